"""Unit tests of the LLM runner's deterministic guards (no API, no cassette): the evidence guard
``is_supported``, the prose-number guard, the verdict merge rules, prices, the token budget, and
the StructuredTools over the real 92003 inputs (``examples/perf-runs/92003``)."""

from __future__ import annotations

import json

import pytest

from ai4s_graph.graph.agents import llm
from ai4s_graph.state import Evidence, Tolerance, Verdict, VerifiedClaim
from ai4s_graph.state.claims import Claim
from ai4s_graph.state.status import Outcome


def _claim(value, returned, cid="tl.r0.idle_time", metric="gpu_timeline.idle_time.percent", unit="%"):
    return Claim(id=cid, analyst="trace_analyst", statement="s", metric=metric, value=value, unit=unit,
                 evidence=[Evidence(tool="tracelens.analyze_trace", query="q", returned=returned)]).model_dump()


def test_is_supported_numbers_strings_bools():
    nested = {"timeline": {"idle_time": {"percent": 8.050771920243083}}, "rows": [1, 2, "92.1"]}
    assert llm.is_supported(_claim(8.05, nested))                 # rounded, within 1 %
    assert llm.is_supported(_claim(92.1, nested))                 # numeric string in the result
    assert not llm.is_supported(_claim(55.5, nested))              # a number no tool returned
    assert not llm.is_supported(_claim(8.3, nested))               # 3 % off: beyond the 1 % default
    assert llm.is_supported(_claim(8.3, nested), Tolerance(rel=0.05))
    assert llm.is_supported(_claim("compute-bound", "compute-bound", metric="diagnosis.x", unit="class"))
    assert not llm.is_supported(_claim("dispatch-bound", {"k": "compute-bound"}, metric="diagnosis.x", unit="class"))
    assert llm.is_supported(_claim(True, {"supports": True}, metric="t.b", unit="bool"))
    assert not llm.is_supported(_claim(True, {"supports": False, "n": 1}, metric="t.b", unit="bool"))
    assert not llm.is_supported({"value": 1.0, "evidence": []})
    # agrees with the lead's claimkit guard on the same inputs
    from ai4s_graph.state import claimkit

    for c in (_claim(8.05, nested), _claim(55.5, nested)):
        assert llm.is_supported(c) == claimkit.is_supported(c)


def test_numbers_in_prose_skips_names_and_keeps_units():
    got = [w for w, _ in llm.numbers_in_prose("Job 92003 on H200 in bf16: idle 8.05%, step 0.0564s, "
                                               "num_workers_8 and `tl.r0.idle_time`, 1,134 samples/s")]
    assert got == ["92003", "8.05", "0.0564", "1,134"]


def _vc(claim, verdict, rederived=None, tol=Tolerance(abs=1.0)):
    return VerifiedClaim(claim=Claim.model_validate(claim), verdict=verdict, verifier="trace_verifier",
                         rederived_value=rederived, tolerance=tol, method="kineto re-derivation").model_dump()


def test_merge_verdicts_needs_an_independent_field_specific_rederivation():
    good = _claim(90.83, {"percent": 90.83}, cid="tl.r0.computation_time", metric="gpu_timeline.computation_time.percent")
    wrong = _claim(40.0, {"percent": 40.0}, cid="tl.r0.planted", metric="gpu_timeline.computation_time.percent")
    invented = _claim(55.5, {"percent": 8.05})
    det = [_vc(good, Verdict.confirmed, 90.8), _vc(wrong, Verdict.refuted, 90.8), _vc(invented, Verdict.confirmed, 8.05),
           _vc(wrong | {"id": "tl.r0.planted2"}, Verdict.inconclusive),
           _vc(good | {"id": "tl.r0.same_tool"}, Verdict.inconclusive),
           _vc(good | {"id": "tl.r0.contains_only"}, Verdict.inconclusive)]
    records = {
        "ev1": {"tool": "kineto.rederive", "query": "q", "args": {},
                "returned": {"gpu_timeline.computation_time.percent": 90.8316, "launch.mean_kernel_us": 90.83}},
        # the analyst's own tool, re-run: never a confirmation
        "ev2": {"tool": "tracelens.analyze_trace", "query": "q", "args": {},
                "returned": {"gpu_timeline.computation_time.percent": 90.83}},
    }
    reviews = [
        {"claim_id": "tl.r0.planted", "verdict": "confirmed", "rederived_ref": "ev1:gpu_timeline.computation_time.percent"},
        {"claim_id": "tl.r0.idle_time", "verdict": "confirmed", "note": "trust me"},
        {"claim_id": "tl.r0.computation_time", "verdict": "refuted",
         "rederived_ref": "ev1:gpu_timeline.computation_time.percent"},
        {"claim_id": "tl.r0.planted2", "verdict": "refuted", "rederived_ref": "ev1:gpu_timeline.computation_time.percent",
         "note": "kineto says otherwise"},
        {"claim_id": "tl.r0.same_tool", "verdict": "confirmed", "rederived_ref": "ev2:gpu_timeline.computation_time.percent"},
        # the number is in ev1, but under another field: no confirmation
        {"claim_id": "tl.r0.contains_only", "verdict": "confirmed", "rederived_ref": "ev1:launch.mean_kernel_us"},
    ]
    merged, refused = llm.merge_verdicts(det, reviews, "trace_verifier", records)
    by = {v.claim.id: v for v in merged}
    assert by["tl.r0.planted"].verdict is Verdict.refuted            # never upgraded
    assert by["tl.r0.idle_time"].verdict is Verdict.unsupported       # 55.5 matches no tool result
    assert by["tl.r0.computation_time"].verdict is Verdict.confirmed  # ev1 agrees: the refutation is refused
    assert by["tl.r0.planted2"].verdict is Verdict.refuted            # independent, disagreeing re-derivation
    assert by["tl.r0.planted2"].rederived_value == pytest.approx(90.8316)
    assert [e.tool for e in by["tl.r0.planted2"].evidence] == ["kineto.rederive"]
    assert by["tl.r0.same_tool"].verdict is Verdict.inconclusive       # rests on the analyst's own call
    assert any("tl.r0.same_tool" in r and "not an independent path" in r for r in refused)
    assert by["tl.r0.contains_only"].verdict is Verdict.inconclusive   # unit µs is not %, and not its field
    assert "kineto says otherwise" in by["tl.r0.planted2"].note
    assert len(refused) == 5


def test_merge_judges_a_subwindow_claim_only_over_its_window():
    ev = Evidence(tool="promql.job_stat", query="q", returned={"telemetry.sm_clock.avg": 1972.0},
                  args={"metric": "sm_clock", "stat": "avg", "start_offset_s": 0, "end_offset_s": 18.0})
    c = Claim(id="llm.telemetry.sm_clock_avg_first_half", analyst="telemetry_analyst", statement="s",
              metric="telemetry.sm_clock.avg.first_half", value=1972.0, unit="MHz", evidence=[ev])
    det = [VerifiedClaim(claim=c, verdict=Verdict.inconclusive, verifier="telemetry_verifier",
                         tolerance=Tolerance(abs=2.0, rel=0.05), method="m").model_dump()]
    full = {"tool": "telemetry.raw_samples", "args": {"metric": "sm_clock", "stat": "avg"},
            "returned": {"raw.sm_clock.avg": 1972.0, "unit": "MHz"}}
    sub = {"tool": "telemetry.raw_samples", "args": {"metric": "sm_clock", "stat": "avg", "start_offset_s": 0,
                                                     "end_offset_s": 18.0},
           "returned": {"raw.sm_clock.avg": 1971.5, "unit": "MHz"}}
    review = [{"claim_id": c.id, "verdict": "confirmed", "rederived_ref": "ev1:raw.sm_clock.avg"}]
    merged, refused = llm.merge_verdicts(det, review, "telemetry_verifier", {"ev1": full})
    assert merged[0].verdict is Verdict.inconclusive and "window" in refused[0]
    merged, refused = llm.merge_verdicts(det, review, "telemetry_verifier", {"ev1": sub})
    assert merged[0].verdict is Verdict.confirmed and merged[0].rederived_value == 1971.5 and not refused


def test_prices_and_cost():
    assert llm.price_for("claude-sonnet-4-5-20250929") == (3.0, 15.0)
    assert llm.price_for("claude-haiku-4-5") == (1.0, 5.0)
    assert llm.price_for("some-other-model") is None
    assert llm.cost_usd("claude-sonnet-4-5", 1_000_000, 100_000) == pytest.approx(4.5)
    assert llm.cost_usd("unknown", 10, 10) == 0.0
    assert llm.PRICE_SOURCE.startswith("https://")


def test_budget_spent_stops_before_any_call(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-budget")

    def no_model(*a, **k):  # the budget check must come before any API call
        raise AssertionError("model must not be called")

    from ai4s_graph.graph.agents import runner

    monkeypatch.setattr(runner, "MODEL_FACTORY", lambda m, n: type("M", (), {"bind_tools": lambda s, *a, **k: s,
                                                                          "invoke": no_model})())
    req = {"out_dir": str(tmp_path), "max_tokens_total": 0, "llm": "anthropic"}
    res = llm.synthesizer_pass(req, {"jobid": "1", "executive_summary": "deterministic summary", "claims": []})
    assert res.status.status is Outcome.partial and "budget" in res.status.reason
    assert res.prose == "deterministic summary"


def test_no_key_means_partial_with_deterministic_result(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    res = llm.synthesizer_pass({"out_dir": str(tmp_path)}, {"jobid": "1", "executive_summary": "kept"})
    assert res.status.status is Outcome.partial and "ANTHROPIC_API_KEY" in res.status.reason
    assert res.prose == "kept" and res.usage.input_tokens == 0


def test_every_agent_prompt_has_the_contract():
    from importlib import resources

    shipped = {p.name[:-3] for p in resources.files("ai4s_graph.prompts").iterdir() if p.name.endswith(".md")}
    # every prompt is loaded by an agent (the launcher is deterministic code: no prompt)
    assert shipped == {"trace_analyst", "telemetry_analyst", "trace_verifier", "telemetry_verifier",
                       "synthesizer", "lever_picker"}
    for agent in shipped:
        text = llm.load_prompt(agent)
        assert text.startswith(f"# {agent}\n")
        for section in ("## Inputs", "## Outputs", "STATUS=ok|partial|fail; reason=<short>", "`numbers`"):
            assert section in text, (agent, section)
    assert "lesson 20" in llm.load_prompt("trace_analyst")    # windowing artifact is not evidence
    assert "lesson 4" in llm.load_prompt("telemetry_analyst")      # burst vs time-averaged never compared
    assert "stays in the report" in llm.load_prompt("trace_verifier")


def test_scrub_makes_paths_relative_and_drops_urls(tmp_path):
    req = {"perf_run": str(tmp_path / "run"), "out_dir": str(tmp_path / "out")}
    got = llm.scrub({"path": f"{tmp_path}/run/traces/t.json.gz", "url": "http://127.0.0.1:4321",
                     "q": "at http://127.0.0.1:4321/api", "series": [1, 2]}, req)
    assert got == {"path": "traces/t.json.gz", "q": "at <tsdb>/api"}


def _tracelens_kernels(path) -> list[dict]:
    """Rows of a TraceLens ``kernel_summary.csv`` (one per parent op category, cpu op, kernel, stream)."""
    import csv

    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_trace_tools_record_evidence(perf_runs, tracelens_refs):
    from ai4s_graph.tools import llm_tools as agent_tools

    run = perf_runs / "92003"
    man = json.loads((run / "manifest.json").read_text())
    man["artifacts"] = {"traces": ["traces/trace_rank0.json.gz"]}
    rec = agent_tools.Recorder()
    with agent_tools.toolset("trace", {"perf_run": str(run), "out_dir": "/tmp"}, {"manifest": man}, rec) as tools:
        t = {x.name: x for x in tools}
        assert set(t) == set(agent_tools.TRACE_TOOLS)
        top = t["trace_top_kernels"].invoke({"category": "GEMM", "n": 2})
        ops = t["trace_ops_for_kernel"].invoke({"kernel_substring": top["result"]["kernels"][0]["name"][:30]})
        bad = t["trace_top_kernels"].invoke({"category": "no-such-category"})
    assert top["evidence_id"] == "ev1" and len(top["result"]["kernels"]) == 2
    # the H200 ViT run: GEMM kernels are cuBLAS nvjet kernels launched by aten::mm / aten::addmm.
    # Known answers from TraceLens's own kernel_summary.csv of the same trace: the GEMM kernel with the
    # most time (its name, launches, total µs), GEMM's share of all kernel time (37.546 %), and the
    # CPU ops that launched the kernels whose names contain the top kernel's first 30 characters
    ref = _tracelens_kernels(tracelens_refs / "92003_rank0_perf_report_csvs" / "kernel_summary.csv")
    gemm = {}
    for r in ref:
        if r["Parent op category"] == "GEMM":
            g = gemm.setdefault(r["Kernel name"], [0, 0.0])
            g[0] += int(r["Kernel duration (µs)_count"])
            g[1] += float(r["Kernel duration (µs)_sum"])
    ref_top = max(gemm, key=lambda k: gemm[k][1])
    k0 = top["result"]["kernels"][0]
    assert k0["name"] == ref_top and k0["name"].startswith("nvjet") and k0["count"] == gemm[ref_top][0]
    assert k0["total_us"] == pytest.approx(gemm[ref_top][1], rel=1e-3)
    share = 100 * sum(g[1] for g in gemm.values()) / sum(float(r["Kernel duration (µs)_sum"]) for r in ref)
    assert top["result"]["category_percent_of_kernel_time"] == pytest.approx(share, abs=0.05)
    sub = k0["name"][:30]
    ref_ops = {}
    for r in ref:
        if sub in r["Kernel name"]:
            ref_ops[r["Parent cpu_op"]] = ref_ops.get(r["Parent cpu_op"], 0.0) + float(r["Kernel duration (µs)_sum"])
    assert set(ref_ops) == {"aten::mm", "aten::addmm"}
    assert {o["op"]: pytest.approx(o["kernel_time_us"], rel=1e-3) for o in ops["result"]["ops"]} == ref_ops
    assert "error" in bad and "categories" in bad["error"]
    assert [r["id"] for r in rec.dump()] == ["ev1", "ev2"]           # errors are not evidence
    assert rec.dump()[0]["query"].startswith("traces/trace_rank0.json.gz")


def test_chat_model_from_a_model_string(monkeypatch):
    from ai4s_graph.graph.agents import runner

    assert runner.split_model(None) == ("anthropic", "claude-sonnet-4-5")
    assert runner.split_model("claude-haiku-4-5") == ("anthropic", "claude-haiku-4-5")
    assert runner.split_model("openai:gpt-4o") == ("openai", "gpt-4o")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-model-string")
    m = runner.make_chat_model("anthropic:claude-sonnet-4-5", 100)
    assert type(m).__name__ == "ChatAnthropic" and m.model == "claude-sonnet-4-5" and m.max_retries == 0
    assert llm.price_for("anthropic:claude-sonnet-4-5") == (3.0, 15.0)


def test_another_provider_needs_no_anthropic_key_and_fails_softly(tmp_path, monkeypatch):
    """A provider whose LangChain package is not installed: STATUS=partial, deterministic text kept."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    req = {"out_dir": str(tmp_path), "llm_model": "no-such-provider:some-model"}
    res = llm.synthesizer_pass(req, {"jobid": "1", "executive_summary": "kept", "claims": []})
    assert res.status.status is Outcome.partial and "cannot build chat model" in res.status.reason
    assert "ANTHROPIC_API_KEY" not in res.status.reason and res.prose == "kept"


def test_agent_notes_render_traced_text_and_withhold_the_rest(tmp_path):
    from ai4s_graph.graph.agents import passes, render

    rep = {"jobid": "92003", "llm": "anthropic", "bottleneck": {"klass": "compute-bound"},
           "claims": [{"claim": {"id": "tl.r0.idle_time", "value": 8.0508, "unit": "%"}, "rederived_value": 8.05,
                       "verdict": "confirmed"}]}
    ref = {"text": "8.05", "unit": "%", "ref": "claim:tl.r0.idle_time:value"}
    passes.write_notes(tmp_path, "trace_analyst", {"prose": "Idle 8.05% only.", "endorsed": ["tl.r0.idle_time"],
                                                   "disputed": {"x": "it is 12% really"}, "numbers": [ref]})
    passes.write_notes(tmp_path, "synthesizer", {"bottleneck_class": "dispatch-bound", "class_note": "idle is 8.05%",
                                                 "levers": {"a": "raises 8.05% to 9%"}, "numbers": [ref]})
    md = render.agent_notes_markdown(tmp_path, rep)
    assert "**trace_analyst** endorses `tl.r0.idle_time`" in md and "> Idle 8.05% only." in md
    assert "`x` ((withheld: 12: no entry in numbers))" in md
    assert "the rules say **compute-bound**: idle is 8.05%" in md
    assert "lever `a`: (withheld: 9: no entry in numbers)" in md
    assert render.agent_notes_markdown(tmp_path, rep | {"llm": "none"}) == ""


def test_same_reader_under_another_tool_name_is_not_independent():
    """A claim the analyst computed with the kineto backend cannot be confirmed by the kineto reader
    again, even under the verifier's tool name; with the HTA backend it can."""
    from ai4s_graph.graph.agents import merge

    c = Claim(id="tl.r0.computation_time", analyst="trace_analyst", statement="s", unit="%", value=90.83,
              metric="gpu_timeline.computation_time.percent",
              evidence=[Evidence(tool="tracelens.analyze_trace", query="q", returned=90.83,
                                 args={"path": "/r/trace_rank0.json.gz", "rank": 0})])
    det = [VerifiedClaim(claim=c, verdict=Verdict.inconclusive, verifier="trace_verifier",
                         tolerance=Tolerance(abs=1.0), method="m").model_dump()]
    rec = {"ev1": {"tool": "kineto.rederive", "args": {}, "returned": {"gpu_timeline.computation_time.percent": 90.8}}}
    review = [{"claim_id": c.id, "verdict": "confirmed", "rederived_ref": "ev1:gpu_timeline.computation_time.percent"}]
    got, refused = merge.merge_verdicts(det, review, "trace_verifier", rec, {"/r/trace_rank0.json.gz": "kineto"})
    assert got[0].verdict is Verdict.inconclusive and "same code path" in refused[0]
    got, refused = merge.merge_verdicts(det, review, "trace_verifier", rec, {"/r/trace_rank0.json.gz": "hta"})
    assert got[0].verdict is Verdict.confirmed and not refused
    assert merge.reader_of("kineto.kernel_stats") == merge.reader_of("kineto.rederive") == "kineto"
