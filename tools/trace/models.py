"""The figures of one rank's trace, whichever reader produced them (pydantic models)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .categories import MAIN_TIMELINE_ROWS, TIMELINE_ROWS

__all__ = ["CategoryRow", "KernelRow", "ShortKernels", "LaunchStats", "TraceAnalysis", "TimelineRow"]


class TimelineRow(BaseModel):
    """One row of TraceLens's ``gpu_timeline`` sheet: time in milliseconds and percent of
    ``total_time``."""

    time_ms: float
    percent: float


class CategoryRow(BaseModel):
    """One op/kernel category: launcher (or kernel) ``count``, kernel time in ms, percent of
    the summed kernel time (TraceLens's ops_summary_by_category columns)."""

    category: str
    count: int
    kernel_time_ms: float
    percent: float


class KernelRow(BaseModel):
    """One kernel name: invocations, total and mean duration (µs), percent of kernel time."""

    name: str
    count: int
    total_us: float
    mean_us: float
    percent: float


class ShortKernels(BaseModel):
    """Kernels shorter than ``threshold_us``; ``percent`` is of the summed kernel time,
    ``percent_of_total_time`` of the GPU timeline's total_time (TraceLens's column)."""

    threshold_us: float
    count: int
    count_per_step: float | None
    time_ms: float
    percent: float
    percent_of_total_time: float


class LaunchStats(BaseModel):
    """Dispatch-bound evidence: mean kernel duration and median idle gap between consecutive
    kernels on the GPU (µs), number of kernel-launch API calls and their mean CPU time (µs)."""

    mean_kernel_us: float
    median_gap_us: float
    launch_calls: int
    mean_launch_cpu_us: float


class TraceAnalysis(BaseModel):
    """Figures from one rank's trace. Times: ms unless the field name says µs (``_us``)."""

    path: str
    backend: str
    rank: int | None
    timeline: dict[str, TimelineRow]
    ops_by_category: list[CategoryRow] = Field(default_factory=list)
    kernels_by_category: list[CategoryRow] = Field(default_factory=list)
    top_kernels: list[KernelRow] = Field(default_factory=list)
    kernel_count: int
    n_steps: int
    kernels_per_step: float | None
    short_kernels: ShortKernels
    launch: LaunchStats
    dataloader_ms_per_step: float
    step_time_ms: float | None
    gpu_ids: list[int] = Field(default_factory=list)
    sources: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list, description="input-hygiene findings (clipped overlaps ...)")
    clipped_excess_us: float = Field(0.0, description="µs cut off events that ran past the next start on their stream")
    window: dict[str, Any] = Field(default_factory=dict, description="hygiene.window_flags of the profiled steps")
    per_step: list[dict[str, Any]] = Field(default_factory=list, description="step, ts, dur_ms, gpu_events, gpu_busy_ms")
    graph_launches: dict[str, int] = Field(default_factory=dict, description="graph-launch API -> calls")
    per_device: list[dict[str, Any]] = Field(default_factory=list,
                                             description="one file holding several GPUs: each device's gpu_timeline "
                                                         "rows (µs) over the common window, busy_pct, idle_pct")
    insufficient_gpu_activity: str | None = Field(None, description="why the trace holds too little GPU work for a "
                                                  "bottleneck class (hygiene.gpu_activity_problem), or None")
    cross_checks: list[dict[str, Any]] = Field(default_factory=list,
                                               description="optional TraceLens / CSV / HTA comparisons, or why not")

    def timeline_json(self, *, with_totals: bool = False) -> dict[str, dict[str, float]]:
        """``{"computation_time": {"time_ms": .., "percent": ..}, ...}`` for the six main rows
        (plus total_comm_time and total_memcpy_time when ``with_totals``)."""
        rows = TIMELINE_ROWS if with_totals else MAIN_TIMELINE_ROWS
        return {k: self.timeline[k].model_dump() for k in rows if k in self.timeline}
