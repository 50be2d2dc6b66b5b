"""HolisticTraceAnalysis's per-rank metrics re-derived on a streaming scan: kernel types by name
(hta/common/types.py), ``get_temporal_breakdown`` and ``get_comm_comp_overlap``."""

from __future__ import annotations

import re

import numpy as np

from .stream import NO_STREAM, TraceScan, union_length


# HolisticTraceAnalysis kernel types (hta/common/types.py patterns, re.match = anchored at start).
HTA_COMM_RE = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
HTA_MEMORY_RE = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
HTA_NON_COMPUTE_RE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)"
    r"|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)"
    r"|(^collective_subgraph_execution)"
)
HTA_COMM, HTA_MEMORY, HTA_COMPUTE, HTA_OTHER = 0, 1, 2, 3


def hta_classes(scan: TraceScan) -> np.ndarray:
    """Per GPU event HTA kernel type (HTA_COMM / HTA_MEMORY / HTA_COMPUTE / HTA_OTHER) by name,
    as HolisticTraceAnalysis's ``get_kernel_type`` assigns it (name patterns of hta/common/types.py)."""
    per_name = np.empty(len(scan.names), dtype=np.int8)
    for i, nm in enumerate(scan.names):
        if HTA_COMM_RE.match(nm):
            per_name[i] = HTA_COMM
        elif HTA_MEMORY_RE.match(nm):
            per_name[i] = HTA_MEMORY
        elif not HTA_NON_COMPUTE_RE.match(nm):
            per_name[i] = HTA_COMPUTE
        else:
            per_name[i] = HTA_OTHER
    return per_name[scan.name_id]



def hta_temporal_breakdown(scan: TraceScan, mask: np.ndarray | None = None) -> dict[str, float]:
    """HTA's ``get_temporal_breakdown`` for one rank, in µs: ``idle_time``, ``compute_time``,
    ``non_compute_time``, ``kernel_time`` (first start to last end of GPU kernels on a stream); all
    zero when no selected event names its stream (HTA keeps only events with a stream)."""
    sel = (scan.stream != NO_STREAM) if mask is None else (mask & (scan.stream != NO_STREAM))
    if not sel.any():
        return {"idle_time": 0.0, "compute_time": 0.0, "non_compute_time": 0.0, "kernel_time": 0.0}
    t0 = scan.ts[sel].min()
    s = scan.ts[sel] - t0
    e = s + scan.dur[sel]
    busy = union_length(s, e)
    kernel_time = float(e.max() - s.min())
    comp = hta_classes(scan)[sel] == HTA_COMPUTE
    compute = union_length(s[comp], e[comp])
    idle = kernel_time - busy
    return {"idle_time": idle, "compute_time": compute, "non_compute_time": kernel_time - compute - idle,
            "kernel_time": kernel_time}


def hta_comm_comp_overlap(scan: TraceScan, mask: np.ndarray | None = None) -> float | None:
    """HTA's ``get_comm_comp_overlap`` for one rank: percent of (merged) communication-kernel time
    that overlaps (merged) computation-kernel time; None without communication kernels."""
    sel = (scan.stream != NO_STREAM) if mask is None else (mask & (scan.stream != NO_STREAM))
    if not sel.any():
        return None
    cls = hta_classes(scan)[sel]
    s = scan.ts[sel] - scan.ts[sel].min()
    e = s + scan.dur[sel]
    comm, comp = cls == HTA_COMM, cls == HTA_COMPUTE
    comm_t = union_length(s[comm], e[comm])
    if comm_t <= 0:
        return None
    comp_t = union_length(s[comp], e[comp])
    both = comm | comp
    overlap = comm_t + comp_t - union_length(s[both], e[both])
    return 100.0 * overlap / comm_t
