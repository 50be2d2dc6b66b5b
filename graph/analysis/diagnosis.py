"""The deterministic diagnosis rules: classify a run as compute-, dispatch-, memory-,
data-loader- or communication-bound (or unknown) from the GPU timeline, kernel statistics,
CPU-side data-loader time, telemetry and the precision discriminator.

Thresholds and their sources:

- Seed 001 T1/T19: a densely packed GPU timeline (busy high) means GPU-bound; large GPU-idle
  gaps while the CPU is busy in the DataLoader mean data-bound; time in ``nccl:*`` not overlapped
  with compute means comms-bound.
- Seed 001 T2 / gotcha U21: utilization alone lies — a GPU is "compute-bound" only when SM clock
  and power are high too; a trickle of tiny kernels reads as high utilization.
- Seed 000 lesson 13: fp64→fp32 speedup ≥ 1.30 ⇒ compute-bound; ≈ 1 ⇒ dispatch-bound.
  Lesson 22: bf16 vs fp32 ≥ 1.4× ⇒ GEMM/compute-bound.
- Kernel launch overhead: a kernel launch costs ~3.5–3.8 µs on MI355X (lesson 18) and ~2–5 µs on
  H100/H200 (CUDA launch latency); a step made of kernels whose mean duration is within a few
  launch latencies (< 20 µs), with the GPU idle most of the time, is dispatch (launch) bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...state import BottleneckClass

# Thresholds (percent of the profiled window unless noted); sources in the module docstring.
IDLE_DISPATCH_PCT = 40.0          # GPU idle share above which the GPU is starved (seed 001 T1)
BUSY_COMPUTE_PCT = 80.0           # densely packed timeline (seed 001 T1: util consistently > 90% is GPU-bound;
                                  # 80% leaves room for the profiler's own gaps)
EXPOSED_COMM_PCT = 20.0           # exposed communication share that makes a run comms-bound (seed 001 T23)
DATALOADER_STEP_SHARE = 0.30      # DataLoader CPU time / step time that makes a run data-bound (seed 001 T19)
SHORT_KERNEL_MEAN_US = 20.0       # mean kernel duration within a few launch latencies (lesson 18, ~3.5 µs)
GEMM_SHARE_COMPUTE = 0.5          # GEMM share of kernel time typical of compute-bound ViT/EDM (lesson 20: ≈80%)
MEMORY_BOUND_ELEMENTWISE_SHARE = 0.6  # elementwise+reduce share of kernel time of a bandwidth-bound step
SM_CLOCK_HIGH_FRAC = 0.80         # SM clock ≥ 80% of the max observed clock counts as "high" (seed 001 T2)


@dataclass
class Diagnosis:
    """A bottleneck class with the rule that fired and the figures it used."""

    klass: BottleneckClass
    rule: str
    inputs: dict[str, Any] = field(default_factory=dict)
    confidence: float = 0.5


def _pct(timeline: dict[str, Any], row: str) -> float | None:
    r = (timeline or {}).get(row)
    if r is None:
        return None
    return float(r["percent"] if isinstance(r, dict) else r)


def category_share(ops_by_category: list[dict[str, Any]] | None, names: tuple[str, ...]) -> float | None:
    """Share (0..1) of kernel time in the given op categories (case-insensitive), or None."""
    if not ops_by_category:
        return None
    total = sum(float(r.get("kernel_time_ms") or 0.0) for r in ops_by_category)
    if total <= 0:
        return None
    want = {n.lower() for n in names}
    part = sum(float(r.get("kernel_time_ms") or 0.0) for r in ops_by_category
               if str(r.get("category", "")).lower() in want)
    return part / total


def classify_trace(trace: dict[str, Any]) -> Diagnosis:
    """Classify from one (aggregated) trace analysis dict (``TraceAnalysis.model_dump()``).

    Uses ``timeline`` percents, ``dataloader_ms_per_step`` / ``step_time_ms``, the mean kernel
    duration (``launch.mean_kernel_us``) and ``ops_by_category``. Returns ``unknown`` when the
    timeline is missing."""
    tl = trace.get("timeline") or {}
    idle = _pct(tl, "idle_time")
    comp = _pct(tl, "computation_time")
    comm = _pct(tl, "exposed_comm_time") or 0.0
    busy = _pct(tl, "busy_time")
    if idle is None or comp is None:
        return Diagnosis(BottleneckClass.unknown, "no GPU timeline", {})
    launch = trace.get("launch") or {}
    mean_k = launch.get("mean_kernel_us")
    step_ms = trace.get("step_time_ms")
    dl_ms = trace.get("dataloader_ms_per_step")
    dl_share = (dl_ms / step_ms) if (dl_ms is not None and step_ms) else None
    gemm = category_share(trace.get("ops_by_category"), ("GEMM", "CONV"))
    elem = category_share(trace.get("ops_by_category"), ("elementwise", "reduce"))
    inputs = {"idle_pct": idle, "computation_pct": comp, "exposed_comm_pct": comm, "busy_pct": busy,
              "mean_kernel_us": mean_k, "dataloader_share": dl_share, "gemm_share": gemm,
              "elementwise_reduce_share": elem}
    if comm >= EXPOSED_COMM_PCT:
        return Diagnosis(BottleneckClass.communication,
                         f"exposed communication {comm:.1f}% ≥ {EXPOSED_COMM_PCT:g}% of the window", inputs, 0.8)
    if dl_share is not None and dl_share >= DATALOADER_STEP_SHARE and idle >= IDLE_DISPATCH_PCT / 2:
        return Diagnosis(BottleneckClass.data_loader,
                         f"DataLoader takes {dl_share * 100:.0f}% of the step while the GPU is idle {idle:.1f}%",
                         inputs, 0.8)
    if idle >= IDLE_DISPATCH_PCT:
        if mean_k is not None and mean_k < SHORT_KERNEL_MEAN_US:
            return Diagnosis(BottleneckClass.dispatch,
                             f"GPU idle {idle:.1f}% ≥ {IDLE_DISPATCH_PCT:g}% with mean kernel {mean_k:.1f} µs < "
                             f"{SHORT_KERNEL_MEAN_US:g} µs: kernel launch overhead dominates", inputs, 0.8)
        return Diagnosis(BottleneckClass.dispatch,
                         f"GPU idle {idle:.1f}% ≥ {IDLE_DISPATCH_PCT:g}% with no data-loader or communication "
                         "cause in the trace: the host does not issue work fast enough", inputs, 0.6)
    if comp >= BUSY_COMPUTE_PCT:
        if elem is not None and elem >= MEMORY_BOUND_ELEMENTWISE_SHARE:
            return Diagnosis(BottleneckClass.memory,
                             f"GPU busy {comp:.1f}% but {elem * 100:.0f}% of kernel time is elementwise/reduce "
                             "(bandwidth-bound kernels)", inputs, 0.6)
        return Diagnosis(BottleneckClass.compute,
                         f"GPU computing {comp:.1f}% ≥ {BUSY_COMPUTE_PCT:g}% of the window"
                         + (f", GEMM {gemm * 100:.0f}% of kernel time" if gemm is not None else ""), inputs, 0.8)
    return Diagnosis(BottleneckClass.unknown,
                     f"GPU computing {comp:.1f}%, idle {idle:.1f}%: no rule fired", inputs, 0.3)


# Board limits (W, boost SM/GFX clock MHz), from the vendors' datasheets: NVIDIA H100 SXM and H200 SXM
# (700 W, 1980 MHz), A100 SXM (400 W, 1410 MHz); AMD Instinct MI300X (750 W, 2100 MHz) and MI355X
# (1400 W, 2400 MHz). Matched on the GPU name in the manifest (``gpu``) or telemetry.
BOARD_LIMITS: dict[str, tuple[float, float]] = {
    "H200": (700.0, 1980.0), "H100": (700.0, 1980.0), "A100": (400.0, 1410.0),
    "MI355X": (1400.0, 2400.0), "MI300X": (750.0, 2100.0),
}


def board_limits(gpu_name: str | None) -> tuple[float, float] | None:
    """(power limit W, boost clock MHz) of a known board from its name, else None."""
    name = (gpu_name or "").upper().replace(" ", "")
    for key, lim in BOARD_LIMITS.items():
        if key in name:
            return lim
    return None


def telemetry_supports_compute(gpu_util: float | None, sm_clock: float | None, sm_clock_max: float | None,
                               power: float | None, power_max: float | None,
                               gpu_name: str | None = None) -> bool | None:
    """Seed 001 T2: high utilization counts only with a high SM clock and high power.

    Clock and power are compared with the board's datasheet limits (:data:`BOARD_LIMITS`) when the
    GPU is known, else with the maxima observed in the same job. Returns True/False, or None when
    the inputs are missing."""
    lim = board_limits(gpu_name)
    clock_ref = lim[1] if lim else sm_clock_max
    power_ref = lim[0] if lim else power_max
    if gpu_util is None or sm_clock is None or not clock_ref:
        return None
    clock_ok = sm_clock >= SM_CLOCK_HIGH_FRAC * clock_ref
    power_ok = True if (power is None or not power_ref) else power >= 0.5 * power_ref
    return gpu_util >= 80.0 and clock_ok and power_ok
