"""tf32-off (seed 001 T9): fp32 SIMT GEMM kernel time / window, on hand-built kernel tables with
known answers (NVIDIA and ROCm names), the pass's own counter, and the bundled tf32-off run beside
its control tf32-on (the real kernel tables of the one pass)."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import tf32_off
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.tools.trace import onepass

from cause_inputs import bundled, confirmed



def _x(kernel_us: dict[str, float], window_ms: float) -> Inputs:
    return Inputs(rank={"path": "/r/traces/trace_rank0.json.gz", "rank": 0, "kernel_us": kernel_us,
                        "timeline": {"total_time": {"time_ms": window_ms, "percent": 100.0}}})


def test_fires_on_cublas_simt_sgemm_with_its_share():
    # 60 + 15 ms of FFMA GEMMs in a 100 ms window: share 0.75; the TF32 kernel and the bf16 conv do not count
    x = _x({"sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize256x64x8": 60_000.0,
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>": 15_000.0,
            "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32": 5_000.0,
            "void precomputed_convolve_sgemm<__nv_bfloat16, 128, 6>": 9_000.0}, 100.0)
    [f] = tf32_off.CAUSE.detect(x)
    assert f.causes == ("tf32-off",) and f.share == 0.75 and f.claim.value == 0.75
    assert [lv.name for lv in f.levers] == ["tf32_matmul"]


def test_other_members_of_the_kind_volta_sgemm_and_rocm_tensile_fp32():
    # volta_sgemm 30 ms + Tensile fp32 (type S) 30 ms of 100 ms: 0.6; an XF32 Tensile kernel is TF32's twin
    x = _x({"volta_sgemm_128x64_nn": 30_000.0, "Cijk_Ailk_Bljk_SB_MT128x128x16_MI32x32x2x1_SN": 30_000.0,
            "Cijk_Ailk_Bljk_SB_MT128x128x16_XF32_SN": 20_000.0}, 100.0)
    [f] = tf32_off.CAUSE.detect(x)
    assert f.share == 0.6


def test_does_not_fire_below_a_majority_or_on_tf32_kernels():
    assert tf32_off.CAUSE.detect(_x({"volta_sgemm_128x64_nn": 41_000.0}, 100.0)) == []  # 0.41 (sdpa-math's)
    assert tf32_off.CAUSE.detect(_x({"sm90_xmma_gemm_f32f32_tf32f32_f32": 90_000.0}, 100.0)) == []
    assert tf32_off.CAUSE.detect(_x({"volta_sgemm_128x64_nn": 90_000.0}, 0.0)) == []  # no window


def test_borderline_at_the_threshold():
    [f] = tf32_off.CAUSE.detect(_x({"ampere_sgemm_64x64_nn": 50_000.0}, 100.0))
    assert f.share == tf32_off.MIN_SHARE
    assert tf32_off.CAUSE.detect(_x({"ampere_sgemm_64x64_nn": 49_900.0}, 100.0)) == []


def test_verifier_rederives_from_its_reader_confirming_and_refuting():
    [f] = tf32_off.CAUSE.detect(_x({"volta_sgemm_128x64_nn": 80_000.0}, 100.0))
    same = Reader(rank={"reader": {"kernel_us": {"volta_sgemm_128x64_nn": 79_000.0},
                                   "timeline": {"total_time": {"time_ms": 100.0}}}})
    rd = tf32_off.CAUSE.rederive(f.claim, same)
    assert rd.value == 0.79 and registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method) \
        .verdict.value == "confirmed"
    other = Reader(rank={"reader": {"kernel_us": {"volta_sgemm_128x64_nn": 40_000.0},
                                    "timeline": {"total_time": {"time_ms": 100.0}}}})
    rd2 = tf32_off.CAUSE.rederive(f.claim, other)
    assert registry.judge(f.claim, "trace_verifier", rd2.value, rd2.tolerance, rd2.method).verdict.value == "refuted"
    assert tf32_off.CAUSE.rederive(f.claim, Reader(rank={})).value is None


def test_the_pass_counter_sums_kernel_durations_of_wanted_names():
    c = onepass.NameCounter(registry.event_name_wanted)
    for d in (10.0, 20.5):
        c.feed({"name": "volta_sgemm_128x64_nn", "cat": "kernel", "dur": d})
    c.feed({"name": "volta_sgemm_128x64_nn", "cat": "cpu_op", "dur": 99.0})  # a cpu op of that name: no kernel time
    c.feed({"name": "elementwise_kernel", "cat": "kernel", "dur": 5.0})  # not wanted
    assert c.kernel_us == {"volta_sgemm_128x64_nn": 30.5} and c.counts["volta_sgemm_128x64_nn"] == 3


@pytest.mark.parametrize("case, fires", [("tf32-off", True), ("tf32-on", False)])
def test_bundled_case_and_its_control(case, fires):
    x, r = bundled(case)
    got = tf32_off.CAUSE.detect(x)
    assert bool(got) is fires
    if fires:
        # measured 2026-12-01: 0.92 of the window in FFMA GEMMs (truth.json: GEMM 94% of kernel time)
        assert 0.85 <= got[0].share <= 0.95
        assert confirmed(tf32_off.CAUSE, got[0].claim, r) == "confirmed"
