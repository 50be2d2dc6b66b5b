"""The GPU shared with another process (issue 24; issue 34 point 4): telemetry sees the GPU busier
than the job's own kernels keep it.

The job's own busy share is the trace's (the union of its kernels and copies over the profiled
window, TraceLens ``gpu_timeline``), re-expressed over the log's steady step when the profiler
stretched the profiled steps (the same kernels over a shorter step: busy x trace step / log step,
as :func:`~..context.representativeness` re-expresses the timeline; capped at 100%). The GPU's
utilization (dcgm-exporter ``DCGM_FI_DEV_GPU_UTIL`` / ``rocm_utilization_percentage``: the share of
time ANY kernel ran, from any process) averaged over the job's window. A job alone cannot keep its
GPU busier than its own kernels do, so utilization above its own busy share by
:data:`CONTENTION_PP` or more is other processes' kernels. (A job phase outside the profiled steps
that is busier than them, e.g. an evaluation loop, reads the same: the claim says so.)

Its share is the excess, (utilization - own busy) / 100: the GPU time in the job's window that
its own kernels do not explain -- a lower bound of the cost, since time-slicing also stretches the
job's own kernels (93109: 1.6x its control's step). Re-derived from the mean of the utilization
series points (``query_range``, not the PromQL statistic) and the verifier reader's busy share
over the verifier's own re-read of the log. Lever ``exclusive_gpu``.

The job's class stays its own trace's: on a shared GPU the GPU is the resource that limits the job
(seed 001 T1: GPU-bound when utilization and power are high; 93109: 79.4% computing, the compute
rule nearer, utilization 100%, 687 W of 700 W), its kernels time-sliced with the other process's.
The job-wide telemetry then reads the job's and the other process's work together, so its
"not compute-bound" reading (the SM clock lowered at the power limit) is this cause's, not a
contradiction of the trace: a confirmed finding resolves it (it supersedes ``power-capped``;
:func:`~..verdict.reconcile_with_causes`).
"""

from __future__ import annotations

import statistics
from typing import Any

from .base import Cause, Constant, Finding, LeverSpec, ev, file_name
from ..figures import Figure, Inputs, Reader, Rederived, returned_dicts, series_mean
from ....state import Claim, Tolerance

CONTENTION_PP = Constant(10.0, "measurement, the 55 bundled H200 runs: utilization over the job's window minus the "
                               "trace's busy share is +19.9 pp on gpu-contention (93109: 100.0% vs 80.1%) and at most "
                               "+0.1 pp on every other run (dcgm-exporter's utilization lags a short job's start, so "
                               "a lone job reads at or below its own busy share); 10 pp is half the one and 10 pp "
                               "above the others")
GAP_TOL = Tolerance(abs=5.0)
CLAIM_ID = "triage.gpu_contention"


def own_busy_pct(busy_pct: float, trace_step_ms: float | None, log_step_ms: float | None) -> float:
    """The job's own busy share (%): the trace's, re-expressed over the log's steady step when the
    profiled steps are longer (busy x trace step / log step), at most 100."""
    if trace_step_ms and log_step_ms and trace_step_ms > log_step_ms > 0:
        return min(100.0, busy_pct * trace_step_ms / log_step_ms)
    return busy_pct


def from_evidence(returned: list[Any]) -> float | None:
    """The claimed excess (pp) from what the evidence returned."""
    d = returned_dicts(returned)
    if d.get("gpu_util_avg") is None or d.get("busy_pct") is None:
        return None
    own = own_busy_pct(float(d["busy_pct"]), d.get("trace_step_ms"), d.get("log_step_ms"))
    return round(float(d["gpu_util_avg"]) - own, 2)


class GpuContention(Cause):
    """Utilization beyond the job's own busy share: another process's kernels on its GPU."""

    seed = "issue 24 (GPU shared with another process); seed 001 T2 (utilization counts any running kernel)"
    causes = {"gpu-contention": "another process runs kernels on the job's GPU (time-sliced with the job)"}
    reads = ("rank.timeline", "rank.step_time_ms", "telemetry.gpu_util.avg", "fom.steady_step_time_s")
    figures = (Figure("gpu_contention.util_beyond_own_busy_pp", "pp",
                      "GPU utilization over the job's window minus the job's own busy share", "cause", GAP_TOL,
                      from_evidence=from_evidence),)
    constants = {"CONTENTION_PP": CONTENTION_PP}
    levers = (LeverSpec("exclusive_gpu", "run on GPUs no other process uses: request them exclusively (SLURM "
                        "--exclusive or --gres with the GPUs bound to the job), and check nvidia-smi --query-compute-apps "
                        "/ rocm-smi --showpids for other processes on the job's GPUs"),)
    verifier_needs = ("series", "log")
    supersedes = ("power-capped", "small-kernel-trickle")
    """The other process's kernels hold the board's power and clock (93109: 691 W of 700 W, SM clock 77% of
    boost, against 126 W at 1980 MHz on its control 93110): clocks_power's reading is this cause's."""

    def detect(self, x: Inputs) -> list[Finding]:
        tl = (x.rank or {}).get("timeline") or {}
        busy = (tl.get("busy_time") or {}).get("percent") if isinstance(tl.get("busy_time"), dict) else None
        util = x.statistic("gpu_util.avg")
        if busy is None or util is None:
            return []
        trace_ms = (x.rank or {}).get("step_time_ms")
        log_s = (x.fom or {}).get("steady_step_time_s")
        log_ms = float(log_s) * 1e3 if log_s else None
        own = own_busy_pct(float(busy), trace_ms, log_ms)
        gap = float(util) - own
        if gap < CONTENTION_PP.value:
            return []
        path = (x.rank or {}).get("path", "")
        c = self.claim(CLAIM_ID,
                       f"the GPU reads {util:.1f}% utilized over the job's window but the job's own kernels keep it "
                       f"busy {own:.1f}% (trace {float(busy):.1f}% of the profiled window"
                       + (f", over the log's {log_ms:.1f} ms step" if own != float(busy) else "")
                       + f"): {gap:.1f} pp of GPU time come from another process (or from a phase of the job busier "
                       "than the profiled steps)", "gpu_contention.util_beyond_own_busy_pp", round(gap, 2), "pp",
                       [ev("trace.timeline", f"{file_name(path)}: busy_time percent and step", {
                           "busy_pct": float(busy), "trace_step_ms": trace_ms, "log_step_ms": log_ms},
                           path=path, rank=(x.rank or {}).get("rank")),
                        ev("promql.instant", "gpu_util avg over the job window", {"gpu_util_avg": float(util)})], 0.75)
        return [Finding(("gpu-contention",), c, (self.lever("exclusive_gpu"),), share=round(gap / 100.0, 4))]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        util = series_mean(r.series.get("gpu_util"))
        rd = ((r.rank or {}).get("reader") or {})
        busy = ((rd.get("timeline") or {}).get("busy_time") or {}).get("percent")
        if util is None or busy is None:
            return Rederived(None, "no independent path for this triage claim", Tolerance())
        steps = list((r.log or {}).get("steps") or [])[1:]  # the first step warms up
        log_ms = statistics.median(steps) * 1e3 if steps else None
        own = own_busy_pct(float(busy), rd.get("step_time_ms"), log_ms)
        return Rederived(round(util - own, 2), "mean of the gpu_util series points minus the verifier reader's busy "
                         "share over its own re-read of the log's steps", GAP_TOL)


CAUSE = GpuContention()
