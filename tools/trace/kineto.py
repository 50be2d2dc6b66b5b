"""An independent reader of PyTorch profiler (kineto) traces and TraceLens's GPU-timeline arithmetic.

This is the verifier's second path: it re-derives the figures :mod:`ai4s_graph.tools.trace.backends`
reports without HolisticTraceAnalysis, TraceLens or pandas. Its reader (:mod:`.kineto_reader`) streams the
Chrome-trace JSON (``*.json`` or ``*.json.gz``), keeps only the few fields each figure needs (GPU
events as small objects, CPU events as columns, names interned; never whole event dicts), and this
module does interval-union arithmetic in plain Python. The reader may be fed during the analysis
pass (one read of the file, each side with its own events and rules) or read the file itself.

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
import statistics
import zlib
from collections import defaultdict
from pathlib import Path

import orjson

from ..errors import InputError, NoGpuEventsError
from ..files import check_input_file
from ..jsonguard import check_bytes
from .categories import (_COMM_RE, MAIN_TIMELINE_ROWS, OP_CATEGORIES, TIMELINE_ROWS,  # noqa: F401 (re-exported)
                         categorize_op)
from .hygiene import GRAPH_LAUNCH_RE, gpu_activity_problem, window_flags
from .models import TimelineRow  # noqa: F401 (re-exported)
from .intervals import merge_intervals, subtract_intervals, total_length  # noqa: F401 (re-exported)
from .kineto_reader import (  # noqa: F401 (re-exported: the reader and its constants)
    _COMM_ARG_KEYS, _CPU_SIDE_CATS, _DATALOADER_RE, _ROCM_LEGACY_MEMCPY_RE, _STEP_RE, COMM, COMPUTE, GPU_CATS,
    LAUNCH_KERNEL_NAMES, MEMCPY, RUNTIME_CATS, GpuEvent, KinetoLoader, KinetoTrace, _Rows, _stream_events,
    classify_gpu_event, is_communication_kernel, load_events,
)
# --------------------------------------------------------------------------------------
# Models and constants
# --------------------------------------------------------------------------------------






def read_trace_json(path: str | Path) -> dict:
    """Read and parse a kineto trace file (``.json`` or ``.json.gz``) into a dict.

    Raises :class:`InputError` (one line: file name + what is wrong) for a missing, empty,
    truncated/corrupt gzip, non-JSON file, or JSON without a ``traceEvents`` list."""
    p = Path(path)
    check_input_file(p)  # missing, a directory, /dev/null, a FIFO or empty: said in one line
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
    check_bytes(raw, p.name)  # depth, string and event bounds before the parser sees it
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InputError(f"{p.name}: not valid JSON ({e})") from e
    del raw
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(f"{p.name}: JSON has no traceEvents list (not a PyTorch profiler trace)")
    return data


# --------------------------------------------------------------------------------------
# Interval arithmetic (the union helpers live in .intervals)
# --------------------------------------------------------------------------------------


def timeline_from_intervals(comp, comm, memcpy) -> dict[str, TimelineRow]:
    """TraceLens's gpu_timeline rows from three lists of (start, end) µs intervals.

    Raises :class:`NoGpuEventsError` when all three are empty."""
    return timeline_from_unions(merge_intervals(comp), merge_intervals(comm), merge_intervals(memcpy))


def timeline_from_unions(comp_u, comm_u, mem_u) -> dict[str, TimelineRow]:
    """:func:`timeline_from_intervals` of three lists already merged (:func:`merge_intervals`)."""
    return _as_rows(_values_from_unions(comp_u, comm_u, mem_u))


def _as_rows(values: dict[str, float]) -> dict[str, TimelineRow]:
    total = values["total_time"]
    return {k: TimelineRow(time_ms=v / 1e3, percent=(v / total * 100.0) if total > 0 else 0.0)
            for k, v in values.items()}


def _values_from_unions(comp_u, comm_u, mem_u) -> dict[str, float]:
    """The eight rows in µs from the three merged unions."""
    all_u = merge_intervals(comp_u + comm_u + mem_u)  # the union of the three unions
    if not all_u:
        raise NoGpuEventsError("no GPU events to build a timeline from")
    total = all_u[-1][1] - all_u[0][0]
    busy = total_length(all_u)
    return {
        "computation_time": total_length(comp_u),
        "exposed_comm_time": total_length(subtract_intervals(comm_u, comp_u)),
        "exposed_memcpy_time": total_length(subtract_intervals(subtract_intervals(mem_u, comp_u), comm_u)),
        "busy_time": busy,
        "idle_time": total - busy,
        "total_time": total,
        "total_comm_time": total_length(comm_u),
        "total_memcpy_time": total_length(mem_u),
    }


def timeline_of(trace: KinetoTrace) -> dict[str, TimelineRow]:
    """gpu_timeline rows of a loaded trace (linked GPU events only, unless the trace has no
    link or was loaded with ``include_unlinked=True``); computed once per trace. A file holding
    several GPUs gets rows per device over the common window, summed; the time where graph replays
    without recorded kernels ran is left out of idle and total (:func:`timeline_details`)."""
    if "timeline" not in trace.memo:
        values, per_device, notes = _timeline_of(trace)
        trace.memo.update(timeline=_as_rows(values), per_device=per_device, timeline_notes=notes)
    return trace.memo["timeline"]


def timeline_details(trace: KinetoTrace) -> tuple[list[dict], list[str]]:
    """``(per_device, notes)`` of :func:`timeline_of`: one dict per device when the file holds
    several (``device``, ``n_events``, the rows in µs, ``busy_pct``, ``idle_pct``), and the notes on
    several devices and unrecorded graph replays."""
    timeline_of(trace)
    return trace.memo["per_device"], trace.memo["timeline_notes"]


def device_of(g: GpuEvent):
    """A GPU event's device: ``args.device``, else its pid (kineto writes each GPU under its own pid)."""
    return g.device if g.device is not None else g.pid


def _timeline_of(trace: KinetoTrace) -> tuple[dict[str, float], list[dict], list[str]]:
    counted = [g for g in trace.gpu if g.linked or not trace.linked_only]
    if not counted:
        raise NoGpuEventsError(f"{trace.path.name}: no GPU events linked to a CPU launch")
    by_dev: dict = {}
    for g in counted:
        d = device_of(g)
        by_dev.setdefault(d if _hashable(d) else repr(d), []).append(g)
    launches = sorted(ts for ts, _api in trace.unrecorded_graph)
    if len(by_dev) == 1:
        values = _device_values(counted, launches)
        return values, [], _graph_notes(trace, values.pop("_unrecorded_us"))
    window = max(g.end for g in counted) - min(g.ts for g in counted)
    total: dict[str, float] = {}
    per_device = []
    unknown = 0.0
    ids = sorted(d for d in by_dev if isinstance(d, int) and not isinstance(d, bool))
    for dev in ids + [d for d in by_dev if d not in ids]:  # device ids, then named GPUs as first seen
        evs = by_dev[dev]
        v = _device_values(evs, launches)
        left_out = v.pop("_unrecorded_us")
        unknown += left_out
        v["total_time"] = window - left_out
        v["idle_time"] = max(0.0, v["total_time"] - v["busy_time"])
        per_device.append({"device": str(dev), "n_events": len(evs), **v,
                           "busy_pct": 100.0 * v["busy_time"] / (v["total_time"] or 1.0),
                           "idle_pct": 100.0 * v["idle_time"] / (v["total_time"] or 1.0)})
        for k, x in v.items():
            total[k] = total.get(k, 0.0) + x
    busiest = max(per_device, key=lambda r: (r["busy_time"], -r["n_events"]))
    note = (f"{len(per_device)} GPUs in one trace file (devices {', '.join(r['device'] for r in per_device)}), "
            f"each over the common window of {window / 1e3:.3f} ms: "
            + ", ".join(f"device {r['device']} busy {r['busy_pct']:.1f}%" for r in per_device)
            + f"; rows summed over the devices; device {busiest['device']} is the busiest (the straggling device)")
    return total, per_device, [note] + _graph_notes(trace, unknown)


def _device_values(events: list[GpuEvent], launches: list[float]) -> dict[str, float]:
    """The eight rows (µs) of one device's events, less the time where unrecorded graph replays
    ran (launch-order gaps: the work launched before a graph launch ends before its replay starts,
    the work launched after it starts after), reported under ``_unrecorded_us``."""
    buckets: tuple[list, list, list] = ([], [], [])
    for g in events:
        buckets[g.kind].append(g)
    unions = [_union_of(b) for b in buckets]
    values = _values_from_unions(*unions)
    values["_unrecorded_us"] = 0.0
    if launches:
        import bisect

        launched = sorted((g.launch_ts, g.ts, g.end) for g in events if g.launch_ts is not None)
        keys = [x[0] for x in launched]
        end_upto, start_from = [], [0.0] * len(launched)  # running max of ends / min of starts from the back
        for _t, _s, e in launched:
            end_upto.append(e if not end_upto or e > end_upto[-1] else end_upto[-1])
        low = float("inf")
        for j in range(len(launched) - 1, -1, -1):
            low = min(low, launched[j][1])
            start_from[j] = low
        gaps = []
        for t in launches:
            i = bisect.bisect_left(keys, t)
            if 0 < i < len(launched) and start_from[i] > end_upto[i - 1]:
                gaps.append((end_upto[i - 1], start_from[i]))
        if gaps:
            busy = merge_intervals(unions[0] + unions[1] + unions[2])
            unknown = total_length(merge_intervals(busy + gaps)) - total_length(busy)
            values["_unrecorded_us"] = unknown
            values["total_time"] -= unknown
            values["idle_time"] = max(0.0, values["idle_time"] - unknown)
    return values


def _graph_notes(trace: KinetoTrace, unknown_us: float) -> list[str]:
    if not trace.unrecorded_graph:
        return []
    return [f"{len(trace.unrecorded_graph)} of {sum(trace.graph_launches.values())} graph launches have no recorded "
            f"kernels: {unknown_us / 1e3:.3f} ms where their replays ran left out of idle and total time"]


def _hashable(v) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def _union_of(events: list[GpuEvent]) -> list[tuple[float, float]]:
    """:func:`merge_intervals` of the events' (ts, end), without a tuple per event."""
    out: list[tuple[float, float]] = []
    cs = ce = None
    for g in sorted(events, key=_start):
        if cs is not None and g.ts <= ce:
            if g.end > ce:
                ce = g.end
        else:
            if cs is not None:
                out.append((cs, ce))
            cs, ce = g.ts, g.end
    if cs is not None:
        out.append((cs, ce))
    return out


def _start(g: GpuEvent) -> float:
    return g.ts


def rederive_timeline(path: str | Path, *, include_unlinked: bool = False) -> dict[str, TimelineRow]:
    """Re-derive TraceLens's gpu_timeline from the raw trace JSON.

    Returns ``{row_name: TimelineRow(time_ms, percent)}`` for the eight rows of
    :data:`TIMELINE_ROWS`. Raises :class:`InputError` / :class:`NoGpuEventsError`."""
    return timeline_of(load_events(path, include_unlinked=include_unlinked))


# --------------------------------------------------------------------------------------
# Kernel counts, op categories, steps, launch statistics
# --------------------------------------------------------------------------------------

def _op_name(trace: KinetoTrace, i: int) -> str:
    """Name of cpu_op ``i`` (without building its row when the ops are kept as columns)."""
    ops = trace.cpu_ops
    return ops.name(i) if isinstance(ops, _Rows) else ops[i][2]


def ops_by_category(trace: KinetoTrace) -> list[dict]:
    """TraceLens's ops_summary_by_category from the raw trace: kernel launchers (innermost
    cpu_op of a linked kernel's launch, or the runtime call when none) grouped by category.

    Returns rows ``{category, count, kernel_time_ms, percent}`` sorted by time, where count is
    the number of launchers and kernel time is the busy time (union) of each launcher's
    direct kernels, summed. Communication kernels are left out, as in TraceLens."""
    launchers: dict[int, object] = {}  # cpu_op index -> its kernel, or a list of them (most launch one)
    agg: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for g in trace.gpu:
        if (trace.linked_only and not g.linked) or g.kind == COMM:  # nothing links: every GPU event counts
            continue
        if g.launcher < 0:  # no cpu_op: the runtime call is the launcher, one per kernel
            agg["other"][0] += 1
            agg["other"][1] += g.end - g.ts
            continue
        prev = launchers.get(g.launcher)
        if prev is None:
            launchers[g.launcher] = g
        elif type(prev) is list:
            prev.append(g)
        else:
            launchers[g.launcher] = [prev, g]
    for idx, ks in launchers.items():
        if type(ks) is not list:
            ks = [ks]
        first = min(ks, key=lambda k: k.ts)
        cat = categorize_op(_op_name(trace, idx), first.name)
        agg[cat][0] += 1
        agg[cat][1] += (ks[0].end - ks[0].ts) if len(ks) == 1 else total_length(merge_intervals((k.ts, k.end) for k in ks))
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
        cat = categorize_op(_op_name(trace, g.launcher), g.name) if g.launcher >= 0 else "unlinked"
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
    whose CPU interval holds the start of its launch call (its own start when it has no launch); a
    graph launch whose kernels were not recorded counts as one (the step launched GPU work)."""
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
    for t, _api in trace.unrecorded_graph:  # a graph launch without recorded kernels did launch GPU work
        k = bisect.bisect_right(starts, t) - 1
        if k >= 0 and t < steps[k][0] + steps[k][1]:
            counts[steps[k][2]] += 1
    return counts


def step_stats(trace: KinetoTrace) -> dict:
    """``n_steps`` (ProfilerStep#N annotations), ``step_time_ms`` (mean duration), ``step_numbers``
    (their N, sorted), ``step_durations_ms`` (each one's duration, in step order),
    ``dataloader_ms_per_step`` (CPU ms in DataLoader ops, e.g. ``enumerate(DataLoader)#...
    __next__``, divided by the step count, or the total when there are no steps), ``window``
    (:func:`~ai4s_graph.tools.trace.hygiene.window_flags` of the GPU events launched per step) and
    ``step_numbers`` (the sorted ``N`` of the ``ProfilerStep#N`` annotations: which training steps
    were profiled)."""
    n = len(trace.steps)
    dl_ms = sum(d for _ts, d, _n in trace.dataloader) / 1e3
    return {
        "n_steps": n,
        "step_time_ms": (sum(d for _ts, d, _n in trace.steps) / n / 1e3) if n else None,
        "dataloader_ms_per_step": dl_ms / n if n else dl_ms,
        "step_numbers": sorted({int(num) for _ts, _d, num in trace.steps if isinstance(num, int)}),
        "step_durations_ms": [d / 1e3 for _ts, d, _n in sorted(trace.steps)],
        "window": window_flags(step_gpu_events(trace)),
        "step_numbers": sorted({int(n) for _ts, _d, n in trace.steps}),
    }


def launch_stats(trace: KinetoTrace) -> dict:
    """Figures for a launch/dispatch-bound diagnosis: ``mean_kernel_us``, ``median_gap_us``
    (start of a kernel minus end of the previous one on the GPU, negative overlaps clipped to
    0), ``launch_calls`` (cudaLaunchKernel/hipLaunchKernel and their variants),
    ``mean_launch_cpu_us`` (their mean CPU duration) and ``graph_launch_calls`` (cudaGraphLaunch /
    hipGraphLaunch and variants: :data:`.hygiene.GRAPH_LAUNCH_RE`). Gaps are taken within each GPU."""
    ks = sorted((g.ts, g.end, g.dur) for g in trace.gpu if g.cat == "kernel")
    per_dev: dict = defaultdict(list)  # gaps within each GPU (a file may hold several)
    for g in trace.gpu:
        if g.cat == "kernel":
            d = device_of(g)
            per_dev[d if _hashable(d) else repr(d)].append((g.ts, g.end, g.dur))
    gaps = []
    for dk in per_dev.values():
        dk.sort()
        gaps += [max(0.0, dk[i][0] - dk[i - 1][1]) for i in range(1, len(dk))]
    launches = [end - ts for ts, end, name, *_ in trace.runtime if name in LAUNCH_KERNEL_NAMES]
    graph_calls = sum(1 for _ts, _end, name, *_ in trace.runtime if GRAPH_LAUNCH_RE.match(name))
    return {
        "mean_kernel_us": (sum(k[2] for k in ks) / len(ks)) if ks else 0.0,
        "median_gap_us": statistics.median(gaps) if gaps else 0.0,
        "launch_calls": len(launches),
        "mean_launch_cpu_us": (sum(launches) / len(launches)) if launches else 0.0,
        "graph_launch_calls": graph_calls,
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
    return figures_of(load_events(path))


def figures_of(tr: KinetoTrace) -> dict:
    """:func:`rederive_figures` of a trace already loaded (e.g. by a :class:`KinetoLoader` fed
    during the analysis pass)."""
    ks = kernel_stats(tr)
    per_device, _notes = timeline_details(tr)
    out: dict = {
        "timeline": {k: v.model_dump() for k, v in timeline_of(tr).items()},
        "per_device": per_device,
        "launch": launch_stats(tr),
        "ops_by_category": ops_by_category(tr),
        "kernel_count": ks["kernel_count"],
        "short_kernels": ks["short_kernels"],
        **step_stats(tr),
        "method": REDERIVE_METHOD,
    }
    if out.get("n_steps"):
        out["kernels_per_step"] = out["kernel_count"] / out["n_steps"]
    out["insufficient_gpu_activity"] = gpu_activity_problem(out["kernel_count"],
                                                            float(out["timeline"]["busy_time"]["time_ms"]) * 1e3)
    return out
