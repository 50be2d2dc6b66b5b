"""End to end: ``ai4s-graph run --job 92003 --perf-run examples/perf-runs/92003 --llm anthropic``
(ViT bf16 on one H200, compute-bound) with the Anthropic calls replayed from
``tests/cassettes/e2e_92003.yaml``, against the same command with ``--llm none``: same bottleneck
class, same deterministic claims and verdicts, prose from the LLM, usage in the report footer, and
no trace of the API key in any file the run wrote."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent / "cassettes"))
import harness  # noqa: E402

pytestmark = pytest.mark.vm


@pytest.fixture
def record_mode(request) -> str:
    return request.config.getoption("--record-mode", default="none") or "none"


def _run(args: list[str]) -> tuple[int, str]:
    from ai4s_graph.cli import app

    r = CliRunner().invoke(app, args)
    return r.exit_code, r.output


def test_graph_in_llm_mode_matches_deterministic_run(perf_runs, tmp_path, monkeypatch, record_mode):
    run = perf_runs / "92003"
    ck = tmp_path / "checkpoints.sqlite"
    # no --cross-check: what TraceLens or HTA would add depends on whether they are installed, and the
    # request bodies (so the cassette) must not
    base = ["run", "--job", "92003", "--perf-run", str(run), "--checkpoint", str(ck), "--workers", "1"]
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code, out = _run(base + ["--out", str(tmp_path / "det"), "--llm", "none"])
    assert code == 0, out
    det = json.loads((tmp_path / "det" / "report.json").read_text())

    with harness.anthropic_cassette("e2e_92003", record_mode, monkeypatch) as cass:
        code, out = _run(base + ["--out", str(tmp_path / "llm"), "--llm", "anthropic",
                                 "--model", "claude-sonnet-4-5", "--max-tokens-total", "400000"])
    assert code == 0, out
    key = os.environ["ANTHROPIC_API_KEY"]
    rep = json.loads((tmp_path / "llm" / "report.json").read_text())

    assert rep["llm"] == "anthropic" and det["llm"] == "none"
    assert rep["bottleneck"]["klass"] == det["bottleneck"]["klass"] == "compute-bound"
    by_llm = {v["claim"]["id"]: v for v in rep["claims"]}
    for v in det["claims"]:                       # every deterministic claim, same value and verdict
        got = by_llm[v["claim"]["id"]]
        assert got["claim"]["value"] == v["claim"]["value"]
        assert got["verdict"] == v["verdict"], v["claim"]["id"]
    extra = [v for cid, v in by_llm.items() if cid.startswith("llm.")]
    assert extra, "the LLM analysts added no claim"
    assert all(v["verdict"] in ("confirmed", "inconclusive", "unsupported", "refuted") for v in extra)
    assert all(v["verdict"] != "confirmed" or v["evidence"] or v["claim"]["evidence"] for v in extra)
    # the prose is the LLM's, and passes the number guard
    from ai4s_graph.graph.agents.tracing import NumberRef, check_text, report_sources

    assert rep["executive_summary"] != det["executive_summary"]
    notes = tmp_path / "llm" / ".ai4s-graph" / "agent_notes"
    # every LLM pass finished (a pass that fell back leaves no notes)
    assert {p.stem for p in notes.iterdir()} == {"trace_analyst", "telemetry_analyst", "trace_verifier",
                                                 "telemetry_verifier", "synthesizer"}
    syn = json.loads((notes / "synthesizer.json").read_text())
    assert syn["summary"] == rep["executive_summary"]
    assert check_text(rep["executive_summary"], [NumberRef(**n) for n in syn["numbers"]], report_sources(rep)) == []
    md = (tmp_path / "llm" / "report.md").read_text()
    # the LLM's class equals the rules' on the same inputs, or the report explains the difference
    assert syn["bottleneck_class"] == rep["bottleneck"]["klass"] or "the rules say" in md
    # the analysts' endorse/dispute lists and the verifiers' prose reach the report, numbers traced
    assert "## Agents (LLM)" in md and "**trace_analyst** endorses" in md and "**telemetry_verifier**:" in md
    assert "**trace_verifier**:" in md
    assert "(withheld:" not in md
    assert "## Agents (LLM)" not in (tmp_path / "det" / "report.md").read_text()
    # verdicts the LLM verifiers changed rest on tools other than the claim's own evidence
    for v in rep["claims"]:
        if "(LLM) with" in v.get("method", ""):
            own = {e["tool"] for e in v["claim"]["evidence"]}
            assert v["evidence"] and v["evidence"][-1]["tool"] not in own, v["claim"]["id"]
    for agent in ("trace_analyst", "telemetry_analyst", "trace_verifier", "telemetry_verifier", "synthesizer"):
        u = rep["usage"][agent]
        assert u["input_tokens"] > 0 and u["output_tokens"] > 0 and u["cost_usd"] > 0, agent
    assert "LLM usage:" in (tmp_path / "llm" / "report.md").read_text()
    assert rep["statuses"]["synthesizer"].startswith("STATUS=ok")
    # the key is in no cassette, report, log, journal, ledger or checkpoint
    assert harness.files_containing(tmp_path, key) == []
    assert [f for f in harness.files_containing(harness.HERE, key) if f.endswith(".yaml")] == []
    assert key not in out


AGENT_NODES = ("telemetry_analyst", "trace_analyst", "telemetry_verifier", "trace_verifier", "synthesizer")


def test_no_api_key_every_agent_node_says_its_llm_was_unavailable(perf_runs, tmp_path, monkeypatch):
    """``--llm anthropic`` without ANTHROPIC_API_KEY: every agent node keeps its deterministic
    result, and its STATUS line says why: the reason of the same node under ``--llm none`` (same
    inputs, same output folder), then ``<node> LLM: ANTHROPIC_API_KEY is not set; deterministic
    result kept``, STATUS=partial (before: the telemetry analyst went partial without a word about
    the LLM, and the verifiers said ok with no mention of it)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    out = tmp_path / "out"
    base = ["run", "--job", "92001", "--perf-run", str(perf_runs / "92001"), "--out", str(out),
            "--checkpoint", str(tmp_path / "ck.sqlite"), "--workers", "1"]
    code, text = _run(base + ["--llm", "none"])
    assert code == 0, text
    det = json.loads((out / "report.json").read_text())
    code, text = _run(base + ["--llm", "anthropic"])  # another thread (llm is in its key), same folder
    assert code == 0, text
    rep = json.loads((out / "report.json").read_text())
    assert rep["llm"] == "anthropic" and rep["bottleneck"]["klass"] == det["bottleneck"]["klass"] == "dispatch-bound"
    assert [(v["claim"]["id"], v["claim"]["value"], v["verdict"]) for v in rep["claims"]] == \
        [(v["claim"]["id"], v["claim"]["value"], v["verdict"]) for v in det["claims"]]  # the deterministic result
    for node in AGENT_NODES:
        plain = det["statuses"][node]
        assert plain.startswith("STATUS=ok; reason="), (node, plain)
        note = f"; {node} LLM: ANTHROPIC_API_KEY is not set; deterministic result kept"
        got = rep["statuses"][node]
        assert got.startswith("STATUS=partial; reason=") and got.endswith(note), (node, got)
        assert len(got) - len("STATUS=partial; reason=") <= 160
        head, own = got[len("STATUS=partial; reason="):-len(note)], plain[len("STATUS=ok; reason="):]
        if node == "synthesizer":  # "report.md in <tmp path>": cut (…) so that the note stays whole
            assert head == own or (head.endswith("…") and own.startswith(head[:-1])), (head, own)
        else:
            assert head == own, (node, head, own)
        assert f"{node:<20} {got}" in text  # the line printed as the node ended
    assert rep["statuses"]["launcher"] == det["statuses"]["launcher"]  # no LLM there: unchanged
