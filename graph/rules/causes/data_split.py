"""A data-bound step split by the host CPU (seed 001 T8): when the DataLoader takes at least
:data:`~..diagnosis.DATALOADER_STEP_SHARE` of the step (the step is data-bound), CPU busy >=
:data:`CPU_BUSY_PCT` means the per-sample transform is the bottleneck (CPU-transform-bound),
<= :data:`CPU_IDLE_PCT` means the workers wait on storage (I/O-bound). The busy share is the
DataLoader workers' own (the node's busy cores less :data:`RANK_CORES` per rank, over the worker
processes: :func:`worker_busy_pct`) when the workers, ranks and cores are known, else the node's;
between the two bounds the readings
cannot separate them and the finding names the class-level cause ``dataloader-stall`` (the step waits
in ``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``). So does a host CPU reading over
a job window shorter than :data:`MIN_WINDOW_S`: there the node's average is mostly the worker start
and the profiler's export, not the steady steps, and says nothing about what the workers do (the
claim says what would separate them). A per-epoch stall the log shows
(:mod:`.worker_respawn`) is the more specific cause: this module then names nothing.

``share`` = DataLoader time per profiled step / profiled step time (the time the GPU waits on the
loader in the profiled steps; an upper bound of what a faster loader saves).

The host CPU is read over the run's steady steps outside the profiler only (:func:`steady_cpu`:
the log's steady steps laid on the wall clock from the rank trace's profiled window, the first
steps' worker start and the profiler's steps and trace export left out), else over the job window.
Measured on cpu-transform-loader (93128, one worker spinning 40 ms of a 42.5 ms step): the job window
reads the worker 87% busy (the worker start and the 0.46 s export dilute it), its 11.25 s of steady
steps 96%; io-wait-loader (93130): 0% over both.

Reads the trace (the DataLoader share of the first analysed rank), the log's step times and
telemetry (the node's CPU utilization), so it runs in the trace analyst, one superstep after the
telemetry analyst wrote its statistics. The steady reading is the mean of the telemetry analyst's
``cpu_util`` series (PromQL ``query_range``) over the spans; the verifier re-derives it over the same
spans from the raw ``node_cpu_seconds_total`` counters (:mod:`ai4s_graph.tools.telemetry.spans`, no
PromQL); a job-window reading from the mean of the ``cpu_util`` series. Levers ``gpu_transform`` (CPU-transform-bound), ``num_workers_8`` (I/O-bound, or
undecided: more workers overlap both waits while cores are free)."""

from __future__ import annotations

from typing import Any

from .base import Cause, Constant, Finding, LeverSpec, ev
from . import oversubscription, worker_respawn
from .. import context as ctx, diagnosis as dg
from ..figures import Figure, Inputs, Reader, Rederived, dataloader_share_pct, series_mean
from ....state import Claim, Tolerance

CPU_BUSY_PCT = 90.0
"""seed 001 T1: "util consistently >90%" is busy; T3: a worker pegged at ~100% CPU."""
CPU_IDLE_PCT = 50.0
"""seed 001 T3 "both idle => I/O-bound": under half the allotted cores busy counts as idle."""
MIN_WINDOW_S = 10.0
"""seed 001 T3: "watch GPU and CPU at once for ~10 s" before reading the host CPU as transform- or
I/O-bound. Measured on the bundled H200 loader runs (1.2-1.7 s jobs, node_exporter every 0.25 s):
the first step (worker start, 0.41-0.46 s) and the profiler's trace export (0.42-0.47 s) are over
half the window, and one worker spinning 40 ms of a 44 ms step (cpu-transform-loader, 93128) moved
the node's busy cores to 1.28 against 0.96 for one sleeping worker (io-wait-loader, 93130) and
0.80-1.49 over the controls (gpu-transform, io-wait-8-workers, deep-prefetch, persistent-workers,
dataloader-stall-8-workers): inside the spread. 10 s is 6x the longest of them."""
RANK_CORES = 1.0
"""Host cores a rank's own training loop keeps busy while it drives the step (one Python thread).
Measured on the bundled H200 runs whose workers only sleep or are absent (persistent-workers,
deep-prefetch, preprocess-on-gpu, gpu-transform, io-wait-8-workers: 0.79-1.14 busy cores of 16 for
one rank). While the rank waits on the DataLoader its thread blocks in the worker queue's ``get``
(off the CPU), so a rank that waits a share ``d`` of the step keeps ``RANK_CORES x (1 - d)`` cores
busy (:func:`worker_busy_pct`). Measured: io-wait-loader (93130, 300 steps, one sleeping worker,
d = 0.45) keeps 0.65 busy cores over its steady steps, against 0.55 from this model and 1.0 without
the wait."""
T8 = "T8 (I/O-bound vs CPU-transform-bound data loading)"
"""The check as the report's "not checked" line names it (seed 001 T8)."""


def not_checked_line(cpu_util_pct: float | None, has_trace: bool) -> str | None:
    """``not checked: T8 ...: needs ...`` naming what T8 lacks: the host CPU busy % over the job
    (``cpu_util_pct``, percent) and a rank trace (the DataLoader share of the step); None when
    both are there."""
    need = []
    if cpu_util_pct is None:
        need.append("host CPU busy % over the job window (cpu_util: node-exporter's node_cpu_seconds_total or "
                    "Omnistat's host collector in the telemetry)")
    if not has_trace:
        need.append("a rank trace (the DataLoader share of the step)")
    return f"not checked: {T8}: needs " + " and ".join(need) if need else None


def worker_busy_pct(cpu_util_pct: float | None, num_workers: int | None, ranks_per_node: int | None,
                    cores: int | None, dataloader_share: float = 0.0) -> float | None:
    """The DataLoader workers' busy share (%) from the node's busy % over ``cores`` cores:
    ``100 x (cpu_util_pct / 100 x cores - ranks_per_node x RANK_CORES x (1 - dataloader_share)) /
    (ranks_per_node x num_workers)``: the ranks' own threads are off the CPU while they wait on the
    loader (``dataloader_share``, 0..1, of the step; :data:`RANK_CORES`). Negative when the ranks
    use less than that; None when an input is missing or there are no worker processes."""
    if cpu_util_pct is None or not num_workers or not ranks_per_node or not cores:
        return None
    rank_cores = ranks_per_node * RANK_CORES * (1.0 - min(max(dataloader_share, 0.0), 1.0))
    return 100.0 * (cpu_util_pct / 100.0 * cores - rank_cores) / (ranks_per_node * num_workers)


def steady_cpu(x: Inputs) -> dict[str, Any] | None:
    """The node's host CPU busy % over the run's steady steps outside the profiler only
    (:func:`~..context.steady_windows`: the log's steady steps laid on the clock from the rank
    trace's profiled window, clipped to the telemetry window), from the telemetry analyst's
    ``cpu_util`` series (PromQL ``query_range``, :func:`~..context.series_mean_over`):
    ``{"pct", "spans": [[start, end], ...] (unix s), "seconds": their total length, "points"}``.
    None without one step line per step in the log (``fom.step_time_source``), a profiled window,
    spans or series points inside them; the caller then reads the job window."""
    log, rank = x.log or {}, x.rank or {}
    if (x.fom or {}).get("step_time_source") != "per-step log lines" or not log.get("step_times_s"):
        return None
    w = (x.telemetry or {}).get("window")
    spans = ctx.steady_windows(ctx.profiled_steps(rank), ctx.profiled_window(rank), list(log["step_times_s"]),
                               int(log.get("warmup_steps_skipped") or 0),
                               (float(w[0]), float(w[1])) if w and len(w) == 2 else None)
    pct, n = ctx.series_mean_over(((x.telemetry or {}).get("series") or {}).get("cpu_util"), spans)
    if pct is None:
        return None
    return {"pct": round(pct, 6), "spans": [[a, b] for a, b in spans], "points": n,
            "seconds": round(sum(b - a for a, b in spans), 3)}


def window_s(x: Inputs) -> float | None:
    """The length (s) of the telemetry analyst's job window (``telemetry["window"]``: unix s start,
    end), None when it has none."""
    w = (x.telemetry or {}).get("window")
    try:
        return float(w[1]) - float(w[0]) if w and len(w) == 2 else None
    except (TypeError, ValueError):
        return None


class DataSplit(Cause):
    """A data-bound step split into CPU-transform-bound or I/O-bound by the host CPU (seed 001 T8)."""

    seed = "seed 001 T8"
    causes = {"dataloader-cpu-transform": "the DataLoader's per-sample CPU transform limits the step",
              "dataloader-io-wait": "the DataLoader waits on storage while the host CPU idles",
              "dataloader-stall": "the step waits on the DataLoader; the host CPU does not say whether on the "
                                  "transform or on I/O"}
    analyst = "trace_analyst"
    reads = ("cpu.dataloader_step_share_pct", "cpu.host_util_pct")
    figures = (Figure("cpu_util", "%", "the node's host CPU utilization over the job, or over the steady steps' "
                      "spans its evidence names", "cause", Tolerance(abs=5.0)),
               Figure("dataloader.step_share", "fraction", "DataLoader time per profiled step / profiled step time",
                      "cause", Tolerance(rel=0.05)))
    constants = {"CPU_BUSY_PCT": Constant(CPU_BUSY_PCT, "seed 001 T1/T3"),
                 "CPU_IDLE_PCT": Constant(CPU_IDLE_PCT, "seed 001 T3"),
                 "DATALOADER_STEP_SHARE": Constant(dg.DATALOADER_STEP_SHARE, "seed 001 T19 (graph/rules/diagnosis.py)"),
                 "RANK_CORES": Constant(RANK_CORES, "measured: bundled sleep-only runs, 0.79-1.12 busy cores"),
                 "MIN_WINDOW_S": Constant(MIN_WINDOW_S, "seed 001 T3 (~10 s of CPU and GPU); measured: bundled runs "
                                                        "93128/93130 and their controls")}
    levers = (LeverSpec("gpu_transform", "run the per-batch transform on the GPU (torchvision.transforms.v2 on device "
                        "tensors, DALI) instead of in the DataLoader worker's CPU (seed 001 T8)"),
              LeverSpec("num_workers_8", "raise DataLoader(num_workers=...) (e.g. 8, below the cores per rank): "
                        "more batches in flight overlap the waits (seed 001 T4, T8; lesson 22)"))
    verifier_needs = ("series", "raw_telemetry")

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank or worker_respawn.respawns(worker_respawn.from_log(x.log or {})):
            return []
        pct = dataloader_share_pct(x.rank)
        if pct is None or pct / 100.0 < dg.DATALOADER_STEP_SHARE:
            return []
        st = steady_cpu(x)
        f = self.check(float(x.rank["dataloader_ms_per_step"]) / float(x.rank["step_time_ms"]),
                       st["pct"] if st else x.figure("cpu.host_util_pct"), st["seconds"] if st else window_s(x),
                       str(x.rank.get("path") or ""), oversubscription.CAUSE.counts(x),
                       spans=st["spans"] if st else None)
        return [f] if f is not None else []

    def not_checked(self, x: Inputs) -> list[str]:
        line = not_checked_line(x.figure("cpu.host_util_pct"), bool(x.rank))
        st = steady_cpu(x) if x.rank else None
        w, pct = st["seconds"] if st else window_s(x), dataloader_share_pct(x.rank) if x.rank else None
        data_bound = pct is not None and pct / 100.0 >= dg.DATALOADER_STEP_SHARE
        if line is None and data_bound and w is not None and w < MIN_WINDOW_S:
            over = "the steady steps outside the profiler span" if st else "the job's window is"
            line = (f"not checked: {T8}: needs host CPU over {MIN_WINDOW_S:g} s of steady steps at least (seed 001 "
                    f"T3; {over} {w:.1f} s) or the DataLoader workers' own CPU time (per-process CPU)")
        return [line] if line else []

    def check(self, dataloader_share: float | None, cpu_util_pct: float | None,
              window: float | None = None, path: str = "",
              counts: tuple[int | None, int | None, int | None] = (None, None, None),
              spans: list | None = None) -> Finding | None:
        """The finding for a data-bound step (``dataloader_share``: DataLoader time / step time, 0..1)
        and the host CPU busy % over the job's telemetry window of ``window`` seconds (None: no host
        telemetry / window unknown): ``dataloader-cpu-transform`` at or above :data:`CPU_BUSY_PCT`,
        ``dataloader-io-wait`` at or below :data:`CPU_IDLE_PCT`, the class-level ``dataloader-stall``
        between them, without the CPU reading or over a window shorter than :data:`MIN_WINDOW_S`;
        None without the share. The finding's ``share`` is ``dataloader_share``; ``path`` (the rank
        trace) is cited by the first evidence, so the verifier re-derives from that rank's tables.
        ``counts`` = ``(num_workers, ranks_per_node, cores)`` (:meth:`.oversubscription.CpuOversubscription.counts`):
        when all are known the bounds apply to the workers' own busy share (:func:`worker_busy_pct`),
        not to the node's (one pegged worker on a 16-core node is 6% of the node); otherwise to the
        node's. ``spans``: the wall-clock spans (unix s) the CPU reading covers when it is over the
        steady steps only (:func:`steady_cpu`; ``window`` is then their total length), named in the
        CPU evidence so the verifier re-derives it over the same spans."""
        if dataloader_share is None:
            return None
        dl = round(dataloader_share, 6)
        evidence = [ev("tracelens.analyze_trace", "dataloader_ms_per_step / step_time_ms", dl,
                       **({"path": path} if path else {}))]
        short = cpu_util_pct is not None and window is not None and window < MIN_WINDOW_S
        if cpu_util_pct is None or short or CPU_IDLE_PCT < cpu_util_pct < CPU_BUSY_PCT:
            why = ("no host CPU telemetry" if cpu_util_pct is None else
                   f"the host CPU reading ({cpu_util_pct:.0f}% busy) covers {'the' if spans else 'a'} {window:.1f} s "
                   f"{'of steady steps' if spans else 'job'}, under the "
                   f"{MIN_WINDOW_S:g} s seed 001 T3 needs; separating them needs host CPU over {MIN_WINDOW_S:g} s "
                   "of steady steps or the workers' per-process CPU" if short else
                   f"the host CPU is {cpu_util_pct:.0f}% busy, between the transform-bound and I/O-bound bounds")
            c = self.claim("triage.t8.dataloader_stall", f"the step waits on the DataLoader {dl * 100:.0f}% of the "
                           f"time ({why}: transform and I/O not separated; seed 001 T19/T8)",
                           "dataloader.step_share", dl, "fraction", evidence, 0.7)
            return Finding(("dataloader-stall",), c, (self.lever("num_workers_8"),), share=dl)
        evidence.append(ev("promql.query_range", "cpu_util mean over the steady steps outside the profiler",
                           cpu_util_pct, metric="cpu_util", spans=spans) if spans else
                        ev("promql.instant", "cpu_util avg", cpu_util_pct))
        over = f" over the {window:.1f} s of steady steps outside the profiler" if spans and window else ""
        wpct = worker_busy_pct(cpu_util_pct, *counts, dataloader_share=dl)
        if wpct is not None:
            return self._by_workers(dl, cpu_util_pct, wpct, counts, evidence, over)
        if cpu_util_pct >= CPU_BUSY_PCT:
            c = self.claim("triage.t8.transform_bound", f"data loading takes {dl * 100:.0f}% of the step "
                           f"while the host CPU is {cpu_util_pct:.0f}% busy{over}: CPU-transform-bound (seed 001 T8)",
                           "cpu_util", cpu_util_pct, "%", evidence, 0.7)
            return Finding(("dataloader-cpu-transform",), c, (self.lever("gpu_transform"),), share=dl)
        c = self.claim("triage.t8.io_bound", f"data loading takes {dl * 100:.0f}% of the step while "
                       f"the host CPU is only {cpu_util_pct:.0f}% busy{over}: I/O-bound (seed 001 T8)",
                       "cpu_util", cpu_util_pct, "%", evidence, 0.7)
        return Finding(("dataloader-io-wait",), c, (self.lever("num_workers_8"),), share=dl)

    def _by_workers(self, dl: float, cpu_util_pct: float, wpct: float, counts: tuple, evidence: list,
                    over: str = "") -> Finding:
        """The finding when the workers' busy share ``wpct`` (%) is known: transform-bound at or
        above :data:`CPU_BUSY_PCT`, I/O-bound at or below :data:`CPU_IDLE_PCT`, the stall between.
        ``over``: the span the reading covers, in words ("" for the job window)."""
        nw, ranks, cores = counts
        evidence.append(ev("manifest", "num_workers, ranks_per_node, cores", {"num_workers": nw, "ranks_per_node": ranks,
                           "cores": cores, "worker_busy_pct": round(wpct, 3)}))
        seen = (f"the host CPU is {cpu_util_pct:.0f}% busy{over} on {cores} cores: beyond the {ranks} rank(s)' own "
                f"{RANK_CORES * (1 - dl):.2g} core each (busy {100 * (1 - dl):.0f}% of the step, waiting on the "
                f"loader the rest), the {nw * ranks} DataLoader worker(s) are {max(wpct, 0.0):.0f}% busy")
        if CPU_IDLE_PCT < wpct < CPU_BUSY_PCT:
            c = self.claim("triage.t8.dataloader_stall", f"the step waits on the DataLoader {dl * 100:.0f}% of the "
                           f"time ({seen}, between the transform-bound and I/O-bound bounds: transform and I/O not "
                           "separated; seed 001 T19/T8)", "dataloader.step_share", dl, "fraction", evidence, 0.7)
            return Finding(("dataloader-stall",), c, (self.lever("num_workers_8"),), share=dl)
        if wpct >= CPU_BUSY_PCT:
            c = self.claim("triage.t8.transform_bound", f"data loading takes {dl * 100:.0f}% of the step while {seen}: "
                           "CPU-transform-bound (seed 001 T8)", "cpu_util", cpu_util_pct, "%", evidence, 0.7)
            return Finding(("dataloader-cpu-transform",), c, (self.lever("gpu_transform"),), share=dl)
        c = self.claim("triage.t8.io_bound", f"data loading takes {dl * 100:.0f}% of the step while {seen}: "
                       "I/O-bound (seed 001 T8)", "cpu_util", cpu_util_pct, "%", evidence, 0.7)
        return Finding(("dataloader-io-wait",), c, (self.lever("num_workers_8"),), share=dl)

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        if c.metric == "dataloader.step_share":
            # the verifier reader's own tables of the rank (``reader``), or a reader table handed directly
            pct = dataloader_share_pct((r.rank or {}).get("reader") or r.rank or {})
            return Rederived(round(pct / 100.0, 6) if pct is not None else None, "the verifier's full-load read of "
                             "the trace: DataLoader time per step / step time", Tolerance(rel=0.05))
        spans = next((e.args["spans"] for e in c.evidence if (e.args or {}).get("spans")), None)
        if spans:
            # the key of ``Reader.raw_stats`` (``tools/telemetry/spans.py:spans_key``: ms-rounded pairs)
            key = ("cpu_util", "avg", tuple((round(float(a), 3), round(float(b), 3)) for a, b in spans))
            v = r.raw_stats.get(key)
            return Rederived(None if v is None else round(v, 6), "raw node_cpu_seconds_total counters over the same "
                             "steady-step spans (100 x (1 - Δidle/Δall) inside each span, plain Python, no PromQL)",
                             Tolerance(abs=5.0))
        v = series_mean(r.series.get("cpu_util"))
        if v is None:
            return Rederived(None, "no independent path for this triage claim", Tolerance())
        return Rederived(round(v, 6), "mean of the cpu_util series (query_range points, not the PromQL avg)",
                         Tolerance(abs=5.0))


CAUSE = DataSplit()
