"""CPU tensor work in the step on hand-built traces (known GPU-idle time in kernel-less ops), the
sampler's re-derivation confirming and refuting, and the bundled case + its control."""

from __future__ import annotations

import pytest
from host_traces import Op, host_trace
from step_traces import bundled, confirmed, read

from ai4s_graph.graph.rules.causes import cpu_preprocess

CAUSE = cpu_preprocess.CAUSE
MM = Op("aten::mm", 200.0, kernel_us=1000.0)


def _gemm_after(*cpu: Op) -> list[Op]:
    return [*cpu, MM]


def test_fires_with_the_kernel_less_op_time(tmp_path):
    # randn 3000 + sort 2500 µs on the host, no kernel: 5500 µs of GPU idle of the 10 ms step; the GEMM's
    # op idles 1 µs before its launch and 2 µs after it until its kernel starts: claim 5503 / 10000
    x, r = read(host_trace(tmp_path, _gemm_after(Op("aten::randn", 3000.0), Op("aten::sort", 2500.0))))
    [f] = CAUSE.detect(x)
    assert f.causes == ("cpu-preprocess-in-step",) and f.share == pytest.approx(0.55, abs=1e-9)
    assert f.claim.metric == "steps.idle.op.share" and f.claim.value == pytest.approx(0.5503, abs=1e-9)
    assert "aten::randn 3.0 ms, aten::sort 2.5 ms" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["preprocess_on_gpu"]
    assert confirmed(f, r) == "confirmed"


@pytest.mark.parametrize("rocm", [False, True])
def test_another_member_of_the_kind(tmp_path, rocm):
    # a CPU shuffle (randperm + index_select on CPU tensors, 6000 µs) beside a hipBLASLt / cuBLAS GEMM
    kernel = "Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI32x32x8x1" if rocm else "sm90_xmma_gemm_bf16bf16_bf16f32"
    items = [Op("aten::randperm", 2000.0), Op("aten::index_select", 4000.0), Op("aten::mm", 200.0, 1000.0, kernel=kernel)]
    x, r = read(host_trace(tmp_path, items, rocm=rocm, py=("prep.py(12): shuffle", 0, 2)))
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(0.6, abs=1e-9)
    assert "prep.py:12 (shuffle)" in f.claim.statement
    assert confirmed(f, r) == "confirmed"


def test_borderline_below_the_threshold(tmp_path):
    # 2400 + 2500 µs = 0.49 of the step < 0.5
    x, _ = read(host_trace(tmp_path, _gemm_after(Op("aten::randn", 2400.0), Op("aten::sort", 2500.0))))
    assert CAUSE.detect(x) == []


def test_ops_that_launch_kernels_do_not_fire(tmp_path):
    # the same 6 ms of host time in ops that each launch a (short) kernel: device work, not CPU work
    items = [Op("aten::sort", 3000.0, kernel_us=20.0), Op("aten::randn", 3000.0, kernel_us=20.0), MM]
    x, _ = read(host_trace(tmp_path, items))
    assert CAUSE.detect(x) == []


def test_framework_regions_do_not_fire(tmp_path):
    # kernel-less autograd nodes and the optimizer's zero_grad: the framework, not the user's tensor work
    items = [Op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 3000.0),
             Op("Optimizer.zero_grad#AdamW.zero_grad", 3000.0), MM]
    x, _ = read(host_trace(tmp_path, items))
    assert CAUSE.detect(x) == []


def test_the_verifier_refutes_a_claim_its_trace_does_not_show(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    x, _ = read(host_trace(tmp_path / "a", _gemm_after(Op("aten::randn", 3000.0), Op("aten::sort", 2500.0))))
    _, other = read(host_trace(tmp_path / "b", _gemm_after(Op("aten::randn", 300.0))))
    [f] = CAUSE.detect(x)
    assert confirmed(f, other) == "refuted"


def test_bundled_case(tmp_path):
    row = bundled("cpu-preprocess", tmp_path)
    assert (row["named_cause"], row["first_lever"]) == ("cpu-preprocess-in-step", "preprocess_on_gpu")


def test_bundled_control(tmp_path):
    row = bundled("preprocess-on-gpu", tmp_path)
    assert row["cause_ok"] and row["named_cause"] != "cpu-preprocess-in-step"
