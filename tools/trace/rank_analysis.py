"""One rank's trace, analysed once: the unit of the graph's per-rank fan-out (LangGraph ``Send``,
worker processes) and of the SLURM job array (:mod:`.slurm_array`).

:func:`analyze_rank` runs the engine (:mod:`.engine`: one bounded-memory pass) and returns a JSON-able
record: every per-rank figure (``analysis``: a :class:`~.models.TraceAnalysis` dump), the TraceLens
timeline rows, HTA's temporal breakdown, per-step figures and the communication kernels with their
collective metadata (columnar, for :mod:`.collectives`). Optional cross-checks (TraceLens, its CSVs
beside the trace, HTA) add evidence under ``cross_checks``; their failure is a note, never a failed
rank. Results are cached by the trace's content hash (:mod:`.cache`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from . import engine
from . import stream as ts_mod
from .backends import CROSS_CHECK_MAX_BYTES, CROSS_CHECK_TOOLS
from .cache import TraceCache, file_sha256
from .collective_types import collective_type
from .engine_window import rank_timeline
from .guard import named_malformed_events
from ..files import check_input_file
from .tables import kernel_tables
from .tracelens_sheets import OpArgsCollector, build_sheets
from .hta_metrics import hta_comm_comp_overlap, hta_temporal_breakdown

#: Version of the per-rank result (part of the cache key): bump when analyze_rank's output changes.
ANALYSIS_VERSION = f"rank-8.s{ts_mod.STREAM_VERSION}"
#: Version of the TraceLens sheets in ``tables`` (:mod:`.tracelens_sheets`), part of the cache key too
#: (a parameter, so the record's ``analysis_version`` string, which the LLM agents see, stays put).
SHEETS_VERSION = 2  # 2: kernel_summary of recorded durations (tables.kernel_tables)



def _launch_lookup(scan: ts_mod.TraceScan) -> tuple[np.ndarray, np.ndarray]:
    """For each GPU event, the start of the CPU event that launched it (NaN when unlinked)."""
    lc, lt = scan.launch_corr, scan.launch_ts
    out = np.full(scan.n_gpu_events, np.nan)
    if lc.size == 0:
        return out, np.zeros(scan.n_gpu_events, dtype=bool)
    order = np.argsort(lc, kind="stable")
    lc_s, lt_s = lc[order], lt[order]
    pos = np.searchsorted(lc_s, scan.corr)
    pos_c = np.minimum(pos, lc_s.size - 1)
    found = (pos < lc_s.size) & (lc_s[pos_c] == scan.corr)
    out[found] = lt_s[pos_c[found]]
    return out, found


def _step_of(launch_ts: np.ndarray, steps: list[tuple[int, float, float]]) -> np.ndarray:
    """ProfilerStep number whose [ts, ts+dur) holds each launch time, -1 otherwise."""
    it = np.full(launch_ts.shape, -1, dtype=np.int64)
    for num, t, d in steps:  # a handful of steps
        it[(launch_ts >= t) & (launch_ts < t + d)] = num
    return it


def rank_record(scan: ts_mod.TraceScan, rank: int) -> dict[str, Any]:
    """The JSON-able per-rank record that :func:`~.collectives.aggregate_ranks` consumes (see analyze_rank)."""
    linked = ts_mod.window_mask(scan, "linked")
    tl, per_device, _notes = rank_timeline(scan, linked)  # the notes reach the rank through engine.analyze_scan
    hta_mask = ts_mod.window_mask(scan, "drop_last_step")
    hta = {"window": "drop_last_step" if scan.steps else "linked"}
    if hta_mask.any():
        hta.update(hta_temporal_breakdown(scan, hta_mask))
        hta["comm_comp_overlap_pct"] = hta_comm_comp_overlap(scan, hta_mask)
    launch_ts, found = _launch_lookup(scan)
    iteration = _step_of(launch_ts, scan.steps)
    last_step_start = max((s[1] for s in scan.steps), default=None)
    # HTA's iteration window: steps but the last, GPU events launched inside them
    steps_out = []
    ends = scan.ts + scan.dur
    for num, t, d in scan.steps:
        sel = (iteration == num) & (scan.stream != ts_mod.NO_STREAM)
        steps_out.append({"step": num, "ts": t, "dur": d,
                          "gpu_max_end": float(ends[sel].max()) if sel.any() else None})
    idx = np.fromiter(scan.comm_args.keys(), dtype=np.int64, count=len(scan.comm_args))
    idx.sort()
    comm: dict[str, list] = {k: [] for k in ("ts", "dur", "stream", "name", "collective", "args_name", "pg",
                                             "pg_ranks", "group_size", "dtype", "in_nelems", "out_nelems",
                                             "iteration", "in_hta_window")}
    for i in idx.tolist():
        if scan.corr[i] < 0:  # TraceLens keeps only comm kernels linked by correlation / External id
            continue
        a = scan.comm_args[i]
        nm = scan.names[scan.name_id[i]]
        comm["ts"].append(float(scan.ts[i]))
        comm["dur"].append(float(scan.dur[i]))
        sid = scan.stream_id(i)
        comm["stream"].append(sid if isinstance(sid, int) and not isinstance(sid, bool) else None)
        comm["name"].append(nm)
        comm["args_name"].append(a.get("Collective name"))
        comm["collective"].append(collective_type(a.get("Collective name"), nm))
        comm["pg"].append(a.get("Process Group Name"))
        pr = a.get("Process Group Ranks")
        comm["pg_ranks"].append(str(pr) if pr is not None else None)
        gs = a.get("Group size")
        comm["group_size"].append(int(gs) if isinstance(gs, (int, float)) else None)
        comm["dtype"].append(a.get("dtype"))
        for key, col in (("In msg nelems", "in_nelems"), ("Out msg nelems", "out_nelems")):
            v = a.get(key)
            comm[col].append(float(v) if isinstance(v, (int, float)) else None)
        comm["iteration"].append(int(iteration[i]))
        lt = launch_ts[i]
        comm["in_hta_window"].append(bool(found[i] and (last_step_start is None or lt < last_step_start)))
    dist = scan.header.get("distributedInfo") or {}
    props = scan.header.get("deviceProperties") or []
    return {
        "device_name": str(props[0].get("name", "")) if props and isinstance(props[0], dict) else "",
        "base_time_ns": scan.header.get("baseTimeNanoseconds"),
        # first GPU start and last GPU end (trace µs): when the trace ran (ranks.foreign_traces)
        "gpu_span_us": [float(scan.ts.min()), float((scan.ts + scan.dur_raw).max())] if len(scan.ts) else None,
        "rank": int(rank),
        "path": scan.path,
        "analysis_version": ANALYSIS_VERSION,
        "backend": "stream",
        "trace_rank": dist.get("rank"),
        "world_size": dist.get("world_size"),
        "n_events": scan.n_events,
        "n_gpu_events": int(linked.sum()),
        "timeline_us": tl,
        "per_device": per_device,
        "timeline": {r["type"]: {"time_ms": r["time ms"], "percent": r["percent"]} for r in ts_mod.timeline_rows(tl)},
        "hta": hta,
        "steps": steps_out,
        "comm": comm,
        "top_kernels": ts_mod.kernel_counts(scan, linked, top=15),
        "scan_bytes": scan.nbytes(),
    }


def cross_check_tools(cross_check: bool | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """The cross-check tools asked for: ``True`` = all of :data:`~.backends.CROSS_CHECK_TOOLS`,
    ``False``/``None``/``()`` = none (the default: opt-in with ``--cross-check``), else the names
    given, in that tuple's order. Raises ``ValueError`` for an unknown tool."""
    if cross_check is True:
        return CROSS_CHECK_TOOLS
    if not cross_check:
        return ()
    bad = [t for t in cross_check if t not in CROSS_CHECK_TOOLS]
    if bad:
        raise ValueError(f"unknown cross-check {bad[0]!r}; choose from {', '.join(CROSS_CHECK_TOOLS)}")
    return tuple(t for t in CROSS_CHECK_TOOLS if t in cross_check)


def _rank_params(path: Path, cross_check: bool | tuple[str, ...]) -> dict[str, Any]:
    size = path.stat().st_size if path.is_file() else 0
    tools = cross_check_tools(cross_check)
    return {"cross_check": list(tools) if (tools and 0 < size <= CROSS_CHECK_MAX_BYTES) else False,
            "sheets": SHEETS_VERSION}


def _label(rec: dict[str, Any], path: Path, rank: int, hit: bool, label: str | None = None,
           digest: str | None = None) -> dict[str, Any]:
    rec = dict(rec)
    rec["rank"] = int(rank)
    rec["label"] = label if label is not None else str(int(rank))
    rec["path"] = str(path)
    if isinstance(rec.get("analysis"), dict):
        rec["analysis"] = dict(rec["analysis"], rank=int(rank), path=str(path))
    rec["sha256"] = digest or file_sha256(path)
    rec["from_cache"] = hit
    return rec


def cached_rank(path: str, rank: int, cache_dir: str | None = None, *, cross_check: bool | tuple[str, ...] = (),
                label: str | None = None) -> dict[str, Any] | None:
    """:func:`analyze_rank`'s result if it is already in the cache (the trace is hashed, not
    parsed), else None. Lets the graph skip the fan-out for ranks analysed in an earlier run."""
    p = Path(path)
    if not p.is_file():
        return None
    params = _rank_params(p, cross_check)
    rec = TraceCache(cache_dir).get("rank", file_sha256(p), ANALYSIS_VERSION, params)
    return _label(rec, p, rank, True, label) if rec is not None else None


def analyze_rank(path: str, rank: int, cache_dir: str | None = None, *, cross_check: bool | tuple[str, ...] = (),
                 label: str | None = None, progress=None, also: tuple = (), taps: tuple = (),
                 opened: BinaryIO | None = None, store: bool = True, workers: int | None = None) -> dict[str, Any]:
    """Analyse one rank's trace; the unit of the graph's per-rank fan-out (LangGraph ``Send``).

    Runs the engine once over the trace (one bounded-memory pass, :mod:`.engine`). With
    ``cross_check`` (the tools, :func:`cross_check_tools`; none by default) and a file of at most
    :data:`~.backends.CROSS_CHECK_MAX_BYTES`, those optional cross-checks (TraceLens, TraceLens CSVs
    beside the trace, HTA) also run and are recorded under ``cross_checks``; their failures are
    notes there, never errors of the rank.

    The result is cached under ``cache_dir`` (default: cache.default_cache_dir()) keyed by the sha256
    of the trace bytes, ANALYSIS_VERSION and whether cross-checks ran; ``"from_cache"`` says whether
    it was served from there. Picklable arguments and result: safe to run in a ProcessPoolExecutor or
    a SLURM array task. ``label``: the rank's unique label (``"0-dup1"`` for a second file claiming
    rank 0, see :mod:`.ranks`). ``also``: other event consumers fed during the engine's read
    (:func:`.stream.scan_trace`), ``taps``: consumers of its bytes; on a cache hit both are fed by a
    read of the same open file. The trace is opened once for the hash, the header, the events and
    the consumers (the optional cross-checks open it themselves); ``opened``: that file already open
    by the caller (read from its start, left open), so that other readers of the caller's can read
    the same file (:func:`.onepass.read_rank`'s lanes). ``store=False``: a computed result is not
    written to the cache; the call returns ``{"value", "from_cache", "sha256"}`` for
    :func:`store_rank` to write and label later (a pass run before the command may write anything:
    :func:`.onepass.engine_part`). ``workers``: the parallel pass's processes for the engine's read
    (:func:`.stream.scan_trace`; default by the trace's size and the CPUs).

    Returns a JSON-able dict: rank, label, path, sha256, analysis (every per-rank figure:
    TraceAnalysis), timeline (TraceLens rows, ms and percent), timeline_us, hta (temporal breakdown µs,
    comm_comp_overlap_pct), steps, comm (columnar communication kernels), top_kernels, tables
    (kernel_summary / short_kernels_summary rows, :mod:`.tables`), tracelens_sheets (the other TraceLens
    sheets and short_kernels_summary by input shapes, :mod:`.tracelens_sheets`), cross_checks,
    from_cache. Raises InputError / NoGpuEventsError / GraphKernelsNotRecordedError."""
    p = Path(path)
    params = _rank_params(p, cross_check)
    cache = TraceCache(cache_dir)

    def compute() -> dict[str, Any]:
        args = OpArgsCollector()  # the op arguments TraceLens's sheets need, from the same read
        with named_malformed_events(p):  # a malformed event (the engine's or a consumer's failure): one line
            scan = ts_mod.scan_trace(p, progress, also, taps=taps, raw=raw, sheets=args, workers=workers)
            rec = rank_record(scan, rank)
            keep: dict[str, Any] = {}
            analysis = engine.analyze_scan(scan, keep=keep)
            rec["tables"] = kernel_tables(scan, keep, keep["timeline_us"]["total_time"])
            rec["tracelens_sheets"] = build_sheets(scan, keep, args)  # written as CSVs, then dropped (big)
        n_events = scan.n_events
        del scan, keep, args
        rec["analysis"] = analysis.model_dump(mode="json")
        rec["cross_checks"] = []
        if params["cross_check"]:
            from .backends import cross_checks  # noqa: PLC0415

            tr = rec.get("trace_rank")
            rec["cross_checks"] = cross_checks(p, analysis, tools=tuple(params["cross_check"]), n_events=n_events,
                                               rank=tr if isinstance(tr, int) else 0)
        return rec

    if opened is not None:
        raw: BinaryIO | None = opened
        raw.seek(0)
    else:
        try:
            raw = open(p, "rb")  # noqa: SIM115 - one open: hash, header, events, consumers
        except OSError:
            raw = None  # the hash reports the missing or unreadable file
        except ValueError:  # a NUL byte in the path: InputError naming it (open's ValueError is no input error)
            check_input_file(p)
            raise
    try:
        if store:
            rec, hit = cache.get_or_compute("rank", p, ANALYSIS_VERSION, compute, params, raw=raw)
            digest = None
        else:  # the caller stores it (store_rank): a lane's pass before the run may write anything
            digest = file_sha256(p, raw)
            got = cache.get("rank", digest, ANALYSIS_VERSION, params)
            rec, hit = (got, True) if got is not None else (compute(), False)
        if hit and (also or taps):
            with named_malformed_events(p):  # the consumers' refusal of an event named as in the pass
                ts_mod.feed_events(p, also, taps=taps, raw=raw)
    finally:
        if raw is not None and opened is None:
            raw.close()
    if not store:
        return {"value": rec, "from_cache": hit, "sha256": digest}
    return _label(rec, p, rank, hit, label)


def store_rank(path: str, rank: int, cache_dir: str | None, got: dict[str, Any], *,
               cross_check: bool | tuple[str, ...] = (), label: str | None = None) -> dict[str, Any]:
    """:func:`analyze_rank`'s result from what ``analyze_rank(..., store=False)`` returned (``got``:
    ``{"value", "from_cache", "sha256"}``), the computed value written to the cache now (under the
    content hash that pass took). Raises OSError when the cache cannot be written."""
    p = Path(path)
    if not got["from_cache"]:
        TraceCache(cache_dir).put("rank", got["sha256"], ANALYSIS_VERSION, got["value"], _rank_params(p, cross_check))
    return _label(got["value"], p, rank, got["from_cache"], label, got["sha256"])


def _analyze_rank_star(args: tuple) -> dict[str, Any]:
    path, rank, cache_dir, cross = args
    return analyze_rank(path, rank, cache_dir, cross_check=cross)


def analyze_ranks(rank_traces: dict[int, str | os.PathLike], cache_dir: str | None = None,
                  workers: int = 0, *, cross_check: bool | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """:func:`analyze_rank` for each rank in a process pool (``workers=0``: one per CPU, at most
    one per rank; 1: in this process). Each worker holds one trace at a time, so peak memory is
    ``workers`` x the per-trace bound. ``cross_check`` runs the optional cross-checks of small
    traces too. Results in rank order; the first error is re-raised."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(str(p), int(r), cache_dir, cross_check) for r, p in sorted(rank_traces.items())]
    done: dict[int, dict[str, Any]] = {}
    for path, rank, _, cross in jobs:  # ranks already analysed: no worker process at all
        hit = cached_rank(path, rank, cache_dir, cross_check=cross)
        if hit is not None:
            done[rank] = hit
    todo = [j for j in jobs if j[1] not in done]
    n = workers or min(len(todo), os.cpu_count() or 1)
    if n <= 1 or len(todo) <= 1:
        fresh = [_analyze_rank_star(j) for j in todo]
    else:
        with ProcessPoolExecutor(max_workers=n) as pool:
            fresh = list(pool.map(_analyze_rank_star, todo))
    done.update({r["rank"]: r for r in fresh})
    return [done[j[1]] for j in jobs]
