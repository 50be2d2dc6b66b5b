"""The LLM agents replayed from cassettes (Anthropic Messages API wire format) on the real 92003 run
(``examples/perf-runs/92003``: ViT bf16 on one H200, compute-bound).

CI replays (``--record-mode=none``, pytest-recording's default). The committed cassettes were
synthesized by ``tests/cassettes/generate.py`` (see tests/cassettes/README.md); with a real
``ANTHROPIC_API_KEY``, ``pytest tests/test_llm_replay.py --record-mode=rewrite`` re-records them
from Claude and the assertions below still hold (they check properties, not scripted text)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import yaml
from tenacity import wait_none

sys.path.insert(0, str(Path(__file__).resolve().parent / "cassettes"))
import harness  # noqa: E402

from ai4s_graph.graph.agents import llm  # noqa: E402
from ai4s_graph.state import Claim, Evidence, Tolerance, Verdict, VerifiedClaim  # noqa: E402
from ai4s_graph.state.status import Outcome  # noqa: E402


@pytest.fixture
def record_mode(request) -> str:
    return request.config.getoption("--record-mode", default="none") or "none"


@pytest.fixture
def run92003(perf_runs) -> dict:
    run = perf_runs / "92003"
    man = json.loads((run / "manifest.json").read_text())
    man["artifacts"] = {"traces": ["traces/trace_rank0.json.gz"], "telemetry": ["telemetry/export.jsonl"],
                        "train_log": "train.log"}
    return {"dir": run, "manifest": man}


@pytest.fixture(autouse=True)
def _no_retry_wait(monkeypatch):
    from ai4s_graph.graph.agents import runner

    monkeypatch.setattr(runner, "RETRY_WAIT", wait_none())


@pytest.fixture(scope="module")
def trace92003(perf_runs) -> dict:
    from ai4s_graph.tools.trace import backends as tracelens

    p = perf_runs / "92003" / "traces" / "trace_rank0.json.gz"
    a = tracelens.analyze_trace(p).model_dump(mode="json")
    a["rank"], a["path"] = 0, str(p)
    return a


def _tracelens_timeline(tracelens_refs: Path) -> dict[str, float]:
    """TraceLens's own GPU timeline of 92003 rank 0 (``gpu_timeline.csv``): ``{type: percent}``."""
    import csv

    with open(tracelens_refs / "92003_rank0_perf_report_csvs" / "gpu_timeline.csv", newline="") as fh:
        return {r["type"]: float(r["percent"]) for r in csv.DictReader(fh)}


def _req(run: dict, out: Path, **kw) -> dict:
    return {"perf_run": str(run["dir"]), "out_dir": str(out), "llm": "anthropic", "llm_model": llm.DEFAULT_MODEL,
            "jobid": "92003", **kw}


def _trace_claims(a: dict) -> list[dict]:
    """Deterministic trace claims of the kind the analyst node makes (numbers from the analysis)."""
    out = []
    for row in ("idle_time", "computation_time"):
        pct = round(a["timeline"][row]["percent"], 4)
        out.append(Claim(id=f"tl.r0.{row}", analyst="trace_analyst",
                         statement=f"Rank 0: {row.replace('_', ' ')} is {pct:.1f}% of the profiled window.",
                         metric=f"gpu_timeline.{row}.percent", value=pct, unit="%",
                         evidence=[Evidence(tool="tracelens.analyze_trace", query=f"trace_rank0.json.gz: {row}",
                                            returned=pct, args={"path": a["path"], "rank": 0})]).model_dump())
    return out


def assert_all_traced(res: llm.LlmResult, texts: list[str], extra_sources: dict | None = None) -> None:
    """Invariant: every number in the pass's texts traces to a field of its own tool results (or a
    given claim), by the references it returned."""
    from ai4s_graph.graph.agents.tracing import check_text

    sources = {**(extra_sources or {}), **{r["id"]: r["returned"] for r in res.evidence}}
    for t in texts:
        assert check_text(t, res.numbers, sources) == [], t


def _assert_new_claims_supported(res: llm.LlmResult, det_ids: list[str], tools: set[str]) -> list[dict]:
    from ai4s_graph.graph.agents.tracing import claim_sources

    ids = [c["id"] for c in res.claims]
    assert ids[: len(det_ids)] == det_ids                       # deterministic claims kept, in order
    new = [c for c in res.claims if c["id"] not in det_ids]
    assert new, "the analyst added no claim of its own"
    for c in new:
        Claim.model_validate(c)
        assert c["id"].startswith("llm.")
        assert llm.is_supported(c), c                           # its number came from a cited tool result
        assert len(c["evidence"]) == 1 and c["evidence"][0]["tool"] in tools | {"tracelens.analyze_trace"}
    assert_all_traced(res, [*(c["statement"] for c in new), res.prose, *res.disputed.values()],
                      claim_sources(res.claims))
    return new


def test_trace_analyst_calls_tools_and_emits_claims(run92003, trace92003, tracelens_refs, tmp_path, monkeypatch,
                                                    record_mode):
    det = _trace_claims(trace92003)
    # the deterministic figures are right: TraceLens's own CSV gives the same (idle 17.29%, computation 81.17%)
    ref = _tracelens_timeline(tracelens_refs)
    for c in det:
        assert c["value"] == pytest.approx(ref[c["metric"].split(".")[1]], abs=0.01), c["id"]
    ctx = {"manifest": run92003["manifest"], "findings": {"trace": {"ranks": [trace92003]}}}
    with harness.anthropic_cassette("trace_analyst", record_mode, monkeypatch) as cass:
        res = llm.analyst_pass("trace_analyst", _req(run92003, tmp_path), ctx, det)
    assert res.status.status is Outcome.ok, res.status.format()
    assert res.tool_calls >= 2 and res.llm_calls >= 2
    assert cass.play_count == res.llm_calls or cass.play_count == 0  # 0 while recording
    _assert_new_claims_supported(res, [c["id"] for c in det], {"kineto.kernel_stats", "kineto.ops_for_kernel"})
    assert len(res.prose) > 40
    # the analyst endorses what its own timeline agrees with (92003's deterministic figures are right)
    assert set(res.endorsed) == {c["id"] for c in det} and not res.disputed
    assert res.usage.input_tokens > 0 and res.usage.output_tokens > 0 and res.usage.cost_usd > 0
    assert len(res.evidence) == res.tool_calls
    # the ledger holds the tokens of every call, for the per-run budget
    assert llm.tokens_used(tmp_path) == res.usage.input_tokens + res.usage.output_tokens


@pytest.mark.vm
def test_telemetry_analyst_calls_tools_and_emits_claims(run92003, tmp_path, monkeypatch, record_mode):
    from ai4s_graph.tools.trainlog import fom
    from ai4s_graph.tools.telemetry import promql
    from ai4s_graph.tools.telemetry.victoria import VictoriaMetrics

    m = run92003["manifest"]
    with VictoriaMetrics() as vm:
        vm.import_jsonl(run92003["dir"] / "telemetry" / "export.jsonl")
        pq = promql.PromQL(vm.url)
        window = pq.job_window("92003", hint=(m["start_unix"], m["end_unix"]))
        st = pq.job_stat("gpu_util", "92003", window, "avg")
    f = fom.parse_log(run92003["dir"] / "train.log", global_batch_size=64)
    det = [Claim(id="om.tel.gpu_util.avg", analyst="telemetry_analyst", statement="mean GPU utilization",
                 metric="telemetry.gpu_util.avg", value=round(st.value, 6), unit="%",
                 evidence=[Evidence(**st.evidence())]).model_dump(),
           Claim(id="om.fom.steady_step_time_s", analyst="telemetry_analyst", statement="steady step time",
                 metric="fom.steady_step_time_s", value=f.steady_step_time_s, unit="s",
                 evidence=[Evidence(tool="fom.parse_log", query="train.log", returned=f.steady_step_time_s)]).model_dump()]
    ctx = {"manifest": m, "findings": {"telemetry": {"window": list(window), "url": vm.url},
                                       "fom": {"steady_step_time_s": f.steady_step_time_s}}}
    with harness.anthropic_cassette("telemetry_analyst", record_mode, monkeypatch):
        res = llm.analyst_pass("telemetry_analyst", _req(run92003, tmp_path), ctx, det)
    assert res.status.status is Outcome.ok, res.status.format()
    assert res.tool_calls >= 2
    new = _assert_new_claims_supported(res, [c["id"] for c in det], {"promql.job_stat", "fom.parse_log"})
    # telemetry evidence carries the PromQL with the rmsjob_info join (seed 000 lesson 5)
    tel = [e for c in new for e in c["evidence"] if e["tool"] == "promql.job_stat"]
    assert tel and all('rmsjob_info{jobid="92003"}' in e["query"] for e in tel)


def test_verifier_refutes_planted_wrong_claim(run92003, trace92003, tracelens_refs, tmp_path, monkeypatch,
                                             record_mode):
    good = _trace_claims(trace92003)
    comp = _tracelens_timeline(tracelens_refs)["computation_time"]     # 81.17 %, TraceLens's own figure
    # planted: a mis-transcribed figure (its "evidence" says 40 %) that the code could not re-derive
    planted = Claim(id="tl.r0.planted_computation", analyst="trace_analyst",
                    statement="Rank 0: the GPU computes only 40% of the profiled window.",
                    metric="gpu_timeline.computation_time.percent", value=40.0, unit="%",
                    evidence=[Evidence(tool="tracelens.analyze_trace", query="stale copy", returned=40.0)])
    # an invented number: no tool returned 55.5
    invented = Claim(id="tl.r0.invented_idle", analyst="trace_analyst", statement="Rank 0: idle 55.5%.",
                     metric="gpu_timeline.idle_time.percent", value=55.5, unit="%",
                     evidence=[Evidence(tool="tracelens.analyze_trace", query="idle",
                                        returned=trace92003["timeline"]["idle_time"]["percent"])])
    tol = Tolerance(abs=1.0)
    verdicts = [VerifiedClaim(claim=Claim.model_validate(c), verdict=Verdict.confirmed, verifier="trace_verifier",
                              rederived_value=c["value"], tolerance=tol, method="kineto").model_dump() for c in good]
    verdicts += [VerifiedClaim(claim=planted, verdict=Verdict.inconclusive, verifier="trace_verifier",
                               tolerance=tol, method="no independent path").model_dump(),
                 VerifiedClaim(claim=invented, verdict=Verdict.confirmed, verifier="trace_verifier",
                               tolerance=tol, method="kineto").model_dump()]
    ctx = {"manifest": run92003["manifest"], "findings": {"ranks": [trace92003]}}
    with harness.anthropic_cassette("trace_verifier", record_mode, monkeypatch):
        res = llm.verifier_pass("trace_verifier", _req(run92003, tmp_path), ctx, verdicts)
    assert res.status.status is Outcome.ok, res.status.format()
    assert res.tool_calls >= 1
    # only re-derivation tools were offered and used: never the analyst's tools or its cached analysis
    assert {r["tool"] for r in res.evidence} <= {"kineto.rederive", "stream.kernel_counts", "slurm.srun_probe"}
    by = {v["claim"]["id"]: v for v in res.verdicts}
    assert by["tl.r0.planted_computation"]["verdict"] == "refuted"
    assert by["tl.r0.planted_computation"]["rederived_value"] == pytest.approx(comp, abs=1.0)
    assert_independent(res, verdicts)
    assert by["tl.r0.invented_idle"]["verdict"] == "unsupported"          # never confirmed
    for c in good:
        assert by[c["id"]]["verdict"] == "confirmed"
    # the probe was asked for; no cluster holds node "vm" (nor does CI): "not run: no cluster"
    probe = [r for r in res.evidence if r["tool"] == "slurm.srun_probe"]
    assert probe and probe[0]["returned"] == {"ran": False, "check": "matmul", "reason": "not run: no cluster"}
    from ai4s_graph.graph.agents.tracing import claim_sources

    assert_all_traced(res, [res.prose or "", *(v["note"] for v in res.verdicts)], claim_sources(verdicts))


def assert_independent(res: llm.LlmResult, before: list[dict]) -> None:
    """Invariant: every verdict the LLM changed rests on a tool other than the claim's own evidence."""
    old = {v["claim"]["id"]: v for v in before}
    for v in res.verdicts:
        o = old[v["claim"]["id"]]
        if v["verdict"] != o["verdict"] and v["verdict"] in ("confirmed", "refuted"):
            added = {e["tool"] for e in v["evidence"]} - {e["tool"] for e in o["evidence"]}
            own = {e["tool"] for e in v["claim"]["evidence"]}
            assert added and not (added & own), (v["claim"]["id"], added, own)


def _report(trace: dict) -> dict:
    claims = _trace_claims(trace)
    vcs = [VerifiedClaim(claim=Claim.model_validate(c), verdict=Verdict.confirmed, verifier="trace_verifier",
                         rederived_value=round(c["value"], 2), tolerance=Tolerance(abs=1.0), method="kineto").model_dump(mode="json")
           for c in claims]
    return {"jobid": "92003", "model": "vit", "state": "COMPLETED", "nodes_list": ["vm"],
            "bottleneck": {"klass": "compute-bound", "rationale": "GPU computing most of the window",
                           "supporting_claims": [c["id"] for c in claims], "confidence": 0.8},
            "claims": vcs, "levers": [{"name": "bigger_effective_batch", "why": "compute-bound", "claims": []}],
            "missing": [], "executive_summary": "Job 92003 is compute-bound (deterministic summary)."}


def test_synthesizer_writes_guarded_summary(trace92003, run92003, tmp_path, monkeypatch, record_mode):
    rep = _report(trace92003)
    with harness.anthropic_cassette("synthesizer", record_mode, monkeypatch):
        res = llm.synthesizer_pass(_req(run92003, tmp_path), rep)
    assert res.status.status is Outcome.ok, res.status.format()
    assert res.prose and res.prose != rep["executive_summary"]
    from ai4s_graph.graph.agents.tracing import report_sources

    assert_all_traced(res, [res.prose, *res.levers.values(), res.class_note], report_sources(rep))
    assert set(res.levers) <= {"bigger_effective_batch"}
    # its own reading of the class from the claims: equal to the rules', or the difference explained
    assert res.bottleneck_class == rep["bottleneck"]["klass"] or res.class_note


def test_malformed_answer_is_retried(run92003, trace92003, tmp_path, monkeypatch, record_mode):
    det = _trace_claims(trace92003)
    ctx = {"manifest": run92003["manifest"], "findings": {"trace": {"ranks": [trace92003]}}}
    with harness.anthropic_cassette("trace_analyst_malformed", record_mode, monkeypatch,
                                    fault="malformed-once") as cass:
        res = llm.analyst_pass("trace_analyst", _req(run92003, tmp_path), ctx, det)
    assert res.status.status is Outcome.ok, res.status.format()
    assert res.malformed_retries == 1
    # the rejection went back to the model as an error tool_result
    last = json.loads(cass.requests[-1].body)
    results = [b for m in last["messages"] if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    assert any(b.get("is_error") for b in results)
    _assert_new_claims_supported(res, [c["id"] for c in det], {"kineto.kernel_stats", "kineto.ops_for_kernel"})


def test_overload_529_is_retried_with_backoff(trace92003, run92003, tmp_path, monkeypatch, record_mode):
    rep = _report(trace92003)
    with harness.anthropic_cassette("synthesizer_overloaded", record_mode, monkeypatch, fault="overload-once") as cass:
        res = llm.synthesizer_pass(_req(run92003, tmp_path), rep)
        statuses = [r["status"]["code"] for r in cass.responses]
    assert statuses[:2] == [529, 200]
    assert res.status.status is Outcome.ok, res.status.format()
    assert res.llm_calls == 1 and res.prose


def test_turn_without_a_tool_call_is_asked_again(trace92003, run92003, tmp_path, monkeypatch, record_mode):
    rep = _report(trace92003)
    with harness.anthropic_cassette("synthesizer_text_turn", record_mode, monkeypatch, fault="text-once") as cass:
        res = llm.synthesizer_pass(_req(run92003, tmp_path), rep)
        first = json.loads(cass.responses[0]["body"]["string"])
    assert first["stop_reason"] == "end_turn" and {b["type"] for b in first["content"]} == {"text"}
    assert res.status.status is Outcome.ok, res.status.format()
    assert res.no_tool_turns == 1 and res.llm_calls == 2 and res.prose


def test_budget_stops_the_llm_path_cleanly(run92003, trace92003, tmp_path, monkeypatch, record_mode):
    """A budget smaller than one call: the first call runs (from the analyst cassette), then the
    pass stops with STATUS=partial and the deterministic claims are kept."""
    if record_mode != "none":
        pytest.skip("replays the first exchange of the trace_analyst cassette")
    det = _trace_claims(trace92003)
    ctx = {"manifest": run92003["manifest"], "findings": {"trace": {"ranks": [trace92003]}}}
    with harness.anthropic_cassette("trace_analyst", record_mode, monkeypatch):
        res = llm.analyst_pass("trace_analyst", _req(run92003, tmp_path, max_tokens_total=100), ctx, det)
    assert res.status.status is Outcome.partial and "budget" in res.status.reason
    assert res.claims is None and res.llm_calls == 1


def test_cassettes_are_wire_format_and_hold_no_key(record_mode):
    files = sorted(harness.HERE.glob("*.yaml"))
    assert record_mode != "none" or {f.stem for f in files} >= {"trace_analyst", "telemetry_analyst", "trace_verifier", "synthesizer",
                                       "trace_analyst_malformed", "synthesizer_overloaded", "synthesizer_text_turn",
                                       "telemetry_verifier", "telemetry_verifier_cap", "lever_picker"}
    kinds = set()
    for f in files:
        text = f.read_text()
        assert harness.FAKE_KEY not in text and "sk-ant-" not in text
        assert "x-api-key" not in text.lower() and "authorization" not in text.lower()
        for it in yaml.safe_load(text)["interactions"]:
            rq, rs = it["request"], it["response"]
            assert rq["method"] == "POST" and rq["uri"] == "https://api.anthropic.com/v1/messages"
            body = json.loads(rq["body"])
            assert {"model", "max_tokens", "system", "messages"} <= set(body)
            out = json.loads(rs["body"]["string"])
            if rs["status"]["code"] == 200:
                assert out["type"] == "message" and out["role"] == "assistant"
                assert out["stop_reason"] in ("tool_use", "end_turn")
                assert {"input_tokens", "output_tokens"} <= set(out["usage"])
                kinds |= {b["type"] for b in out["content"]}
            else:
                assert out["type"] == "error"
            kinds |= {b["type"] for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]}
    assert {"text", "tool_use", "tool_result"} <= kinds


def test_key_absent_from_logs(trace92003, run92003, tmp_path, monkeypatch, record_mode, caplog):
    caplog.set_level(logging.DEBUG)
    rep = _report(trace92003)
    with harness.anthropic_cassette("synthesizer", record_mode, monkeypatch):
        res = llm.synthesizer_pass(_req(run92003, tmp_path), rep)
    import os

    key = os.environ["ANTHROPIC_API_KEY"]  # the fake key in replay, the real one while re-recording
    assert key not in caplog.text
    assert key not in res.model_dump_json()
    assert harness.files_containing(tmp_path, key) == []
