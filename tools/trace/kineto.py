"""An independent reader of PyTorch profiler (kineto) traces and TraceLens's GPU-timeline arithmetic.

This is the verifier's second path: it re-derives the figures :mod:`ai4s_graph.tools.trace.backends`
reports without HolisticTraceAnalysis, TraceLens or pandas. It reads the Chrome-trace JSON
(``*.json`` or ``*.json.gz``) with ``orjson``, keeps only the few fields each figure needs
(intervals as tuples, names interned; never whole event dicts), and does interval-union
arithmetic in plain Python.

Definitions follow TraceLens (AMD-AGI/TraceLens, ``TraceLens/TreePerf/gpu_event_analyser.py``
``GPUEventAnalyser.get_gpu_event_lists`` / ``compute_metrics_dict`` and
``TraceLens/Trace2Tree/trace_to_tree.py`` for CPU-GPU linking), read there and re-written here:

- GPU events are ``cat`` in {kernel, gpu_memcpy, gpu_memset}. By default only events *linked*
  to a CPU launch are counted (TraceLens's ``include_unlinked_kernels=False``). Here a GPU event
  links to every runtime/driver call carrying its correlation id (kernel launches, memcpys and
  graph launches of the runtime and driver APIs, CUDA and HIP: all kernels a graph launch replays
  share its id), and to an ``ac2g`` flow start half with its id; a finishing half alone is no
  launch (real traces hold them for kernels launched before the window). A trace where nothing
  links counts every GPU event. (TraceLens itself needs both flow halves and drops a kernel whose
  launch wrote only the finishing half.)
- Events on one (device, stream) run in issue order (CUDA C++ Programming Guide, "Streams"): an
  event whose end runs past the next event's start on its stream is clipped at that start.
- communication = kernels/memsets whose name matches ``nccl``, ``rccl`` or
  ``cross_device_reduce`` (case-insensitive); memcpy = ``gpu_memcpy`` plus ROCm 7.1 rocclr copy
  kernels; computation = every other kernel and ``gpu_memset`` (TraceLens files memsets
  under computation, not memcpy).
- computation_time = |union(computation)|; exposed_comm_time = |union(comm) − union(comp)|;
  exposed_memcpy_time = |union(memcpy) − union(comp) − union(comm)|; busy_time = |union(all)|;
  total_time = last GPU end − first GPU start; idle_time = total − busy;
  total_comm_time = |union(comm)|; total_memcpy_time = |union(memcpy)|.
  Percentages are of total_time.

Times in the trace are microseconds (floats with ns fractions); results are in ms and %.
"""

from __future__ import annotations

import gzip
import re
import statistics
import sys
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import BaseModel

from ..errors import InputError, NoGpuEventsError
from .categories import (_COMM_RE, MAIN_TIMELINE_ROWS, OP_CATEGORIES, TIMELINE_ROWS,  # noqa: F401 (re-exported)
                         categorize_op)
from .hygiene import GRAPH_LAUNCH_RE, GraphKernelsNotRecordedError, graph_not_recorded_message, window_flags

# --------------------------------------------------------------------------------------
# Models and constants
# --------------------------------------------------------------------------------------


class TimelineRow(BaseModel):
    """One row of TraceLens's ``gpu_timeline`` sheet: time in milliseconds and percent of
    ``total_time``."""

    time_ms: float
    percent: float



GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})
LAUNCH_KERNEL_NAMES = frozenset(
    {"cudaLaunchKernel", "hipLaunchKernel", "cudaLaunchKernelExC", "hipExtLaunchKernel",
     "hipModuleLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "hipExtModuleLaunchKernel"}
)

# ROCm 7.1 rocclr copy kernels count as memcpy (TraceLens util._ROCM_LEGACY_MEMCPY_NAMES).
_ROCM_LEGACY_MEMCPY_RE = re.compile(
    r"^(MEMORY_COPY_(HOST_TO_DEVICE|DEVICE_TO_HOST|DEVICE_TO_DEVICE)"
    r"|__amd_rocclr_copyBuffer(Rect)?(Aligned)?)(\.kd)?$"
)
_DATALOADER_RE = re.compile(r"DataLoader", re.IGNORECASE)
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

COMPUTE, COMM, MEMCPY = 0, 1, 2
_COMM_ARG_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name")
_CPU_SIDE_CATS = frozenset({"cpu_op", "user_annotation", "python_function", "gpu_user_annotation"})


def classify_gpu_event(cat: str, name: str) -> int:
    """TraceLens's bucket for one GPU event: ``COMPUTE`` (0), ``COMM`` (1) or ``MEMCPY`` (2)."""
    if cat == "gpu_memcpy":
        return MEMCPY
    if cat == "kernel" and _ROCM_LEGACY_MEMCPY_RE.match(name or ""):
        return MEMCPY
    if name and _COMM_RE.search(name):
        return COMM
    return COMPUTE


def is_communication_kernel(name: str) -> bool:
    """True for NCCL/RCCL collectives and custom all-reduce kernels (TraceLens's rule)."""
    return bool(name and _COMM_RE.search(name))


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class GpuEvent:
    """One GPU activity, reduced to what the figures need (times in µs)."""

    ts: float
    end: float
    dur: float
    cat: str
    name: str
    kind: int  # COMPUTE / COMM / MEMCPY
    corr: int | None
    pid: object
    tid: object
    stream: object
    device: object
    external_id: int | None
    linked: bool = False
    launcher: int = -1  # index into KinetoTrace.cpu_ops of the nearest cpu_op, or -1
    launch_ts: float | None = None  # start of the CPU call that launched it
    comm_args: dict | None = None  # collective metadata of a communication kernel (record_param_comms args)
    dur_raw: float = 0.0  # duration as recorded (dur is clipped at the next start on its stream)


@dataclass(slots=True)
class KinetoTrace:
    """The parts of one kineto trace the analyses use. Times are µs on the trace's clock.

    ``cpu_ops``: (ts, end, name, thread); ``runtime``: (ts, end, name, link id, thread), thread = a
    small code per (pid, tid);
    ``steps``: (ts, dur, step number) of ``ProfilerStep#N`` annotations;
    ``dataloader``: (ts, dur, name) of CPU events whose name mentions DataLoader."""

    path: Path
    rank: int | None
    gpu: list[GpuEvent]
    cpu_ops: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    steps: list[tuple] = field(default_factory=list)
    dataloader: list[tuple] = field(default_factory=list)
    has_flows: bool = False
    linked_only: bool = True
    overlaps: list[tuple] = field(default_factory=list)  # (name, next name, stream, excess µs)
    graph_launches: dict = field(default_factory=dict)  # {API name: calls}


def read_trace_json(path: str | Path) -> dict:
    """Read and parse a kineto trace file (``.json`` or ``.json.gz``) into a dict.

    Raises :class:`InputError` (one line: file name + what is wrong) for a missing, empty,
    truncated/corrupt gzip, non-JSON file, or JSON without a ``traceEvents`` list."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p.name}: trace file not found ({p})")
    if p.stat().st_size == 0:
        raise InputError(f"{p.name}: trace file is empty")
    try:
        with open(p, "rb") as fh:
            magic = fh.read(2)
        if magic == b"\x1f\x8b":
            with gzip.open(p, "rb") as fh:
                raw = fh.read()
        else:
            raw = p.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
        raise InputError(f"{p.name}: truncated or corrupt gzip ({type(e).__name__}: {e})") from e
    if not raw.strip():
        raise InputError(f"{p.name}: trace file is empty")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InputError(f"{p.name}: not valid JSON ({e})") from e
    del raw
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(f"{p.name}: JSON has no traceEvents list (not a PyTorch profiler trace)")
    return data


def _rank_of(data: dict) -> int | None:
    info = data.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    return None


def _stream_events(p: Path):
    """``(rank, event iterator)``: ``distributedInfo.rank`` from the file's head and the
    ``traceEvents`` one at a time (ijson), so memory holds only the kept intervals, never the event
    list. The iterator raises :class:`InputError` (one line) on a truncated or malformed file."""
    from .stream import read_header  # header keys only (before traceEvents)

    if not p.is_file():
        raise InputError(f"{p.name}: trace file not found ({p})")
    if p.stat().st_size == 0:
        raise InputError(f"{p.name}: trace file is empty")
    head = read_header(p, ("distributedInfo",))
    rank = _rank_of(head)

    def gen():
        import ijson

        n = 0
        try:
            with open(p, "rb") as raw:
                magic = raw.read(2)
                raw.seek(0)
                fh = gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw
                for ev in ijson.items(fh, "traceEvents.item", use_float=True):
                    n += 1
                    yield ev
        except (ijson.JSONError, EOFError, gzip.BadGzipFile, zlib.error, OSError, ValueError) as e:
            msg = " ".join(str(e).split())[:120] or type(e).__name__
            raise InputError(f"{p.name}: truncated or not valid JSON ({msg})") from e
        if n == 0:
            raise InputError(f"{p.name}: JSON has no traceEvents list (not a PyTorch profiler trace)")

    return rank, gen()


def load_events(path: str | Path, *, include_unlinked: bool = False) -> KinetoTrace:
    """Load the GPU, runtime, cpu_op, ProfilerStep and DataLoader intervals of one trace.

    The events are streamed (never held as a list); GPU events are marked ``linked`` by the
    linking rule of the module docstring; each kernel's ``launcher`` is the innermost ``cpu_op`` enclosing its launch
    call on the same thread (TraceLens's host call-stack rule, incl. the <1 µs "bleed" rule).

    Raises :class:`InputError` for unreadable input and :class:`NoGpuEventsError` when the
    trace holds no kernel/memcpy/memset event (a CPU-only run)."""
    p = Path(path)
    rank, events = _stream_events(p)

    intern = sys.intern
    gpu: list[GpuEvent] = []
    cpu_ops: list[tuple] = []
    runtime: list[tuple] = []
    steps: list[tuple] = []
    dataloader: list[tuple] = []
    flow_ids: set = set()
    launch_key = None  # "correlation" or "External id" (TraceLens _set_linking_key)
    stack_items: list[tuple] = []  # (ts, order, end, kind 0=cpu_op 1=runtime, index, thread)
    threads: dict[tuple, int] = {}  # (pid, tid) -> small thread code (shared small ints, no per-event copies)

    for order, ev in enumerate(events):
        if not isinstance(ev, dict):
            continue
        cat = ev.get("cat")
        ph = ev.get("ph")
        if cat == "ac2g":
            if ph == "s":  # the start half sits on the launching CPU thread
                flow_ids.add(ev.get("id"))
            continue
        if ph != "X":
            continue
        try:
            ts = float(ev["ts"])
            dur = float(ev.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        name = ev.get("name") or ""
        args = ev.get("args") or {}
        if cat in GPU_CATS:
            g = GpuEvent(
                ts=ts, end=ts + dur, dur=dur, cat=intern(cat), name=intern(name),
                kind=classify_gpu_event(cat, name), corr=args.get("correlation"),
                pid=ev.get("pid"), tid=ev.get("tid"), stream=args.get("stream"),
                device=args.get("device"), external_id=args.get("External id"),
            )
            if g.kind == COMM:
                g.comm_args = {k: args[k] for k in _COMM_ARG_KEYS if k in args}
            gpu.append(g)
        elif cat in RUNTIME_CATS or (cat not in _CPU_SIDE_CATS and "correlation" in args):
            if launch_key is None and "launch" in name.lower():
                launch_key = "correlation" if "correlation" in args else "External id"
            end = ts + dur
            thr = threads.setdefault((ev.get("pid"), ev.get("tid")), len(threads))
            runtime.append((ts, end, intern(name), (args.get("correlation"), args.get("External id")), thr))
            stack_items.append((ts, order, end, 1, len(runtime) - 1, thr))
        elif cat == "cpu_op":
            end = ts + dur
            thr = threads.setdefault((ev.get("pid"), ev.get("tid")), len(threads))
            cpu_ops.append((ts, end, intern(name), thr))
            stack_items.append((ts, order, end, 0, len(cpu_ops) - 1, thr))
            m = _STEP_RE.match(name)
            if m:
                steps.append((ts, dur, int(m.group(1))))
            elif _DATALOADER_RE.search(name):
                dataloader.append((ts, dur, name))
        elif cat in ("user_annotation", "python_function") or cat is None:
            m = _STEP_RE.match(name)
            if m and cat != "python_function":
                steps.append((ts, dur, int(m.group(1))))
            elif cat == "user_annotation" and _DATALOADER_RE.search(name):
                dataloader.append((ts, dur, name))
    del events

    if not gpu:
        graphs: dict[str, int] = defaultdict(int)
        for r in runtime:
            if GRAPH_LAUNCH_RE.match(r[2]):
                graphs[r[2]] += 1
        if graphs:
            raise GraphKernelsNotRecordedError(graph_not_recorded_message(p.name, dict(graphs)))
        raise NoGpuEventsError(f"{p.name}: no GPU kernel, memcpy or memset events (CPU-only run?)")

    overlaps = _clip_streams(gpu)

    # Keep only the link id per runtime event, not its args.
    key = launch_key or "correlation"
    k = 0 if key == "correlation" else 1
    runtime = [(ts, end, name, a[k], thr) for ts, end, name, a, thr in runtime]

    # --- CPU -> GPU linking: every GPU event carrying a launch's link id ------------------
    by_link: dict = defaultdict(list)
    for i, g in enumerate(gpu):
        link = g.corr if key == "correlation" else g.external_id
        if link is not None:
            by_link[link].append(i)
    gpu_parent: dict[int, int] = {}  # gpu index -> runtime index
    graph_calls: dict[str, int] = defaultdict(int)
    for ri, (rts, _end, rname, link, _thr) in enumerate(runtime):
        if GRAPH_LAUNCH_RE.match(rname):
            graph_calls[rname] += 1
        if link is None:
            continue
        for gi in by_link.get(link, ()):
            gpu[gi].linked = True
            gpu[gi].launch_ts = rts
            gpu_parent[gi] = ri
    for g in gpu:  # a flow start half with the kernel's correlation id, no runtime call in the trace
        if not g.linked and g.corr is not None and g.corr in flow_ids:
            g.linked = True
    has_flows = bool(flow_ids)
    # A trace where nothing links (no runtime events) counts every GPU event.
    linked_only = any(g.linked for g in gpu)

    # --- host call stacks: innermost cpu_op around each runtime event -----------------
    runtime_cpu_op = _runtime_parents(stack_items, cpu_ops)
    for gi, ri in gpu_parent.items():
        gpu[gi].launcher = runtime_cpu_op.get(ri, -1)

    return KinetoTrace(
        path=p, rank=rank, gpu=gpu, cpu_ops=cpu_ops, runtime=runtime, steps=sorted(steps),
        dataloader=dataloader, has_flows=has_flows,
        linked_only=linked_only and not include_unlinked, overlaps=overlaps, graph_launches=dict(graph_calls),
    )


def _clip_streams(gpu: list[GpuEvent]) -> list[tuple]:
    """Clip, in place, each GPU event whose end runs past the start of the next event on its
    (device, stream); returns ``(name, next name, stream, excess µs)`` per clipped event."""
    per_stream: dict = defaultdict(list)
    for g in gpu:
        g.dur_raw = g.dur
        if g.stream is not None:
            per_stream[(g.device if g.device is not None else g.pid, g.stream)].append(g)
    out = []
    for (_dev, stream), evs in per_stream.items():
        evs.sort(key=lambda x: x.ts)
        for a, b in zip(evs, evs[1:]):
            if a.end > b.ts:
                out.append((a.name, b.name, stream, a.end - b.ts))
                a.end = b.ts
                a.dur = b.ts - a.ts
    return out


def _runtime_parents(stack_items: list[tuple], cpu_ops: list[tuple]) -> dict[int, int]:
    """Map runtime-event index -> index of the innermost enclosing cpu_op (skipping
    pass-through ``execute`` ops), following TraceLens's per-thread stack build
    (``BaseTraceToTree.build_host_call_stack_tree``)."""
    stack_items.sort(key=lambda x: (x[0], x[1]))
    stacks: dict = defaultdict(list)
    parent: dict[tuple[int, int], tuple[int, int] | None] = {}
    result: dict[int, int] = {}
    for ts, _order, end, kind, idx, thr in stack_items:
        stack = stacks[thr]
        while stack and ts >= stack[-1][0]:
            stack.pop()
        if stack and end > stack[-1][0]:
            if stack[-1][0] - ts < 1.0 and len(stack) >= 2:
                stack.pop()
            else:
                continue  # a large bleed: TraceLens leaves the event out of the tree
        par = stack[-1][1] if stack else None
        node = (kind, idx)
        parent[node] = par
        stack.append((end, node))
        if kind == 1:
            cur = par
            while cur is not None:
                if cur[0] == 0:
                    if cpu_ops[cur[1]][2] == "execute":
                        cur = parent.get(cur)
                        continue
                    result[idx] = cur[1]
                    break
                cur = parent.get(cur)
    return result


# --------------------------------------------------------------------------------------
# Interval arithmetic
# --------------------------------------------------------------------------------------


def merge_intervals(intervals) -> list[tuple[float, float]]:
    """Union of (start, end) intervals as sorted, non-overlapping intervals (touching ones
    merge)."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def subtract_intervals(b: list[tuple[float, float]], a: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``b − a`` for sorted, non-overlapping interval lists (the parts of b not covered by a)."""
    result = []
    j = 0
    n = len(a)
    for bs, be in b:
        cur = bs
        while j < n and a[j][1] <= bs:
            j += 1
        k = j
        while k < n and a[k][0] < be:
            s, e = a[k]
            if s > cur:
                result.append((cur, min(be, s)))
            cur = max(cur, e)
            if cur >= be:
                break
            k += 1
        if cur < be:
            result.append((cur, be))
    return result


def total_length(intervals) -> float:
    """Sum of interval lengths (µs in, µs out)."""
    return sum(e - s for s, e in intervals)


def timeline_from_intervals(comp, comm, memcpy) -> dict[str, TimelineRow]:
    """TraceLens's gpu_timeline rows from three lists of (start, end) µs intervals.

    Raises :class:`NoGpuEventsError` when all three are empty."""
    comp_u, comm_u, mem_u = merge_intervals(comp), merge_intervals(comm), merge_intervals(memcpy)
    all_u = merge_intervals(list(comp) + list(comm) + list(memcpy))
    if not all_u:
        raise NoGpuEventsError("no GPU events to build a timeline from")
    total = all_u[-1][1] - all_u[0][0]
    comp_t = total_length(comp_u)
    exposed_comm = total_length(subtract_intervals(comm_u, comp_u))
    exposed_mem = total_length(subtract_intervals(subtract_intervals(mem_u, comp_u), comm_u))
    busy = total_length(all_u)
    values = {
        "computation_time": comp_t,
        "exposed_comm_time": exposed_comm,
        "exposed_memcpy_time": exposed_mem,
        "busy_time": busy,
        "idle_time": total - busy,
        "total_time": total,
        "total_comm_time": total_length(comm_u),
        "total_memcpy_time": total_length(mem_u),
    }
    return {
        k: TimelineRow(time_ms=v / 1e3, percent=(v / total * 100.0) if total > 0 else 0.0)
        for k, v in values.items()
    }


def timeline_of(trace: KinetoTrace) -> dict[str, TimelineRow]:
    """gpu_timeline rows of a loaded trace (linked GPU events only, unless the trace has no
    link or was loaded with ``include_unlinked=True``)."""
    buckets: tuple[list, list, list] = ([], [], [])
    for g in trace.gpu:
        if trace.linked_only and not g.linked:
            continue
        buckets[g.kind].append((g.ts, g.end))
    if not any(buckets):
        raise NoGpuEventsError(f"{trace.path.name}: no GPU events linked to a CPU launch")
    return timeline_from_intervals(*buckets)


def rederive_timeline(path: str | Path, *, include_unlinked: bool = False) -> dict[str, TimelineRow]:
    """Re-derive TraceLens's gpu_timeline from the raw trace JSON.

    Returns ``{row_name: TimelineRow(time_ms, percent)}`` for the eight rows of
    :data:`TIMELINE_ROWS`. Raises :class:`InputError` / :class:`NoGpuEventsError`."""
    return timeline_of(load_events(path, include_unlinked=include_unlinked))


# --------------------------------------------------------------------------------------
# Kernel counts, op categories, steps, launch statistics
# --------------------------------------------------------------------------------------

def ops_by_category(trace: KinetoTrace) -> list[dict]:
    """TraceLens's ops_summary_by_category from the raw trace: kernel launchers (innermost
    cpu_op of a linked kernel's launch, or the runtime call when none) grouped by category.

    Returns rows ``{category, count, kernel_time_ms, percent}`` sorted by time, where count is
    the number of launchers and kernel time is the busy time (union) of each launcher's
    direct kernels, summed. Communication kernels are left out, as in TraceLens."""
    launchers: dict[tuple, list[GpuEvent]] = defaultdict(list)
    for g in trace.gpu:
        if not g.linked or g.kind == COMM:
            continue
        key = ("op", g.launcher) if g.launcher >= 0 else ("rt", id(g))
        launchers[key].append(g)
    agg: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for (kind, idx), ks in launchers.items():
        ks.sort(key=lambda k: k.ts)
        name = trace.cpu_ops[idx][2] if kind == "op" else ""
        cat = categorize_op(name, ks[0].name) if kind == "op" else "other"
        agg[cat][0] += 1
        agg[cat][1] += total_length(merge_intervals((k.ts, k.end) for k in ks))
    total = sum(v[1] for v in agg.values())
    rows = [
        {"category": c, "count": int(v[0]), "kernel_time_ms": v[1] / 1e3,
         "percent": (v[1] / total * 100.0) if total else 0.0}
        for c, v in agg.items()
    ]
    rows.sort(key=lambda r: -r["kernel_time_ms"])
    return rows


def kernel_stats(trace: KinetoTrace, *, short_kernel_us: float = 10.0, top: int = 20) -> dict:
    """Kernel figures over every ``cat == kernel`` event (linked or not, as TraceLens's
    kernel_summary): ``kernel_count``, ``kernel_time_us``, ``top_kernels`` (name, count,
    total_us, mean_us, percent of kernel time), ``short_kernels`` (dur < ``short_kernel_us``:
    count, time_us, percent of kernel time, percent of total GPU time; count/time of those
    launched under a cpu_op, the figures TraceLens's short_kernels_summary sums to) and the per-launcher
    ``kernels_by_category``. ``short_kernel_us`` default 10 µs is TraceLens's
    ``short_kernel_threshold_us``."""
    kernels = [g for g in trace.gpu if g.cat == "kernel"]
    durs = [g.dur for g in kernels]
    ktime = sum(durs)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    by_cat: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for g, d in zip(kernels, durs):
        by_name[g.name][0] += 1
        by_name[g.name][1] += d
        cat = categorize_op(trace.cpu_ops[g.launcher][2], g.name) if g.launcher >= 0 else "unlinked"
        by_cat[cat][0] += 1
        by_cat[cat][1] += d
    tops = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]
    short = [d for d in durs if d < short_kernel_us]
    short_op = [g.dur for g in kernels if g.dur < short_kernel_us and g.launcher >= 0]
    total_us = timeline_of(trace)["total_time"].time_ms * 1e3
    return {
        "kernel_count": len(kernels),
        "kernel_time_us": ktime,
        "top_kernels": [
            {"name": n, "count": int(c), "total_us": t, "mean_us": t / c,
             "percent": (t / ktime * 100.0) if ktime else 0.0}
            for n, (c, t) in tops
        ],
        "kernels_by_category": sorted(
            ({"category": c, "count": int(v[0]), "kernel_time_ms": v[1] / 1e3,
              "percent": (v[1] / ktime * 100.0) if ktime else 0.0} for c, v in by_cat.items()),
            key=lambda r: -r["kernel_time_ms"]),
        "short_kernels": {
            "threshold_us": short_kernel_us,
            "count": len(short),
            "time_us": sum(short),
            "percent_of_kernel_time": (sum(short) / ktime * 100.0) if ktime else 0.0,
            "percent_of_total_time": (sum(short) / total_us * 100.0) if total_us else 0.0,
            # TraceLens's short_kernels_summary groups by parent cpu_op and drops kernels
            # without one; these two are the figures comparable to its sums.
            "count_with_cpu_op": len(short_op),
            "time_us_with_cpu_op": sum(short_op),
        },
    }


def count_kernels(path: str | Path, short_kernel_us: float = 10.0) -> dict:
    """Kernel count and short-kernel figures of one trace; see :func:`kernel_stats`."""
    return kernel_stats(load_events(path), short_kernel_us=short_kernel_us)


def step_gpu_events(trace: KinetoTrace) -> dict[int, int]:
    """``{ProfilerStep number: GPU events launched in it}``: a counted GPU event belongs to the step
    whose CPU interval holds the start of its launch call (its own start when it has no launch)."""
    import bisect

    steps = sorted(trace.steps)
    starts = [s[0] for s in steps]
    counts = {n: 0 for _ts, _d, n in steps}
    if not steps:
        return counts
    for g in trace.gpu:
        if trace.linked_only and not g.linked:
            continue
        t = g.launch_ts if g.launch_ts is not None else g.ts
        k = bisect.bisect_right(starts, t) - 1
        if k >= 0 and t < steps[k][0] + steps[k][1]:
            counts[steps[k][2]] += 1
    return counts


def step_stats(trace: KinetoTrace) -> dict:
    """``n_steps`` (ProfilerStep#N annotations), ``step_time_ms`` (mean duration),
    ``dataloader_ms_per_step`` (CPU ms in DataLoader ops, e.g. ``enumerate(DataLoader)#...
    __next__``, divided by the step count, or the total when there are no steps) and ``window``
    (:func:`~ai4s_graph.tools.trace.hygiene.window_flags` of the GPU events launched per step)."""
    n = len(trace.steps)
    dl_ms = sum(d for _ts, d, _n in trace.dataloader) / 1e3
    return {
        "n_steps": n,
        "step_time_ms": (sum(d for _ts, d, _n in trace.steps) / n / 1e3) if n else None,
        "dataloader_ms_per_step": dl_ms / n if n else dl_ms,
        "window": window_flags(step_gpu_events(trace)),
    }


def launch_stats(trace: KinetoTrace) -> dict:
    """Figures for a launch/dispatch-bound diagnosis: ``mean_kernel_us``, ``median_gap_us``
    (start of a kernel minus end of the previous one on the GPU, negative overlaps clipped to
    0), ``launch_calls`` (cudaLaunchKernel/hipLaunchKernel and their variants) and
    ``mean_launch_cpu_us`` (their mean CPU duration)."""
    ks = sorted((g.ts, g.end, g.dur) for g in trace.gpu if g.cat == "kernel")
    gaps = [max(0.0, ks[i][0] - ks[i - 1][1]) for i in range(1, len(ks))]
    launches = [end - ts for ts, end, name, *_ in trace.runtime if name in LAUNCH_KERNEL_NAMES]
    return {
        "mean_kernel_us": (sum(k[2] for k in ks) / len(ks)) if ks else 0.0,
        "median_gap_us": statistics.median(gaps) if gaps else 0.0,
        "launch_calls": len(launches),
        "mean_launch_cpu_us": (sum(launches) / len(launches)) if launches else 0.0,
    }


def gpu_ids(trace: KinetoTrace) -> list[int]:
    """Device ids seen on GPU events (``args.device``, else the GPU pid)."""
    ids = set()
    for g in trace.gpu:
        d = g.device if g.device is not None else g.pid
        if isinstance(d, int):
            ids.add(d)
    return sorted(ids)


#: How the verifier's figures are re-derived (quoted in its verdicts).
REDERIVE_METHOD = ("full-load reader (tools/trace/kineto.py): its own linking, stream clipping, step assignment and "
                   "interval unions, independent of the analyst's streaming engine")


def rederive_figures(path: str | Path) -> dict:
    """The verifier's figures of one trace by this reader: a dict shaped like
    ``TraceAnalysis.model_dump()`` (timeline, launch, short_kernels, kernel_count, n_steps,
    kernels_per_step, step_time_ms, dataloader_ms_per_step, ops_by_category, window) plus ``method``.
    JSON-able (it may be computed in a worker process, concurrently with the engine's pass).
    Raises :class:`InputError` / :class:`NoGpuEventsError` on a trace it cannot read."""
    tr = load_events(path)
    ks = kernel_stats(tr)
    out: dict = {
        "timeline": {k: v.model_dump() for k, v in timeline_of(tr).items()},
        "launch": launch_stats(tr),
        "ops_by_category": ops_by_category(tr),
        "kernel_count": ks["kernel_count"],
        "short_kernels": ks["short_kernels"],
        **step_stats(tr),
        "method": REDERIVE_METHOD,
    }
    if out.get("n_steps"):
        out["kernels_per_step"] = out["kernel_count"] / out["n_steps"]
    return out
