"""Analysis of one PyTorch profiler (kineto) trace: GPU timeline, kernels, steps, launch overhead.

``analyze_trace(path)`` returns a :class:`TraceAnalysis` whose ``timeline`` is keyed exactly by
TraceLens's ``gpu_timeline`` row names. ``backend="auto"`` (and ``"stream"``) is the project's ONE
engine, :mod:`ai4s_graph.tools.trace.engine`: a bounded-memory streaming pass that computes every
figure at every trace size. The other backends are optional cross-checks
(:func:`cross_checks` runs those available and records agreement, or why one could not run, as
evidence; a failing cross-check is a note, never a failed analysis):

- ``"tracelens"``: AMD-AGI/TraceLens when ``import TraceLens`` works
  (``generate_perf_report_pytorch``; not on PyPI, installs from git);
- ``"tracelens-csv"``: TraceLens's own CSVs when ``<stem>_perf_report_csvs/gpu_timeline.csv``
  sits beside the trace (stem = file name without ``.json``/``.json.gz``);
- ``"hta"``: HolisticTraceAnalysis (PyPI ``traceinsight``, ``import hta``) parses the trace
  (``HTA_DISABLE_NS_ROUNDING=1``, ``include_last_profiler_step=True``, ``trace_files={rank:
  path}``); the TraceLens definitions are then computed on HTA's data frame with numpy.

``backend="kineto"`` uses :mod:`ai4s_graph.tools.trace.kineto`, the project's full-load reader and the
verifier's independent path. With the TraceLens backends, figures TraceLens does not report
(steps, DataLoader time, launch statistics, GPU ids) come from the kineto reader, and
``sources`` says so.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from typing import Any, Callable

from . import engine, kineto
from ..errors import InputError, NoGpuEventsError, ToolUnavailableError
from .kineto import MAIN_TIMELINE_ROWS, TIMELINE_ROWS, TimelineRow
from .hygiene import input_notes
from .models import CategoryRow, KernelRow, LaunchStats, ShortKernels, TraceAnalysis
from .ranks import find_rank_traces

__all__ = [
    "BACKENDS", "CategoryRow", "KernelRow", "LaunchStats", "ShortKernels", "TimelineRow",
    "TraceAnalysis", "TIMELINE_ROWS", "MAIN_TIMELINE_ROWS", "analyze_trace", "analyze_traces",
    "find_rank_traces", "tracelens_available", "csv_report_dir", "cross_checks",
]

BACKENDS = ("auto", "stream", "tracelens", "tracelens-csv", "hta", "kineto")
CROSS_CHECK_TOOLS = ("tracelens", "tracelens-csv", "hta")
#: Cross-checks load the whole event list (TraceLens ~17 B of RSS per byte of JSON, HTA ~7,
#: bench/RESULTS.md) and take seconds per 10k events (HTA on the 100k-event owlv2 trace: 22 s here):
#: above this many events or this size on disk they are skipped, with a note.
CROSS_CHECK_MAX_BYTES = 64 * 1024 * 1024
CROSS_CHECK_MAX_EVENTS = 200_000
#: A cross-check "agrees" when every main gpu_timeline row is within 0.1 % of total time of the
#: engine's (the agreement target of issue 12; TraceLens's own rows are ms with float rounding).
AGREE_FRACTION_OF_TOTAL = 0.001
SHORT_KERNEL_US = 10.0
"""TraceLens's default ``short_kernel_threshold_us`` (generate_perf_report_pytorch)."""


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


_QUIET = threading.local()
_ROUTER_LOCK = threading.Lock()


class _ThreadRouter:
    """A stand-in for ``sys.stdout`` / ``sys.stderr`` that drops what a thread inside
    :func:`quiet_this_thread` writes and passes every other thread's writes through. A
    ``contextlib.redirect_stdout`` would swap the stream for the whole process: the graph runs the
    cross-checks in a worker thread while the main thread prints each node's STATUS line, and such a
    line was lost (seen under load)."""

    def __init__(self, target) -> None:
        self._target = target

    def write(self, s: str) -> int:
        return len(s) if getattr(_QUIET, "on", False) else self._target.write(s)

    def flush(self) -> None:
        if not getattr(_QUIET, "on", False):
            self._target.flush()

    def __getattr__(self, name: str):
        return getattr(self._target, name)


@contextlib.contextmanager
def quiet_this_thread():
    """Silence ``print`` output of third-party code (TraceLens, HTA) run by this thread only."""
    with _ROUTER_LOCK:
        for name in ("stdout", "stderr"):
            cur = getattr(sys, name)
            if not isinstance(cur, _ThreadRouter):
                setattr(sys, name, _ThreadRouter(cur))
    outer = getattr(_QUIET, "on", False)  # nested use: the outer block stays quiet
    _QUIET.on = True
    try:
        yield
    finally:
        _QUIET.on = outer


def _stem(path: Path) -> str:
    name = path.name
    for suf in (".json.gz", ".json"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return path.stem


def csv_report_dir(path: str | Path) -> Path | None:
    """TraceLens's CSV report folder beside a trace (``<stem>_perf_report_csvs`` holding
    gpu_timeline.csv), or None."""
    p = Path(path)
    d = p.parent / f"{_stem(p)}_perf_report_csvs"
    return d if (d / "gpu_timeline.csv").is_file() else None


def tracelens_available() -> bool:
    """True when the TraceLens package imports."""
    try:
        import TraceLens  # noqa: F401
    except Exception:
        return False
    return True


def _hta_available() -> bool:
    try:
        import hta  # noqa: F401
    except Exception:
        return False
    return True


def _resolve_backend(path: Path, backend: str) -> str:
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return "stream" if backend == "auto" else backend


def _kineto_extras(tr: kineto.KinetoTrace, short_kernel_us: float) -> dict:
    """Fields every backend reports that come from the kineto reader."""
    ks = kineto.kernel_stats(tr, short_kernel_us=short_kernel_us)
    return {
        "kstats": ks,
        "steps": kineto.step_stats(tr),
        "launch": kineto.launch_stats(tr),
        "gpu_ids": kineto.gpu_ids(tr),
        "rank": tr.rank,
        "warnings": reader_warnings(tr),
    }


def reader_warnings(tr: kineto.KinetoTrace) -> list[str]:
    """What the verifier's reader did about a trace's input, one line each: its notes (categories
    normalised, duration pairs joined, events dropped), several GPUs, unrecorded graph replays,
    zero-length events left unclipping, clipped events."""
    out = list(tr.notes) + input_notes(zero_inside=tr.zero_inside) + kineto.timeline_details(tr)[1]
    return out + [f"GPU event '{a}' (stream {st}) runs {x:.3f} us past the start of '{b}' on the same stream: "
                  "clipped at that start" for a, b, st, x in tr.overlaps]


def _short(threshold: float, count: int, time_us: float, ktime_us: float, total_us: float,
           n_steps: int) -> ShortKernels:
    return ShortKernels(
        threshold_us=threshold, count=count,
        count_per_step=(count / n_steps) if n_steps else None,
        time_ms=time_us / 1e3,
        percent=(time_us / ktime_us * 100.0) if ktime_us else 0.0,
        percent_of_total_time=(time_us / total_us * 100.0) if total_us else 0.0,
    )


def _assemble(path: Path, backend: str, timeline: dict[str, TimelineRow], ex: dict, *,
              ops_by_category=None, kernel_count=None, top_kernels=None, short=None,
              kernels_by_category=None, sources=None, rank=None) -> TraceAnalysis:
    ks, st = ex["kstats"], ex["steps"]
    n_steps = st["n_steps"]
    kcount = ks["kernel_count"] if kernel_count is None else kernel_count
    total_us = timeline["total_time"].time_ms * 1e3
    if short is None:
        sk = ks["short_kernels"]
        short = _short(sk["threshold_us"], sk["count"], sk["time_us"], ks["kernel_time_us"], total_us, n_steps)
    return TraceAnalysis(
        path=str(path), backend=backend, rank=ex["rank"] if rank is None else rank,
        timeline=timeline,
        ops_by_category=ops_by_category if ops_by_category is not None else [
            CategoryRow(**r) for r in kineto.ops_by_category(ex["trace"])],
        kernels_by_category=kernels_by_category if kernels_by_category is not None else [
            CategoryRow(**r) for r in ks["kernels_by_category"]],
        top_kernels=top_kernels if top_kernels is not None else [KernelRow(**r) for r in ks["top_kernels"]],
        kernel_count=kcount, n_steps=n_steps,
        kernels_per_step=(kcount / n_steps) if n_steps else None,
        short_kernels=short, launch=LaunchStats(**ex["launch"]),
        dataloader_ms_per_step=st["dataloader_ms_per_step"], step_time_ms=st["step_time_ms"],
        gpu_ids=ex["gpu_ids"], sources=sources or {}, warnings=ex.get("warnings") or [],
        window=st.get("window") or {}, graph_launches=(ex["trace"].graph_launches if ex.get("trace") else {}),
        clipped_excess_us=sum(x[3] for x in ex["trace"].overlaps) if ex.get("trace") else 0.0,
    )


# --------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------


def _analyze_kineto(path: Path, short_kernel_us: float) -> TraceAnalysis:
    tr = kineto.load_events(path)
    ex = _kineto_extras(tr, short_kernel_us)
    ex["trace"] = tr
    return _assemble(path, "kineto", kineto.timeline_of(tr), ex,
                     sources={"all": "kineto (own reader, TraceLens definitions)"})


def _timeline_from_df(df) -> dict[str, TimelineRow]:
    """TraceLens gpu_timeline from a DataFrame with columns ``type`` and ``time ms``."""
    vals = {str(t): float(v) for t, v in zip(df["type"], df["time ms"])}
    missing = [k for k in MAIN_TIMELINE_ROWS if k not in vals]
    if missing:
        raise InputError(f"gpu_timeline lacks rows {', '.join(missing)}")
    total = vals["total_time"]
    return {k: TimelineRow(time_ms=vals[k], percent=(vals[k] / total * 100.0) if total else 0.0)
            for k in TIMELINE_ROWS if k in vals}


def _from_tracelens_frames(path: Path, backend: str, frames: dict, short_kernel_us: float,
                           timeline: dict[str, TimelineRow] | None = None, notes: list[str] = ()) -> TraceAnalysis:
    """Build a TraceAnalysis from TraceLens's sheets (DataFrames keyed by sheet name); ``timeline``:
    its gpu_timeline rows when already read, ``notes``: what was done about the sheets."""
    timeline = timeline if timeline is not None else _timeline_from_df(frames["gpu_timeline"])
    tr = kineto.load_events(path)
    ex = _kineto_extras(tr, short_kernel_us)
    ex["trace"] = tr
    ex["warnings"] = list(notes) + ex["warnings"]
    sources = {"timeline": backend}
    ops = None
    cat_df = frames.get("ops_summary_by_category")
    if cat_df is not None and len(cat_df):
        ops = [CategoryRow(category=str(r["op category"]), count=int(r["Count"]),
                           kernel_time_ms=float(r["total_direct_kernel_time_ms"]),
                           percent=float(r["Percentage (%)"])) for _, r in cat_df.iterrows()]
        sources["ops_by_category"] = backend
    kcount = top = kcat = short = None
    ksum = frames.get("kernel_summary")
    if ksum is not None and len(ksum):
        kcount = int(ksum["Kernel duration (µs)_count"].sum())
        ktime = float(ksum["Kernel duration (µs)_sum"].sum())
        g = ksum.groupby("Kernel name", dropna=False).agg(
            count=("Kernel duration (µs)_count", "sum"), total=("Kernel duration (µs)_sum", "sum"))
        g = g.sort_values("total", ascending=False).head(20)
        top = [KernelRow(name=str(n), count=int(r["count"]), total_us=float(r["total"]),
                         mean_us=float(r["total"]) / int(r["count"]),
                         percent=float(r["total"]) / ktime * 100.0 if ktime else 0.0)
               for n, r in g.iterrows()]
        c = ksum.groupby("Parent op category", dropna=False).agg(
            count=("Kernel duration (µs)_count", "sum"), total=("Kernel duration (µs)_sum", "sum"))
        kcat = sorted((CategoryRow(category=str(n) if n == n else "unlinked", count=int(r["count"]),
                                   kernel_time_ms=float(r["total"]) / 1e3,
                                   percent=float(r["total"]) / ktime * 100.0 if ktime else 0.0)
                       for n, r in c.iterrows()), key=lambda x: -x.kernel_time_ms)
        sources.update(kernel_count=backend, top_kernels=backend, kernels_by_category=backend)
        # TraceLens's short_kernels_summary leaves out kernels without a parent cpu_op, so the
        # short-kernel figures come from the kineto reader (all kernels); see tests.
    rest = [k for k in ("ops_by_category", "kernel_count", "top_kernels") if k not in sources]
    sources["short_kernels, steps, launch, dataloader, gpu_ids" + ("".join(", " + r for r in rest))] = "kineto"
    return _assemble(path, backend, timeline, ex, ops_by_category=ops, kernel_count=kcount,
                     top_kernels=top, kernels_by_category=kcat, short=short, sources=sources)


def _analyze_tracelens_csv(path: Path, short_kernel_us: float) -> TraceAnalysis:
    from .tracelens_csv import read_report_dir

    d = csv_report_dir(path)
    if d is None:
        raise InputError(f"{path.name}: no {_stem(path)}_perf_report_csvs/gpu_timeline.csv beside the trace")
    frames, ms, notes = read_report_dir(d)
    total = ms["total_time"]
    timeline = {k: TimelineRow(time_ms=v, percent=(v / total * 100.0) if total else 0.0) for k, v in ms.items()}
    return _from_tracelens_frames(path, "tracelens-csv", frames, short_kernel_us, timeline, notes)


def _analyze_tracelens(path: Path, short_kernel_us: float) -> TraceAnalysis:
    try:
        from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch
    except Exception as e:
        raise ToolUnavailableError(f"TraceLens is not installed ({e}); pip install "
                                   "git+https://github.com/AMD-AGI/TraceLens.git") from e
    kineto.read_trace_json(path)  # clear one-line errors before TraceLens sees bad input
    import warnings

    with tempfile.TemporaryDirectory() as out, quiet_this_thread(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            frames = generate_perf_report_pytorch(
                str(path), output_csvs_dir=out, kernel_summary=True, short_kernel_study=True,
                short_kernel_threshold_us=int(short_kernel_us))
        except ValueError as e:
            if "No GPU events" in str(e):
                raise NoGpuEventsError(f"{path.name}: {e}") from e
            raise InputError(f"{path.name}: TraceLens failed ({e})") from e
    return _from_tracelens_frames(path, "tracelens", frames, short_kernel_us)


# ---- HTA --------------------------------------------------------------------------------


def _union_length(starts, ends) -> float:
    """Length of the union of intervals given as numpy arrays (µs)."""
    import numpy as np

    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = np.maximum.accumulate(ends[order])
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    seg_end = np.append(e[idx[1:] - 1], e[-1])
    return float(np.sum(seg_end - s[idx]))


def _analyze_hta(path: Path, short_kernel_us: float) -> TraceAnalysis:
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"  # HTA rounds to whole µs otherwise (see notes)
    try:
        from hta.trace_analysis import TraceAnalysis as HtaTraceAnalysis
    except Exception as e:
        raise ToolUnavailableError(f"HolisticTraceAnalysis is not installed ({e}); pip install traceinsight") from e
    import logging

    import numpy as np

    # Validate first: HTA's own errors on bad files are long tracebacks.
    tr = kineto.load_events(path)
    rank = tr.rank if tr.rank is not None else 0
    logging.getLogger("hta").setLevel(logging.ERROR)
    with quiet_this_thread():
        try:
            hta = HtaTraceAnalysis(trace_files={rank: str(path)}, trace_dir=str(path.parent),
                                   include_last_profiler_step=True)
        except Exception as e:
            raise InputError(f"{path.name}: HTA could not parse the trace ({type(e).__name__}: {e})") from e
    df = hta.t.get_trace(rank)
    table = hta.t.symbol_table.get_sym_table()
    names = df["name"].map(lambda i: table[i] if 0 <= i < len(table) else "")
    cats = df["cat"].map(lambda i: table[i] if 0 <= i < len(table) else "")
    ts = df["ts"].to_numpy(dtype=float)
    dur = df["dur"].to_numpy(dtype=float)
    end = ts + dur
    cat_arr = cats.to_numpy()
    name_arr = names.to_numpy()
    is_gpu = np.isin(cat_arr, list(kineto.GPU_CATS))
    if not is_gpu.any():
        raise NoGpuEventsError(f"{path.name}: no GPU kernel, memcpy or memset events (CPU-only trace?)")
    is_rt = np.isin(cat_arr, list(kineto.RUNTIME_CATS))
    corr = df["correlation"].to_numpy()
    # Linked GPU events: a CUDA/HIP runtime or driver call carries the same correlation id.
    linked = is_gpu & np.isin(corr, corr[is_rt & (corr >= 0)]) & (corr >= 0)
    use = linked if linked.any() else is_gpu
    kind = np.array([kineto.classify_gpu_event(c, n) for c, n in zip(cat_arr[use], name_arr[use])], dtype=int)
    s_use, e_use = ts[use], end[use]
    comp = kind == kineto.COMPUTE
    comm = kind == kineto.COMM
    mem = kind == kineto.MEMCPY
    U = _union_length
    comp_t = U(s_use[comp], e_use[comp])
    cc = comp | comm
    cc_t = U(s_use[cc], e_use[cc])
    busy = U(s_use, e_use)
    total = float(e_use.max() - s_use.min())
    vals = {
        "computation_time": comp_t,
        "exposed_comm_time": cc_t - comp_t,          # |comm ∪ comp| − |comp|
        "exposed_memcpy_time": busy - cc_t,          # |all| − |comp ∪ comm|
        "busy_time": busy,
        "idle_time": total - busy,
        "total_time": total,
        "total_comm_time": U(s_use[comm], e_use[comm]),
        "total_memcpy_time": U(s_use[mem], e_use[mem]),
    }
    timeline = {k: TimelineRow(time_ms=v / 1e3, percent=v / total * 100.0 if total else 0.0)
                for k, v in vals.items()}

    # Kernels (every cat == kernel event, as TraceLens's kernel_summary).
    is_k = cat_arr == "kernel"
    kdur = dur[is_k]
    kname = name_arr[is_k]
    ktime = float(kdur.sum())
    import pandas as pd

    kdf = pd.DataFrame({"name": kname, "dur": kdur})
    g = kdf.groupby("name").agg(count=("dur", "size"), total=("dur", "sum")).sort_values("total", ascending=False)
    top = [KernelRow(name=str(n), count=int(r["count"]), total_us=float(r["total"]),
                     mean_us=float(r["total"]) / int(r["count"]),
                     percent=float(r["total"]) / ktime * 100.0 if ktime else 0.0)
           for n, r in g.head(20).iterrows()]
    short_mask = kdur < short_kernel_us

    # Ops by category: a kernel's launcher is the cpu_op with the kernel's External id.
    ext = df["external_id"].to_numpy()
    is_op = cat_arr == "cpu_op"
    op_by_ext: dict = {}
    for e_id, n in zip(ext[is_op], name_arr[is_op]):
        if e_id >= 0 and e_id not in op_by_ext:
            op_by_ext[e_id] = n
    ops_rows: dict = {}
    groups: dict = {}
    for i in np.flatnonzero(use):
        if kineto.is_communication_kernel(name_arr[i]):
            continue
        e_id = ext[i]
        key = ("op", e_id) if e_id in op_by_ext else ("rt", int(corr[i]))
        groups.setdefault(key, []).append(i)
    for key, idxs in groups.items():
        idxs.sort(key=lambda i: ts[i])
        cat = kineto.categorize_op(op_by_ext[key[1]], name_arr[idxs[0]]) if key[0] == "op" else "other"
        row = ops_rows.setdefault(cat, [0, 0.0])
        row[0] += 1
        row[1] += U(ts[idxs], end[idxs])
    tot_ops = sum(v[1] for v in ops_rows.values())
    ops = sorted((CategoryRow(category=c, count=v[0], kernel_time_ms=v[1] / 1e3,
                              percent=v[1] / tot_ops * 100.0 if tot_ops else 0.0)
                  for c, v in ops_rows.items()), key=lambda r: -r.kernel_time_ms)

    # Steps, DataLoader, launch statistics from HTA's frame too.
    cpu_side = is_op | (cat_arr == "user_annotation")  # not the gpu_user_annotation copy
    step_mask = np.array([n.startswith("ProfilerStep#") for n in name_arr]) & cpu_side
    n_steps = int(step_mask.sum())
    step_ms = float(dur[step_mask].mean() / 1e3) if n_steps else None
    dl_mask = np.array(["DataLoader" in n for n in name_arr]) & cpu_side
    dl_ms = float(dur[dl_mask].sum() / 1e3)
    order = np.argsort(ts[is_k], kind="stable")
    ks_s, ks_e = ts[is_k][order], end[is_k][order]
    gaps = np.clip(ks_s[1:] - ks_e[:-1], 0, None)
    launch_mask = is_rt & np.isin(name_arr, list(kineto.LAUNCH_KERNEL_NAMES))
    launch = LaunchStats(
        mean_kernel_us=float(kdur.mean()) if len(kdur) else 0.0,
        median_gap_us=float(np.median(gaps)) if len(gaps) else 0.0,
        launch_calls=int(launch_mask.sum()),
        mean_launch_cpu_us=float(dur[launch_mask].mean()) if launch_mask.any() else 0.0,
    )
    kcount = int(is_k.sum())
    ex = {"kstats": {"kernel_count": kcount, "kernel_time_us": ktime, "short_kernels": None},
          "steps": {"n_steps": n_steps, "step_time_ms": step_ms,
                    "dataloader_ms_per_step": dl_ms / n_steps if n_steps else dl_ms},
          "launch": launch.model_dump(), "gpu_ids": kineto.gpu_ids(tr), "rank": tr.rank}
    short = _short(short_kernel_us, int(short_mask.sum()), float(kdur[short_mask].sum()), ktime,
                   total, n_steps)
    kcat = [CategoryRow(**r) for r in kineto.kernel_stats(tr, short_kernel_us=short_kernel_us)["kernels_by_category"]]
    return _assemble(path, "hta", timeline, ex, ops_by_category=ops, kernel_count=kcount,
                     top_kernels=top, short=short, kernels_by_category=kcat,
                     sources={"all but kernels_by_category, gpu_ids": "hta (TraceLens definitions on HTA's frame)",
                              "kernels_by_category, gpu_ids": "kineto"})


# --------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------


def analyze_trace(path: str | Path, *, backend: str = "auto", short_kernel_us: float = SHORT_KERNEL_US,
                  progress: Callable[[int, int], None] | None = None) -> TraceAnalysis:
    """Analyze one kineto trace (``*.json`` / ``*.json.gz``).

    ``backend``: ``auto`` = ``stream`` (the engine), or a cross-check backend: ``tracelens``,
    ``tracelens-csv``, ``hta`` or ``kineto``. ``progress(bytes_read, file_size)``: optional callback
    of the engine's pass. ``short_kernel_us``: kernels
    shorter than this count as short (default 10 µs, TraceLens's default threshold).

    Raises :class:`InputError` (missing, empty, truncated, non-JSON or non-kineto file; bad
    backend name), :class:`NoGpuEventsError` (CPU-only trace) and
    :class:`ToolUnavailableError` (a forced backend whose library is not installed)."""
    p = Path(path)
    chosen = _resolve_backend(p, backend)
    try:
        if chosen == "stream":
            res = engine.analyze(p, short_kernel_us=short_kernel_us, progress=progress)
        elif chosen == "kineto":
            res = _analyze_kineto(p, short_kernel_us)
        elif chosen == "hta":
            res = _analyze_hta(p, short_kernel_us)
        elif chosen == "tracelens-csv":
            kineto.read_trace_json(p)
            res = _analyze_tracelens_csv(p, short_kernel_us)
        else:
            res = _analyze_tracelens(p, short_kernel_us)
    except (ValueError, TypeError, KeyError) as e:  # a field of an event that is not what kineto writes
        if isinstance(e, InputError):
            raise
        raise InputError(f"{p.name}: malformed trace event ({type(e).__name__}: {' '.join(str(e).split())[:120]})") from None
    check_timeline(res.timeline, p)
    return res


def check_timeline(timeline: dict[str, TimelineRow], path: str | Path) -> None:
    """Refuse an impossible GPU timeline: a NaN/inf or negative time, or a share outside 0-100%
    (seen with non-numeric ``ts`` or negative ``dur`` in hand-edited traces). Raises
    :class:`InputError` naming the first bad row."""
    for name, row in timeline.items():
        t, pct = float(row.time_ms), float(row.percent)
        if not (math.isfinite(t) and math.isfinite(pct)) or t < 0 or pct < -1e-6 or pct > 100.0 + 1e-6:
            raise InputError(f"{Path(path).name}: impossible GPU timeline ({name} = {t:.4g} ms, {pct:.4g}%): "
                             "events with non-numeric, missing or negative ts/dur")


def _analyze_one(args: tuple) -> TraceAnalysis:
    path, backend, short_kernel_us = args
    return analyze_trace(path, backend=backend, short_kernel_us=short_kernel_us)


def analyze_traces(paths, workers: int = 0, *, backend: str = "auto",
                   short_kernel_us: float = SHORT_KERNEL_US) -> list[TraceAnalysis]:
    """Analyze several traces (e.g. one per rank) in a process pool, results in input order.

    ``workers=0`` → ``min(len(paths), os.cpu_count())``; ``workers=1`` runs in this process.
    The first error raised by any trace is re-raised."""
    paths = [Path(p) for p in paths]
    if not paths:
        return []
    n = workers or min(len(paths), os.cpu_count() or 1)
    jobs = [(p, backend, short_kernel_us) for p in paths]
    if n <= 1 or len(paths) == 1:
        return [_analyze_one(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=n) as pool:
        return list(pool.map(_analyze_one, jobs))


def cross_checks(path: str | Path, analysis: TraceAnalysis, *, tools: tuple[str, ...] = CROSS_CHECK_TOOLS,
                 max_bytes: int = CROSS_CHECK_MAX_BYTES, n_events: int | None = None,
                 max_events: int = CROSS_CHECK_MAX_EVENTS) -> list[dict[str, Any]]:
    """Run the optional cross-checks available for one trace and compare their GPU timeline with
    the engine's ``analysis``. Never raises: each entry is ``{"tool", "status", "note"}`` with
    status ``agrees`` / ``differs`` (plus ``max_row_diff_ms`` and ``rows_ms``), ``failed`` (the
    tool raised: its one-line error, e.g. HTA's int16 TypeError on traces of > ~32k events),
    ``unavailable`` (not installed) or ``skipped`` (file larger than ``max_bytes`` or more than
    ``max_events`` events, when ``n_events`` is given). TraceLens
    CSVs are only checked when a ``<stem>_perf_report_csvs/`` folder sits beside the trace."""
    p = Path(path)
    size = p.stat().st_size if p.is_file() else 0
    out: list[dict[str, Any]] = []
    total = analysis.timeline["total_time"].time_ms
    for tool in tools:
        if tool == "tracelens-csv" and csv_report_dir(p) is None:
            continue
        if (tool == "tracelens" and not tracelens_available()) or (tool == "hta" and not _hta_available()):
            out.append({"tool": tool, "status": "unavailable", "note": f"{tool} is not installed"})
            continue
        if tool != "tracelens-csv" and (size > max_bytes or (n_events or 0) > max_events):
            out.append({"tool": tool, "status": "skipped",
                        "note": f"{size / 2**20:.0f} MiB on disk, {n_events or '?'} events (limits {max_bytes / 2**20:.0f} "
                                f"MiB, {max_events} events): {tool} loads every event"})
            continue
        try:
            other = analyze_trace(p, backend=tool, short_kernel_us=analysis.short_kernels.threshold_us)
        except Exception as e:  # noqa: BLE001 - a third-party tool's failure is a note, never the rank's
            msg = " ".join(str(e).split())[:240]
            out.append({"tool": tool, "status": "failed", "note": f"{type(e).__name__}: {msg}"})
            continue
        rows = {k: other.timeline[k].time_ms for k in MAIN_TIMELINE_ROWS if k in other.timeline}
        worst = max((abs(v - analysis.timeline[k].time_ms) for k, v in rows.items()), default=0.0)
        ok = worst <= AGREE_FRACTION_OF_TOTAL * total
        out.append({"tool": tool, "status": "agrees" if ok else "differs", "max_row_diff_ms": worst, "rows_ms": rows,
                    "note": (f"gpu_timeline rows within {worst:.4g} ms of the engine's" if ok else
                             f"gpu_timeline rows differ by up to {worst:.4g} ms (> 0.1% of {total:.4g} ms)")
                    + (f"; {len(analysis.warnings)} hygiene warning(s) apply to the engine only" if analysis.warnings and not ok else "")})
    return out
