"""SDPA's silent fallback to the math backend (seed 001 T14): the trace holds
``aten::_scaled_dot_product_attention_math`` events, so the fused kernels were not eligible
(dtype, head dim, mask) and PyTorch fell back without a word (seed 000 lesson 21: MATH is 10-15x
slower than EFFICIENT).

Detects from the trace's event-name counts (the analysis pass); re-derived from the raw text of the
same trace (the pass's raw-text counter: no JSON parse). Lever ``sdpa_fused_backend`` (the benchmark's lever id), saving from
``tools/levers/impact.py`` (``SDPA_MATH_SLOWDOWN``, lesson 21)."""

from __future__ import annotations

import re

from .base import Cause, Constant, Finding, LeverSpec, ev, file_name
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

MATH_SDPA = "aten::_scaled_dot_product_attention_math"
FUSED_SDPA = re.compile(r"flash|efficient_attention|fmha|cudnn_attention|_scaled_dot_product_(flash|efficient|cudnn)", re.I)
"""A fused attention op or kernel (the count of those is the statement's context)."""
CLAIM_ID = "triage.t14.sdpa_math"
METHOD = "raw-text count of the math-backend op in the trace file"


class SdpaMathFallback(Cause):
    """Attention on SDPA's math backend instead of a fused kernel (seed 001 T14)."""

    seed = "seed 001 T14; seed 000 lesson 21"
    causes = {"sdpa-math-fallback": "scaled_dot_product_attention ran on the MATH backend (no fused kernel)"}
    analyst = "trace_analyst"
    reads = ("event_names", "rank")
    figures = (Figure("sdpa_math_calls", "calls", "attention calls on SDPA's math backend in one rank trace", "cause",
                      Tolerance()),)
    constants = {"MATH_SLOWDOWN": Constant(10.0, "seed 000 lesson 21: MATH is 10-15x slower than EFFICIENT "
                                                 "(the lever's saving model, tools/levers/impact.py SDPA_MATH_SLOWDOWN)")}
    levers = (LeverSpec("sdpa_fused_backend", "feed SDPA bf16/fp16 inputs and force the fused backend with "
                        "sdpa_kernel([EFFICIENT_ATTENTION, FLASH_ATTENTION]) so an ineligible shape errors loudly",
                        saving="sdpa_efficient"),)
    event_names = (MATH_SDPA,)
    event_name_patterns = (FUSED_SDPA,)
    raw_patterns = {"sdpa_math": re.escape(MATH_SDPA) + '"'}

    def detect(self, x: Inputs) -> list[Finding]:
        n = x.event_names.get(MATH_SDPA, 0)
        if not n or not x.rank:
            return []
        fused = sum(v for k, v in x.event_names.items() if FUSED_SDPA.search(k) and k != MATH_SDPA)
        path = str(x.rank["path"])
        c = self.claim(CLAIM_ID, f"{n} attention calls ran SDPA's math backend ({MATH_SDPA}), {fused} ran a fused "
                       "kernel: a silent fallback (seed 001 T14; lesson 21: MATH is 10-15x slower than EFFICIENT)",
                       "sdpa_math_calls", n, "calls",
                       [ev("trace.event_names", f"{file_name(path)}: count {MATH_SDPA}", n, path=path,
                           rank=x.rank.get("rank"))], 0.9)
        return [Finding(("sdpa-math-fallback",), c, (self.lever("sdpa_fused_backend"),))]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        n = ((r.rank or {}).get("raw_counts") or {}).get("sdpa_math")
        if n is None:
            return Rederived(None, "no independent path for this triage claim", Tolerance())
        return Rederived(n, METHOD, Tolerance())


CAUSE = SdpaMathFallback()
