"""fp32 matrix multiplies without TF32 (seed 001 T9): cuBLAS runs FFMA (SIMT) sgemm kernels on the
CUDA cores instead of TF32 tensor-core kernels, because ``torch.backends.cuda.matmul.allow_tf32``
is False (``float32_matmul_precision('highest')``, PyTorch's default since 1.12).

Signature: the time of the fp32 SIMT GEMM kernels (:data:`FP32_SIMT_GEMM`) is at least
:data:`MIN_SHARE` of the profiled window. ``share`` = that kernel time / the GPU timeline's total
time (an upper bound of what TF32 saves: TF32 GEMMs still take some time).

Detects from the analyst's kernel time by name (the one pass's name counter, raw event durations);
re-derived from the verifier reader's kernels (its own parse and clipping) over its own timeline
(:class:`~..kernel_share.KernelFamilyCause`). Lever ``tf32_matmul``."""

from __future__ import annotations

import re

from .base import Constant, LeverSpec
from ..figures import Figure
from ..kernel_share import KernelFamilyCause

FP32_SIMT_GEMM = re.compile(r"xmma_gemm_f32f32_f32f32|simt_sgemm|[a-z0-9]_sgemm|^(void )?sgemm|gemmSN_\w+<float"
                            r"|^Cijk_\w*?_S(B|_B)_", re.I)
"""fp32 GEMM kernels on the CUDA cores (FFMA): cuBLAS ``sm80/sm90_xmma_gemm_f32f32_f32f32``,
CUTLASS ``cutlass_80_simt_sgemm``, ``volta_sgemm``/``ampere_sgemm``, ``sgemm_largek_lds64``,
``gemmSN_*<float``; ROCm Tensile (rocBLAS/hipBLASLt) ``Cijk_*_SB_*`` / ``Cijk_*_S_B_*`` (type S =
fp32 in and out)."""
NOT_FP32_SIMT = re.compile(r"tf32|xf32|bf16|bfloat16|f16|half|hgemm|__half|i8|int8|_HB_|_BB_|_HH_", re.I)
"""Names of tensor-core or reduced-precision kernels the family pattern must not take (a cuDNN
``precomputed_convolve_sgemm<__nv_bfloat16`` is a bf16 convolution; ``*_tf32f32`` is TF32)."""
TF32_GEMM = re.compile(r"tf32|xf32", re.I)
"""TF32/XF32 tensor-core GEMMs (the statement's context: what the control runs)."""
MIN_SHARE = 0.5


class Tf32Off(KernelFamilyCause):
    """fp32 GEMMs on FFMA kernels for most of the step (seed 001 T9)."""

    seed = "seed 001 T9"
    causes = {"tf32-off": "fp32 matrix multiplies without TF32: FFMA sgemm kernels instead of tensor cores"}
    reads = ("rank",)
    include, exclude, context, min_share = FP32_SIMT_GEMM, NOT_FP32_SIMT, TF32_GEMM, MIN_SHARE
    claim_id, metric, cause_id, lever_name = "triage.t9.tf32_off", "tf32_off.simt_gemm_share", "tf32-off", "tf32_matmul"
    figures = (Figure("tf32_off.simt_gemm_share", "fraction", "fp32 SIMT GEMM kernel time / GPU timeline total time",
                      "cause", KernelFamilyCause.tolerance),)
    constants = {"MIN_SHARE": Constant(MIN_SHARE, "measurement on the bundled H200 runs (bench/accuracy/cases): "
                                       "tf32-off 0.92 of the window in fp32 SIMT GEMMs; every other run <= 0.41 "
                                       "(sdpa-math 0.41, deep-prefetch 0.32, tf32-on 0.002): a majority of the step, "
                                       "margin both sides")}
    levers = (LeverSpec("tf32_matmul", "torch.backends.cuda.matmul.allow_tf32 = True (or "
                        "torch.set_float32_matmul_precision('high')) so fp32 matmuls run on TF32 tensor cores "
                        "(seed 001 T9: 2-4x on fp32-heavy runs)"),)

    def statement(self, s: float, part_us: float, context_us: float) -> str:
        return (f"fp32 GEMMs run on FFMA (SIMT) kernels for {s:.0%} of the profiled window ({part_us / 1e3:.1f} ms; "
                f"TF32 tensor-core GEMMs {context_us / 1e3:.1f} ms): TF32 is off (seed 001 T9)")


CAUSE = Tf32Off()
