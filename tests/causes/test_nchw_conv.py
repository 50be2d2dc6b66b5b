"""nchw-conv-layout (seed 001 T11): layout-conversion kernel time / window, on hand-built kernel
tables with known answers (cuDNN and MIOpen names), and the bundled nchw-conv run beside its
control conv-control (channels_last) through the one pass's real tables."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import nchw_conv
from ai4s_graph.graph.rules.figures import Inputs, Reader

from cause_inputs import bundled, confirmed

CUDNN_IN = "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true>"
CUDNN_OUT = "void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float, true, false>"
FPROP = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"


def _x(kernel_us: dict[str, float], window_ms: float) -> Inputs:
    return Inputs(rank={"path": "/r/traces/trace_rank0.json.gz", "rank": 0, "kernel_us": kernel_us,
                        "timeline": {"total_time": {"time_ms": window_ms, "percent": 100.0}}})


def _judge(f, reader_kernel_us: dict[str, float], window_ms: float) -> str:
    r = Reader(rank={"reader": {"kernel_us": reader_kernel_us, "timeline": {"total_time": {"time_ms": window_ms}}}})
    rd = nchw_conv.CAUSE.rederive(f.claim, r)
    return registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value


def test_fires_on_cudnn_layout_conversions_with_their_share():
    # 9 + 5 ms of conversions in 40 ms: 0.35; the padding kernel and the conv itself do not count
    x = _x({CUDNN_IN: 9_000.0, CUDNN_OUT: 5_000.0, FPROP: 8_000.0,
            "void nhwcAddPaddingKernel<__nv_bfloat16, __nv_bfloat16, float, true>": 700.0}, 40.0)
    [f] = nchw_conv.CAUSE.detect(x)
    assert f.causes == ("nchw-conv-layout",) and f.share == 0.35
    assert [lv.name for lv in f.levers] == ["channels_last"]
    assert "8.0 ms of convolutions" in f.claim.statement
    assert _judge(f, {CUDNN_IN: 9_000.0, CUDNN_OUT: 5_000.0}, 40.0) == "confirmed"
    assert _judge(f, {CUDNN_IN: 1_000.0}, 40.0) == "refuted"


def test_another_member_of_the_kind_miopen_transposes():
    # MIOpen: 3 ms + 3 ms of transposes in 60 ms: 0.1
    x = _x({"transpose_NCHW2NHWC_kernel_bf16": 3_000.0, "transpose_NHWC2NCHW_kernel_bf16": 3_000.0,
            "MIOpenConvFwd_igemm_bf16": 20_000.0}, 60.0)
    [f] = nchw_conv.CAUSE.detect(x)
    assert f.share == 0.1


def test_borderline_and_absent():
    [f] = nchw_conv.CAUSE.detect(_x({CUDNN_IN: 5_000.0}, 100.0))
    assert f.share == nchw_conv.MIN_SHARE
    assert nchw_conv.CAUSE.detect(_x({CUDNN_IN: 4_900.0}, 100.0)) == []
    assert nchw_conv.CAUSE.detect(_x({FPROP: 90_000.0}, 100.0)) == []


@pytest.mark.parametrize("case, fires", [("nchw-conv", True), ("conv-control", False), ("cudnn-benchmark-off", False)])
def test_bundled_case_and_its_controls(case, fires):
    x, r = bundled(case)
    got = nchw_conv.CAUSE.detect(x)
    assert bool(got) is fires
    if fires:  # measured 2026-12-01: 0.33 of the window in nchwToNhwc/nhwcToNchw kernels
        assert 0.28 <= got[0].share <= 0.38 and confirmed(nchw_conv.CAUSE, got[0].claim, r) == "confirmed"
