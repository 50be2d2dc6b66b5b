"""A data-bound step split by the host CPU (seed 001 T8): when the DataLoader takes at least
:data:`~..diagnosis.DATALOADER_STEP_SHARE` of the step (the step is data-bound), host CPU busy >=
:data:`CPU_BUSY_PCT` means the per-sample transform is the bottleneck (CPU-transform-bound),
<= :data:`CPU_IDLE_PCT` means the workers wait on storage (I/O-bound); between the two the readings
cannot separate them.

Reads the trace (the DataLoader share of the first analysed rank) and telemetry (the node's CPU
utilization), so it runs in the trace analyst, one superstep after the telemetry analyst wrote its
statistics. Re-derived from the mean of the ``cpu_util`` series (``query_range`` points, not the
PromQL statistic). Levers ``gpu_transforms`` / ``stage_to_local_nvme``."""

from __future__ import annotations

from .base import Cause, Constant, Finding, LeverSpec, ev
from .. import diagnosis as dg
from ..figures import Figure, Inputs, Reader, Rederived, dataloader_share_pct, series_mean
from ....state import Claim, Tolerance

CPU_BUSY_PCT = 90.0
"""seed 001 T1: "util consistently >90%" is busy; T3: a worker pegged at ~100% CPU."""
CPU_IDLE_PCT = 50.0
"""seed 001 T3 "both idle => I/O-bound": under half the allotted cores busy counts as idle."""
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


class DataSplit(Cause):
    """A data-bound step split into CPU-transform-bound or I/O-bound by the host CPU (seed 001 T8)."""

    seed = "seed 001 T8"
    causes = {"dataloader-transform-bound": "the DataLoader's per-sample CPU transform limits the step",
              "dataloader-io-bound": "the DataLoader waits on storage while the host CPU idles"}
    analyst = "trace_analyst"
    reads = ("cpu.dataloader_step_share_pct", "cpu.host_util_pct")
    figures = (Figure("cpu_util", "%", "the node's host CPU utilization over the job", "cause", Tolerance(abs=5.0)),)
    constants = {"CPU_BUSY_PCT": Constant(CPU_BUSY_PCT, "seed 001 T1/T3"),
                 "CPU_IDLE_PCT": Constant(CPU_IDLE_PCT, "seed 001 T3"),
                 "DATALOADER_STEP_SHARE": Constant(dg.DATALOADER_STEP_SHARE, "seed 001 T19 (graph/rules/diagnosis.py)")}
    levers = (LeverSpec("gpu_transforms", "move the per-sample transform to the GPU (DALI, torchvision v2 on tensors); "
                        "more workers cap at the core count"),
              LeverSpec("stage_to_local_nvme", "stage the working set to node-local NVMe or shard small files "
                        "(seed 001 T8: U8/U25)"))
    verifier_needs = ("series",)

    def detect(self, x: Inputs) -> list[Finding]:
        cpu = x.figure("cpu.host_util_pct")
        if cpu is None or not (cpu >= CPU_BUSY_PCT or cpu <= CPU_IDLE_PCT) or not x.rank:
            return []
        pct = dataloader_share_pct(x.rank)
        if pct is None or pct / 100.0 < dg.DATALOADER_STEP_SHARE:
            return []
        f = self.check(float(x.rank["dataloader_ms_per_step"]) / float(x.rank["step_time_ms"]), cpu)
        return [f] if f is not None else []

    def not_checked(self, x: Inputs) -> list[str]:
        line = not_checked_line(x.figure("cpu.host_util_pct"), bool(x.rank))
        return [line] if line else []

    def check(self, dataloader_share: float | None, cpu_util_pct: float | None) -> Finding | None:
        """The finding for a data-bound step (``dataloader_share``: DataLoader time / step time)
        and the host CPU busy %; None between :data:`CPU_IDLE_PCT` and :data:`CPU_BUSY_PCT` or
        when an input is missing."""
        if dataloader_share is None or cpu_util_pct is None:
            return None
        evidence = [ev("tracelens.analyze_trace", "dataloader_ms_per_step / step_time_ms", dataloader_share),
                    ev("promql.instant", "cpu_util avg", cpu_util_pct)]
        if cpu_util_pct >= CPU_BUSY_PCT:
            c = self.claim("triage.t8.transform_bound", f"data loading takes {dataloader_share * 100:.0f}% of the step "
                           f"while the host CPU is {cpu_util_pct:.0f}% busy: CPU-transform-bound (seed 001 T8)",
                           "cpu_util", cpu_util_pct, "%", evidence, 0.7)
            return Finding(("dataloader-transform-bound",), c, (self.lever("gpu_transforms"),))
        if cpu_util_pct <= CPU_IDLE_PCT:
            c = self.claim("triage.t8.io_bound", f"data loading takes {dataloader_share * 100:.0f}% of the step while "
                           f"the host CPU is only {cpu_util_pct:.0f}% busy: I/O-bound (seed 001 T8)",
                           "cpu_util", cpu_util_pct, "%", evidence, 0.7)
            return Finding(("dataloader-io-bound",), c, (self.lever("stage_to_local_nvme"),))
        return None

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        v = series_mean(r.series.get("cpu_util"))
        if v is None:
            return Rederived(None, "no independent path for this triage claim", Tolerance())
        return Rederived(round(v, 6), "mean of the cpu_util series (query_range points, not the PromQL avg)",
                         Tolerance(abs=5.0))


CAUSE = DataSplit()
