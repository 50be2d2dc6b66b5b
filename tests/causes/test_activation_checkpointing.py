"""activation-checkpointing (seed 001 T17): forward kernels / backward kernels of the families with a
distinct backward kernel, on hand-built traces whose counts are known by construction (CUDA and
ROCm kernel names), the verifier's raw-text re-derivation confirming and refuting, and the bundled
activation-checkpointing run beside its control through the CLI."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import activation_checkpointing as A
from ai4s_graph.graph.rules.figures import supported

from cause_inputs import assert_bundled_run, inputs_for, reader_for, trace

LN_F = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float)"
LN_B = "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<float, float, false>(float)"
GELU_F = "void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)>"
GELU_B = "void at::native::vectorized_elementwise_kernel<8, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&)>"
SDPA_F = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
SDPA_B = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0"
TL = {"timeline": {"computation_time": {"percent": 60.0, "time_ms": 60.0}, "total_time": {"percent": 100.0,
                                                                                          "time_ms": 100.0}}}


def _verdict(f, path) -> str:
    rd = A.CAUSE.rederive(f.claim, reader_for(path))
    return registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value


def test_every_layer_recomputed_fires_with_its_share(tmp_path):
    # 12 layers x (2 layer norms, 1 GELU, 1 attention) run forward twice and backward once: 96 vs 48 kernels
    p = trace(tmp_path, {LN_F: 48, LN_B: 24, GELU_F: 24, GELU_B: 12, SDPA_F: 24, SDPA_B: 12,
                         "autograd::engine::evaluate_function: NativeLayerNormBackward0": 24})
    [f] = A.CAUSE.detect(inputs_for(p, rank=TL))
    assert f.causes == ("activation-checkpointing",) and f.claim.value == 2.0
    assert [lv.name for lv in f.levers] == ["no_activation_checkpointing"]
    # share: computing 60% x r / (1 + 2 + r) with r = 1 -> 0.15
    assert f.share == pytest.approx(0.15)
    assert supported(f.claim, A.CAUSE.figures)                # the ratio is the formula of its evidence
    assert _verdict(f, p) == "confirmed"
    q = trace(tmp_path, {LN_F: 24, LN_B: 24, GELU_F: 12, GELU_B: 12, SDPA_F: 12, SDPA_B: 12}, "other.json.gz")
    assert _verdict(f, q) == "refuted"                       # the same claim against a trace without recompute


def test_another_member_of_the_kind_rocm_names(tmp_path):
    # ROCm: Composable Kernel attention and PyTorch's hipified layer norm, half of the layers checkpointed
    p = trace(tmp_path, {"fmha_fwd_d128_bf16_batch_b128x128x32": 30, "fmha_bwd_d128_bf16_batch_b128x128x32": 20,
                         LN_F: 60, LN_B: 40})
    [f] = A.CAUSE.detect(inputs_for(p, rank=TL))
    assert f.claim.value == 1.5 and f.share == pytest.approx(round(0.6 * 0.5 / 3.5, 4))
    assert _verdict(f, p) == "confirmed"


def test_borderline_and_absent(tmp_path):
    at = trace(tmp_path, {LN_F: 3, LN_B: 2}, "at.json.gz")            # exactly RECOMPUTE_RATIO
    assert [f.claim.value for f in A.CAUSE.detect(inputs_for(at, rank=TL))] == [A.RECOMPUTE_RATIO]
    below = trace(tmp_path, {LN_F: 29, LN_B: 20}, "below.json.gz")   # 1.45
    assert A.CAUSE.detect(inputs_for(below, rank=TL)) == []
    # forward kernels without any backward kernel (an evaluation pass): not a training step, no finding
    evals = trace(tmp_path, {LN_F: 40, GELU_F: 20}, "eval.json.gz")
    assert A.CAUSE.detect(inputs_for(evals, rank=TL)) == []
    # a family without backward kernels does not count against the others (1 GELU eval + balanced LN)
    mixed = trace(tmp_path, {LN_F: 10, LN_B: 10, GELU_F: 30}, "mixed.json.gz")
    assert A.CAUSE.detect(inputs_for(mixed, rank=TL)) == []


@pytest.mark.parametrize("case, cause, lever", [
    ("activation-checkpointing", "activation-checkpointing", "no_activation_checkpointing"),
    ("checkpointing-control", None, None),
])
def test_bundled_case_and_its_control(case, cause, lever, tmp_path):
    assert_bundled_run(case, tmp_path, cause, lever)
