"""The scripted model that authors the cassettes (tests/cassettes/fake_anthropic.py) derives its
answers from the request by rules: a changed input changes its answer, and it never copies the
report's class. Requests are hand-built in the Messages API shape."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "cassettes"))
import fake_anthropic as F  # noqa: E402


def _req(agent: str, payload: dict, results: list[dict] = (), asked: list[dict] = (), tools=(), forced=None) -> dict:
    msgs = [{"role": "user", "content": [{"type": "text", "text": json.dumps(payload)}]}]
    if asked:
        msgs.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": a["name"],
                                                       "input": a["input"]} for i, a in enumerate(asked)]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                  "content": json.dumps(r)} for i, r in enumerate(results)]})
    req = {"system": f"# {agent}\n...", "messages": msgs, "tools": [{"name": t} for t in tools]}
    if forced:
        req["tool_choice"] = {"type": "tool", "name": forced}
    return req


def _final(blocks: list[dict]) -> dict:
    return next(b["input"] for b in blocks if b["type"] == "tool_use" and b["name"].startswith("submit_"))


def _claim(cid, metric, value, unit="%", verdict="confirmed"):
    return {"id": cid, "metric": metric, "value": value, "unit": unit, "verdict": verdict,
            "cite_as": f"claim:{cid}:value", "statement": "s"}


def test_synthesizer_reads_the_class_from_the_claims_not_from_the_report():
    busy = [_claim("c", "gpu_timeline.computation_time.percent", 90.8), _claim("i", "gpu_timeline.idle_time.percent", 8.0)]
    idle = [_claim("c", "gpu_timeline.computation_time.percent", 5.4), _claim("i", "gpu_timeline.idle_time.percent", 94.6),
            _claim("k", "kernels.mean_kernel_us", 2.3, "µs")]
    rep = {"jobid": "1", "nodes_list": ["n"], "bottleneck": {"klass": "compute-bound"}, "levers": []}
    a = _final(F.synthesizer(_req("synthesizer", {"report": rep | {"claims": busy}})))
    b = _final(F.synthesizer(_req("synthesizer", {"report": rep | {"claims": idle}})))
    assert a["bottleneck_class"] == "compute-bound" and not a["class_note"]
    # same report class, different claims: a different reading, and the difference explained
    assert b["bottleneck_class"] == "dispatch-bound" and "compute-bound" in b["class_note"]
    # a refuted claim does not count
    c = _final(F.synthesizer(_req("synthesizer", {"report": rep | {"claims": [dict(busy[0], verdict="refuted")]}})))
    assert c["bottleneck_class"] == "unknown" and c["class_note"]


def test_verifier_judges_by_the_field_it_rederived():
    v = {"claim_id": "tl.r0.c", "metric": "gpu_timeline.computation_time.percent", "value": 90.8, "unit": "%",
         "verdict": "inconclusive", "evidence": []}
    tools = ("trace_rederive", "trace_stream_kernels", "node_probe")
    first = F._verifier(_req("trace_verifier", {"verdicts": [v]}, tools=tools), "trace")
    asked = [{"name": b["name"], "input": b["input"]} for b in first if b["type"] == "tool_use"]
    assert [a["name"] for a in asked] == ["trace_rederive", "node_probe"]
    probe = {"evidence_id": "ev2", "tool": "slurm.srun_probe", "result": {"ran": False, "reason": "not run: no cluster"}}

    def answer(comp):
        res = [{"evidence_id": "ev1", "tool": "kineto.rederive", "result": {"gpu_timeline.computation_time.percent": comp}},
               probe]
        return _final(F._verifier(_req("trace_verifier", {"verdicts": [v]}, res, asked, tools), "trace"))

    assert answer(90.83)["reviews"][0]["verdict"] == "confirmed"
    r = answer(40.0)["reviews"][0]
    assert r["verdict"] == "refuted" and r["rederived_ref"] == "ev1:gpu_timeline.computation_time.percent"
    assert answer(40.0)["numbers"] == [{"text": "40", "unit": "%", "ref": "ev1:gpu_timeline.computation_time.percent"}]


def test_a_forced_tool_choice_gets_the_final_answer():
    v = {"claim_id": "a", "metric": "telemetry.power.avg", "value": 1.0, "unit": "W", "verdict": "inconclusive",
         "evidence": []}
    tools = ("telemetry_raw_stat", "log_reread", "node_probe")
    free = F._verifier(_req("telemetry_verifier", {"verdicts": [v]}, tools=tools), "telemetry")
    forced = F._verifier(_req("telemetry_verifier", {"verdicts": [v]}, tools=tools, forced="submit_review"), "telemetry")
    assert any(b.get("name") == "telemetry_raw_stat" for b in free)
    assert [b["name"] for b in forced if b["type"] == "tool_use"] == ["submit_review"]


def test_a_rejected_answer_is_repaired_by_dropping_the_untraced_sentences():
    req = {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": True,
                                                      "content": "rejected: numbers not traced to a tool-result field: "
                                                                 "935: unit 'x' is not ...; 40: no entry in numbers. "
                                                                 "Add a numbers entry"}]}]}
    assert F._rejected_numbers(req) == ["935", "40"]
    blocks = [{"type": "tool_use", "name": "submit_review", "input": {
        "reviews": [{"claim_id": "a", "note": "re-derives 935 kernels/step"}],
        "prose": "All agree. The share is 40% here. Done."}}]
    x = F._repair(blocks, ["935", "40"])[0]["input"]
    assert x["prose"] == "All agree. Done." and x["reviews"][0]["note"] == ""
