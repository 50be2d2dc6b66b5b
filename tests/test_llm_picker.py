"""The lever picker of ``optimize --llm``: the LLM picks among the catalog's eligible levers with a
reason tied to the verified bottleneck (cassette), through the optimizer's seam
``pick_lever(picker=...)``; without a key the deterministic picker runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "cassettes"))
import harness  # noqa: E402

from ai4s_graph.graph.agents import picker as P  # noqa: E402
from ai4s_graph.graph.agents.tracing import check_text, report_sources  # noqa: E402
from ai4s_graph.tools.levers import catalog as L  # noqa: E402


@pytest.fixture
def record_mode(request) -> str:
    return request.config.getoption("--record-mode", default="none") or "none"


def _report() -> dict:
    """A data-loader-bound report (92002-like figures) whose class a confirmed claim verifies."""
    def vc(cid, metric, value, unit, verdict):
        return {"claim": {"id": cid, "analyst": "trace_analyst", "statement": "s", "metric": metric, "value": value,
                          "unit": unit, "evidence": [{"tool": "tracelens.analyze_trace", "query": "q", "returned": value,
                                                      "args": {}}], "confidence": 0.9},
                "verdict": verdict, "verifier": "trace_verifier", "rederived_value": value, "method": "m", "note": ""}
    return {"jobid": "92002", "llm": "anthropic",
            "bottleneck": {"klass": "data-loader-bound", "rationale": "DataLoader time dominates the step",
                           "supporting_claims": ["tl.r0.dataloader_share", "tl.r0.idle_time"], "confidence": 0.8},
            "claims": [vc("tl.r0.dataloader_share", "cpu.dataloader_step_share_pct", 45.7834, "%", "confirmed"),
                       vc("tl.r0.idle_time", "gpu_timeline.idle_time.percent", 43.2517, "%", "confirmed"),
                       vc("tl.r0.planted", "gpu_timeline.computation_time.percent", 12.0, "%", "refuted")],
            "levers": []}


def _picker(tmp_path, llm="anthropic"):
    rp = tmp_path / "report.json"
    rp.write_text(json.dumps(_report()))
    return P.make_picker(llm, report_path=rp, loop_dir=tmp_path / "loop")


def test_without_a_key_the_deterministic_picker_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cat = L.load_catalog(L.bundled_catalog("cpu-toy"))
    pk = _picker(tmp_path)
    lever = L.pick_lever(cat, bottleneck="data-loader-bound", picker=pk)
    assert lever == L.pick_lever(cat, bottleneck="data-loader-bound")          # the rule picker's choice
    assert pk.picks[-1]["by"] == "rules" and "ANTHROPIC_API_KEY" in pk.picks[-1]["llm_status"]
    assert "targets data-loader-bound" in pk.picks[-1]["reason"]
    rec = json.loads((tmp_path / "loop" / ".ai4s-graph" / "agent_notes" / "lever_picker.jsonl").read_text())
    assert rec["lever"] == lever.name


def test_llm_picker_picks_an_eligible_lever_for_the_verified_class(tmp_path, monkeypatch, record_mode):
    cat = L.load_catalog(L.bundled_catalog("cpu-toy"))
    pk = _picker(tmp_path)
    with harness.anthropic_cassette("lever_picker", record_mode, monkeypatch):
        first = L.pick_lever(cat, bottleneck="data-loader-bound", picker=pk)
        # a changed input (the report now recommends pin_memory) changes the answer
        second = L.pick_lever(cat, bottleneck="data-loader-bound", recommended=["pin_memory"], picker=pk)
    eligible = {lv.name for lv in L.eligible_levers(cat)}
    for lever, pick in zip((first, second), pk.picks):
        assert pick["by"] == "llm", pick
        assert lever.name in eligible and any(t.value == "data-loader-bound" for t in lever.targets)
        assert "tl.r0.dataloader_share" in pick["reason"] or "tl.r0.idle_time" in pick["reason"]
    assert second.name == "pin_memory" and first.name != second.name
    # every number in the reason traces to a confirmed claim's value
    notes = (tmp_path / "loop" / ".ai4s-graph" / "agent_notes" / "lever_picker.jsonl").read_text().splitlines()
    assert len(notes) == 2


def test_picker_refuses_a_lever_off_the_verified_class(tmp_path):
    """The validation the LLM's answer must pass, on hand-built answers."""
    from ai4s_graph.graph.agents.schemas import PickAnswer

    rep = _report()
    src = report_sources(rep)
    ok = PickAnswer(lever="pin_memory", reason="The DataLoader takes 45.8% of each step.", claims=["tl.r0.dataloader_share"],
                    numbers=[{"text": "45.8", "unit": "%", "ref": "claim:tl.r0.dataloader_share:value"}])
    assert check_text(ok.reason, ok.numbers, src) == []
    bad = ok.model_copy(update={"reason": "The DataLoader takes 50% of each step."})
    assert check_text(bad.reason, bad.numbers, src)


def test_optimize_cli_has_the_llm_picker_option():
    from typer.testing import CliRunner

    from ai4s_graph.cli import app

    out = CliRunner().invoke(app, ["optimize", "--help"]).output
    assert "--llm" in out and "--llm-model" in out
