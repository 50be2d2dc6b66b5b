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

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from ...state import BottleneckClass
from ...state.claimkit import PCT_TOL
from ...tools.perfmodel.datasheet import find_gpu

# Rule thresholds (percent of the profiled window unless noted). Each cites its source; the
# bundled H200 runs' values are in the tests (tests/test_verdict.py tests both sides of each).
IDLE_DISPATCH_PCT = 40.0          # GPU idle share above which the GPU is starved: seed 001 T1 ("util
                                  # consistently > 90% ⇒ GPU-bound; low/fluctuating ⇒ elsewhere"); 40% idle is
                                  # well below that band. Measured: dispatch-bound 91001/92001 idle 89.5/94.6%,
                                  # compute-bound 91003/92003 idle 8.1/17.3%
BUSY_COMPUTE_PCT = 80.0           # densely packed timeline (seed 001 T1: util consistently > 90% is GPU-bound;
                                  # 80% leaves room for the profiler's own gaps: 92003 computes 82.7% under
                                  # the profiler while its log step is 4% shorter than the profiled one)
EXPOSED_COMM_PCT = 20.0           # exposed communication share that makes a run comms-bound (seed 001 T23:
                                  # "time in nccl:* not overlapped ⇒ comms-bound"; 20% = the share at which
                                  # perfect overlap would buy ≥ 1.25× throughput)
DATALOADER_STEP_SHARE = 0.30      # DataLoader CPU time / step time that makes a run data-bound (seed 001 T19:
                                  # GPU-idle gaps lining up with CPU data work; measured 92002: 0.49 with idle 43%)
SHORT_KERNEL_MEAN_US = 20.0       # mean kernel duration within a few launch latencies (lesson 18: 3.5–3.8 µs per
                                  # launch on MI355X; reports/eval-h200-2026-11-29.md: 6.1 µs on H200)
MEMORY_BOUND_ELEMENTWISE_SHARE = 0.6  # elementwise+reduce share of kernel time of a bandwidth-bound step (seed 001
                                  # T15: fusing elementwise chains is the memory-bound lever; a majority well
                                  # above half of kernel time)
EXPOSED_H2D_PCT = 20.0            # exposed memory-copy share that makes a run input-bound when the copies are
                                  # host-to-device (seed 001 T6: "the H2D copy sits on the critical path between
                                  # fetch and forward", a DataLoader knob); 20% = the share at which hiding the copy
                                  # would buy >= 1.25x, as EXPOSED_COMM_PCT. Measured on the bundled H200 runs:
                                  # pageable-h2d 52.3% (pageable HtoD copies), its pinned control conv-control 12.8%,
                                  # cudnn-benchmark-off 12.6%, nchw-conv 9.5%, every other run <= 5.1% but
                                  # d2h-param-copy's 64.6/68.0% (device-to-host copies: H2D_COPY_MAJORITY)
H2D_COPY_MAJORITY = 0.5           # host-to-device copies hold at least half of the copy time: the exposed copies are
                                  # the input's (d2h-param-copy's 64.6% exposed copies are device-to-host, not T6)
H2D_COPY = re.compile(r"^Memcpy HtoD")
"""Kineto's name of a host-to-device copy (``gpu_memcpy``): CUDA (CUPTI) ``Memcpy HtoD (Pageable -> Device)`` /
``(Pinned -> Device)``; ROCm (kineto RoctracerActivity_inl.h, getGpuActivityKindString: ``HtoD``) the same prefix.
The one pass sums these copies' time by name (``kernel_us``) because :func:`wants_name` accepts them."""
STALL_SHARE = 0.10                # the log's stall steps (graph/rules/context.py STALL_FACTOR) cost >= 10% of the run's
                                  # steady time: a loader-bound run when DataLoader workers feed it (seed 001 T5 stalls
                                  # at epoch starts, T7 every Nth step); 10% = the 1.10x of REPR_STEP_RATIO (twice
                                  # lesson 9's +-5%). Measured on the bundled H200 runs: shallow-prefetch 0.26,
                                  # worker-respawn 0.88, every other run 0.00 (no step >= 3x its median)
NEAREST_TIE_PP = PCT_TOL.abs       # two distances to the thresholds closer than the timeline's own agreement
                                  # tolerance (state/claimkit.py PCT_TOL: 1 pp, a timeline row re-derived by the
                                  # verifier's reader) are a tie: neither rule is nearer (nearest_rule)
SM_CLOCK_HIGH_FRAC = 0.80         # SM clock ≥ 80% of the board's boost clock counts as "high" (seed 001 T2)
UTIL_HIGH_PCT = 80.0              # telemetry utilization counted as high (seed 001 T1/T2, same band as
                                  # BUSY_COMPUTE_PCT)
POWER_HIGH_FRAC = 0.5             # power ≥ half the board limit counts as "high" (seed 001 T2; 92003 bf16 GEMMs
                                  # draw 60–70% of the H200's 700 W)

# Cross-rank attribution (issue 13).
WAIT_SHARE_STRAGGLER = 0.5        # the other ranks' exposed communication is "waiting for the straggler" when at
                                  # least half of it is arrival skew (latest arrival minus own arrival at the
                                  # implicitly synchronising collectives, TraceLens straggler_summary): waiting is
                                  # then the largest single part of it

# Confidence from rule margins. A margin is how far a rule's deciding figure is past its threshold,
# relative to the threshold: (value - thr) / thr for "≥" rules, (thr - value) / thr for "<" rules.
MARGIN_FULL = 0.5                 # margin at which confidence saturates (0.95): the figure would have to be off
                                  # by a third to reach the threshold, more than the largest profile-vs-log
                                  # distortion of the GPU-heavy bundled runs (≤ 6%)
BORDERLINE_MARGIN = 0.10          # a verdict within 10% of its threshold is borderline: twice the ±5% run-to-run
                                  # band of seed 000 lesson 9

# Representativeness of the profiled steps.
REPR_STEP_RATIO = 1.10            # profiled step / the log's steady step above which profiling distorted the step
                                  # (twice lesson 9's ±5% band). Measured: 92002/92003/91003 1.04–1.06; host-heavy
                                  # 91001/92001/92004 1.38/1.42/1.60 (record_shapes; notes/trace-libraries.md:
                                  # a 60 ms DDP step spanned 90 ms under the profiler)
REPR_UTIL_PP = 25.0               # |trace busy% − telemetry utilization%| inside the profiled window above which the
                                  # two disagree. Measured on real H200 runs (raw NVML samples inside the window vs
                                  # trace busy): 92002 −5, 92003 −4, 92004 +10, 91002 +16, 93002 −21, 93004 −2 pp;
                                  # NVML counts any running kernel, so it reads high for tiny kernels (seed 001 T2)

# Progress of failed and timed-out jobs.
HANG_GAP_STEPS = 10.0             # silence of ≥ 10 of the longest logged steps (warm-up included) is not step-time
                                  # jitter: in the bundled logs every step but the first lasts ≤ 2.6× the median
                                  # and the first (warm-up) ≤ 25× (92001: 0.434 vs 0.0174 s)
HANG_MIN_GAP_S = 60.0             # and at least a minute: a checkpoint or evaluation pass can take that long
UTIL_ACTIVE_PCT = 5.0             # GPU utilization above which the GPU counts as doing work (idle H200s read 0%)


@dataclass
class RuleTest:
    """One rule evaluated on a trace: its class, whether it fired, its margin (≥ 0 when it fired,
    see :data:`MARGIN_FULL`) and the text that explains it."""

    klass: BottleneckClass
    fired: bool
    margin: float
    text: str


@dataclass
class Diagnosis:
    """A bottleneck class with the rule that fired, the figures it used, a confidence derived from
    the rule margins (:func:`confidence_from_margin`), the runner-up class and whether the verdict
    is borderline (winning margin < :data:`BORDERLINE_MARGIN`)."""

    klass: BottleneckClass
    rule: str
    inputs: dict[str, Any] = field(default_factory=dict)
    confidence: float = 0.5
    margin: float | None = None
    runner_up: BottleneckClass | None = None
    runner_up_margin: float | None = None
    borderline: bool = False
    tests: list[RuleTest] = field(default_factory=list)


def _above(v: float, thr: float) -> float:
    return (v - thr) / thr


def _below(v: float, thr: float) -> float:
    return (thr - v) / thr


def confidence_from_margin(margin: float, runner_up_margin: float | None = None) -> float:
    """Confidence in [0.5, 0.95] of a verdict whose rule passed by ``margin`` (relative, ≥ 0).

    Linear from 0.5 at the threshold to 0.95 at :data:`MARGIN_FULL`; when the runner-up's rule
    passed too (``runner_up_margin ≥ 0``), only the lead over it counts."""
    lead = margin - max(0.0, runner_up_margin or 0.0) if runner_up_margin is not None else margin
    return round(0.5 + 0.45 * max(0.0, min(1.0, lead / MARGIN_FULL)), 3)


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


def wants_name(name: str) -> bool:
    """Whether the class rules read the GPU time of events of this name (host-to-device copies,
    :data:`H2D_COPY`): the one pass sums their time by name when this (or a cause) accepts it."""
    return bool(H2D_COPY.search(name))


def h2d_copy_share(trace: dict[str, Any]) -> float | None:
    """Share (0..1) of the trace's memory-copy time spent in host-to-device copies: the copies of
    :data:`H2D_COPY` in ``kernel_us`` (name -> GPU µs, the one pass's or the verifier reader's sum
    by name) over the timeline's ``total_memcpy_time``. None without copies or without the tables."""
    tl = trace.get("timeline") or {}
    row = tl.get("total_memcpy_time")
    ms = row.get("time_ms") if isinstance(row, dict) else None
    ku = trace.get("kernel_us")
    if not ms or ku is None:
        return None
    part = sum(float(v) for k, v in ku.items() if H2D_COPY.search(k))
    return min(1.0, part / (float(ms) * 1e3))


def scaled_timeline(timeline: dict[str, Any], ratio: float) -> dict[str, Any]:
    """The timeline re-expressed over a shorter step: GPU rows × ``ratio`` (profiled step / the
    run's step, > 1), idle what is left of 100%. Assumes the profiler added host time only (its
    kernels run as fast: bench/accuracy profiler-stretched and profiler-plain, the same job with and
    without with_stack, run the same 27.8 ms of GPU computation a step at 73.4 and 42.1 ms steps)."""
    out: dict[str, Any] = {}
    for k, v in timeline.items():
        pct = float(v["percent"] if isinstance(v, dict) else v)
        row = {"percent": min(100.0, pct * ratio) if k not in ("idle_time", "total_time") else pct}
        if isinstance(v, dict) and "time_ms" in v:
            row["time_ms"] = v["time_ms"]
        out[k] = row
    busy = out.get("busy_time", {}).get("percent")
    if busy is not None:
        out["idle_time"] = {"percent": max(0.0, 100.0 - busy)}
    return out


def profiled_step_ms(trace: dict[str, Any]) -> float | None:
    """The median profiled step (ms): of the engine's ``per_step`` durations, else the verifier
    reader's ``step_durations_ms``, else the mean ``step_time_ms``. The median, because the profiler
    stretches every profiled step while a stall (an epoch start, a refill) lengthens one: a window
    of 503, 33 and 29 ms steps (bench/accuracy worker-respawn) is stretched to 33 ms, not 188."""
    durs = [float(r["dur_ms"]) for r in trace.get("per_step") or [] if isinstance(r, dict) and r.get("dur_ms")]
    durs = durs or [float(d) for d in trace.get("step_durations_ms") or [] if d]
    if durs:
        return statistics.median(durs)
    t = trace.get("step_time_ms")
    return float(t) if t else None


def step_correction(trace: dict[str, Any]) -> float | None:
    """The profiler's stretch of the profiled step when it is material: the median profiled step
    (:func:`profiled_step_ms`) over the run's steady step outside the profiler (``run_step.ms``,
    from the training log: :func:`ai4s_graph.graph.rules.context.run_step`), when above
    :data:`REPR_STEP_RATIO`; else None (no run step, or a stretch within run-to-run noise). The class
    rules then read the GPU time per step over the run's step (:func:`over_run_step`; issue 24 point
    2: a profiler-stretched but GPU-bound run keeps its class)."""
    run_ms = (trace.get("run_step") or {}).get("ms")
    prof = profiled_step_ms(trace)
    if not run_ms or not prof or run_ms <= 0:
        return None
    ratio = prof / float(run_ms)
    return ratio if ratio > REPR_STEP_RATIO else None


def over_run_step(trace: dict[str, Any]) -> dict[str, Any]:
    """The timeline re-expressed over the run's step: each GPU row's time per profiled step
    (``time_ms`` / ``n_steps``) over ``run_step.ms`` (capped at 100%), idle what busy leaves; without
    row times or a step count, :func:`scaled_timeline` by mean profiled step / run step. Assumes the
    GPU does the same work in a profiled and an unprofiled step (the profiler adds host time)."""
    tl = trace.get("timeline") or {}
    run_ms = float(trace["run_step"]["ms"])
    n = trace.get("n_steps")
    if not n or not all(isinstance(v, dict) and v.get("time_ms") is not None for v in tl.values()):
        return scaled_timeline(tl, float(trace.get("step_time_ms") or run_ms) / run_ms)
    out = {k: {"percent": min(100.0, float(v["time_ms"]) / n / run_ms * 100.0), "time_ms": v["time_ms"]}
           for k, v in tl.items() if k not in ("idle_time", "total_time")}
    out["total_time"] = {"percent": 100.0, "time_ms": run_ms * n}
    busy = out.get("busy_time", {}).get("percent")
    out["idle_time"] = {"percent": max(0.0, 100.0 - busy) if busy is not None else _pct(tl, "idle_time")}
    return out


def rule_tests(trace: dict[str, Any]) -> tuple[list[RuleTest], dict[str, Any]] | None:
    """Every rule evaluated on one trace analysis dict, in priority order (communication,
    data loader, dispatch, memory, compute), with its margin; plus the figures used. None when
    the trace has no GPU timeline."""
    tl = trace.get("timeline") or {}
    if _pct(tl, "idle_time") is None or _pct(tl, "computation_time") is None:
        return None
    stretch = step_correction(trace)
    window = {"window_idle_pct": _pct(tl, "idle_time"), "window_computation_pct": _pct(tl, "computation_time")}
    if stretch is not None:
        tl = over_run_step(trace)
    idle = _pct(tl, "idle_time")
    comp = _pct(tl, "computation_time")
    comm = _pct(tl, "exposed_comm_time") or 0.0
    busy = _pct(tl, "busy_time")
    memcpy = _pct(tl, "exposed_memcpy_time") or 0.0
    h2d = h2d_copy_share(trace)
    launch = trace.get("launch") or {}
    mean_k = launch.get("mean_kernel_us")
    step_ms = trace.get("step_time_ms")
    dl_ms = trace.get("dataloader_ms_per_step")
    dl_share = (dl_ms / step_ms) if (dl_ms is not None and step_ms) else None
    gemm = category_share(trace.get("ops_by_category"), ("GEMM", "CONV"))
    elem = category_share(trace.get("ops_by_category"), ("elementwise", "reduce"))
    inputs = {"idle_pct": idle, "computation_pct": comp, "exposed_comm_pct": comm, "busy_pct": busy,
              "exposed_memcpy_pct": memcpy, "h2d_copy_share": h2d,
              "mean_kernel_us": mean_k, "dataloader_share": dl_share, "gemm_share": gemm,
              "elementwise_reduce_share": elem}
    if stretch is not None:
        inputs.update(window, step_stretch=round(stretch, 3), run_step_ms=(trace.get("run_step") or {}).get("ms"),
                      profiled_step_ms=profiled_step_ms(trace))
    C = BottleneckClass
    where = "the run's step" if stretch is not None else "the window"
    out = [RuleTest(C.communication, comm >= EXPOSED_COMM_PCT, _above(comm, EXPOSED_COMM_PCT),
                    f"exposed communication {comm:.1f}% ≥ {EXPOSED_COMM_PCT:g}% of {where}")]
    m_h2d = (min(_above(memcpy, EXPOSED_H2D_PCT), _above(h2d, H2D_COPY_MAJORITY)) if h2d is not None else -1.0)
    if dl_share is not None:
        m = min(_above(dl_share, DATALOADER_STEP_SHARE), _above(idle, IDLE_DISPATCH_PCT / 2))
        txt = f"DataLoader takes {dl_share * 100:.0f}% of the step while the GPU is idle {idle:.1f}%"
    else:
        m, txt = -1.0, "no DataLoader time in the trace"
    rs = trace.get("run_step") or {}
    stall, workers = rs.get("stall_share"), rs.get("loader_workers")
    if stall is not None and workers:
        inputs.update(stall_share=stall, loader_workers=workers)
        m_stall = _above(stall, STALL_SHARE)
        if m_stall >= 0 and m_stall > m:
            m, txt = m_stall, (f"the log's steps outside the profiler stall: {len(rs.get('stalls') or [])} of "
                               f"{rs.get('n')} take ≥ {rs.get('stall_factor', 3):g}× the median {rs.get('ms', 0):.2f} ms and cost "
                               f"{stall * 100:.0f}% ≥ {STALL_SHARE * 100:g}% of the run's steady time, with {workers} "
                               "DataLoader workers feeding it: the loader's queue runs dry (seed 001 T5/T7)")
    if m_h2d >= 0 and m_h2d > m:
        m, txt = m_h2d, (f"exposed memory copies take {memcpy:.1f}% ≥ {EXPOSED_H2D_PCT:g}% of {where}, "
                         f"{h2d * 100:.0f}% of the copy time host-to-device: the input's copy blocks the step "
                         "(seed 001 T6)")
    out.append(RuleTest(C.data_loader, m >= 0, m, txt))
    m = _above(idle, IDLE_DISPATCH_PCT)
    if mean_k is not None and mean_k < SHORT_KERNEL_MEAN_US:
        txt = (f"GPU idle {idle:.1f}% ≥ {IDLE_DISPATCH_PCT:g}% with mean kernel {mean_k:.1f} µs < "
               f"{SHORT_KERNEL_MEAN_US:g} µs: kernel launch overhead dominates")
    else:
        txt = (f"GPU idle {idle:.1f}% ≥ {IDLE_DISPATCH_PCT:g}% with no data-loader or communication cause in the "
               "trace: the host does not issue work fast enough")
    out.append(RuleTest(C.dispatch, m >= 0, m, txt))
    m_comp = _above(comp, BUSY_COMPUTE_PCT)
    m_mem = min(m_comp, _above(elem, MEMORY_BOUND_ELEMENTWISE_SHARE)) if elem is not None else -1.0
    out.append(RuleTest(C.memory, m_mem >= 0, m_mem,
                        f"GPU busy {comp:.1f}% but {(elem or 0) * 100:.0f}% of kernel time is elementwise/reduce "
                        "(bandwidth-bound kernels)"))
    out.append(RuleTest(C.compute, m_comp >= 0, m_comp,
                        f"GPU computing {comp:.1f}% ≥ {BUSY_COMPUTE_PCT:g}% of {where}"
                        + (f", GEMM {gemm * 100:.0f}% of kernel time" if gemm is not None else "")))
    return out, inputs


def classify_trace(trace: dict[str, Any]) -> Diagnosis:
    """Classify from one trace analysis dict (``TraceAnalysis.model_dump()``).

    Uses ``timeline`` percents, ``dataloader_ms_per_step`` / ``step_time_ms``, the mean kernel
    duration (``launch.mean_kernel_us``) and ``ops_by_category``. The first rule that fires in
    :func:`rule_tests` order decides; the runner-up is the other class whose rule came closest
    (or passed too); the confidence follows :func:`confidence_from_margin`. Returns ``unknown``
    (confidence 0.3) when no rule fires or the timeline is missing, and ``unknown`` (0.0) with the
    engine's reason when the trace holds too little GPU work (``insufficient_gpu_activity``)."""
    # --- too little GPU work for any class (the engine's figure, tools/trace/hygiene.py:gpu_activity_problem)
    if trace.get("insufficient_gpu_activity"):
        return Diagnosis(BottleneckClass.unknown, str(trace["insufficient_gpu_activity"]), {}, 0.0)
    # ---
    got = rule_tests(trace)
    if got is None:
        return Diagnosis(BottleneckClass.unknown, "no GPU timeline", {}, 0.0)
    tests, inputs = got
    win = next((t for t in tests if t.fired), None)
    others = [t for t in tests if t is not win]
    ru = max(others, key=lambda t: t.margin)
    over = _over_run_step(inputs)
    if win is None:
        near = nearest_rule(tests, inputs)
        if near is not None:
            rest = [t for t in tests if t is not near]
            ru = max(rest, key=lambda t: t.margin)
            return Diagnosis(near.klass, over + near.text, inputs, 0.5, near.margin, ru.klass, ru.margin, True, tests)
        return Diagnosis(BottleneckClass.unknown,
                         over + f"GPU computing {inputs['computation_pct']:.1f}%, idle {inputs['idle_pct']:.1f}%: "
                         "no rule fired", inputs, 0.3, None, ru.klass, ru.margin, True, tests)
    conf = confidence_from_margin(win.margin, ru.margin)
    return Diagnosis(win.klass, over + win.text, inputs, conf, win.margin, ru.klass, ru.margin,
                     win.margin < BORDERLINE_MARGIN, tests)


def _over_run_step(inputs: dict[str, Any]) -> str:
    """The rule text's preamble when the rules read the timeline over the run's step
    (:func:`step_correction`), else ""."""
    if inputs.get("step_stretch") is None:
        return ""
    return (f"over the run's steady step outside the profiler ({inputs['run_step_ms']:.2f} ms; the profiled steps "
            f"last {inputs['profiled_step_ms']:.2f} ms (median), {inputs['step_stretch']:.2f}× > {REPR_STEP_RATIO:g}×: the "
            f"profiler's host overhead, its kernels run as fast; in the window itself GPU computing "
            f"{inputs['window_computation_pct']:.1f}%, idle {inputs['window_idle_pct']:.1f}%): ")


def nearest_rule(tests: list[RuleTest], inputs: dict[str, Any]) -> RuleTest | None:
    """When no rule fired and the window is split between computing and idle (exposed
    communication under :data:`EXPOSED_COMM_PCT` and exposed copies under
    :data:`EXPOSED_H2D_PCT`), the rule whose threshold is nearer in percentage points of the step:
    the compute rule (computing short of :data:`BUSY_COMPUTE_PCT`; the memory rule instead when
    elementwise/reduce kernels hold :data:`MEMORY_BOUND_ELEMENTWISE_SHARE` of the kernel time) or
    the dispatch rule (idle short of :data:`IDLE_DISPATCH_PCT`). Both thresholds are shares of one
    step (computing + idle ≈ 100%), so their distances compare in one unit; a GPU computing 78% is
    mostly computing, one idle 35% is mostly waiting; distances within :data:`NEAREST_TIE_PP` of
    each other are a tie (no class). Returns that :class:`RuleTest` re-worded as a
    borderline verdict (margin < 0), or None (a window held by copies or communication). The
    benchmark reads its classes the same way (bench/accuracy/measured.py: "between the two
    thresholds and nearer this one")."""
    comp, idle = inputs["computation_pct"], inputs["idle_pct"]
    if (inputs.get("exposed_memcpy_pct") or 0.0) >= EXPOSED_H2D_PCT or inputs["exposed_comm_pct"] >= EXPOSED_COMM_PCT:
        return None
    gap_c, gap_d = BUSY_COMPUTE_PCT - comp, IDLE_DISPATCH_PCT - idle
    if abs(gap_c - gap_d) <= NEAREST_TIE_PP:
        return None
    by = {t.klass: t for t in tests}
    C = BottleneckClass
    if gap_c < gap_d:
        elem = inputs.get("elementwise_reduce_share")
        k = C.memory if elem is not None and elem >= MEMORY_BOUND_ELEMENTWISE_SHARE else C.compute
        t = by[k]
        what = ("bandwidth-bound kernels: elementwise/reduce " f"{elem * 100:.0f}% of kernel time" if k is C.memory
                else "mostly computing" + (f", GEMM {inputs['gemm_share'] * 100:.0f}% of kernel time"
                                          if inputs.get("gemm_share") is not None else ""))
        return RuleTest(k, False, min(t.margin, _above(comp, BUSY_COMPUTE_PCT)),
                        f"borderline: GPU computing {comp:.1f}% and idle {idle:.1f}%, between the compute rule "
                        f"(≥ {BUSY_COMPUTE_PCT:g}%) and the dispatch rule (idle ≥ {IDLE_DISPATCH_PCT:g}%) and nearer "
                        f"the first ({gap_c:.1f} vs {gap_d:.1f} pp): {what}")
    t = by[C.dispatch]
    return RuleTest(C.dispatch, False, t.margin,
                    f"borderline: GPU idle {idle:.1f}% and computing {comp:.1f}%, between the dispatch rule "
                    f"(idle ≥ {IDLE_DISPATCH_PCT:g}%) and the compute rule (≥ {BUSY_COMPUTE_PCT:g}%) and nearer the "
                    f"first ({gap_d:.1f} vs {gap_c:.1f} pp): the GPU waits for the host a large part of the step")


def board_limits(gpu_name: str | None) -> tuple[float, float | None] | None:
    """(power limit W, boost clock MHz) of a known board from its name, from the one GPU datasheet
    (:data:`ai4s_graph.tools.perfmodel.datasheet.GPUS`: ``tdp_w``, ``boost_mhz``; the boost clock is
    None for a board whose sheet gives none), else None (an unknown board, or a PCIe/NVL variant
    whose limits differ from the SXM row)."""
    spec = find_gpu(gpu_name or "")
    return (spec.tdp_w, spec.boost_mhz) if spec is not None else None


def telemetry_supports_compute(gpu_util: float | None, sm_clock: float | None, sm_clock_max: float | None,
                               power: float | None, power_max: float | None,
                               gpu_name: str | None = None) -> bool | None:
    """Seed 001 T2: high utilization counts only with a high SM clock and high power.

    Clock and power are compared with the board's datasheet limits (:func:`board_limits`) when the
    GPU is known, else with the maxima observed in the same job. Returns True/False, or None when
    the inputs are missing."""
    lim = board_limits(gpu_name)
    clock_ref = lim[1] if lim and lim[1] else sm_clock_max
    power_ref = lim[0] if lim else power_max
    if gpu_util is None or sm_clock is None or not clock_ref:
        return None
    clock_ok = sm_clock >= SM_CLOCK_HIGH_FRAC * clock_ref
    power_ok = True if (power is None or not power_ref) else power >= POWER_HIGH_FRAC * power_ref
    return gpu_util >= UTIL_HIGH_PCT and clock_ok and power_ok


def trace_class(trace: dict[str, Any]) -> Diagnosis:
    """:func:`classify_trace`, except on a profiled window that is not a steady state
    (``window.degenerate``: some profiled steps launched no GPU work while others did,
    tools/trace/hygiene.py): then ``unknown``, since the rules read a steady-state window (seed 001
    T19) and GPU work in one step of eight must not pass as compute-bound. ``trace``: the figures of
    one rank trace, from the engine (the analyst) or from the verifier's reader."""
    d = classify_trace(trace)
    w = trace.get("window") or {}
    if w.get("degenerate"):
        return Diagnosis(BottleneckClass.unknown, f"{w.get('reason')}; the rules need a steady-state window "
                                                  f"(on the busy part alone: {d.klass.value})", d.inputs, 0.3)
    return d


def memory_bound_from_roofline(roofline: dict[str, Any] | None) -> tuple[bool | None, str]:
    """Whether the kernel time is dominated by memory-bound categories by the roofline (arithmetic
    intensity below the ridge, seed 001 T15), measured from recorded shapes: True when the
    memory-bound categories hold more kernel time than the compute-bound ones; (None, why) when
    the trace has no shapes. ``roofline``: :func:`ai4s_graph.tools.perfmodel.roofline.roofline_of`'s dict."""
    if not roofline or not roofline.get("shapes_recorded") or not roofline.get("categories"):
        return None, "no roofline: the trace was recorded without shapes (record_shapes=True)"
    mem = sum(a["kernel_us"] for a in roofline["categories"].values() if a["bound"] == "memory")
    comp = sum(a["kernel_us"] for a in roofline["categories"].values() if a["bound"] == "compute")
    return mem > comp, f"memory-bound categories {mem / 1000:.2f} ms vs compute-bound {comp / 1000:.2f} ms of kernel time"
