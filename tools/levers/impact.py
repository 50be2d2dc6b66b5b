"""Impact estimates: the time per step a recommended lever could save, with its arithmetic and
low/high bounds, so levers can be ranked by estimated saving (seed 000's agents rank their
findings by impact).

Models (all per step, ms; ``trace`` is the aggregated ``TraceAnalysis`` dict: ``step_time_ms``,
``n_steps``, ``timeline.busy_time.time_ms`` over the profiled steps, ``kernels_per_step``,
``timeline.exposed_comm_time``, ``ops_by_category``):

- launch overhead removed by graph capture: low = kernels/step x the launch floor
  of the trace's GPU (:func:`launch_floor_us`: measured per GPU model, :data:`LAUNCH_FLOOR_BY_GPU`;
  :data:`LAUNCH_FLOOR_US` for a GPU not measured),
  high = the GPU idle time of the step not spent in the DataLoader (graph replay leaves no host gap
  inside the captured region); both capped by the idle time; a larger batch per launch: the same
  bounds x (1 - 1/:data:`BATCH_FACTOR`) per step of today's samples; fusion: not estimated;
- DataLoader overlap (num_workers, prefetch, pinned copies): high = min(DataLoader, GPU idle) (loading
  fully hidden), low = min(high, step - DataLoader) (one background loader: the step becomes
  max(rest of the step, loading));
- a memory-bound category brought to peak bandwidth (roofline): high = t - bytes / peak B/s, low =
  t - bytes / (:data:`ACHIEVABLE_BW_FRAC` x peak);
- exposed communication overlapped with compute: high = exposed communication, low = 0 (overlap is
  not guaranteed: seed 001 T23 lists what breaks it);
- SDPA math fallback to a fused kernel: t_math x (1 - 1/10) .. (1 - 1/15) (lesson 21: MATH 10-15x slower);
- bf16 for fp32 matrix math: low = t_matrix x (1 - 1/1.4) (lesson 22: a >= 1.4x precision speedup marks
  GEMM-bound work), high = t_matrix x (1 - peak_fp32/peak_bf16) (datasheet).
A lever with no model gets ``saving_ms_low = saving_ms_high = None`` and says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..perfmodel.datasheet import gpu_key

LAUNCH_FLOOR_US = 3.5
"""Device-side kernel launch latency floor of a GPU not in :data:`LAUNCH_FLOOR_BY_GPU`: the smallest
measured (seed 000 lesson 18: 3.5-3.8 us/launch, MI355X), so the saving's low end stays a low end."""
LAUNCH_FLOOR_BY_GPU: dict[str, tuple[float, str]] = {
    "MI355X": (3.5, "seed 000 lesson 18: 3.5-3.8 us per HIP launch on every MI355X GPU"),
    "H200": (5.5, "measured on the H200 devices: 6.02 us per empty launch (reports/raw-2026-11-29/"
                  "node_health_probe-h200.json), 6.085 us (raw-2026-11-29/eval-vm.json), 5.49 us on the 2-GPU host "
                  "(raw-2026-11-30-2gpu/eval-2gpu.json); the smallest, rounded, for the saving's low end"),
}
"""Launch floor per GPU model (the :func:`~ai4s_graph.tools.perfmodel.datasheet.gpu_key` of the
trace's device name), µs per launch, with its measurement."""
ACHIEVABLE_BW_FRAC = 4215.7 / 4800.0
"""Fraction of HBM peak a device-to-device copy reached on the H200 device (reports/raw-2026-11-29:
``d2d_gbps`` 4215.7 GB/s vs the 4.8 TB/s datasheet): peak bandwidth is not reachable, this is."""
SDPA_MATH_SLOWDOWN = (10.0, 15.0)      # seed 000 lesson 21: MATH ~15 vs ~290 TFLOPS, "10-15x slower"
PRECISION_SPEEDUP_FLOOR = 1.4          # seed 000 lesson 22: >= 1.4x precision speedup => GEMM-bound

LAUNCH_LEVERS = {"torch_compile_reduce_overhead", "cuda_graphs", "hip_graphs"}
"""Graph capture and replay: the launch model itself (the captured region's launches go, module doc)."""
BATCH_LAUNCH_LEVERS = {"larger_batch_per_launch"}
"""More work per launch: the same launches carry :data:`BATCH_FACTOR` x the samples, so per sample the
launch-bound time falls by ``1 - 1/BATCH_FACTOR`` (seed 001 T18)."""
BATCH_FACTOR = 2.0
"""The batch multiple the lever stands for: one doubling (the first step of the bundled gnn.yaml's batch
packing levers, 16 -> 32 graphs); a larger multiple is its own lever with its own estimate."""
FUSION_LEVERS = {"fuse_small_kernels"}
"""Kernel fusion: how many kernels fuse into one is not visible in one trace, so no estimate (never the
graph model's numbers copied: issue 24)."""
LOADER_LEVERS = {"num_workers", "persistent_workers", "pin_memory_non_blocking", "prefetch_factor"}
MEMORY_LEVERS = {"torch_compile", "fuse_elementwise", "bf16_activations", "batch_packing"}
"""``torch_compile`` is the lever catalog's id of the fusion lever (``tools/levers/catalogs/workload.yaml``);
``fuse_elementwise`` its older name, still estimated for callers that use it."""
COMM_LEVERS = {"ddp_bucket_cap_mb", "remove_host_syncs", "fsdp_prefetch", "overlap_comm"}


@dataclass(frozen=True)
class LeverImpact:
    """Estimated saving of one lever, ms per step (``None`` when no model applies), the
    arithmetic that produced it, and the step time it is a share of."""

    lever: str
    saving_ms_low: float | None
    saving_ms_high: float | None
    step_ms: float | None
    arithmetic: str
    #: which step ``step_ms`` is: ``"run"`` the run's steady step outside the profiler (the rules'
    #: lever choice passed a profiler-stretched trace, ``trace["profiled_step_ms"]``), else
    #: ``"profiled"`` the trace's profiled step (issue 27 report 5 point 2: the report says which)
    basis: str = "profiled"

    @property
    def mid(self) -> float:
        return -1.0 if self.saving_ms_high is None else (self.saving_ms_low + self.saving_ms_high) / 2

    def text(self) -> str:
        if self.saving_ms_high is None:
            return f"saving not estimated: {self.arithmetic}"
        pct = f" ({100 * self.saving_ms_low / self.step_ms:.0f}–{100 * self.saving_ms_high / self.step_ms:.0f}% of " \
              f"{step_words(self.step_ms, self.basis)})" if self.step_ms else ""
        return f"could save {self.saving_ms_low:.2f}–{self.saving_ms_high:.2f} ms per step{pct}: {self.arithmetic}"


def step_words(step_ms: float, basis: str | None) -> str:
    """The step a saving is a share of, in words: ``the run's 17.4 ms steady step`` (``basis``
    ``"run"``: the log's steady step outside the profiler) or ``the 24.7 ms profiled step``
    (``"profiled"``, or None: a saving estimated without the rules' choice of step)."""
    return f"the run's {step_ms:.1f} ms steady step" if basis == "run" else f"the {step_ms:.1f} ms profiled step"


def launch_floor_us(device_name: str | None) -> tuple[float, str]:
    """(µs per launch, which GPU it is for) of the trace's device (``deviceProperties[0].name``, e.g.
    ``NVIDIA H200``): :data:`LAUNCH_FLOOR_BY_GPU`, else :data:`LAUNCH_FLOOR_US` (lesson 18's MI355X
    floor, the smallest measured)."""
    key = gpu_key(device_name or "") if device_name else None
    if key in LAUNCH_FLOOR_BY_GPU:
        return LAUNCH_FLOOR_BY_GPU[key][0], f"{key}, measured"
    return LAUNCH_FLOOR_US, "MI355X's, lesson 18: this GPU's was not measured"


def _per_step(trace: dict[str, Any]) -> tuple[float | None, float | None, float | None, int]:
    """(step ms, GPU busy ms per step, GPU idle ms per step, steps)."""
    n = int(trace.get("n_steps") or 0) or 1
    step = trace.get("step_time_ms")
    busy = ((trace.get("timeline") or {}).get("busy_time") or {}).get("time_ms")
    if step is None or busy is None:
        return step, None, None, n
    busy_s = busy / n
    return step, busy_s, max(0.0, step - busy_s), n


def estimate(lever: str, trace: dict[str, Any] | None, roofline: dict[str, Any] | None = None,
             sdpa_math_ms: float | None = None) -> LeverImpact:
    """The :class:`LeverImpact` of ``lever`` for this trace (and roofline, when shapes were
    recorded). Never raises on missing inputs: the arithmetic then says what was missing."""
    trace = trace or {}
    step, busy, idle, n = _per_step(trace)
    if step is None or busy is None:
        return LeverImpact(lever, None, None, step, "no step time or GPU busy time in the trace")
    if lever in LAUNCH_LEVERS or lever in BATCH_LAUNCH_LEVERS:
        k = trace.get("kernels_per_step")
        if not k:
            return LeverImpact(lever, None, None, step, "no kernel count per step")
        dl = min(trace.get("dataloader_ms_per_step") or 0.0, idle)
        floor, which = launch_floor_us(trace.get("device_name"))
        low = min(idle, k * floor / 1000)
        high = max(low, idle - dl)
        if lever in LAUNCH_LEVERS:
            return LeverImpact(lever, low, high, step,
                               f"low {k:.0f} kernels/step × {floor} µs launch floor ({which}) = {k * floor / 1000:.2f} ms, "
                               f"high the GPU idle not spent in the DataLoader: {step:.2f} − {busy:.2f} busy − {dl:.2f} "
                               f"DataLoader = {high:.2f} ms")
        f = 1 - 1 / BATCH_FACTOR
        return LeverImpact(lever, low * f, high * f, step,
                           f"per step of today's samples at {BATCH_FACTOR:g}x the batch: the launch-bound time × (1 − "
                           f"1/{BATCH_FACTOR:g}); low {k:.0f} kernels/step × {floor} µs ({which}) × {f:g} = {low * f:.2f} ms, "
                           f"high (GPU idle not in the DataLoader {high:.2f} ms) × {f:g} = {high * f:.2f} ms")
    if lever in FUSION_LEVERS:
        return LeverImpact(lever, None, None, step, "how many kernels fuse into one is not visible in one trace")
    if lever in LOADER_LEVERS:
        dl = trace.get("dataloader_ms_per_step")
        if dl is None:
            return LeverImpact(lever, None, None, step, "no DataLoader time in the trace")
        high = min(dl, idle)
        low = min(high, max(0.0, step - dl))
        return LeverImpact(lever, low, high, step,
                           f"high min(DataLoader {dl:.2f}, GPU idle {idle:.2f}) = {high:.2f} ms (loading fully hidden), low "
                           f"min(that, {step:.2f} − {dl:.2f}) = {low:.2f} ms (one background loader, the step becomes "
                           "max(rest of step, loading))")
    if lever in COMM_LEVERS:
        ex = ((trace.get("timeline") or {}).get("exposed_comm_time") or {}).get("time_ms")
        if ex is None:
            return LeverImpact(lever, None, None, step, "no exposed-communication time in the trace")
        return LeverImpact(lever, 0.0, ex / n, step, f"high all {ex / n:.2f} ms of exposed communication per step; low 0 "
                           "(overlap can be broken by host syncs, seed 001 T23)")
    if lever in MEMORY_LEVERS:
        cats = {c: a for c, a in ((roofline or {}).get("categories") or {}).items() if a.get("bound") == "memory"
                and c in ("elementwise", "normalization", "reduction")}
        if not cats:
            return LeverImpact(lever, None, None, step, "no roofline (trace recorded without shapes) or no memory-bound "
                               "elementwise/normalization/reduction category")
        lo = hi = 0.0
        parts, modelled = [], 0
        for c, a in cats.items():
            t = a["kernel_us"] / 1000 / n
            peak = a["tbps"] * 100 / a["pct_peak_bw"] if a.get("pct_peak_bw") else None
            if not peak:
                continue
            if a.get("above_peak_bw") or a["tbps"] > peak:  # the byte model over-counts: no saving from it
                parts.append(f"{c} not modelled: its modelled bytes exceed the {peak:.2f} TB/s peak over its "
                             f"{t:.2f} ms (an over-count)")
                continue
            t_peak = a["bytes"] / n / (peak * 1e12) * 1000
            hi += max(0.0, t - t_peak)
            lo += max(0.0, t - t_peak / ACHIEVABLE_BW_FRAC)
            modelled += 1
            parts.append(f"{c} {t:.2f} ms at {a['tbps']:.2f} TB/s → {t_peak:.2f} ms at the {peak:.2f} TB/s peak")
        if not modelled:
            return LeverImpact(lever, None, None, step, "; ".join(parts) or "no category with a peak bandwidth")
        return LeverImpact(lever, lo, hi, step, "; ".join(parts) + f"; low at {ACHIEVABLE_BW_FRAC * 100:.0f}% of peak "
                           "(the H200 device's measured copy bandwidth)")
    if lever in ("sdpa_efficient",):
        if not sdpa_math_ms:
            return LeverImpact(lever, None, None, step, "no SDPA math-backend time (triage T14 did not fire)")
        a, b = SDPA_MATH_SLOWDOWN
        t = sdpa_math_ms
        return LeverImpact(lever, t * (1 - 1 / a), t * (1 - 1 / b), step,
                           f"{t:.2f} ms of math-backend attention × (1 − 1/{a:g} .. 1 − 1/{b:g}) (lesson 21)")
    if lever == "precision_bf16":
        cats = (roofline or {}).get("categories") or {}
        mm = [a for c, a in cats.items() if c in ("GEMM", "CONV", "SDPA") and a.get("precision") == "fp32"]
        if not mm:
            return LeverImpact(lever, None, None, step, "no fp32 matrix math measured (needs a trace with shapes)")
        t = sum(a["kernel_us"] for a in mm) / 1000 / n
        pk32, pk16 = mm[0].get("peak_tflops"), (roofline or {}).get("peak_bf16_tflops")
        ratio = max(pk16 / pk32, PRECISION_SPEEDUP_FLOOR) if pk16 and pk32 else PRECISION_SPEEDUP_FLOOR
        return LeverImpact(lever, t * (1 - 1 / PRECISION_SPEEDUP_FLOOR), t * (1 - 1 / ratio), step,
                           f"{t:.2f} ms of fp32 matrix math × (1 − 1/{PRECISION_SPEEDUP_FLOOR}) low (lesson 22), × (1 − 1/"
                           f"{ratio:.1f}) high (datasheet bf16/fp32 peak ratio)")
    return LeverImpact(lever, None, None, step, "no time model for this lever (its effect is not visible in one trace)")


def capped(e: LeverImpact, trace: dict[str, Any] | None = None) -> LeverImpact:
    """``e`` with its saving never more than its step (a lever cannot save more than the whole step
    the user runs: ``saving_ms_low``/``high`` ≤ ``step_ms``), and, when the step is the run's steady
    step outside the profiler (``trace["profiled_step_ms"]``, set by the rules' lever choice), the
    arithmetic saying so."""
    if e.saving_ms_high is None or not e.step_ms:
        return e
    lo, hi, why = e.saving_ms_low, e.saving_ms_high, e.arithmetic
    if hi > e.step_ms:
        lo, hi = min(lo, e.step_ms), e.step_ms
        why += f"; capped at the {e.step_ms:.2f} ms step"
    prof = (trace or {}).get("profiled_step_ms")
    basis = "profiled"
    if prof and prof != e.step_ms:
        basis = "run"
        why += (f"; the step is the run's {e.step_ms:.2f} ms outside the profiler (the profiled step, {prof:.2f} ms median, "
                "is stretched by the profiler's host overhead)")
    return LeverImpact(e.lever, lo, hi, e.step_ms, why, basis)


def rank_levers(levers: list[str], trace: dict[str, Any] | None, roofline: dict[str, Any] | None = None,
                sdpa_math_ms: float | None = None, models: dict[str, Any] | None = None) -> list[LeverImpact]:
    """:func:`estimate` for each lever (or its own model in ``models``: lever name ->
    ``(trace, roofline) -> LeverImpact``), ordered by the midpoint of the estimated saving (largest
    first); levers without an estimate keep their given (cost) order at the end."""
    models = models or {}
    est = [capped(models[lv](trace, roofline) if lv in models else estimate(lv, trace, roofline, sdpa_math_ms), trace)
           for lv in levers]
    known = sorted([e for e in est if e.saving_ms_high is not None], key=lambda e: -e.mid)
    return known + [e for e in est if e.saving_ms_high is None]


def annotate(recommendations: list[Any], trace: dict[str, Any] | None, roofline: dict[str, Any] | None = None,
             models: dict[str, Any] | None = None) -> list[Any]:
    """The lever choice's one call: ``recommendations`` (objects with ``name`` and ``why``, e.g.
    ``LeverRecommendation``) reordered by estimated saving (:func:`rank_levers`; ``models``: a
    lever's own saving model), each ``why`` extended with its estimate and arithmetic. Returns new
    objects (``model_copy``) when they are pydantic models."""
    by = {r.name: r for r in recommendations}
    out = []
    for e in rank_levers([r.name for r in recommendations], trace, roofline, models=models):
        r = by[e.lever]
        why = f"{r.why}; {e.text()}"
        upd: dict[str, Any] = {"why": why}
        if hasattr(r, "saving_ms_low"):  # the numbers too, for the report's headline (issue 27)
            upd.update(saving_ms_low=e.saving_ms_low, saving_ms_high=e.saving_ms_high, step_ms=e.step_ms,
                       step_basis=e.basis if e.step_ms else None)
        out.append(r.model_copy(update=upd) if hasattr(r, "model_copy") else r)
    return out
