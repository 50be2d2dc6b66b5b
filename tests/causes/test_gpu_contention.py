"""The GPU-contention cause: hand-built trace busy shares and telemetry utilization with known
excesses (an NVIDIA dcgm job, an AMD rocm job, a profiler-stretched lone job), the verifier's
re-derivation from the utilization series and its own reader, and the bundled run beside its
control."""

from __future__ import annotations

import json

import pytest

from ai4s_graph.graph.rules.causes import gpu_contention
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.state import Manifest
from cause_inputs import bundled_row, confirmed


def inputs(busy: float, util: float | None, trace_ms: float = 40.0, log_s: float | None = 0.040,
           gpu: str = "NVIDIA H200") -> Inputs:
    stats = {} if util is None else {"gpu_util.avg": {"value": util}}
    return Inputs(rank={"path": "/r/traces/trace_rank0.json.gz", "rank": 0, "step_time_ms": trace_ms,
                        "timeline": {"busy_time": {"percent": busy}}},
                  telemetry={"stats": stats}, fom={"steady_step_time_s": log_s} if log_s else {},
                  manifest=Manifest(jobid="1", gpu=gpu))


def reader(util_points: list[float], busy: float, trace_ms: float = 40.0, steps: list[float] | None = None) -> Reader:
    return Reader(series={"gpu_util": {"vm": [(float(i), v) for i, v in enumerate(util_points)]}},
                  rank={"reader": {"timeline": {"busy_time": {"percent": busy}}, "step_time_ms": trace_ms}},
                  log={"steps": steps if steps is not None else [0.4, 0.040, 0.040, 0.040]})


def test_fires_on_utilization_beyond_the_jobs_own_busy_share():
    # 93109's shape: 100% utilization, trace busy 80.1%, steps as long as the log's: excess 19.9 pp, share 0.199
    [f] = gpu_contention.CAUSE.detect(inputs(80.1, 100.0))
    assert f.causes == ("gpu-contention",) and f.claim.value == 19.9 and f.share == pytest.approx(0.199)
    assert [lv.name for lv in f.levers] == ["exclusive_gpu"]


def test_other_member_amd_rocm_job_at_half_busy():
    # MI300X job busy 45% with rocm utilization 72%: 27 pp
    [f] = gpu_contention.CAUSE.detect(inputs(45.0, 72.0, gpu="AMD Instinct MI300X"))
    assert f.claim.value == 27.0


def test_profiler_stretch_is_corrected_before_comparing():
    # 93110's shape: busy 40% of a profiled step 1.59x the log's (37.1 vs 23.3 ms): own busy 63.7%;
    # utilization 70% is only 6.3 pp beyond it: a lone job, no finding (uncorrected it would read 30 pp)
    assert gpu_contention.CAUSE.detect(inputs(40.0, 70.0, trace_ms=37.1, log_s=0.0233)) == []
    assert gpu_contention.CAUSE.detect(inputs(40.0, 70.0, trace_ms=37.1, log_s=None))


def test_does_not_fire_on_a_lone_job_or_without_telemetry():
    assert gpu_contention.CAUSE.detect(inputs(97.3, 51.5)) == []  # compute-bound 93105: utilization lags
    assert gpu_contention.CAUSE.detect(inputs(80.0, None)) == []


def test_borderline_at_the_threshold():
    assert gpu_contention.CAUSE.detect(inputs(80.0, 90.0))  # 10.0 pp
    assert gpu_contention.CAUSE.detect(inputs(80.0, 89.9)) == []


def test_verifier_rederives_from_the_series_and_its_reader():
    [f] = gpu_contention.CAUSE.detect(inputs(80.1, 100.0))
    assert confirmed(gpu_contention.CAUSE, f.claim, reader([100.0, 99.0, 100.0], 80.4)) == "confirmed"
    assert confirmed(gpu_contention.CAUSE, f.claim, reader([60.0, 50.0, 70.0], 80.4)) == "refuted"
    assert confirmed(gpu_contention.CAUSE, f.claim, Reader()) == "inconclusive"


@pytest.mark.parametrize("case, cause", [("gpu-contention", "gpu-contention"), ("gpu-contention-control", None)])
def test_bundled_case_and_its_control(case, cause, tmp_path):
    r = bundled_row(case, tmp_path)
    assert (r["error"], r["named_cause"]) == ("", cause)
    if cause:
        assert r["first_lever"] == "exclusive_gpu"
        # compute-bound on its own trace (79.4% computing, the nearer rule), the telemetry's contradiction
        # (100% utilization, 687 W, SM clock 78% of boost) resolved by the contention it measures
        b = json.loads((tmp_path / case / "report.json").read_text())["bottleneck"]
        assert (b["klass"], b["cause"]) == ("compute-bound", "gpu-contention")
        [c] = b["contradictions"]
        assert c["resolved"].startswith("the telemetry is not the job's alone: the GPU reads 100.0% utilized")
    else:
        assert r["class_ok"] is True


def test_a_confirmed_contention_supersedes_the_power_cap_it_explains():
    # 93109's readings: the board at 691 W of 700 W with the SM clock at 1523 MHz (77% of boost) and
    # utilization 100%: clocks_power reads a power cap; the other process explains it
    from ai4s_graph.graph.rules import registry, verdict
    from ai4s_graph.graph.rules.causes import clocks_power
    from ai4s_graph.state import Bottleneck, BottleneckClass

    x = inputs(80.1, 100.0)
    x.telemetry["stats"].update({"sm_clock.avg": {"value": 1523.0}, "power.avg": {"value": 691.0}})
    cont = registry.detect("trace_analyst", x)
    cap = registry.detect("telemetry_analyst", x)
    assert [f.causes for f in cont if f.causes == ("gpu-contention",)] and [f.causes for f in cap] == [("power-capped",)]
    findings = {"trace": {"triage": registry.lever_entries([f for f in cont if f.causes == ("gpu-contention",)])},
                "telemetry": {"triage": registry.lever_entries(cap)}}
    judged = [registry.judge(f.claim, "v", f.claim.value, gpu_contention.GAP_TOL, "m") for f in cont + cap]
    assert {v.verdict.value for v in judged} == {"confirmed"}
    b = verdict.name_causes(Bottleneck(klass=BottleneckClass.unknown, rationale=""), findings, judged)
    assert b.cause == "gpu-contention" and [c.id for c in b.causes] == ["gpu-contention"]
    # without the contention finding the power cap is named
    b = verdict.name_causes(Bottleneck(klass=BottleneckClass.unknown, rationale=""),
                            {"telemetry": {"triage": registry.lever_entries(cap)}}, judged)
    assert b.cause == "power-capped" and clocks_power.CAUSE.causes


def _tel_contradiction():
    from ai4s_graph.state import BottleneckClass, Contradiction
    return Contradiction(direct="trace of rank 0: GPU computing 79.4%, idle 19.9% of the profiled window → compute-bound",
                         direct_class=BottleneckClass.compute, winner="trace (direct measurement)", why="w", settle="s",
                         indirect="telemetry over the job: utilization 100.0%, SM clock 1551.6 MHz, power 687.1 W → "
                                  "does not support a compute-bound reading", indirect_class="not compute-bound",
                         claims=["om.tel.supports_compute"])


def test_a_named_contention_resolves_the_telemetry_contradiction_it_explains():
    # the job's class is its own trace's (compute-bound, seed 001 T1: the GPU is the resource that limits it,
    # shared): the board's 100% utilization, full power and lowered clock are the job's and the other process's
    # together, so they do not contradict the trace; the penalty for the contradiction (0.15) is returned
    from ai4s_graph.graph.rules import registry, verdict
    from ai4s_graph.state import Bottleneck, BottleneckClass

    x = inputs(80.1, 100.0)
    x.telemetry["stats"].update({"sm_clock.avg": {"value": 1523.0}, "power.avg": {"value": 691.0}})
    cont = [f for f in registry.detect("trace_analyst", x) if f.causes == ("gpu-contention",)]
    cap = registry.detect("telemetry_analyst", x)
    judged = [registry.judge(f.claim, "v", f.claim.value, gpu_contention.GAP_TOL, "m") for f in cont + cap]
    findings = {"trace": {"triage": registry.lever_entries(cont)}, "telemetry": {"triage": registry.lever_entries(cap)}}
    b = Bottleneck(klass=BottleneckClass.compute, rationale="borderline.", confidence=0.35,
                   contradictions=[_tel_contradiction()])
    verdict.name_causes(b, findings, judged)
    [c] = b.contradictions
    assert b.cause == "gpu-contention" and b.confidence == 0.5
    assert c.resolved.startswith("the telemetry is not the job's alone: the GPU reads 100.0% utilized") and \
        "(claim `triage.gpu_contention`, gpu-contention)" in c.resolved
    assert b.rationale == f"borderline. Resolved: {c.resolved}."
    # a power cap alone (no other process) is a reading of the job's own board: nothing is resolved
    b = Bottleneck(klass=BottleneckClass.compute, rationale="r", confidence=0.35, contradictions=[_tel_contradiction()])
    verdict.name_causes(b, {"telemetry": {"triage": registry.lever_entries(cap)}}, judged)
    assert b.cause == "power-capped" and b.contradictions[0].resolved is None and b.confidence == 0.35
    # a refuted contention claim resolves nothing either
    refuted = [registry.judge(f.claim, "v", 0.0, gpu_contention.GAP_TOL, "m") for f in cont]
    b = Bottleneck(klass=BottleneckClass.compute, rationale="r", confidence=0.35, contradictions=[_tel_contradiction()])
    verdict.name_causes(b, {"trace": {"triage": registry.lever_entries(cont)}}, refuted)
    assert b.cause is None and b.contradictions[0].resolved is None

