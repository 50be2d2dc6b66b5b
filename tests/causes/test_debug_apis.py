"""Debug APIs left on (seed 001 T12): anomaly mode (aten::isnan on at least half the backward nodes)
and launch-serializing variables. The claim's value is a boolean, a formula of its evidence: the
registry's support check accepts it, so the raw-text re-derivation confirms it (it used to end
"unsupported" by construction)."""

from __future__ import annotations

import pytest
from cause_inputs import inputs_for, reader_for, trace

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import debug_apis
from ai4s_graph.state.claimkit import is_supported

CAUSE = debug_apis.CAUSE
BW = "autograd::engine::evaluate_function: AddmmBackward0"


def test_anomaly_mode_is_found_and_confirmed(tmp_path):
    p = trace(tmp_path, {BW: 40, "aten::isnan": 40})
    [f] = CAUSE.detect(inputs_for(p))
    assert f.causes == ("anomaly-mode",) and f.claim.value is True
    assert [lv.name for lv in f.levers] == ["anomaly_detection_off"]
    assert "40 aten::isnan checks for 40 backward nodes" in f.claim.statement
    assert not is_supported(f.claim)  # True is among no returned number...
    assert debug_apis.from_evidence([e.returned for e in f.claim.evidence]) is True  # ...but follows from them
    r = reader_for(p)
    assert r.rank["raw_counts"]["isnan"] == 40 and r.rank["raw_counts"]["backward"] == 40
    rd = CAUSE.rederive(f.claim, r)
    assert rd.value is True
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


def test_launch_blocking_in_the_environment(tmp_path):
    p = trace(tmp_path, {"aten::mm": 4})
    [f] = CAUSE.detect(inputs_for(p, env={"CUDA_LAUNCH_BLOCKING": "1", "OMP_NUM_THREADS": "7"}))
    assert f.causes == ("cuda-launch-blocking",) and "CUDA_LAUNCH_BLOCKING=1" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["launch_blocking_off"]
    rd = CAUSE.rederive(f.claim, reader_for(p))
    assert rd.value is True
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


@pytest.mark.parametrize("isnan,env", [(3, {}), (19, {"CUDA_LAUNCH_BLOCKING": "0"})])
def test_silent_below_the_threshold(tmp_path, isnan, env):
    # 19 isnan for 40 backward nodes is 0.475 < 0.5 per node: a loss guard, not anomaly mode
    p = trace(tmp_path, {BW: 40, "aten::isnan": isnan})
    assert CAUSE.detect(inputs_for(p, env=env)) == []


def test_exactly_half_per_backward_node_fires(tmp_path):
    p = trace(tmp_path, {BW: 40, "aten::isnan": 20})
    assert [f.claim.value for f in CAUSE.detect(inputs_for(p))] == [True]


def test_both_on_give_both_levers_in_cause_order(tmp_path):
    # HIP naming (ROCm) of the launch-serializing variable, with anomaly mode on the same run
    p = trace(tmp_path, {BW: 10, "aten::isnan": 10})
    [f] = CAUSE.detect(inputs_for(p, env={"HIP_LAUNCH_BLOCKING": "1"}))
    assert f.causes == ("anomaly-mode", "cuda-launch-blocking")
    assert [lv.name for lv in f.levers] == ["anomaly_detection_off", "launch_blocking_off"]


def test_levers_are_catalog_levers():
    from bench.accuracy.cases import LEVERS
    assert {s.name for s in CAUSE.levers} <= set(LEVERS)


@pytest.mark.parametrize("env,share", [({}, 0.14), ({"CUDA_LAUNCH_BLOCKING": "1"}, 0.17)])
def test_share_is_the_time_of_the_checks_and_blocking_launches(tmp_path, env, share):
    from host_traces import Op, host_trace
    from step_traces import read
    # 20 backward nodes a step, each checked by isnan (20 µs) + any (20 µs) + item (30 µs): 1400 µs of the
    # 10 ms step; with CUDA_LAUNCH_BLOCKING=1 also the 60 launch calls of 5 µs on the host: + 300 µs
    one = [Op(BW, 10.0, kernel_us=1.0), Op("aten::isnan", 20.0, kernel_us=1.0), Op("aten::any", 20.0, kernel_us=1.0),
           Op("aten::item", 30.0, launch_us=20.0, sync=True)]
    x, _ = read(host_trace(tmp_path, one * 20))
    x.rank["n_steps"], x.env = 3, env
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(share, abs=1e-9)
