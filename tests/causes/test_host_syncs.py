"""Host syncs (seed 001 T23): >= 32 stream synchronizations a step fire (CUDA and HIP naming),
fewer are silent (the loss read once a step), the raw-text count re-derives the claim; anomaly mode
is named before it; the bundled grad-norm-sync run and its control end to end."""

from __future__ import annotations

import pytest
from cause_inputs import assert_bundled_run, inputs_for, reader_for, trace

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import host_syncs as hs

CAUSE = hs.CAUSE


@pytest.mark.parametrize("sync", ["cudaStreamSynchronize", "hipStreamSynchronize"])
def test_per_parameter_item_fires_and_is_confirmed(tmp_path, sync):
    # 2 steps, 100 grad-norm .item() each: 200 scalar reads, 200 stream drains
    p = trace(tmp_path, {sync: 200, "aten::item": 200, "aten::_local_scalar_dense": 200})
    [f] = CAUSE.detect(inputs_for(p, rank={"n_steps": 2}))
    assert f.causes == ("host-sync",) and f.claim.value == 200 and "(100 a step), 200 host reads" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["remove_host_syncs"]
    rd = CAUSE.rederive(f.claim, reader_for(p))
    assert rd.value == 200
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"
    rd = CAUSE.rederive(f.claim, reader_for(trace(tmp_path, {sync: 6}, name="o.json.gz")))
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "refuted"


@pytest.mark.parametrize("n,steps,fires", [(96, 3, True), (93, 3, False), (48, 3, False), (500, 0, False)])
def test_borderline(tmp_path, n, steps, fires):
    # 96 in 3 steps = 32 a step fires; 31 a step (93) does not; 16 a step is a checkpoint/copy run's count
    p = trace(tmp_path, {"cudaStreamSynchronize": n})
    assert bool(CAUSE.detect(inputs_for(p, rank={"n_steps": steps}))) is fires


def test_anomaly_mode_is_registered_first():
    order = [c.name for c in registry.CAUSES]
    assert order.index("debug_apis") < order.index("host_syncs")


@pytest.mark.parametrize("case,cause,lever", [("grad-norm-sync", "host-sync", "remove_host_syncs"),
                                              ("experts-foreach", None, None)])
def test_bundled_run_and_its_control(tmp_path, case, cause, lever):
    assert_bundled_run(case, tmp_path, cause, lever)


def test_share_is_the_gpu_idle_time_blocked_in_syncs(tmp_path):
    from host_traces import Op, host_trace
    from step_traces import read
    # 40 host reads a step, each blocked 10 µs in cudaStreamSynchronize with the GPU idle, then a GEMM:
    # 400 µs of the 10 ms step
    x, _ = read(host_trace(tmp_path, [Op("aten::item", 15.0, launch_us=10.0, sync=True)] * 40
                           + [Op("aten::mm", 200.0, kernel_us=1000.0)]))
    x.rank["n_steps"] = 3
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(0.04, abs=1e-9)
