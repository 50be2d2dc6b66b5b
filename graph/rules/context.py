"""The verdict in context (issue 13): is the profile representative of the run, where did a
failed or timed-out job stop (a hang or a slow job), and how does the achieved collective bus
bandwidth compare with what the fabric can do. Pure functions over the analysed inputs (the trace's
base time comes from the analysis pass, the log's facts from the one log read, the baseline's rows
from :func:`ai4s_graph.tools.cluster.baseline.load_baseline`); the synthesizer puts their results
in the report.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from . import diagnosis as dg
from ...tools.perfmodel.datasheet import find_gpu

# ---------------------------------------------------------------------------------------------
# Representativeness
# ---------------------------------------------------------------------------------------------

def profiled_window(rank_result: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) in unix s of the profiled steps of one rank result: its streaming record's
    ``steps`` (µs after the trace's time origin) plus ``base_time_ns``, kineto's
    ``baseTimeNanoseconds`` read by the same pass; None when either is missing."""
    rec = rank_result.get("stream") or {}
    steps = rec.get("steps") or []
    if not steps or not isinstance(rec.get("base_time_ns"), (int, float)):
        return None
    base = int(rec["base_time_ns"]) / 1e9
    t0 = min(float(s["ts"]) for s in steps)
    t1 = max(float(s["ts"]) + float(s["dur"]) for s in steps)
    return base + t0 / 1e6, base + t1 / 1e6


PROFILER_EDGE_STEPS = 1
"""Steps either side of the profiled ones that the profiler slows too: its warm-up step before the
window (torch.profiler's schedule ``warmup``, tracing already on) and the step after it (the trace
export of ``on_trace_ready``). Measured on the bundled H200 runs: gemm-base's steps 4 and 8 (profiled
5-7) took 24.9 and 63.5 ms against a 4.3 ms median, shallow-prefetch's step 12 (profiled 9-11) 446 ms
against 20 ms (bench/accuracy/bundle.py leaves the same steps out of its unprofiled median)."""
MIN_RUN_STEPS = 2
"""Steady steps outside the profiler a run step needs (a median of one step is that step alone)."""
STALL_FACTOR = 3.0
"""A step at least this many times the run's median step is a stall (seed 001 T5 "a visible stall at
the start of every epoch", T7 "every Nth step has a long idle gap"). Measured on the bundled H200
runs, outside the profiler and the warm-up: worker-respawn's epoch starts 22-23x the median,
shallow-prefetch's refills 3.4-3.9x; no step of the 48 other single-GPU runs reaches 2.6x."""


def run_step(profiled: list[int], step_times_s: list[float], first_index: int = 0,
             batches_per_epoch: int | None = None) -> dict[str, Any] | None:
    """The run's steady step outside the profiler, from the training log.

    ``profiled``: the ``ProfilerStep#N`` numbers of the trace; ``step_times_s``: the log's steady
    step times (s) in run order, the first at global step index ``first_index`` (the warm-up steps
    before it skipped); ``batches_per_epoch``: where epochs start, when known. The log's step at
    global index N is taken to be ``ProfilerStep#N`` (``prof.step()`` once per logged step from the
    first), so this needs a log with one line per step: it returns None when the log holds no step
    past the last profiled one (a log that prints every k-th step), without profiled steps, or with
    fewer than :data:`MIN_RUN_STEPS` steps left.

    Returns ``{ms, n, stall_factor, mean_ms, max_ms, excluded: [lo, hi], stalls: [[index, ms], ...],
    stall_share, epoch_start_stalls}``: ``ms`` the median (ms) of the steady steps outside the
    profiled ones and :data:`PROFILER_EDGE_STEPS` either side; ``stalls`` the steps of at least
    :data:`STALL_FACTOR` × that median; ``stall_share`` their time beyond the median over the total
    of those steps (0..1: what the stalls cost the run); ``epoch_start_stalls`` how many of them
    open an epoch."""
    if not profiled or not step_times_s:
        return None
    lo, hi = min(profiled) - PROFILER_EDGE_STEPS, max(profiled) + PROFILER_EDGE_STEPS
    if first_index + len(step_times_s) - 1 <= max(profiled):
        return None
    kept = [(first_index + i, float(t) * 1e3) for i, t in enumerate(step_times_s)
            if not lo <= first_index + i <= hi and math.isfinite(float(t)) and float(t) > 0]
    if len(kept) < MIN_RUN_STEPS:
        return None
    vals = [v for _, v in kept]
    med = statistics.median(vals)
    stalls = [[i, round(v, 3)] for i, v in kept if v >= STALL_FACTOR * med]
    total = sum(vals)
    excess = sum(v - med for _, v in stalls)
    return {"ms": round(med, 4), "n": len(kept), "stall_factor": STALL_FACTOR, "mean_ms": round(statistics.fmean(vals), 4),
            "max_ms": round(max(vals), 4), "excluded": [lo, hi], "stalls": stalls,
            "stall_share": round(excess / total, 4) if total > 0 else 0.0,
            "epoch_start_stalls": (sum(1 for i, _ in stalls if i % batches_per_epoch == 0)
                                   if batches_per_epoch else None)}


def profiled_steps(trace: dict[str, Any]) -> list[int]:
    """The ``ProfilerStep#N`` numbers of one rank's tables: the engine's ``per_step`` rows, else the
    verifier reader's ``step_numbers``, else the streaming record's ``steps``; [] when none."""
    rows = trace.get("per_step") or (trace.get("stream") or {}).get("steps") or []
    nums = [int(r["step"]) for r in rows if isinstance(r, dict) and isinstance(r.get("step"), (int, float))]
    return sorted(set(nums)) or sorted({int(n) for n in trace.get("step_numbers") or []})


def steady_windows(profiled: list[int], window: tuple[float, float] | None, step_times_s: list[float] | None,
                   first_index: int = 0, job_window: tuple[float, float] | None = None) -> list[tuple[float, float]]:
    """The wall-clock spans (unix s) of the log's steady steps outside the profiler: the steps
    :func:`run_step` reads, laid on the clock from the profiled window, the one place the inputs
    give a step's wall-clock time (the trace's ``baseTimeNanoseconds`` + ``ProfilerStep#N``).

    ``profiled``: the ``ProfilerStep#N`` numbers; ``window``: the profiled steps' ``(start, end)``
    in unix s (:func:`profiled_window`); ``step_times_s``: the log's steady step times (s), the
    first at global index ``first_index``; the log's step N is ``ProfilerStep#N``, as in
    :func:`run_step`. The steps before the profiled ones end where the profiler's warm-up step
    (:data:`PROFILER_EDGE_STEPS`) begins, ``window[0]`` less its logged time; those after start
    where the export step after the window ends; each span is as long as its steps' logged time.
    A log whose step times leave out part of the step (the data wait) gives spans shorter than
    the steps took, still inside the steady steps. ``job_window``: clips the spans (None: no clip).
    Returns 0, 1 or 2 spans of positive length, in time order; [] without a window, without
    profiled steps, or when the log does not cover the edge steps."""
    times = [float(t) for t in step_times_s or []]
    if not profiled or window is None or not times:
        return []
    p0, p1, last = min(profiled), max(profiled), first_index + len(times) - 1

    def t(g: int) -> float:
        return times[g - first_index]
    spans = []
    if first_index <= p0 - PROFILER_EDGE_STEPS - 1 and p0 - 1 <= last:  # the log holds the steps up to the window
        end = float(window[0]) - sum(t(g) for g in range(p0 - PROFILER_EDGE_STEPS, p0))
        spans.append((end - sum(t(g) for g in range(first_index, p0 - PROFILER_EDGE_STEPS)), end))
    if first_index <= p1 + 1 and p1 + PROFILER_EDGE_STEPS + 1 <= last:  # and the steps after it
        start = float(window[1]) + sum(t(g) for g in range(p1 + 1, p1 + PROFILER_EDGE_STEPS + 1))
        spans.append((start, start + sum(t(g) for g in range(p1 + PROFILER_EDGE_STEPS + 1, last + 1))))
    if job_window is not None:
        lo, hi = float(job_window[0]), float(job_window[1])
        spans = [(max(a, lo), min(b, hi)) for a, b in spans]
    return [(round(a, 3), round(b, 3)) for a, b in spans if b > a]


def series_mean_over(series: dict[str, Any] | None, spans: list[tuple[float, float]]) -> tuple[float | None, int]:
    """The mean of a ``promql.job_series`` result (``{instance: [(unix s, value), ...]}`` on an even
    grid, each point the rate over the grid step before it) over the points whose whole step lies
    in one of ``spans``: ``(mean, points)``, ``(None, 0)`` when none does. The grid step is the
    series' median point spacing (a single point counts with a zero step)."""
    pts = []
    for pairs in (series or {}).values():
        ts = sorted(float(p[0]) for p in pairs)
        gaps = [b - a for a, b in zip(ts, ts[1:]) if b > a]
        step = statistics.median(gaps) if gaps else 0.0
        pts += [float(v) for tt, v in pairs if v is not None and math.isfinite(float(v))
                and any(a + step - 1e-6 <= float(tt) <= b + 1e-6 for a, b in spans)]
    return (sum(pts) / len(pts), len(pts)) if pts else (None, 0)


def with_run_step(trace: dict[str, Any], step_times_s: list[float] | None, first_index: int = 0,
                  batches_per_epoch: int | None = None, loader_workers: int | None = None) -> dict[str, Any]:
    """``trace`` (one rank's tables) with ``run_step`` (:func:`run_step` of its profiled steps and
    the log's steps) when the log gives one; the class rules then read the timeline over the run's
    step where the profiler stretched the profiled one (:func:`~.diagnosis.step_correction`), and its
    stalls with ``loader_workers`` (the job's DataLoader workers, the manifest's ``num_workers``) as
    a loader stall (:data:`~.diagnosis.STALL_SHARE`). A new dict: ``trace`` itself is not changed."""
    rs = run_step(profiled_steps(trace), list(step_times_s or []), first_index, batches_per_epoch)
    if rs is not None:
        rs["loader_workers"] = loader_workers
    return {**trace, "run_step": rs} if rs is not None else trace


def _bursty(rs: dict[str, Any] | None) -> str:
    """The finding of stalls in the log (issue 24 point 2: bursty stalls are a finding, not profiler
    inflation), "" when the run's steps have none."""
    if not rs or not rs.get("stalls"):
        return ""
    n, k = len(rs["stalls"]), rs["n"]
    where = ", ".join(f"{i} ({v:.0f} ms)" for i, v in rs["stalls"][:6]) + (" …" if n > 6 else "")
    ep = rs.get("epoch_start_stalls")
    kind = (" at epoch starts (seed 001 T5: workers re-spawned each epoch)" if ep and ep == n else
            " inside epochs (seed 001 T7: the loader's queue runs dry every few steps)" if ep == 0 else "")
    return (f"the run's steps are bursty: {n} of {k} steady steps outside the profiler take ≥ {STALL_FACTOR:g}× the "
            f"median {rs['ms']:.2f} ms (steps {where}){kind}; they cost {rs['stall_share'] * 100:.0f}% of those steps' "
            f"time (mean {rs['mean_ms']:.2f} ms vs median {rs['ms']:.2f} ms) — a finding about the run, not the "
            "profiler's doing")


def representativeness(rank_result: dict[str, Any], fom: dict[str, Any] | None,
                       util_series: list[tuple[float, float]] | None,
                       window: tuple[float, float] | None = None) -> dict[str, Any] | None:
    """Compare the profiled steps with the run.

    ``rank_result``: the critical rank's trace result (``step_time_ms``, ``timeline``, and
    ``run_step`` when the log gave one: :func:`with_run_step`, then compared with that run step and its
    stalls reported, :func:`_bursty`); ``fom``: the log's figures (``steady_step_time_s``, used
    without a ``run_step``); ``util_series``: GPU utilization ``[(unix s, %)]``;
    ``window``: the profiled window in unix s (:func:`profiled_window`). Returns ``{step_ratio,
    trace_step_ms, log_step_ms, step_flag, class_after_correction, idle_pct_over_run_step, run_steps,
    run_step_mean_ms, stalls,
    stall_share, bursty, busy_pct, util_pct_window,
    util_samples, util_diff_pp, util_flag, representative, statement}`` or None when neither check
    can run. ``trace_step_ms`` is the class rules' profiled step (the median,
    :func:`~.diagnosis.profiled_step_ms`) and ``idle_pct_over_run_step`` their GPU idle over the run's
    step (:func:`~.diagnosis.over_run_step`), so ``step_ratio`` is the stretch the Bottleneck
    rationale quotes. Thresholds: :data:`~.diagnosis.REPR_STEP_RATIO`, :data:`~.diagnosis.REPR_UTIL_PP`."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    # the class rules' own profiled step (the median, diagnosis.profiled_step_ms) and their own
    # re-expression over the run's step (diagnosis.over_run_step): one stretch, one idle figure in
    # the whole report (issue 27: the Bottleneck rationale and this section quote the same numbers)
    t_ms = dg.profiled_step_ms(rank_result)
    rs = rank_result.get("run_step") or None
    log_s = (rs["ms"] / 1e3) if rs else (fom or {}).get("steady_step_time_s")
    what = "the run's steady step outside the profiler" if rs else "the log's steady step"
    tl = rank_result.get("timeline") or {}
    if t_ms and log_s:
        ratio = round(float(t_ms) / (float(log_s) * 1e3), 3)  # rounded as the rules round their step_stretch
        flag = ratio > dg.REPR_STEP_RATIO or ratio < 1.0 / dg.REPR_STEP_RATIO
        out.update(step_ratio=round(ratio, 3), trace_step_ms=round(float(t_ms), 3),
                   log_step_ms=round(float(log_s) * 1e3, 3), step_flag=flag)
        if rs:
            out.update(run_steps=rs["n"], run_step_mean_ms=rs["mean_ms"], stalls=rs["stalls"],
                       stall_share=rs["stall_share"])
        if flag:
            before = dg.classify_trace({k: v for k, v in rank_result.items() if k != "run_step"}).klass.value
            after_d = dg.classify_trace({**rank_result, "run_step": {"ms": float(log_s) * 1e3}})
            after = after_d.klass.value
            out["class_after_correction"] = after
            idle_c = (dg.over_run_step({**rank_result, "run_step": {**(rs or {}), "ms": float(log_s) * 1e3}})
                      .get("idle_time", {}).get("percent") if ratio > 1 else None)
            if idle_c is not None:
                out["idle_pct_over_run_step"] = round(float(idle_c), 2)
            # the run step's own count, named (issue 27 report 5 point 3): its median is over the steady steps
            # less the profiled ones and PROFILER_EDGE_STEPS either side, not over the summary's steady steps
            of_n = (f" (median of the {rs['n']} steady steps outside the profiled ones and {PROFILER_EDGE_STEPS} "
                    "either side)" if rs and rs.get("n") else "")
            if ratio > 1:
                notes.append(f"the profiled steps last {ratio:.2f}× {what} ({float(t_ms):.2f} ms (median) vs "
                             f"{float(log_s) * 1e3:.2f} ms{of_n}, threshold {dg.REPR_STEP_RATIO:g}×): the profiler stretched "
                             "them (its host overhead, e.g. record_shapes or with_stack)"
                             + (f"; over the run's step the GPU is idle {idle_c:.1f}% and the class "
                                + ("holds" if after == before else f"is {after} (the window alone reads {before})")
                                + (" — the verdict reads it so" if rs else "") if idle_c is not None else ""))
            else:
                notes.append(f"the profiled steps last {ratio:.2f}× {what} ({float(t_ms):.2f} vs "
                             f"{float(log_s) * 1e3:.2f} ms{of_n}): the profiler caught faster steps than the run's typical one")
        else:
            notes.append(f"the profiled steps last {ratio:.2f}× {what}: representative")
    burst = _bursty(rs)
    if burst:
        notes.append(burst)
        out["bursty"] = True
    busy = (tl.get("busy_time") or {}).get("percent") if isinstance(tl.get("busy_time"), dict) else tl.get("busy_time")
    if busy is not None and util_series and window:
        # Only samples inside the profiled window: before it a short job may still be starting (real 2-GPU
        # runs 93001/93002: 0% until the profiled steps), and right after it the profiler's trace export
        # stalls the GPU (bundled H200 runs: 0% for ~0.75 s). A window with no sample is not compared.
        lo, hi = window
        vals = [float(v) for t, v in util_series if lo <= float(t) <= hi]
        if vals:
            u = statistics.fmean(vals)
            diff = u - float(busy)
            uflag = abs(diff) > dg.REPR_UTIL_PP
            out.update(busy_pct=round(float(busy), 2), util_pct_window=round(u, 2), util_samples=len(vals),
                       util_diff_pp=round(diff, 2), util_flag=uflag)
            notes.append(f"GPU busy {float(busy):.1f}% in the trace vs utilization {u:.1f}% over the profiled window "
                         f"({len(vals)} sample(s)): " + (f"disagree by more than {dg.REPR_UTIL_PP:g} pp" if uflag else
                                                    f"agree within {dg.REPR_UTIL_PP:g} pp"))
        else:
            out["util_samples"] = 0
            notes.append(f"no utilization sample falls inside the {window[1] - window[0]:.3f} s profiled window: "
                         "busy share and utilization not compared")
    if not out:
        return None
    out["representative"] = not (out.get("step_flag") or out.get("util_flag"))
    out["statement"] = ("Profile representative: " if out["representative"] else "Profile NOT representative: ") \
        + "; ".join(notes) + "."
    return out


# ---------------------------------------------------------------------------------------------
# Progress of failed and timed-out jobs
# ---------------------------------------------------------------------------------------------

def _last_step(start: float, step_times_s: list[float], util: list[tuple[float, float]],
               last_step_unix: float | None) -> tuple[float, str]:
    """(unix s of the last logged step, how it was placed): its log timestamp, else the first GPU
    activity (utilization > :data:`~.diagnosis.UTIL_ACTIVE_PCT`, else the job start) plus the sum
    of the logged step times."""
    if last_step_unix is not None:
        return last_step_unix, "the last step line's timestamp"
    first = next((t for t, v in util if v > dg.UTIL_ACTIVE_PCT), None)
    t0 = first if first is not None else start
    return t0 + sum(step_times_s), ("first GPU activity + the sum of the logged step times" if first is not None else
                                    "job start + the sum of the logged step times (a lower bound: start-up time is "
                                    "not counted)")


def _after_text(u_after: float | None) -> str:
    """What GPU utilization after the last step says (spinning, idle, partly busy), "" without samples."""
    if u_after is None:
        return ""
    what = ("the GPU kept spinning without progress (a collective waiting for a peer that never arrives, e.g. "
            "a PMIx/NCCL fence: seed 000, cluster constraints)" if u_after >= 50 else
            "the GPU sat idle (the host stopped issuing work: a deadlock, an I/O wait, a dead DataLoader worker)"
            if u_after <= dg.UTIL_ACTIVE_PCT else "the GPU was partly busy without the log advancing")
    return f" GPU utilization after it: mean {u_after:.0f}% — {what}."


def progress(state: str, start: float | None, end: float | None, step_times_s: list[float],
             planned_steps: int | None = None, util_series: list[tuple[float, float]] | None = None,
             last_step_unix: float | None = None) -> dict[str, Any] | None:
    """Where a job that did not complete stopped, and whether it hung or was slow.

    ``state``: SLURM state; ``start``/``end``: unix s; ``step_times_s``: the logged step times in
    order; ``util_series``: GPU utilization ``[(unix s, %)]``; ``last_step_unix``: the last step's
    log timestamp when the log has them. Without a timestamp the last step is placed at the first
    GPU activity (utilization > :data:`~.diagnosis.UTIL_ACTIVE_PCT`, else the job start) plus the
    sum of the logged step times. A silence of at least ``max(HANG_MIN_GAP_S, HANG_GAP_STEPS ×
    longest step)`` before the end is a hang; less, on a TIMEOUT, a slow job. Returns None for a
    COMPLETED job or one without start/end."""
    st = (state or "UNKNOWN").split()[0].upper()
    if st == "COMPLETED" or start is None or end is None:
        return None
    util = sorted((float(t), float(v)) for t, v in (util_series or []) if start - 1 <= float(t) <= end + 1)
    out: dict[str, Any] = {"state": st, "start": start, "end": end, "steps_logged": len(step_times_s),
                           "planned_steps": planned_steps}
    if not step_times_s:
        out.update(verdict="no-progress", statement=f"The job ended {st} before logging a single step: it never "
                   "reached steady state (lesson 21); read its error output.")
        return out
    t_last, how = _last_step(start, step_times_s, util, last_step_unix)
    gap = end - t_last
    longest = max(step_times_s)
    need = max(dg.HANG_MIN_GAP_S, dg.HANG_GAP_STEPS * longest)
    after = [v for t, v in util if t > t_last + 1.0]
    u_after = statistics.fmean(after) if after else None
    med = statistics.median(step_times_s)
    out.update(last_step_s_into_job=round(t_last - start, 1), how=how, gap_s=round(gap, 1),
               hang_gap_s=round(need, 1), longest_step_s=round(longest, 4), median_step_s=round(med, 4),
               util_after_pct=None if u_after is None else round(u_after, 1))
    ua = _after_text(u_after)
    if gap >= need:
        out["verdict"] = "hang"
        out["statement"] = (f"HUNG: the log's last step ({len(step_times_s)}) came about {t_last - start:.0f} s into "
                            f"the job ({how}), {gap:.0f} s before it ended {st}; that silence is ≥ {need:.0f} s "
                            f"(max of {dg.HANG_MIN_GAP_S:g} s and {dg.HANG_GAP_STEPS:g}× the longest step, "
                            f"{longest:.3g} s).{ua}")
    elif st in ("TIMEOUT", "TIMEOUT_WAITING"):
        rest = (planned_steps - len(step_times_s)) if planned_steps else None
        out["verdict"] = "slow"
        out["statement"] = (f"SLOW, not hung: the log advanced until about {max(gap, 0):.0f} s before the {st} "
                            f"(under the {need:.0f} s hang threshold), at a median {med:.3g} s/step"
                            + (f"; the remaining {rest} of {planned_steps} steps would need about "
                               f"{rest * med:.0f} s more" if rest and rest > 0 else "") + f".{ua}")
    else:
        out["verdict"] = "stopped"
        out["statement"] = (f"STOPPED by a failure ({st}) while still making progress: the last step "
                            f"({len(step_times_s)}) came {max(gap, 0):.0f} s before the end; read the error "
                            f"output.{ua}")
    return out


# ---------------------------------------------------------------------------------------------
# Bus bandwidth in context
# ---------------------------------------------------------------------------------------------

def baseline_at(rows: list[tuple[float, float]], nbytes: float) -> tuple[float, float]:
    """(payload, busbw) of the measured payload nearest to ``nbytes`` on a log scale."""
    return min(rows, key=lambda r: abs(math.log(max(r[0], 1.0)) - math.log(max(nbytes, 1.0))))


def link_reference(gpu: str | None) -> tuple[float, str] | None:
    """(GB/s, source) of the GPU's GPU-to-GPU link, one direction, from the one datasheet
    (:data:`ai4s_graph.tools.perfmodel.datasheet.GPUS`, ``link_gbps_uni`` and ``link_source``): the
    ceiling of an intra-node ring all-reduce busbw (nccl-tests' busbw is defined so that it compares
    with the link speed). None for a GPU not in the datasheet."""
    spec = find_gpu(gpu or "")
    return (spec.link_gbps_uni, spec.link_source) if spec is not None else None


def allreduce_groups(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The collective groups :func:`busbw_context` compares: all-reduces with a busbw and a size."""
    return [g for g in groups if g.get("collective") == "allreduce" and g.get("busbw_gbps") and g.get("msg_bytes")]


def busbw_context(groups: list[dict[str, Any]], baseline: tuple[list[tuple[float, float]], str] | None,
                  gpu: str | None, nodes: int | None = None) -> list[dict[str, Any]]:
    """Each all-reduce group's achieved busbw against the eval-cluster measurement at the nearest
    message size (``baseline``: ``(rows, source)`` of
    :func:`ai4s_graph.tools.cluster.baseline.load_baseline`), else the GPU's datasheet link figure
    (:func:`link_reference`, single-node jobs only). Returns the rows ``{collective, msg_bytes,
    busbw_gbps, reference_gbps, reference, ratio}``."""
    rows_in = allreduce_groups(groups)
    if not rows_in:
        return []
    ref_rows, src = baseline if baseline else ([], "")
    sheet = link_reference(gpu)
    out = []
    for g in rows_in:
        mb, bw = float(g["msg_bytes"]), float(g["busbw_gbps"])
        if ref_rows:
            pay, ref = baseline_at(ref_rows, mb)
            how = f"eval-cluster all-reduce at {pay / 2**20:.4g} MiB, {src}"
        elif sheet and (nodes or 1) <= 1:
            ref, how = sheet
        else:
            continue
        out.append({"collective": "allreduce", "msg_bytes": mb, "busbw_gbps": round(bw, 2),
                    "reference_gbps": round(ref, 2), "reference": how, "ratio": round(bw / ref, 3) if ref else None})
    return out
