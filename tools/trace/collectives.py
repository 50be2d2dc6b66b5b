"""Multi-rank findings from per-rank kineto traces: busy/idle and exposed communication per rank,
collective analysis across ranks (time, message size, algorithm and bus bandwidth), stragglers.

The work is split map/reduce so that the graph can fan out one worker per rank:

* :func:`analyze_rank` (map, one trace, picklable, safe in a ProcessPoolExecutor or a SLURM array
  task) streams the trace (:mod:`ai4s_graph.tools.trace.stream`, bounded memory), keeps the
  per-rank timeline and the communication kernels with their collective metadata, and returns a
  JSON-able dict, cached by the trace's content hash (:mod:`ai4s_graph.tools.trace.cache`);
* :func:`aggregate_ranks` (reduce) matches collectives across ranks and derives the report;
* :func:`analyze_collectives` does both for ``{rank: path}`` and returns a :class:`CollectiveReport`.

Definitions and their sources
-----------------------------
* Per-rank busy/idle/exposed communication: TraceLens ``gpu_timeline`` (see trace_stream).
* Communication-computation overlap: HolisticTraceAnalysis ``get_comm_comp_overlap`` — the share
  of merged communication-kernel time that overlaps merged computation-kernel time, in HTA's
  default window (kernels launched before the last ProfilerStep).
* Matching a collective across ranks: TraceLens ``NcclAnalyser`` — the k-th kernel of a process
  group on each rank is the same collective; when no kernel carries process-group metadata and
  each rank has one communication stream, the k-th communication kernel ("simplified mode").
* Per collective (TraceLens ``build_df_nccl_implicit_sync_cat``): wait time of rank r =
  latest start - start on r; skew in start = max wait; the rank with the largest wait arrived
  first, the rank with zero wait arrived last; communication latency = shortest duration.
* Bandwidth (NCCL, nccl-tests ``doc/PERFORMANCE.md``): algbw = S / t with S the message size
  (output size for all_gather, input size otherwise) and t the latency; busbw = algbw x factor:
  all_reduce 2(n-1)/n, all_gather / reduce_scatter / all_to_all (n-1)/n, broadcast / reduce 1.
  Units: GB/s = 1e9 B/s, as nccl-tests prints (TraceLens reports GiB/s: divide by 1.0737).
* Straggler summary (TraceLens ``build_df_straggler_summary``): per rank total and mean wait,
  times arrived last / first; the rank that arrives last most often waits least: it is the
  straggler. HTA's ``get_potential_stragglers`` (last long communication kernel starting latest)
  is computed too (``hta_potential_stragglers``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from . import stream as ts_mod
from ..errors import InputError
from ..files import package_dir
from .cache import TraceCache, file_sha256

#: Version of the per-rank result (part of the cache key): bump when analyze_rank's output changes.
ANALYSIS_VERSION = f"rank-1.s{ts_mod.STREAM_VERSION}"

#: Traces larger than this (bytes on disk) skip tools.tracelens.analyze_trace (which loads the
#: whole event list) and are analysed by the streaming path only.
STREAM_THRESHOLD_BYTES = 64 * 1024 * 1024

#: Bytes per element of the ``dtype`` names PyTorch writes in ``record_param_comms`` args
#: (c10 ScalarType names; TraceLens's ``dtype2bytes`` holds the common subset).
DTYPE_BYTES: dict[str, int] = {
    "Float": 4, "Int": 4, "Long": 8, "BFloat16": 2, "Bool": 1, "Byte": 1, "Char": 1, "Double": 8,
    "Half": 2, "Short": 2, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
    "UInt16": 2, "UInt32": 4, "UInt64": 8,
}

#: busbw / algbw factors, n = ranks in the group (NCCL nccl-tests doc/PERFORMANCE.md).
BUSBW_FACTOR = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}

#: Collectives where every rank waits for the last one (TraceLens's implicit-sync category).
IMPLICIT_SYNC = {"allreduce", "reducescatter", "allgather", "alltoall"}

_NAME_TO_TYPE = {
    "allreduce": "allreduce", "allreduce_coalesced": "allreduce", "all_reduce": "allreduce",
    "reducescatter": "reducescatter", "_reduce_scatter_base": "reducescatter",
    "reduce_scatter_tensor_coalesced": "reducescatter", "reduce_scatter": "reducescatter",
    "allgather": "allgather", "all_gather": "allgather", "_allgather_base": "allgather",
    "all_gather_into_tensor_coalesced": "allgather", "allgather_into_tensor_coalesced": "allgather",
    "_all_gather_base": "allgather",
    "all_to_all": "alltoall", "alltoall": "alltoall", "all_to_allv": "alltoallv", "alltoallv": "alltoallv",
    "broadcast": "broadcast", "reduce": "reduce", "send": "sendrecv", "recv": "sendrecv",
    "barrier": "barrier", "gather": "gather", "scatter": "scatter",
}
_KERNEL_TYPE_RE = [
    (re.compile(r"AllReduce|cross_device_reduce", re.I), "allreduce"),
    (re.compile(r"ReduceScatter", re.I), "reducescatter"),
    (re.compile(r"AllGather", re.I), "allgather"),
    (re.compile(r"AllToAll", re.I), "alltoall"),
    (re.compile(r"Broadcast", re.I), "broadcast"),
    (re.compile(r"SendRecv|_Send|_Recv", re.I), "sendrecv"),
    (re.compile(r"Reduce", re.I), "reduce"),
]
#: HTA's straggler metric looks at kernels whose name starts with ``ncclKernel`` (hta/analyzers/
#: straggler.py); newer NCCL (``ncclDevKernel_``) and RCCL names are accepted here as well.
_HTA_COMM_NAME_RE = re.compile(r"^(nccl(Dev)?Kernel|rccl)")


def collective_type(args_name: str | None, kernel_name: str) -> str:
    """Canonical collective (``allreduce``, ``allgather``, ``reducescatter``, ``alltoall``,
    ``broadcast``, ``reduce``, ``sendrecv``...) from the ``Collective name`` arg, else from the
    kernel name (``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``allreduce``); ``unknown``."""
    if args_name:
        t = _NAME_TO_TYPE.get(str(args_name).lower())
        if t:
            return t
    for rx, t in _KERNEL_TYPE_RE:
        if rx.search(kernel_name):
            return t
    return str(args_name).lower() if args_name else "unknown"


# ============================================================================ result models


class RankRow(BaseModel):
    """One rank's GPU time split (µs; TraceLens gpu_timeline) and HTA overlap (percent)."""

    rank: int
    busy_us: float
    idle_us: float
    idle_pct: float
    computation_us: float
    exposed_comm_us: float
    exposed_comm_pct: float
    total_comm_us: float
    exposed_memcpy_us: float
    total_us: float
    comm_comp_overlap_pct: float | None = Field(description="HTA get_comm_comp_overlap, percent")
    n_comm_kernels: int


class CollectiveGroup(BaseModel):
    """Collectives of one kind and message size (one row per (collective, dtype, bytes, group))."""

    collective: str
    dtype: str | None
    msg_bytes: float | None
    group_size: int | None
    count: int
    total_latency_us: float
    mean_latency_us: float
    min_latency_us: float
    max_latency_us: float
    mean_skew_start_us: float
    algbw_gbps: float | None = Field(description="mean over instances, GB/s = 1e9 B/s")
    busbw_gbps: float | None
    busbw_min_gbps: float | None
    busbw_max_gbps: float | None


class StragglerRow(BaseModel):
    """TraceLens straggler_summary row for one rank (µs)."""

    rank: int
    total_wait_us: float
    mean_wait_us: float
    times_arrived_last: int
    times_arrived_first: int
    pct_arrived_last: float
    num_collectives: int
    total_comm_dur_us: float


class StragglerClaim(BaseModel):
    """Data for a claim that one rank is slower than the rest."""

    rank: int
    statement: str
    pct_arrived_last: float
    times_arrived_last: int
    num_collectives: int
    wait_imposed_us: float = Field(description="mean over collectives of the other ranks' mean wait for it")
    rule: str


class StragglerReport(BaseModel):
    """Straggler findings: TraceLens-style per-rank rows (arrival order and wait at each matched
    collective), the rank that arrives last most often, HTA's potential stragglers, and the claim."""

    rows: list[StragglerRow]
    straggler_rank: int | None = Field(description="rank that arrives last most often")
    hta_potential_stragglers: list[int] = Field(default_factory=list)
    hta_metric_kernel: str | None = None
    claim: StragglerClaim | None = None


class CollectiveReport(BaseModel):
    """Multi-rank findings. Times µs, sizes bytes, bandwidth GB/s (1e9 B/s)."""

    ranks: list[int]
    world_size: int | None
    simplified_matching: bool
    per_rank: list[RankRow]
    groups: list[CollectiveGroup]
    n_collectives_matched: int
    stragglers: StragglerReport
    slowest_rank: int | None = Field(description="rank with the most computation time")
    notes: list[str] = Field(default_factory=list)


# ============================================================================ per-rank (map)


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
    """The JSON-able per-rank record that :func:`aggregate_ranks` consumes (see analyze_rank)."""
    linked = ts_mod.window_mask(scan, "linked")
    tl = ts_mod.gpu_timeline(scan, linked)
    hta_mask = ts_mod.window_mask(scan, "drop_last_step")
    hta = {"window": "drop_last_step" if scan.steps else "linked"}
    if hta_mask.any():
        hta.update(ts_mod.hta_temporal_breakdown(scan, hta_mask))
        hta["comm_comp_overlap_pct"] = ts_mod.hta_comm_comp_overlap(scan, hta_mask)
    launch_ts, found = _launch_lookup(scan)
    iteration = _step_of(launch_ts, scan.steps)
    last_step_start = max((s[1] for s in scan.steps), default=None)
    # HTA's iteration window: steps but the last, GPU events launched inside them
    steps_out = []
    ends = scan.ts + scan.dur
    for num, t, d in scan.steps:
        sel = (iteration == num) & (scan.stream >= 0)
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
        comm["stream"].append(int(scan.stream[i]))
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
    return {
        "rank": int(rank),
        "path": scan.path,
        "analysis_version": ANALYSIS_VERSION,
        "backend": "stream",
        "trace_rank": dist.get("rank"),
        "world_size": dist.get("world_size"),
        "n_events": scan.n_events,
        "n_gpu_events": int(linked.sum()),
        "timeline_us": tl,
        "timeline": {r["type"]: {"time_ms": r["time ms"], "percent": r["percent"]} for r in ts_mod.timeline_rows(tl)},
        "hta": hta,
        "steps": steps_out,
        "comm": comm,
        "top_kernels": ts_mod.kernel_counts(scan, linked, top=15),
        "scan_bytes": scan.nbytes(),
    }


def _rank_params(path: Path, single_trace: bool, stream_threshold_bytes: int) -> dict[str, Any]:
    size = path.stat().st_size if path.is_file() else 0
    return {"single_trace": bool(single_trace and 0 < size < stream_threshold_bytes)}


def _label(rec: dict[str, Any], path: Path, rank: int, hit: bool) -> dict[str, Any]:
    rec = dict(rec)
    rec["rank"] = int(rank)
    rec["sha256"] = file_sha256(path)
    rec["from_cache"] = hit
    return rec


def cached_rank(path: str, rank: int, cache_dir: str | None = None, *,
                stream_threshold_bytes: int = STREAM_THRESHOLD_BYTES, single_trace: bool = True) -> dict[str, Any] | None:
    """:func:`analyze_rank`'s result if it is already in the cache (the trace is hashed, not
    parsed), else None. Lets the graph skip the fan-out for ranks analysed in an earlier run."""
    p = Path(path)
    if not p.is_file():
        return None
    params = _rank_params(p, single_trace, stream_threshold_bytes)
    rec = TraceCache(cache_dir).get("rank", file_sha256(p), ANALYSIS_VERSION, params)
    return _label(rec, p, rank, True) if rec is not None else None


def analyze_rank(path: str, rank: int, cache_dir: str | None = None, *,
                 stream_threshold_bytes: int = STREAM_THRESHOLD_BYTES,
                 single_trace: bool = True) -> dict[str, Any]:
    """Analyse one rank's trace; the unit of the graph's per-rank fan-out (LangGraph ``Send``).

    Streams the trace once (memory bounded by the GPU-event count, see trace_stream) for the
    timeline and the communication kernels. When the file is smaller than
    ``stream_threshold_bytes`` and ``single_trace`` is set, ``tools.tracelens.analyze_trace`` (which
    loads the whole trace; TraceLens when installed) also runs and its result is stored under
    ``"single_trace"``; a failure there is recorded in ``"single_trace_error"``, not raised.

    The result is cached under ``cache_dir`` (default: trace_cache.default_cache_dir()) keyed by
    the sha256 of the trace bytes, ANALYSIS_VERSION and whether single_trace ran; ``"from_cache"``
    says whether it was served from there. Picklable arguments and result: safe to run in a
    ProcessPoolExecutor or a SLURM array task.

    Returns a JSON-able dict: rank, path, sha256, timeline (TraceLens rows, ms and percent),
    timeline_us, hta (temporal breakdown µs, comm_comp_overlap_pct), steps, comm (columnar
    communication kernels), top_kernels, from_cache. Raises InputError / NoGpuEventsError."""
    p = Path(path)
    params = _rank_params(p, single_trace, stream_threshold_bytes)
    cache = TraceCache(cache_dir)

    def compute() -> dict[str, Any]:
        rec = rank_record(ts_mod.scan_trace(p), rank)
        if params["single_trace"]:
            try:
                from . import backends as tracelens

                rec["single_trace"] = tracelens.analyze_trace(p).model_dump(mode="json")
            except Exception as err:  # noqa: BLE001 - recorded, the streaming result stands
                rec["single_trace_error"] = " ".join(str(err).split())[:300]
        return rec

    rec, hit = cache.get_or_compute("rank", p, ANALYSIS_VERSION, compute, params)
    return _label(rec, p, rank, hit)


def _analyze_rank_star(args: tuple) -> dict[str, Any]:
    path, rank, cache_dir, single = args
    return analyze_rank(path, rank, cache_dir, single_trace=single)


def analyze_ranks(rank_traces: dict[int, str | os.PathLike], cache_dir: str | None = None,
                  workers: int = 0, *, single_trace: bool = True) -> list[dict[str, Any]]:
    """:func:`analyze_rank` for each rank in a process pool (``workers=0``: one per CPU, at most
    one per rank; 1: in this process). Each worker holds one trace at a time, so peak memory is
    ``workers`` x the per-trace bound. ``single_trace=False`` skips the full single-trace analysis
    of small traces (streaming path only; ~10x faster per rank). Results in rank order; the first
    error is re-raised."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(str(p), int(r), cache_dir, single_trace) for r, p in sorted(rank_traces.items())]
    done: dict[int, dict[str, Any]] = {}
    for path, rank, _, single in jobs:  # ranks already analysed: no worker process at all
        hit = cached_rank(path, rank, cache_dir, single_trace=single)
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


# ============================================================================ cross-rank (reduce)


def _long_comm_frame(results: list[dict[str, Any]]) -> pd.DataFrame:
    frames = []
    for r in results:
        c = r.get("comm") or {}
        if not c.get("ts"):
            continue
        df = pd.DataFrame(c)
        df["rank"] = int(r["rank"])
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def match_collectives(long: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """Add ``collective_id`` to the long table of communication kernels (TraceLens matching).

    Returns ``(frame, simplified)``: ``simplified`` when no kernel carries a process group and
    every rank has one communication stream (then the k-th kernel of each rank is matched)."""
    df = long.copy()
    pg_missing = df["pg"].isna().all()
    single_stream = bool((df.groupby("rank")["stream"].nunique() <= 1).all())
    simplified = bool(pg_missing and single_stream)
    df = df.sort_values(["rank", "ts"], kind="stable")
    if simplified:
        df["pg"] = "all"
    else:
        df["pg"] = df["pg"].fillna("Unknown_Group").astype(str)
    df["index_in_group"] = df.groupby(["pg", "rank"]).cumcount()
    df["collective_id"] = df["pg"] + "_" + df["index_in_group"].astype(str)
    return df, simplified


def per_collective(df: pd.DataFrame, simplified: bool) -> pd.DataFrame:
    """One row per matched collective: latency, skews, arrival ranks, size, algbw/busbw and
    per-rank wait (column ``wait`` holds a {rank: µs} dict)."""
    df = df.copy()
    df["end"] = df["ts"] + df["dur"]
    g = df.groupby("collective_id", sort=False)
    first = g.first()
    out = pd.DataFrame({
        "collective": first["collective"],
        "args_name": first["args_name"],
        "dtype": first["dtype"],
        "group_size": first["group_size"],
        "in_nelems": first["in_nelems"],
        "out_nelems": first["out_nelems"],
        "n_ranks": g["rank"].nunique(),
        "latest_start": g["ts"].max(),
        "comm_latency_us": g["dur"].min(),
        "skew_end_us": g["end"].max() - g["end"].min(),
    })
    df = df.join(out["latest_start"], on="collective_id")
    df["wait"] = df["latest_start"] - df["ts"]
    gw = df.groupby("collective_id", sort=False)
    out["skew_start_us"] = gw["wait"].max()
    out["avg_wait_us"] = gw["wait"].mean()
    # earliest arrival = largest wait; last arrival = smallest wait (ties: lowest index as idxmin/idxmax)
    out["earliest_arrival_rank"] = df.loc[gw["wait"].idxmax(), ["collective_id", "rank"]].set_index("collective_id")["rank"]
    out["last_arrival_rank"] = df.loc[gw["wait"].idxmin(), ["collective_id", "rank"]].set_index("collective_id")["rank"]
    out["wait"] = gw.apply(lambda x: dict(zip(x["rank"].astype(int), x["wait"].astype(float))), include_groups=False)
    # message size and bandwidth
    bpe = out["dtype"].map(lambda d: DTYPE_BYTES.get(d) if isinstance(d, str) else None).astype(float)
    nel = np.where(out["collective"] == "allgather", out["out_nelems"].astype(float), out["in_nelems"].astype(float))
    out["msg_bytes"] = nel * bpe
    out["algbw_gbps"] = out["msg_bytes"] / (out["comm_latency_us"] * 1e-6) / 1e9
    out.loc[out["comm_latency_us"] <= 0, "algbw_gbps"] = np.nan
    gs = out["group_size"].astype(float).where(out["group_size"].notna(), out["n_ranks"].astype(float))
    factor = [BUSBW_FACTOR[c](n) if c in BUSBW_FACTOR and n and n > 0 else np.nan
              for c, n in zip(out["collective"], gs)]
    out["busbw_gbps"] = out["algbw_gbps"] * np.asarray(factor, dtype=float)
    # implicit-sync collectives (TraceLens): all ranks wait for the last one
    sync = out["collective"].isin(IMPLICIT_SYNC)
    if simplified:
        sync |= out["args_name"].isna()
    out["implicit_sync"] = sync
    return out.reset_index()


def straggler_summary(coll: pd.DataFrame, long: pd.DataFrame) -> list[StragglerRow]:
    """TraceLens ``straggler_summary`` over the implicit-sync collectives matched on >1 rank."""
    sync = coll[coll["implicit_sync"] & (coll["n_ranks"] > 1)]
    if sync.empty:
        return []
    ranks = sorted(long["rank"].unique().tolist())
    wait = pd.DataFrame(list(sync["wait"]), index=sync.index)[ranks]
    n = len(sync)
    last = wait.idxmin(axis=1)
    dur = long.groupby("rank")["dur"].sum()
    rows = []
    for r in ranks:
        rows.append(StragglerRow(
            rank=int(r), total_wait_us=float(wait[r].sum()), mean_wait_us=float(wait[r].mean()),
            times_arrived_last=int((last == r).sum()),
            times_arrived_first=int((sync["earliest_arrival_rank"] == r).sum()),
            pct_arrived_last=100.0 * float((last == r).sum()) / n, num_collectives=n,
            total_comm_dur_us=float(dur.get(r, 0.0))))
    rows.sort(key=lambda x: x.total_wait_us)
    return rows


def hta_potential_stragglers(results: list[dict[str, Any]], long: pd.DataFrame, num_candidates: int = 2,
                             min_normalized_duration: float = 0.01) -> tuple[list[int], str | None]:
    """HTA's ``get_potential_stragglers`` (hta/analyzers/straggler.py), re-derived.

    Over the profiled steps but the last: keep communication kernels on a stream > 0 lasting at
    least ``min_normalized_duration`` x mean iteration time; per (rank, stream, iteration, name)
    take the last one; pick the (stream, name) whose duration varies most across ranks (mean over
    iterations of the std); per iteration the ``num_candidates`` ranks with the latest normalized
    start are stragglers; ranks sorted by how often they were. Returns ``(ranks, kernel name)``."""
    steps: dict[int, list[tuple[float, float, float | None]]] = {}
    for r in results:
        st = r.get("steps") or []
        for s in st[:-1]:  # HTA drops the last profiler step
            steps.setdefault(s["step"], []).append((s["ts"], s["dur"], s["gpu_max_end"]))
    if not steps or long.empty:
        return [], None
    iterations = sorted(steps)
    t_min = min(t for v in steps.values() for t, _, _ in v)
    t_max = max(max(t + d, e if e is not None else t + d) for v in steps.values() for t, d, e in v)
    mean_iter = (t_max - t_min) / len(iterations)
    k = long[(long["stream"] > 0) & long["iteration"].isin(iterations) & (long["iteration"] > 0)
             & long["in_hta_window"] & (long["dur"] >= mean_iter * min_normalized_duration)
             & long["name"].str.match(_HTA_COMM_NAME_RE)]
    if k.empty:
        return [], None
    k = k.sort_values("ts", kind="stable").groupby(["rank", "stream", "iteration", "name"], as_index=False).last()
    k["start_n"] = (k["ts"] - t_min) / mean_iter
    k["dur_n"] = k["dur"] / mean_iter
    spread = k.groupby(["stream", "iteration", "name"])["dur_n"].std().groupby(["stream", "name"]).mean()
    if spread.dropna().empty:
        return [], None
    stream, name = spread.idxmax()
    cand = k[(k["stream"] == stream) & (k["name"] == name)]
    kk = max(1, num_candidates)
    counts: dict[int, int] = {}
    for _, grp in cand.groupby("iteration"):
        vals = sorted(grp["start_n"].tolist(), reverse=True)
        thr = vals[min(kk, len(vals)) - 1]
        for rk, v in zip(grp["rank"], grp["start_n"]):
            counts[int(rk)] = counts.get(int(rk), 0) + (1 if v >= thr else 0)
    ranked = sorted(counts, key=lambda r: -counts[r])
    return ranked[:kk], name


def _straggler_claim(rows: list[StragglerRow], world: int) -> StragglerClaim | None:
    """A claim when one rank arrives last at >= max(50 %, 1.5 x 100/n %) of the collectives."""
    if len(rows) < 2:
        return None
    top = max(rows, key=lambda x: (x.times_arrived_last, -x.total_wait_us))
    need = max(50.0, 150.0 / world)
    if top.pct_arrived_last < need:
        return None
    others = [x.mean_wait_us for x in rows if x.rank != top.rank]
    imposed = float(np.mean(others)) - top.mean_wait_us
    return StragglerClaim(
        rank=top.rank,
        statement=(f"rank {top.rank} is a straggler: it arrives last at {top.times_arrived_last} of "
                   f"{top.num_collectives} collectives ({top.pct_arrived_last:.0f}%); the other ranks wait "
                   f"{imposed:.1f} us longer per collective on average"),
        pct_arrived_last=top.pct_arrived_last, times_arrived_last=top.times_arrived_last,
        num_collectives=top.num_collectives, wait_imposed_us=imposed,
        rule=f"pct_arrived_last >= max(50, 150/n_ranks) = {need:.1f}% (n_ranks={world})")


def _rank_row(r: dict[str, Any]) -> RankRow:
    tl = r["timeline_us"]
    tot = tl["total_time"] or 1.0
    return RankRow(
        rank=int(r["rank"]), busy_us=tl["busy_time"], idle_us=tl["idle_time"], idle_pct=100 * tl["idle_time"] / tot,
        computation_us=tl["computation_time"], exposed_comm_us=tl["exposed_comm_time"],
        exposed_comm_pct=100 * tl["exposed_comm_time"] / tot, total_comm_us=tl["total_comm_time"],
        exposed_memcpy_us=tl["exposed_memcpy_time"], total_us=tl["total_time"],
        comm_comp_overlap_pct=(r.get("hta") or {}).get("comm_comp_overlap_pct"),
        n_comm_kernels=len((r.get("comm") or {}).get("ts", [])))


def _groups(coll: pd.DataFrame) -> list[CollectiveGroup]:
    out = []
    keys = ["collective", "dtype", "msg_bytes", "group_size"]
    c = coll.copy()
    for key, g in c.groupby(keys, dropna=False, sort=False):
        coll_name, dtype, mb, gsz = (None if (not isinstance(v, str) and pd.isna(v)) else v for v in key)

        def _f(x):
            x = x.dropna()
            return float(x.mean()) if len(x) else None

        out.append(CollectiveGroup(
            collective=str(coll_name), dtype=dtype, msg_bytes=float(mb) if mb is not None else None,
            group_size=int(gsz) if gsz is not None else None, count=len(g),
            total_latency_us=float(g["comm_latency_us"].sum()), mean_latency_us=float(g["comm_latency_us"].mean()),
            min_latency_us=float(g["comm_latency_us"].min()), max_latency_us=float(g["comm_latency_us"].max()),
            mean_skew_start_us=float(g["skew_start_us"].mean()),
            algbw_gbps=_f(g["algbw_gbps"]), busbw_gbps=_f(g["busbw_gbps"]),
            busbw_min_gbps=float(g["busbw_gbps"].min()) if g["busbw_gbps"].notna().any() else None,
            busbw_max_gbps=float(g["busbw_gbps"].max()) if g["busbw_gbps"].notna().any() else None))
    out.sort(key=lambda x: -x.total_latency_us)
    return out


def build_report(results: list[dict[str, Any]], *, num_candidates: int = 1) -> CollectiveReport:
    """The :class:`CollectiveReport` from per-rank records (analyze_rank / rank_record).

    Raises InputError when ``results`` is empty or has a rank twice."""
    if not results:
        raise InputError("no rank results to aggregate")
    ranks = [int(r["rank"]) for r in results]
    if len(set(ranks)) != len(ranks):
        raise InputError(f"rank given twice in {sorted(ranks)}")
    results = sorted(results, key=lambda r: int(r["rank"]))
    per_rank = [_rank_row(r) for r in results]
    notes: list[str] = []
    ws = {r.get("world_size") for r in results if r.get("world_size")}
    world = max(ws) if ws else None
    if world and world != len(results):
        notes.append(f"{len(results)} of world_size={world} rank traces given: cross-rank figures cover those ranks only")
    long = _long_comm_frame(results)
    groups: list[CollectiveGroup] = []
    simplified = False
    n_matched = 0
    rows: list[StragglerRow] = []
    hta_ranks: list[int] = []
    hta_kernel = None
    if long.empty:
        notes.append("no communication kernels in these traces")
    else:
        long, simplified = match_collectives(long)
        coll = per_collective(long, simplified)
        n_matched = int((coll["n_ranks"] > 1).sum())
        groups = _groups(coll)
        rows = straggler_summary(coll, long)
        hta_ranks, hta_kernel = hta_potential_stragglers(results, long, num_candidates=num_candidates)
        if coll["msg_bytes"].isna().all():
            notes.append("communication kernels carry no message size (no 'In msg nelems'/'dtype' args; "
                         "PyTorch >= 2.1 with record_shapes records them): bandwidth not computed")
    comp = {p.rank: p.computation_us for p in per_rank}
    slowest = max(comp, key=comp.get) if len(comp) > 1 else None
    claim = _straggler_claim(rows, len(results))
    top = max(rows, key=lambda x: (x.times_arrived_last, -x.total_wait_us)) if rows else None
    return CollectiveReport(
        ranks=ranks, world_size=world, simplified_matching=simplified, per_rank=per_rank, groups=groups,
        n_collectives_matched=n_matched,
        stragglers=StragglerReport(rows=rows, straggler_rank=top.rank if top else None,
                                   hta_potential_stragglers=hta_ranks, hta_metric_kernel=hta_kernel, claim=claim),
        slowest_rank=slowest, notes=notes)


def aggregate_ranks(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Reduce step of the fan-out: per-rank busy/idle/exposed-communication table, collectives by
    kind and size with bus bandwidth, straggler summary and claim, slowest rank. JSON-able dict
    (the :class:`CollectiveReport` fields). Raises InputError on an empty list."""
    return build_report(results).model_dump(mode="json")


def analyze_collectives(rank_traces: dict[int, str | os.PathLike], *, cache_dir: str | None = None,
                        workers: int = 0, num_candidates: int = 1, single_trace: bool = False) -> CollectiveReport:
    """Multi-rank report for ``{rank: trace path}`` (kineto ``.json``/``.json.gz``), ranks analysed
    in parallel worker processes (see :func:`analyze_ranks`) and cached by content hash.

    Raises InputError (no traces, a missing/empty/truncated trace), NoGpuEventsError."""
    if not rank_traces:
        raise InputError("no rank traces given")
    results = analyze_ranks(rank_traces, cache_dir=cache_dir, workers=workers, single_trace=single_trace)
    return build_report(results, num_candidates=num_candidates)


def find_stragglers(rank_traces: dict[int, str | os.PathLike] | None = None, *,
                    results: list[dict[str, Any]] | None = None, cache_dir: str | None = None,
                    num_candidates: int = 1) -> StragglerReport:
    """Straggler findings only, from traces (``{rank: path}``) or from analyze_rank results.

    Raises InputError when neither is given."""
    if results is None:
        if not rank_traces:
            raise InputError("find_stragglers needs rank traces or rank results")
        results = analyze_ranks(rank_traces, cache_dir=cache_dir, single_trace=False)
    return build_report(results, num_candidates=num_candidates).stragglers


def comm_kernel_stats(result: dict[str, Any], *, hta_window: bool = True) -> list[dict[str, Any]]:
    """Per communication-kernel name of one rank: ``count``, ``sum_us``, ``max_us``, ``min_us``,
    ``mean_us``, ``std_us`` (sample std), largest sum first — the communication rows of HTA's
    ``get_gpu_kernel_breakdown`` when ``hta_window`` (kernels launched before the last
    ProfilerStep), else over every linked communication kernel."""
    c = result.get("comm") or {}
    if not c.get("ts"):
        return []
    df = pd.DataFrame(c)
    if hta_window:
        df = df[df["in_hta_window"]]
    g = df.groupby("name")["dur"]
    out = pd.DataFrame({"count": g.size(), "sum_us": g.sum(), "max_us": g.max(), "min_us": g.min(),
                        "mean_us": g.mean(), "std_us": g.std()}).reset_index()
    out = out.sort_values("sum_us", ascending=False)
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()} for row in out.to_dict("records")]


# ============================================================================ SLURM job array

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:+-]*$")


def render_slurm_array(rank_traces: dict[int, str | os.PathLike], work_dir: str | os.PathLike, *,
                       cache_dir: str | None = None, python: str | None = None, partition: str | None = None,
                       account: str | None = None, time_limit: str = "01:00:00", mem: str | None = "8G",
                       max_parallel: int | None = None, job_name: str = "ai4s-rank-trace",
                       pythonpath: str | None = None) -> Path:
    """Write ``<work_dir>/ranks.json`` (array index -> rank, trace) and the sbatch script
    ``<work_dir>/analyze-ranks.sbatch`` (template ``sbatch/trace-rank-array.sbatch.j2``): a job
    array with one task per rank trace, each running :func:`run_rank_task` into
    ``<work_dir>/results/rank-<r>.json``. Collect with :func:`gather_rank_results`.

    Returns the script path. Raises InputError for no traces or an unsafe partition / account /
    time / mem / job name (shell metacharacters)."""
    import jinja2
    import shlex

    if not rank_traces:
        raise InputError("no rank traces for the SLURM array")
    for label, v in (("partition", partition), ("account", account), ("time_limit", time_limit), ("mem", mem),
                     ("job_name", job_name)):
        if v is not None and not _SAFE_VALUE.match(str(v)):
            raise InputError(f"{label}={v!r} has characters not allowed in an sbatch option")
    wd = Path(work_dir).resolve()
    (wd / "results").mkdir(parents=True, exist_ok=True)
    (wd / "logs").mkdir(parents=True, exist_ok=True)
    entries = [{"rank": int(r), "trace": str(Path(p).resolve())} for r, p in sorted(rank_traces.items())]
    manifest = wd / "ranks.json"
    manifest.write_text(json.dumps(entries, indent=1))
    sbatch_dir = package_dir("sbatch")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(sbatch_dir)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["q"] = lambda v: shlex.quote(str(v))
    text = env.get_template("trace-rank-array.sbatch.j2").render(
        job_name=job_name, n_tasks=len(entries), max_parallel=max_parallel, time_limit=time_limit, mem=mem,
        partition=partition, account=account, log_dir=str(wd / "logs"), python=python or sys.executable,
        manifest=str(manifest), results_dir=str(wd / "results"), cache_dir=cache_dir, pythonpath=pythonpath)
    script = wd / "analyze-ranks.sbatch"
    script.write_text(text)
    return script


def run_rank_task(manifest: str | os.PathLike, index: int, out_dir: str | os.PathLike,
                  cache_dir: str | None = None) -> Path:
    """One array task: analyse entry ``index`` of ``ranks.json`` and write ``rank-<r>.json``
    atomically into ``out_dir``. Raises InputError for an index outside the manifest."""
    entries = json.loads(Path(manifest).read_text())
    if not 0 <= index < len(entries):
        raise InputError(f"array index {index} outside 0..{len(entries) - 1} of {manifest}")
    e = entries[index]
    res = analyze_rank(e["trace"], int(e["rank"]), cache_dir)
    out = Path(out_dir) / f"rank-{int(e['rank'])}.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(res))
    os.replace(tmp, out)
    return out


def gather_rank_results(work_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Read ``results/rank-*.json`` of a finished array. Raises InputError naming missing ranks."""
    wd = Path(work_dir)
    entries = json.loads((wd / "ranks.json").read_text())
    out, missing = [], []
    for e in entries:
        p = wd / "results" / f"rank-{int(e['rank'])}.json"
        if not p.is_file():
            missing.append(int(e["rank"]))
            continue
        out.append(json.loads(p.read_text()))
    if missing:
        raise InputError(f"SLURM array results missing for ranks {missing[:20]}"
                         f"{' ...' if len(missing) > 20 else ''} (see {wd / 'logs'})")
    return out


def _main(argv: list[str] | None = None) -> int:
    """``python -m ai4s_graph.tools.trace.collectives rank-task --manifest M --index I --out-dir D``."""
    import typer

    app = typer.Typer(add_completion=False)

    @app.command("rank-task")
    def rank_task(manifest: str = typer.Option(...), index: int = typer.Option(...),
                  out_dir: str = typer.Option(...), cache_dir: str = typer.Option(None)) -> None:
        """Analyse one rank trace of a SLURM array into <out-dir>/rank-<r>.json."""
        try:
            out = run_rank_task(manifest, index, out_dir, cache_dir)
        except InputError as err:
            print(f"STATUS=fail; reason={err}")
            raise typer.Exit(2)
        print(f"STATUS=ok; reason=wrote {out}")

    @app.command("report")
    def report(work_dir: str) -> None:
        """Aggregate the gathered results of an array into one JSON report on stdout."""
        print(json.dumps(aggregate_ranks(gather_rank_results(work_dir)), indent=1))

    app(argv, standalone_mode=False)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
