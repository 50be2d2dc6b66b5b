"""fp32 matrix multiplies without TF32 (seed 001 T9): cuBLAS runs FFMA (SIMT) sgemm kernels on the
CUDA cores instead of TF32 tensor-core kernels, because ``torch.backends.cuda.matmul.allow_tf32``
is False (``float32_matmul_precision('highest')``, PyTorch's default since 1.12).

Signature: the time of the fp32 SIMT GEMM kernels (:data:`FP32_SIMT_GEMM`: cuBLAS/CUTLASS
``sm80_xmma_gemm_f32f32_f32f32*``, ``cutlass_*_simt_sgemm*``, ``volta_sgemm*``, ``sgemm_largek*``,
``gemmSN_*<float``; rocBLAS/hipBLASLt Tensile ``Cijk_*_S[B]_*`` fp32 kernels without XF32) is at
least :data:`MIN_SHARE` of the profiled window. ``share`` = that kernel time / the GPU timeline's
total time (an upper bound of what TF32 saves: TF32 GEMMs still take some time).

Detects from the analyst's kernel time by name (the one pass's name counter, raw event durations);
re-derived from the verifier reader's kernels (its own parse and clipping) over its own timeline.
Lever ``tf32_matmul``."""

from __future__ import annotations

import re

from .base import Cause, Constant, Finding, LeverSpec, ev, file_name
from ..figures import Figure, Inputs, Reader, Rederived
from ..kernel_share import family_us, share, window_us
from ....state import Claim, Tolerance

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
CLAIM_ID = "triage.t9.tf32_off"
METHOD = "fp32 SIMT GEMM kernel time of the verifier reader's kernels over its own GPU timeline"
MIN_SHARE = 0.5
TOL = Tolerance(abs=0.02)


class Tf32Off(Cause):
    """fp32 GEMMs on FFMA kernels for most of the step (seed 001 T9)."""

    seed = "seed 001 T9"
    causes = {"tf32-off": "fp32 matrix multiplies without TF32: FFMA sgemm kernels instead of tensor cores"}
    analyst = "trace_analyst"
    reads = ("rank",)
    figures = (Figure("tf32_off.simt_gemm_share", "fraction", "fp32 SIMT GEMM kernel time / GPU timeline total time",
                      "cause", TOL),)
    constants = {"MIN_SHARE": Constant(MIN_SHARE, "measurement on the bundled H200 runs (bench/accuracy/cases): "
                                       "tf32-off 0.92 of the window in fp32 SIMT GEMMs; every other run <= 0.41 "
                                       "(sdpa-math 0.41, deep-prefetch 0.32, tf32-on 0.002): a majority of the step, "
                                       "margin both sides")}
    levers = (LeverSpec("tf32_matmul", "torch.backends.cuda.matmul.allow_tf32 = True (or "
                        "torch.set_float32_matmul_precision('high')) so fp32 matmuls run on TF32 tensor cores "
                        "(seed 001 T9: 2-4x on fp32-heavy runs)"),)

    def wants_name(self, name: str) -> bool:
        return bool(FP32_SIMT_GEMM.search(name) or TF32_GEMM.search(name))

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank:
            return []
        ku = x.rank.get("kernel_us") or {}
        simt = family_us(ku, FP32_SIMT_GEMM, NOT_FP32_SIMT)
        s = share(simt, window_us(x.rank.get("timeline")))
        if s is None or s < MIN_SHARE:
            return []
        tf32 = family_us(ku, TF32_GEMM)
        path = str(x.rank["path"])
        c = self.claim(CLAIM_ID, f"fp32 GEMMs run on FFMA (SIMT) kernels for {s:.0%} of the profiled window "
                       f"({simt / 1e3:.1f} ms; TF32 tensor-core GEMMs {tf32 / 1e3:.1f} ms): TF32 is off "
                       "(seed 001 T9)", "tf32_off.simt_gemm_share", s, "fraction",
                       [ev("trace.kernel_time", f"{file_name(path)}: fp32 SIMT GEMM kernel time / total time", s,
                           path=path, rank=x.rank.get("rank"), simt_us=round(simt, 1))], 0.85)
        return [Finding(("tf32-off",), c, (self.lever("tf32_matmul"),), share=s)]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        rd = (r.rank or {}).get("reader") or {}
        if "kernel_us" not in rd:
            return Rederived(None, "no independent path for this triage claim", TOL)
        return Rederived(share(family_us(rd["kernel_us"], FP32_SIMT_GEMM, NOT_FP32_SIMT), window_us(rd.get("timeline"))),
                         METHOD, TOL)


CAUSE = Tf32Off()
