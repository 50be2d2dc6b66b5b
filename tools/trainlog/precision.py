"""The precision discriminator (seed 000 lessons 13 and 22): the same workload at two precisions,
classified by the speedup of the lower one (:func:`compare_precision`)."""

from __future__ import annotations

import math

from .models import FomResult, PrecisionVerdict
from ...state.claims import BottleneckClass
from ..errors import InputError

#: Default relative noise band of a FOM comparison: lesson 9 of seed 000 treats lever results as
#: noise until they replicate within +-5%; lesson 13's "+1.3% within noise" sits inside it.
DEFAULT_NOISE_BAND = 0.05
#: fp64 -> fp32 speedup at or above which a workload is compute-bound (seed 000 lesson 13:
#: "A compute-bound workload should show >=30% speedup when switching fp64->fp32").
FP64_FP32_COMPUTE_THRESHOLD = 1.30
#: fp32 -> bf16/fp16 speedup at or above which a workload is GEMM/compute-bound (seed 000
#: lesson 22: "A >=1.4x precision speedup => MFMA/GEMM-bound").
FP32_BF16_COMPUTE_THRESHOLD = 1.40

_PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


def _time_of(v: FomResult | float, name: str) -> tuple[float, str]:
    if isinstance(v, FomResult):
        if v.steady_step_time_s is None:
            raise InputError(f"{name} run has no steady step time to compare")
        return v.steady_step_time_s, "steady_step_time_s"
    f = float(v)
    if not math.isfinite(f) or f <= 0:
        raise InputError(f"{name} FOM must be a positive finite number, got {v}")
    return f, "value"


def compare_precision(
    fom_hi: FomResult | float,
    fom_lo: FomResult | float,
    hi: str = "fp64",
    lo: str = "fp32",
    *,
    noise_band: float = DEFAULT_NOISE_BAND,
    higher_is_better: bool = False,
) -> PrecisionVerdict:
    """The precision discriminator: run the same workload at two precisions and classify it.

    ``fom_hi``/``fom_lo``: the run at the higher precision ``hi`` and the lower precision ``lo``,
    either :class:`FomResult` (their ``steady_step_time_s`` are compared: same batch, seconds per
    step) or plain numbers (times in seconds unless ``higher_is_better=True``, e.g. samples/s).
    ``speedup`` = time_hi / time_lo. Rules (seed 000):

    * lesson 13 (fp64 -> fp32; threshold 1.30): speedup >= 1.30 -> compute-bound; |speedup - 1|
      <= ``noise_band`` -> dispatch-bound ("fp32 ~ fp64"); fp32 slower than fp64 beyond the noise
      band (speedup < 1 - noise) -> memory-bound (lesson 13's "fp32 > fp64" branch, epoch times).
    * lesson 22 (fp32/tf32 -> bf16/fp16; threshold 1.40): speedup >= 1.40 -> GEMM/compute-bound;
      within noise -> dispatch-bound (by analogy with lesson 13); slower -> no seed rule.
    * any other pair uses lesson 13's 1.30 threshold (stated in ``rule``).
    * a speedup between the noise band and the threshold is ``inconclusive`` (class ``unknown``):
      replicate the runs (lesson 9).

    ``noise_band`` defaults to 0.05 (lesson 9: results count only when they replicate within
    +-5%). Raises :class:`InputError` for an unknown precision name, equal precisions, or a
    non-positive value.
    """
    hi_n, lo_n = hi.lower(), lo.lower()
    for n in (hi_n, lo_n):
        if n not in _PRECISIONS:
            raise InputError(f"unknown precision {n!r} (known: {', '.join(_PRECISIONS)})")
    if _PRECISIONS.index(hi_n) >= _PRECISIONS.index(lo_n):
        raise InputError(f"hi precision {hi_n} must be wider than lo precision {lo_n}")
    if not (0 <= noise_band < 1):
        raise InputError(f"noise_band must be in [0, 1), got {noise_band}")
    vh, metric = _time_of(fom_hi, "hi")
    vl, _ = _time_of(fom_lo, "lo")
    if higher_is_better and not isinstance(fom_hi, FomResult):
        speedup = vl / vh
        metric = "throughput (higher is better)"
    else:
        speedup = vh / vl
        metric = metric if metric != "value" else "time (lower is better)"

    if hi_n in ("fp32", "tf32") and lo_n in ("bf16", "fp16"):
        threshold, lesson = FP32_BF16_COMPUTE_THRESHOLD, "seed 000 lesson 22"
        memory_branch = False
    else:
        threshold, lesson = FP64_FP32_COMPUTE_THRESHOLD, "seed 000 lesson 13"
        memory_branch = (hi_n, lo_n) == ("fp64", "fp32")
        if (hi_n, lo_n) != ("fp64", "fp32"):
            lesson += " (threshold extrapolated to this precision pair)"

    if speedup >= threshold:
        cls, rule = BottleneckClass.compute, f"speedup {speedup:.3f} >= {threshold:.2f}: {lo_n} much faster than {hi_n} -> compute-bound"
    elif abs(speedup - 1.0) <= noise_band:
        cls, rule = BottleneckClass.dispatch, (
            f"|speedup - 1| = {abs(speedup - 1):.3f} <= noise {noise_band:.2f}: {lo_n} ~ {hi_n} -> dispatch-bound"
        )
    elif speedup < 1.0 - noise_band and memory_branch:
        cls, rule = BottleneckClass.memory, (
            f"speedup {speedup:.3f} < {1 - noise_band:.2f}: fp32 slower than fp64 -> memory-bound (lesson 13 branch 3)"
        )
    elif speedup < 1.0 - noise_band:
        cls, rule = BottleneckClass.unknown, (
            f"speedup {speedup:.3f} < {1 - noise_band:.2f}: {lo_n} slower than {hi_n}; no seed rule for this pair"
        )
    else:
        cls, rule = BottleneckClass.unknown, (
            f"speedup {speedup:.3f} between noise band (1 +- {noise_band:.2f}) and threshold {threshold:.2f}: "
            "inconclusive, replicate (lesson 9)"
        )
    return PrecisionVerdict(
        hi=hi_n,
        lo=lo_n,
        metric=metric,
        hi_value=vh,
        lo_value=vl,
        speedup=speedup,
        noise_band=noise_band,
        threshold=threshold,
        bottleneck_class=cls,
        verdict=cls.value if cls is not BottleneckClass.unknown else "inconclusive",
        rule=rule,
        lesson=lesson,
    )
