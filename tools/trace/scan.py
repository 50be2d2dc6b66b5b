"""What the engine's one pass keeps of a trace (:class:`TraceScan`) and the codes it keeps them under.

The pass itself is :func:`ai4s_graph.tools.trace.stream.scan_trace`; the input fixes it applies to the
events (duration pairs, stream clipping) are :mod:`.stream_fix`; its figures are :mod:`.stream`,
:mod:`.engine_window` and :mod:`.engine`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np

from .categories import TIMELINE_ROWS
from .codes import (CLS_COMM, CLS_COMP, CLS_MEMCPY, COLLECTIVE_ARG_KEYS, COMM_RE, GPU_CATS,  # noqa: F401
                    KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, NO_STREAM, ROCM_LEGACY_MEMCPY_RE)
from .hygiene import GRAPH_LAUNCH_RE

GPU_TIMELINE_ROWS = TIMELINE_ROWS  # TraceLens gpu_timeline.csv row names, in its order


LaunchWindow = Literal["linked", "all", "profiler_steps", "drop_last_step"]


def grouped(keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by equal ``keys`` (integer columns of one length n): ``(group, first)``, the
    group of each row (int64, n) numbered in the order of the group's first row, and each group's
    first row (int64, one per group, ascending)."""
    cols = [np.asarray(k, dtype=np.int64) for k in keys]
    if not cols[0].size:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    key, span = np.zeros(cols[0].size, dtype=np.int64), 1
    for c in cols:  # one int64 per row (mixed radix) while the columns' ranges fit in 62 bits
        lo, width = int(c.min()), int(c.max()) - int(c.min()) + 1
        span *= width
        if span >= 1 << 62:
            break
        key = key * width + (c - lo)
    if span < 1 << 62:
        _u, first, inv = np.unique(key, return_index=True, return_inverse=True)
    else:
        _u, first, inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(first.size, dtype=np.int64)
    rank[order] = np.arange(first.size)
    return rank[inv.reshape(-1)], first[order]


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D integer array, ascending (what ``np.unique`` returns, same dtype),
    by one sort. numpy 2.3+'s ``np.unique`` goes through a hash table for integers: 20 ms for the
    88 k launch correlations + 81 k flow ids of the replicated 176 MB trace and 47 ms for 170 k
    random int64, against 0.5 and 0.9 ms for the sort (measured 2026-12-02, numpy 2.4.6)."""
    a = np.sort(np.ravel(a))
    if a.size < 2:
        return a
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


@dataclass
class TraceScan:
    """What one streaming pass keeps of a trace. Times are µs as in the trace (float64).

    GPU events, trace order: ``ts``, ``dur`` (clipped on its stream), ``dur_raw`` (as recorded),
    ``name_id`` (into ``names``), ``kind``, ``device``, ``stream`` (a code: ``stream_ids[code]`` is the
    ``args.stream`` value as written, any width or type; :data:`NO_STREAM` for none), ``corr``.
    Launches (CPU events with a correlation id): ``launch_corr``, ``launch_ts``, ``launch_end``,
    ``launch_name`` (into ``cpu_names``), ``launch_thread``, ``launch_order`` (event index).
    cpu_ops: ``op_ts``, ``op_end``, ``op_name`` (into ``cpu_names``), ``op_thread``, ``op_order``.
    ``flow_ids``: ids of ``ac2g`` flow start halves (written on the launching CPU thread). ``steps``: ``(number, ts, dur)``;
    ``gpu_steps``: ``(ts, dur)`` of their ``gpu_user_annotation`` copies (HTA's step window reads them).
    ``dataloader``: ``(ts, dur)`` of CPU events whose name mentions DataLoader.
    ``comm_args``: GPU event index -> collective metadata, for communication kernels.
    ``overlaps``: ``(i, j, excess_us)``: event i ran ``excess_us`` past the start of j, next on its
    stream (i was clipped). ``header``: top-level keys before ``traceEvents``. ``notes``: one line per
    input condition the pass handled (duration pairs joined, categories normalised, events dropped ...)."""

    path: str
    n_events: int
    ts: np.ndarray
    dur: np.ndarray
    name_id: np.ndarray
    kind: np.ndarray
    stream: np.ndarray
    corr: np.ndarray
    names: list[str]
    launch_corr: np.ndarray
    launch_ts: np.ndarray
    dur_raw: np.ndarray | None = None
    device: np.ndarray | None = None
    launch_end: np.ndarray | None = None
    launch_name: np.ndarray | None = None
    launch_thread: np.ndarray | None = None
    launch_order: np.ndarray | None = None
    op_ts: np.ndarray | None = None
    op_end: np.ndarray | None = None
    op_name: np.ndarray | None = None
    op_thread: np.ndarray | None = None
    op_order: np.ndarray | None = None
    flow_ids: np.ndarray | None = None
    cpu_names: list[str] = field(default_factory=list)
    steps: list[tuple[int, float, float]] = field(default_factory=list)
    gpu_steps: list[tuple[float, float]] = field(default_factory=list)
    dataloader: list[tuple[float, float]] = field(default_factory=list)
    comm_args: dict[int, dict[str, Any]] = field(default_factory=dict)
    header: dict[str, Any] = field(default_factory=dict)
    cat_counts: dict[str, int] = field(default_factory=dict)
    overlaps: list[tuple[int, int, float]] = field(default_factory=list)
    bad_durations: int = 0  # GPU events dropped for a negative or non-finite ``dur`` (an export fault)
    stream_ids: list[Any] = field(default_factory=list)
    device_names: dict[int, Any] = field(default_factory=dict)  # device code < -1 -> the pid / device as written
    notes: list[str] = field(default_factory=list)
    zero_inside: int = 0  # zero-length GPU events lying inside another event on their stream (never clip it)

    @property
    def n_gpu_events(self) -> int:
        return int(self.ts.shape[0])

    def nbytes(self) -> int:
        """Bytes held by the numpy arrays of the scan's fields (the part that grows with the trace)."""
        return int(sum(a.nbytes for a in (getattr(self, f.name) for f in fields(self)) if isinstance(a, np.ndarray)))

    def stream_id(self, i: int) -> Any:
        """GPU event ``i``'s ``args.stream`` as written in the trace (None when it has none)."""
        c = int(self.stream[i])
        return self.stream_ids[c] if 0 <= c < len(self.stream_ids) else None

    def device_label(self, code: int) -> str:
        """A device code as the trace names it: ``0``, ``1``, or a string pid such as ``GPU 1``."""
        return str(self.device_names.get(int(code), int(code)))

    def link_ids(self) -> np.ndarray:
        """Sorted unique ids a GPU event can link to: launch correlations and ac2g flow-start ids
        (computed once per scan)."""
        memo = self.__dict__.get("_link_ids")
        if memo is None:
            ids = self.launch_corr if self.flow_ids is None else np.concatenate([self.launch_corr, self.flow_ids])
            memo = self.__dict__["_link_ids"] = sorted_unique(ids)
        return memo

    def graph_launch_mask(self) -> np.ndarray:
        """Per launch: is it a graph launch (runtime or driver API, CUDA or HIP)? Computed once per scan."""
        memo = self.__dict__.get("_graph_mask")
        if memo is None:
            n = 0 if self.launch_name is None else self.launch_name.size
            gids = [i for i, nm in enumerate(self.cpu_names) if GRAPH_LAUNCH_RE.match(nm)] if n else []
            memo = np.isin(self.launch_name, gids) if gids else np.zeros(n, dtype=bool)
            self.__dict__["_graph_mask"] = memo
        return memo

    def graph_launches(self) -> dict[str, int]:
        """``{API name: calls}`` of graph launches (runtime and driver APIs, CUDA and HIP)."""
        if self.launch_name is None or self.launch_name.size == 0:
            return {}
        gids = [i for i, nm in enumerate(self.cpu_names) if GRAPH_LAUNCH_RE.match(nm)]
        if not gids:
            return {}
        cnt = np.bincount(self.launch_name, minlength=len(self.cpu_names))
        return {self.cpu_names[i]: int(cnt[i]) for i in gids if cnt[i]}
