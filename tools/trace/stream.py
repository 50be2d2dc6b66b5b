"""Bounded-memory analysis of PyTorch profiler (kineto) traces of hundreds of MB to GBs.

The trace is read once with ``ijson`` (yajl2 C backend) as a stream of events; the event list is
never materialized. Of each event only what the analyses need is kept, in compact numpy arrays:

* every GPU event (``cat`` in ``kernel``, ``gpu_memcpy``, ``gpu_memset``): start and duration
  (float64 µs), interned name id (int32), kind (int8), stream (int32), correlation id (int64):
  33 bytes per GPU event (66 while the growable buffers are being doubled);
* every CPU-side event carrying a ``correlation`` (the ``cuda_runtime`` / ``cuda_driver`` launches):
  correlation id and start, 16 bytes per launch (HTA's "kernels launched in the profiled steps" window);
* the ``ProfilerStep#N`` annotations and, for communication kernels only, their collective
  metadata (``Collective name``, ``In msg nelems``, ``dtype``, ``Group size``, process group ...);
* one copy of each distinct GPU event name.

**Memory bound.** Peak RSS = interpreter + imports (~30 MiB for this module, ~85 MiB with the
pandas/pydantic of tools.collectives) + at most 66 B x GPU events + 32 B x launches (array
doubling) + the distinct names + ijson's 64 KiB read buffer. It does not grow with the CPU-side
events or with the size of the JSON text. Measured (bench/RESULTS.md): a 1.01 GB kineto trace
(5.2 M events, 0.49 M GPU events, 1.13 M launches; 33 MiB of arrays) is scanned in 16 s at 64 MiB
peak RSS, and the whole per-rank + collective analysis of it peaks at 162 MiB; TraceLens and
HolisticTraceAnalysis load the whole event list (1.7 GiB / 0.7 GiB already for a 100 MB trace).

The gpu_timeline rows follow TraceLens's (over the GPU events linked to a CPU launch, as TraceLens's
default ``include_unlinked_kernels=False``) ``GPUEventAnalyser.compute_metrics`` definitions
(AMD-AGI/TraceLens, TraceLens/TreePerf/gpu_event_analyser.py): computation = union of non-communication
kernels and memsets; communication = union of kernels whose name contains ``nccl``/``rccl``
(or ``cross_device_reduce``); exposed communication = communication not covered by computation;
exposed memcpy = memcpy not covered by computation or communication; busy = union of all GPU
events; total = last end - first start; idle = total - busy. All times are µs.
"""

from __future__ import annotations

import gzip
import os
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

import numpy as np

from ..errors import InputError, NoGpuEventsError
from .kineto import _COMM_RE, TIMELINE_ROWS
from ijson.common import ObjectBuilder

import ijson as _ijson_pkg

try:  # the C backend is 5-10x faster than the pure-Python one; fall back silently.
    import ijson.backends.yajl2_c as ijson  # type: ignore[import-not-found]
except Exception:  # pragma: no cover - depends on the wheel
    import ijson  # type: ignore[no-redef]

_JSON_ERRORS = (_ijson_pkg.JSONError, _ijson_pkg.IncompleteJSONError, OSError, EOFError, ValueError)

#: Bumped whenever a result computed from a scan changes meaning (the trace cache keys on it).
STREAM_VERSION = "1"

#: GPU event categories of kineto traces, as TraceLens and HTA read them.
GPU_CATS: dict[str, int] = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2}
KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET = 0, 1, 2

#: Class codes of the gpu_timeline (TraceLens semantics).
CLS_COMP, CLS_COMM, CLS_MEMCPY = 0, 1, 2

#: Communication kernels: TraceLens ``COMMUNICATION_KEYS`` (``nccl``, ``rccl``, substring, any case)
#: plus its default custom collective ``cross_device_reduce`` (vLLM).
COMM_RE = _COMM_RE  # the same rule as the single-trace path
#: ROCm 7.1 legacy copy / fill kernels that TraceLens re-routes (memcpy / computation).
ROCM_LEGACY_MEMCPY_RE = re.compile(
    r"^(MEMORY_COPY_(HOST_TO_DEVICE|DEVICE_TO_HOST|DEVICE_TO_DEVICE)"
    r"|__amd_rocclr_copyBuffer(Rect)?(Aligned)?)(\.kd)?$"
)

#: Kernel args that carry collective metadata (PyTorch >= 2.1 record_param_comms on the kernel).
COLLECTIVE_ARG_KEYS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "In split size",
    "Out split size",
)

_STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)")

GPU_TIMELINE_ROWS = TIMELINE_ROWS  # TraceLens gpu_timeline.csv row names, in its order

LaunchWindow = Literal["linked", "all", "profiler_steps", "drop_last_step"]


@dataclass
class TraceScan:
    """What one streaming pass keeps of a trace. Times are µs as in the trace (float64).

    ``ts``/``dur``/``name_id``/``kind``/``stream``/``corr``: one entry per GPU event, trace order.
    ``names``: distinct GPU event names (``name_id`` indexes it).
    ``launch_corr``/``launch_ts``: CPU-side events with a correlation id (kernel launches).
    ``steps``: ``(step_number, ts, dur)`` of each ``ProfilerStep#N``.
    ``comm_args``: GPU event index -> collective metadata, for communication kernels.
    ``header``: small top-level keys found before ``traceEvents`` (``distributedInfo`` ...).
    """

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
    steps: list[tuple[int, float, float]] = field(default_factory=list)
    comm_args: dict[int, dict[str, Any]] = field(default_factory=dict)
    header: dict[str, Any] = field(default_factory=dict)
    cat_counts: dict[str, int] = field(default_factory=dict)

    @property
    def n_gpu_events(self) -> int:
        return int(self.ts.shape[0])

    def nbytes(self) -> int:
        """Bytes held by the numpy arrays (the part that grows with the trace)."""
        arrs = (self.ts, self.dur, self.name_id, self.kind, self.stream, self.corr,
                self.launch_corr, self.launch_ts)
        return int(sum(a.nbytes for a in arrs))


def _open(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _check_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"trace not found: {p}")
    if p.stat().st_size == 0:
        raise InputError(f"trace is empty (0 bytes): {p}")
    return p


def read_header(path: str | os.PathLike, keys: tuple[str, ...] = ("distributedInfo", "deviceProperties",
                                                                  "schemaVersion")) -> dict[str, Any]:
    """Top-level ``keys`` that precede ``traceEvents`` (kineto writes ``distributedInfo`` first).

    Reads only the head of the file; returns ``{}`` for keys that come after the events.
    Raises InputError on a file that is not JSON."""
    p = _check_path(path)
    out: dict[str, Any] = {}
    builder: ObjectBuilder | None = None
    key: str | None = None
    try:
        with _open(p) as fh:
            for prefix, event, value in ijson.parse(fh, use_float=True):
                if builder is not None:
                    if prefix == "" and event in ("map_key", "end_map"):
                        out[key] = builder.value  # type: ignore[index]
                        builder = None
                    else:
                        builder.event(event, value)
                        continue
                if prefix == "" and event == "map_key":
                    if value == "traceEvents":
                        break
                    key = value
                    if key in keys:
                        builder = ObjectBuilder()
    except _JSON_ERRORS as err:
        raise InputError(f"trace is not valid JSON: {p}: {str(err).splitlines()[0][:120]}") from err
    return out


def iter_events(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Yield the ``traceEvents`` of a kineto trace one at a time (``.json`` or ``.json.gz``).

    Memory: one event at a time plus ijson's 64 KiB buffer. Raises InputError (one line) on a
    missing, empty, truncated or malformed file."""
    p = _check_path(path)
    try:
        with _open(p) as fh:
            yield from ijson.items(fh, "traceEvents.item", use_float=True)
    except _JSON_ERRORS as err:
        msg = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        raise InputError(f"trace is truncated or not valid JSON: {p}: {msg}") from err


def scan_trace(path: str | os.PathLike) -> TraceScan:
    """One streaming pass over a trace; see the module docstring for what is kept and the bound.

    Raises InputError (missing / empty / truncated / malformed) and NoGpuEventsError (no kernel,
    memcpy or memset event)."""
    p = _check_path(path)
    header = read_header(p)
    ts, dur = array("d"), array("d")
    name_id, stream = array("i"), array("i")
    kind = array("b")
    corr = array("q")
    l_corr, l_ts = array("q"), array("d")
    names: list[str] = []
    name_index: dict[str, int] = {}
    steps: list[tuple[int, float, float]] = []
    comm_args: dict[int, dict[str, Any]] = {}
    comm_name_cache: dict[int, bool] = {}
    cat_counts: dict[str, int] = {}
    n = 0
    for ev in iter_events(p):
        n += 1
        cat = ev.get("cat")
        cat_counts[cat] = cat_counts.get(cat, 0) + 1
        k = GPU_CATS.get(cat)  # type: ignore[arg-type]
        if k is not None:
            t = ev.get("ts")
            d = ev.get("dur")
            if t is None or d is None:
                continue
            nm = ev.get("name") or ""
            i = name_index.get(nm)
            if i is None:
                i = name_index[nm] = len(names)
                names.append(nm)
            args = ev.get("args") or {}
            idx = len(ts)
            ts.append(float(t))
            dur.append(float(d))
            name_id.append(i)
            kind.append(k)
            s = args.get("stream", -1)
            stream.append(int(s) if isinstance(s, (int, float)) else -1)
            c = args.get("correlation", -1)
            corr.append(int(c) if isinstance(c, (int, float)) else -1)
            if k == KIND_KERNEL:
                is_comm = comm_name_cache.get(i)
                if is_comm is None:
                    is_comm = comm_name_cache[i] = bool(COMM_RE.search(nm))
                if is_comm:
                    comm_args[idx] = {key: args[key] for key in COLLECTIVE_ARG_KEYS if key in args}
            continue
        if cat == "ac2g" or ev.get("ph") not in ("X", None):
            continue
        args = ev.get("args")
        if args:
            c = args.get("correlation")
            if isinstance(c, (int, float)) and ev.get("ts") is not None:
                l_corr.append(int(c))
                l_ts.append(float(ev["ts"]))
        nm = ev.get("name")
        if nm and nm.startswith("ProfilerStep"):
            m = _STEP_RE.match(nm)
            if m and ev.get("ts") is not None:
                steps.append((int(m.group(1)), float(ev["ts"]), float(ev.get("dur") or 0.0)))
    if n == 0:
        raise InputError(f"trace has no traceEvents: {p}")
    if len(ts) == 0:
        raise NoGpuEventsError(f"trace has no GPU kernel, memcpy or memset events: {p}")
    steps.sort(key=lambda s: s[1])
    return TraceScan(
        path=str(p), n_events=n,
        ts=np.frombuffer(ts, dtype=np.float64), dur=np.frombuffer(dur, dtype=np.float64),
        name_id=np.frombuffer(name_id, dtype=np.int32), kind=np.frombuffer(kind, dtype=np.int8),
        stream=np.frombuffer(stream, dtype=np.int32), corr=np.frombuffer(corr, dtype=np.int64),
        names=names, launch_corr=np.frombuffer(l_corr, dtype=np.int64),
        launch_ts=np.frombuffer(l_ts, dtype=np.float64), steps=steps, comm_args=comm_args,
        header=header, cat_counts=cat_counts,
    )


# --------------------------------------------------------------------------- classification


def tracelens_classes(scan: TraceScan) -> np.ndarray:
    """Per GPU event class code (CLS_COMP / CLS_COMM / CLS_MEMCPY) as TraceLens's gpu_timeline
    assigns it: gpu_memcpy and ROCm legacy copy kernels -> memcpy; kernels/memsets whose name
    contains nccl/rccl -> communication; everything else (memsets included) -> computation."""
    per_name = np.zeros(len(scan.names), dtype=np.int8)
    legacy = np.zeros(len(scan.names), dtype=bool)
    for i, nm in enumerate(scan.names):
        if COMM_RE.search(nm):
            per_name[i] = CLS_COMM
        if ROCM_LEGACY_MEMCPY_RE.match(nm):
            legacy[i] = True
    cls = per_name[scan.name_id]
    cls = np.where(scan.kind == KIND_MEMCPY, CLS_MEMCPY, cls)
    cls = np.where((scan.kind == KIND_KERNEL) & legacy[scan.name_id], CLS_MEMCPY, cls)
    return cls.astype(np.int8)


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


# --------------------------------------------------------------------------- interval algebra


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of intervals ``[start_i, end_i)`` (same unit as the inputs).

    Touching intervals merge (TraceLens merges when ``start <= last_end``); O(n log n)."""
    bs, be = merged_intervals(start, end)
    return float(np.sum(be - bs)) if bs.size else 0.0


def merged_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``[start_i, end_i)`` as sorted disjoint blocks ``(starts, ends)``."""
    if start.size == 0:
        return start[:0], end[:0]
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = np.maximum.accumulate(end[order])
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    return s[new], np.maximum.reduceat(e, first)


def window_mask(scan: TraceScan, window: LaunchWindow = "linked") -> np.ndarray:
    """Which GPU events to analyse (bool mask over the scan's GPU events).

    ``linked`` (default): events whose correlation id matches a CPU-side launch in the trace, which
    is what TraceLens's gpu_timeline keeps (``include_unlinked_kernels=False``); a trace with no
    launch correlation at all (GPU-only) keeps every event. ``all``: every GPU event.
    ``profiler_steps``: events launched by a CPU-side event starting at or before the end of the
    last ProfilerStep (HTA with ``include_last_profiler_step=True``). ``drop_last_step``: launched
    before the start of the last ProfilerStep (HTA's default, which drops the possibly incomplete
    last step). Without ProfilerStep annotations the two HTA windows fall back to ``linked``.
    Raises InputError on an unknown window name."""
    if window not in ("linked", "all", "profiler_steps", "drop_last_step"):
        raise InputError(f"unknown launch window {window!r}: use linked, all, profiler_steps or drop_last_step")
    if window == "all" or scan.launch_corr.size == 0:
        return np.ones(scan.n_gpu_events, dtype=bool)
    if window == "linked" or not scan.steps:
        return np.isin(scan.corr, scan.launch_corr)
    if window == "profiler_steps":
        ok = scan.launch_ts <= max(s[1] + s[2] for s in scan.steps)
    else:
        ok = scan.launch_ts < max(s[1] for s in scan.steps)
    return np.isin(scan.corr, scan.launch_corr[ok])


def gpu_timeline(scan: TraceScan, mask: np.ndarray | None = None) -> dict[str, float]:
    """The eight gpu_timeline rows of TraceLens, in µs (see module docstring for definitions).

    ``mask`` selects GPU events (default: all). Raises NoGpuEventsError if it selects none."""
    sel = np.ones(scan.n_gpu_events, dtype=bool) if mask is None else mask
    if not sel.any():
        raise NoGpuEventsError(f"no GPU events in the selected window: {scan.path}")
    t0 = scan.ts[sel].min()  # relative times keep float64 precision on epoch-µs timestamps
    s = scan.ts[sel] - t0
    e = s + scan.dur[sel]
    cls = tracelens_classes(scan)[sel]
    comp, comm, mem = cls == CLS_COMP, cls == CLS_COMM, cls == CLS_MEMCPY
    comp_t = union_length(s[comp], e[comp])
    comm_t = union_length(s[comm], e[comm])
    mem_t = union_length(s[mem], e[mem])
    cc = comp | comm
    comp_comm_t = union_length(s[cc], e[cc])
    busy = union_length(s, e)
    total = float(e.max() - s.min())
    exposed_comm = comp_comm_t - comp_t
    exposed_mem = busy - comp_comm_t
    return {
        "computation_time": comp_t,
        "exposed_comm_time": exposed_comm,
        "exposed_memcpy_time": exposed_mem,
        "busy_time": busy,
        "idle_time": total - busy,
        "total_time": total,
        "total_comm_time": comm_t,
        "total_memcpy_time": mem_t,
    }


def timeline_rows(timeline_us: dict[str, float]) -> list[dict[str, float | str]]:
    """gpu_timeline rows in TraceLens's CSV shape: ``type``, ``time ms``, ``percent`` (of total)."""
    total = timeline_us["total_time"] or 1.0
    return [{"type": k, "time ms": timeline_us[k] / 1e3, "percent": 100.0 * timeline_us[k] / total}
            for k in GPU_TIMELINE_ROWS]


def kernel_counts(scan: TraceScan, mask: np.ndarray | None = None, top: int | None = None) -> list[dict[str, Any]]:
    """Per GPU event name: ``count`` and ``total_us`` (sum of durations), largest total first."""
    sel = np.ones(scan.n_gpu_events, dtype=bool) if mask is None else mask
    ids = scan.name_id[sel]
    cnt = np.bincount(ids, minlength=len(scan.names))
    tot = np.bincount(ids, weights=scan.dur[sel], minlength=len(scan.names))
    order = np.argsort(-tot, kind="stable")
    rows = [{"name": scan.names[i], "count": int(cnt[i]), "total_us": float(tot[i])}
            for i in order if cnt[i] > 0]
    return rows[:top] if top else rows


def hta_temporal_breakdown(scan: TraceScan, mask: np.ndarray | None = None) -> dict[str, float]:
    """HTA's ``get_temporal_breakdown`` for one rank, in µs: ``idle_time``, ``compute_time``,
    ``non_compute_time``, ``kernel_time`` (first start to last end of GPU kernels on a stream)."""
    sel = (scan.stream >= 0) if mask is None else (mask & (scan.stream >= 0))
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
    sel = (scan.stream >= 0) if mask is None else (mask & (scan.stream >= 0))
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


def analyze_trace_streaming(path: str | os.PathLike, *, window: LaunchWindow = "linked",
                            top_kernels: int = 20) -> dict[str, Any]:
    """Bounded-memory single-trace summary (JSON-able).

    Returns ``{"path", "backend": "stream", "n_events", "n_gpu_events", "timeline_us" (the eight
    gpu_timeline rows, µs), "gpu_timeline" (TraceLens CSV rows), "kernel_counts" (top kernels),
    "n_kernel_names", "profiler_steps", "distributed_info", "scan_bytes"}``.
    Raises InputError / NoGpuEventsError as :func:`scan_trace`."""
    scan = scan_trace(path)
    mask = window_mask(scan, window)
    tl = gpu_timeline(scan, mask)
    return {
        "path": scan.path,
        "backend": "stream",
        "window": window,
        "n_events": scan.n_events,
        "n_gpu_events": scan.n_gpu_events,
        "timeline_us": tl,
        "gpu_timeline": timeline_rows(tl),
        "kernel_counts": kernel_counts(scan, mask, top=top_kernels),
        "n_kernel_names": len(scan.names),
        "profiler_steps": [s[0] for s in scan.steps],
        "distributed_info": scan.header.get("distributedInfo"),
        "scan_bytes": scan.nbytes(),
    }
