"""The trace engine: every per-rank figure, at every trace size, from ONE streaming scan
(:func:`ai4s_graph.tools.trace.stream.scan_trace`, bounded memory).

From the scan's arrays it computes what TraceLens's perf report and HolisticTraceAnalysis give,
with the same definitions: the GPU timeline rows (``gpu_timeline``), ops by category
(``ops_summary_by_category``: kernel launchers by TraceLens's host call-stack rule), kernel
statistics (``kernel_summary``) and short kernels (``short_kernels_summary``), kernel launch
overhead, DataLoader / CPU time, per-step figures, and the input-hygiene findings (clipped
overlaps, graph launches, a profiled window that is not a steady state). Communication kernels and
collectives across ranks are in :mod:`.rank_analysis` / :mod:`.collectives`, from the same scan.

Definitions (read in AMD-AGI/TraceLens and re-written over numpy arrays):

- launcher of a GPU event: the innermost ``cpu_op`` enclosing the launch call on the same thread
  (``BaseTraceToTree.build_host_call_stack_tree``: a child that bleeds < 1 µs past its parent
  still nests; pass-through ``execute`` ops are skipped);
- ops by category: per launcher, the union of its direct non-communication GPU events; count =
  launchers, time = those unions summed (``total_direct_kernel_time``);
- kernel statistics over every ``kernel`` event, linked or not (TraceLens ``kernel_summary``);
  short = duration < 10 µs (its ``short_kernel_threshold_us``);
- kernel launch overhead: mean kernel duration, median gap between consecutive kernels, the
  launch-API calls and their mean CPU duration.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from .categories import LAUNCH_KERNEL_NAMES, categorize_op
from .engine_window import launch_index, rank_timeline, step_unrecorded  # noqa: F401 (launch_index re-exported)
from .guard import named_malformed_events
from .hygiene import gpu_activity_problem, window_flags
from .launch_tree import launch_parents  # noqa: F401 (re-exported: the launcher rule)
from .tables import kernel_tables
from .models import CategoryRow, KernelRow, LaunchStats, ShortKernels, TimelineRow, TraceAnalysis
from .scan import grouped, sorted_unique
from .stream import (CLS_COMM, KIND_KERNEL, TraceScan, overlap_warnings, scan_trace,
                     tracelens_classes, union_length, union_lengths, window_mask)

#: TraceLens's default ``short_kernel_threshold_us`` (generate_perf_report_pytorch).
SHORT_KERNEL_US = 10.0


# --------------------------------------------------------------------------- linking


def launchers(scan: TraceScan) -> np.ndarray:
    """Per GPU event, the index of its launcher ``cpu_op`` (-1 when none)."""
    li = launch_index(scan)
    lp = launch_parents(scan)
    out = np.full(scan.n_gpu_events, -1, dtype=np.int64)
    ok = li >= 0
    if lp.size:
        out[ok] = lp[li[ok]]
    return out


# --------------------------------------------------------------------------- figures


def category_codes(scan: Any, launcher: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per GPU event, its launcher op's category (:func:`~.categories.categorize_op` of the launcher
    cpu_op's name and the event's own kernel name) as a code into the returned labels: ``(codes,
    labels)``, ``codes`` an int64 array as long as ``launcher`` (one launcher cpu_op index per GPU
    event, -1 for none), ``labels[0] == ""`` for an event without a launcher. ``scan``: a
    :class:`TraceScan` (or anything with its ``op_name``, ``cpu_names``, ``name_id``, ``names``).
    ``categorize_op`` is asked once per distinct (op name, kernel name)."""
    n = launcher.size
    codes = np.zeros(n, dtype=np.int64)
    has = np.flatnonzero(launcher >= 0)
    if not has.size:
        return codes, [""]
    width = len(scan.names) + 1
    key = scan.op_name[launcher[has]].astype(np.int64) * width + scan.name_id[has]
    uniq, inv = np.unique(key, return_inverse=True)
    index: dict[str, int] = {"": 0}
    per = np.empty(uniq.size, dtype=np.int64)
    for j, k in enumerate(uniq.tolist()):
        per[j] = index.setdefault(categorize_op(scan.cpu_names[k // width], scan.names[k % width]), len(index))
    codes[has] = per[inv.reshape(-1)]
    return codes, list(index)


class _FirstKernels:
    """The scan's names seen through a subset of its GPU events (``rows``): what
    :func:`category_codes` reads, for the groups of :func:`ops_by_category`."""

    def __init__(self, scan: TraceScan, rows: np.ndarray) -> None:
        self.op_name, self.cpu_names, self.names = scan.op_name, scan.cpu_names, scan.names
        self.name_id = scan.name_id[rows]


def ops_by_category(scan: TraceScan, linked: np.ndarray, launcher: np.ndarray) -> list[dict[str, Any]]:
    """TraceLens's ops_summary_by_category: rows ``{category, count, kernel_time_ms, percent}``
    (see the module docstring), largest time first. Communication kernels are left out."""
    cls = tracelens_classes(scan)
    sel = np.flatnonzero(linked & (cls != CLS_COMM))
    agg: dict[str, list[float]] = {}
    if sel.size:
        op = launcher[sel]
        has = op >= 0
        lone = sel[~has]  # GPU events without a launcher cpu_op: one "other" launcher each
        g = sel[has]
        gop = op[has]
        order = np.lexsort((scan.ts[g], gop))
        g, gop = g[order], gop[order]
        bounds = np.flatnonzero(np.diff(gop)) + 1
        starts = np.concatenate([[0], bounds]).astype(np.int64) if g.size else np.zeros(0, dtype=np.int64)
        ends = np.concatenate([bounds, [g.size]]).astype(np.int64) if g.size else np.zeros(0, dtype=np.int64)
        t0 = scan.ts[g].min() if g.size else 0.0
        s_all = scan.ts[g] - t0
        e_all = s_all + scan.dur[g]
        t = union_lengths(s_all, e_all, np.concatenate([starts, ends[-1:]]))  # a launcher op's kernel time
        # a group's category: its launcher op's name and its first kernel's (asked once per pair)
        codes, labels = category_codes(_FirstKernels(scan, g[starts]), gop[starts])
        if lone.size:  # the lone events first, as one entry of their summed time under "other"
            if "other" not in labels:
                labels.append("other")
            codes = np.concatenate([[labels.index("other")], codes]).astype(np.int64)
            t = np.concatenate([[float(np.sum(scan.dur[lone]))], t])
        # per category in the order of its first entry; each sum adds entry after entry (np.bincount
        # adds its weights in order, as the loop over groups did)
        cat_of, first = grouped([codes])
        counts = np.bincount(cat_of, minlength=first.size)
        sums = np.bincount(cat_of, weights=t, minlength=first.size)
        for c, cnt, tot in zip(codes[first].tolist(), counts.tolist(), sums.tolist()):
            agg[labels[c]] = [cnt, tot]
        if lone.size:
            agg["other"][0] += int(lone.size) - 1
    total = sum(v[1] for v in agg.values())
    rows = [{"category": c, "count": int(v[0]), "kernel_time_ms": v[1] / 1e3,
             "percent": (v[1] / total * 100.0) if total else 0.0} for c, v in agg.items()]
    rows.sort(key=lambda r: -r["kernel_time_ms"])
    return rows


def kernel_stats(scan: TraceScan, launcher: np.ndarray, total_us: float, *,
                 short_kernel_us: float = SHORT_KERNEL_US, top: int = 20) -> dict[str, Any]:
    """Kernel figures over every ``kernel`` event (linked or not, as TraceLens's kernel_summary):
    ``kernel_count``, ``kernel_time_us``, ``top_kernels``, ``kernels_by_category`` (per launcher
    category, ``unlinked`` without one), ``short_kernels`` (count, time_us, percents, and the count /
    time of those with a launcher cpu_op, the figures TraceLens's short_kernels_summary sums to)."""
    k = scan.kind == KIND_KERNEL
    ki = np.flatnonzero(k)
    durs = scan.dur[ki]
    ktime = float(durs.sum())
    nn = len(scan.names)
    cnt = np.bincount(scan.name_id[ki], minlength=nn)
    tot = np.bincount(scan.name_id[ki], weights=durs, minlength=nn)
    order = np.argsort(-tot, kind="stable")
    tops = [{"name": scan.names[i], "count": int(cnt[i]), "total_us": float(tot[i]),
             "mean_us": float(tot[i]) / int(cnt[i]), "percent": float(tot[i]) / ktime * 100.0 if ktime else 0.0}
            for i in order[:top] if cnt[i] > 0]
    codes, labels = category_codes(scan, launcher[: scan.n_gpu_events])
    by_cat: dict[str, list[float]] = {}
    cat_of, first = grouped([codes[ki]])
    counts = np.bincount(cat_of, minlength=first.size)
    sums = np.bincount(cat_of, weights=durs, minlength=first.size)  # added in event order, as a loop would
    for c, cnt, tot in zip(codes[ki][first].tolist(), counts.tolist(), sums.tolist()):
        by_cat[labels[c] or "unlinked"] = [cnt, tot]
    short = durs < short_kernel_us
    with_op = launcher[ki] >= 0
    return {
        "kernel_count": int(ki.size),
        "kernel_time_us": ktime,
        "top_kernels": tops,
        "kernels_by_category": sorted(
            ({"category": c, "count": int(v[0]), "kernel_time_ms": v[1] / 1e3,
              "percent": (v[1] / ktime * 100.0) if ktime else 0.0} for c, v in by_cat.items()),
            key=lambda r: -r["kernel_time_ms"]),
        "short_kernels": {
            "threshold_us": short_kernel_us, "count": int(short.sum()), "time_us": float(durs[short].sum()),
            "percent_of_kernel_time": float(durs[short].sum()) / ktime * 100.0 if ktime else 0.0,
            "percent_of_total_time": float(durs[short].sum()) / total_us * 100.0 if total_us else 0.0,
            "count_with_cpu_op": int((short & with_op).sum()),
            "time_us_with_cpu_op": float(durs[short & with_op].sum()),
        },
        "category_codes": codes,
        "category_labels": labels,
    }


def launch_stats(scan: TraceScan) -> dict[str, Any]:
    """``mean_kernel_us``, ``median_gap_us`` (start of a kernel minus end of the previous one on the
    same GPU, overlaps clipped to 0), ``launch_calls`` (cudaLaunchKernel / hipLaunchKernel and variants)
    and ``mean_launch_cpu_us`` (their mean CPU duration)."""
    ki = np.flatnonzero(scan.kind == KIND_KERNEL)
    ts, dur, dev = scan.ts[ki], scan.dur[ki], scan.device[ki]
    end = ts + dur
    order = np.lexsort((dur, end, ts, dev))  # gaps within each GPU (a file may hold several)
    s, e, dv = ts[order], end[order], dev[order]
    gaps = np.maximum(0.0, s[1:] - e[:-1])[dv[1:] == dv[:-1]]
    lids = [i for i, nm in enumerate(scan.cpu_names) if nm in LAUNCH_KERNEL_NAMES]
    lm = np.isin(scan.launch_name, lids) if lids else np.zeros(scan.launch_corr.size, dtype=bool)
    ld = (scan.launch_end - scan.launch_ts)[lm]
    return {
        "mean_kernel_us": float(dur.mean()) if dur.size else 0.0,
        "median_gap_us": float(np.median(gaps)) if gaps.size else 0.0,
        "launch_calls": int(lm.sum()),
        "mean_launch_cpu_us": float(ld.mean()) if ld.size else 0.0,
    }


def per_step(scan: TraceScan, linked: np.ndarray) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per ProfilerStep: ``step``, ``ts``, ``dur_ms``, ``gpu_events`` (GPU events whose launch call
    starts inside the step; their own start when unlinked), ``gpu_busy_ms`` (union of those events),
    ``graph_launches_unrecorded`` (graph launches in it whose kernels were not recorded); and
    :func:`~ai4s_graph.tools.trace.hygiene.window_flags` over them, an unrecorded graph launch
    counting as GPU work launched."""
    if not scan.steps:
        return [], window_flags({})
    li = launch_index(scan)
    t = scan.ts if scan.launch_ts.size == 0 else np.where(li >= 0, scan.launch_ts[np.maximum(li, 0)], scan.ts)
    starts = np.array([s[1] for s in scan.steps])
    k = np.searchsorted(starts, t, side="right") - 1
    durs = np.array([s[2] for s in scan.steps])
    inside = (k >= 0) & linked
    inside[inside] &= t[inside] < (starts[k[inside]] + durs[k[inside]])
    rows, counts = [], {}
    unrec = step_unrecorded(scan)
    for j, (num, st, d) in enumerate(scan.steps):
        sel = inside & (k == j)
        n = int(sel.sum())
        busy = union_length(scan.ts[sel] - st, scan.ts[sel] - st + scan.dur[sel]) if n else 0.0
        rows.append({"step": num, "ts": st, "dur_ms": d / 1e3, "gpu_events": n, "gpu_busy_ms": busy / 1e3,
                     "graph_launches_unrecorded": unrec.get(num, 0)})
        counts[num] = counts.get(num, 0) + n
    # a graph launch without recorded kernels did launch GPU work in its step
    return rows, window_flags({s: c + unrec.get(s, 0) for s, c in counts.items()})


def dataloader_stats(scan: TraceScan) -> dict[str, Any]:
    """``n_steps``, ``step_time_ms`` (mean ProfilerStep duration) and ``dataloader_ms_per_step``
    (CPU ms in DataLoader events per step; the total when there are no steps)."""
    n = len(scan.steps)
    dl_ms = sum(d for _t, d in scan.dataloader) / 1e3
    return {"n_steps": n, "step_time_ms": (sum(s[2] for s in scan.steps) / n / 1e3) if n else None,
            "dataloader_ms_per_step": dl_ms / n if n else dl_ms}


def gpu_ids(scan: TraceScan) -> list[int]:
    """Device ids seen on GPU events (``args.device``, else the GPU pid)."""
    return sorted(int(d) for d in sorted_unique(scan.device) if d >= 0)


# --------------------------------------------------------------------------- assembly


def analyze_scan(scan: TraceScan, *, short_kernel_us: float = SHORT_KERNEL_US,
                 keep: dict[str, Any] | None = None) -> TraceAnalysis:
    """Every per-rank figure of a scan as a :class:`TraceAnalysis` (backend ``stream``).

    ``keep``: when a dict is given, the intermediate arrays the CSV tables need (``linked``,
    ``launcher``, ``category_codes`` / ``category_labels``: :func:`category_codes`) are stored in it. Raises NoGpuEventsError when no GPU event links."""
    linked = window_mask(scan, "linked")
    tl_us, per_device, notes = rank_timeline(scan, linked)
    total = tl_us["total_time"]
    timeline = {k: TimelineRow(time_ms=v / 1e3, percent=(v / total * 100.0) if total > 0 else 0.0)
                for k, v in tl_us.items()}
    launcher = launchers(scan)
    ks = kernel_stats(scan, launcher, total, short_kernel_us=short_kernel_us)
    st = dataloader_stats(scan)
    steps, window = per_step(scan, linked)
    sk = ks["short_kernels"]
    n_steps = st["n_steps"]
    warnings = overlap_warnings(scan) + notes
    if scan.link_ids().size and linked.all() and not np.isin(scan.corr, scan.link_ids()).any():
        warnings.append("no GPU event carries the correlation id of a CPU launch or flow: every GPU event is counted")
    if window.get("degenerate"):
        warnings.append(window["reason"])
    gl = scan.graph_launches()
    if keep is not None:
        keep.update(linked=linked, launcher=launcher, category_codes=ks["category_codes"],
                    category_labels=ks["category_labels"], timeline_us=tl_us)
    return TraceAnalysis(
        path=scan.path, backend="stream", rank=_header_rank(scan), timeline=timeline,
        ops_by_category=[CategoryRow(**r) for r in ops_by_category(scan, linked, launcher)],
        kernels_by_category=[CategoryRow(**r) for r in ks["kernels_by_category"]],
        top_kernels=[KernelRow(**r) for r in ks["top_kernels"]],
        kernel_count=ks["kernel_count"], n_steps=n_steps,
        kernels_per_step=(ks["kernel_count"] / n_steps) if n_steps else None,
        short_kernels=ShortKernels(
            threshold_us=short_kernel_us, count=sk["count"],
            count_per_step=(sk["count"] / n_steps) if n_steps else None, time_ms=sk["time_us"] / 1e3,
            percent=sk["percent_of_kernel_time"], percent_of_total_time=sk["percent_of_total_time"]),
        launch=LaunchStats(**launch_stats(scan)),
        dataloader_ms_per_step=st["dataloader_ms_per_step"], step_time_ms=st["step_time_ms"],
        gpu_ids=gpu_ids(scan), sources={"all": "stream (the engine: one bounded-memory pass, TraceLens definitions)"},
        warnings=warnings, window=window, per_step=steps, graph_launches=gl, per_device=per_device,
        clipped_excess_us=float(sum(x[2] for x in scan.overlaps)),
        insufficient_gpu_activity=gpu_activity_problem(ks["kernel_count"], tl_us["busy_time"]),
    )


def _header_rank(scan: TraceScan) -> int | None:
    info = scan.header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info.get("rank"), bool):
        return int(info["rank"])
    return None


def analyze(path: str | os.PathLike, *, short_kernel_us: float = SHORT_KERNEL_US,
            progress: Callable[[int, int], None] | None = None) -> TraceAnalysis:
    """Scan a trace once and return every per-rank figure (:func:`analyze_scan`).

    Raises InputError (missing / empty / truncated / malformed, a malformed event named:
    :mod:`.guard`), GraphKernelsNotRecordedError and NoGpuEventsError (see
    :func:`~ai4s_graph.tools.trace.stream.scan_trace`)."""
    with named_malformed_events(path):
        return analyze_scan(scan_trace(path, progress), short_kernel_us=short_kernel_us)


def analyze_with_tables(path: str | os.PathLike, *, short_kernel_us: float = SHORT_KERNEL_US,
                        progress: Callable[[int, int], None] | None = None) -> tuple[TraceAnalysis, dict[str, list]]:
    """:func:`analyze` plus the kernel_summary / short_kernels_summary rows of
    :func:`~ai4s_graph.tools.trace.tables.kernel_tables`, from the same single pass."""
    with named_malformed_events(path):
        scan = scan_trace(path, progress)
        keep: dict[str, Any] = {}
        analysis = analyze_scan(scan, short_kernel_us=short_kernel_us, keep=keep)
        return analysis, kernel_tables(scan, keep, keep["timeline_us"]["total_time"], short_kernel_us)

