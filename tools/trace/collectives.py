"""Multi-rank findings from per-rank kineto traces: busy/idle and exposed communication per rank,
collective analysis across ranks (time, message size, algorithm and bus bandwidth), stragglers.

The work is split map/reduce so that the graph can fan out one worker per rank:

* :func:`~ai4s_graph.tools.trace.rank_analysis.analyze_rank` (map, one trace, picklable, safe in a
  ProcessPoolExecutor or a SLURM array task: :mod:`.slurm_array`) runs the engine on the trace
  (bounded memory) and keeps the per-rank figures and the communication kernels with their
  collective metadata, cached by the trace's content hash (:mod:`ai4s_graph.tools.trace.cache`);
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
  is computed too (``hta_potential_stragglers``, on the traces' own clocks, as HTA does).
* Clocks (dftracer#160; TraceLens's straggler summary, PR#599, compares raw starts): each rank's
  trace has its own clock, and an offset of a few hundred µs names the wrong straggler. All ranks
  leave a synchronising collective together, so each rank's clock offset from the lowest rank's is
  the median, over the implicit-sync collectives every rank ran, of its end minus the lowest rank's
  end; starts and ends are compared after subtracting it (:func:`clock_offsets`). What is left of
  the ends' spread bounds what the clocks can tell apart: a collective's arrival order is resolved
  only when its start spread exceeds its end spread, and the straggler claim counts last arrivals at
  resolved collectives only; when too few are resolved no straggler is named and a note says why.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
from pydantic import BaseModel, Field

from ..errors import InputError
from .collective_types import collective_type  # noqa: F401 (part of this module's API)
from .rank_analysis import analyze_ranks
from .stragglers import (StragglerReport, StragglerRow, hta_potential_stragglers, straggler_claim,
                         straggler_summary)

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
#: How the notes on the ranks' clocks begin (the report lists them under what was done to the inputs).
CLOCK_NOTE_PREFIXES = ("ranks' clocks aligned", "the arrival order is resolved")

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
    clock_offsets_us: dict[int, float] = Field(default_factory=dict,
                                               description="each rank's clock offset from the lowest rank's (µs)")


# ============================================================================ cross-rank (reduce)


def _long_comm_frame(results: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd  # lazy: only multi-rank collectives need it (~40 MB)
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


def clock_offsets(df: pd.DataFrame, simplified: bool) -> tuple[dict[int, float], int]:
    """``({rank: clock offset µs from the lowest rank's}, collectives used)`` (module docstring,
    "Clocks"): the median over the implicit-sync collectives matched on every rank of the rank's end
    minus the lowest rank's end. Offsets 0 when fewer than two ranks or no such collective."""
    import pandas as pd  # lazy: only multi-rank collectives need it (~40 MB)
    ranks = sorted(int(r) for r in df["rank"].unique())
    zero = {r: 0.0 for r in ranks}
    sync = df["collective"].isin(IMPLICIT_SYNC)
    if simplified:
        sync |= df["args_name"].isna()
    d = df[sync]
    if len(ranks) < 2 or d.empty:
        return zero, 0
    ends = pd.DataFrame({"cid": d["collective_id"], "rank": d["rank"].astype(int), "end": d["ts"] + d["dur"]})
    piv = ends.pivot_table(index="cid", columns="rank", values="end", aggfunc="first").reindex(columns=ranks).dropna()
    if piv.empty:
        return zero, 0
    ref = piv[ranks[0]]
    return {r: float((piv[r] - ref).median()) for r in ranks}, int(len(piv))


def per_collective(df: pd.DataFrame, simplified: bool) -> pd.DataFrame:
    """One row per matched collective: latency, skews, arrival ranks, size, algbw/busbw and
    per-rank wait (column ``wait`` holds a {rank: µs} dict)."""
    import pandas as pd  # lazy: only multi-rank collectives need it (~40 MB)
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
    import pandas as pd  # lazy: only multi-rank collectives need it (~40 MB)
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

    Two records of the same rank (two files that both say rank 0) are never merged: the first
    (lowest label, then path) stands for the rank across ranks and a note names the other.
    Raises InputError when ``results`` is empty."""
    if not results:
        raise InputError("no rank results to aggregate")
    notes: list[str] = []
    seen: dict[int, dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: (int(r["rank"]), str(r.get("label") or r["rank"]), str(r.get("path")))):
        k = int(r["rank"])
        if k in seen:
            notes.append(f"rank {k} is claimed by {os.path.basename(str(seen[k].get('path')))} and "
                         f"{os.path.basename(str(r.get('path')))}: kept apart; cross-rank figures use the first")
            continue
        seen[k] = r
    results = list(seen.values())
    ranks = [int(r["rank"]) for r in results]
    per_rank = [_rank_row(r) for r in results]
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
    claim = None
    offsets: dict[int, float] = {}
    if long.empty:
        notes.append("no communication kernels in these traces")
    else:
        long, simplified = match_collectives(long)
        offsets, n_align = clock_offsets(long, simplified)
        aligned = long.assign(ts=long["ts"] - long["rank"].astype(int).map(offsets))  # each rank on rank 0's clock
        coll = per_collective(aligned, simplified)
        n_matched = int((coll["n_ranks"] > 1).sum())
        groups = _groups(coll)
        rows = straggler_summary(coll, aligned)
        claim, why = _resolved_claim(coll, rows, len(results))
        notes += _clock_notes(offsets, n_align, coll) + ([why] if why else [])
        hta_ranks, hta_kernel = hta_potential_stragglers(results, long, num_candidates=num_candidates)
        if coll["msg_bytes"].isna().all():
            notes.append("communication kernels carry no message size (no 'In msg nelems'/'dtype' args; "
                         "PyTorch >= 2.1 with record_shapes records them): bandwidth not computed")
    comp = {p.rank: p.computation_us for p in per_rank}
    slowest = max(comp, key=comp.get) if len(comp) > 1 else None
    top = max(rows, key=lambda x: (x.times_arrived_last, -x.total_wait_us)) if rows else None
    return CollectiveReport(
        ranks=ranks, world_size=world, simplified_matching=simplified, per_rank=per_rank, groups=groups,
        n_collectives_matched=n_matched,
        stragglers=StragglerReport(rows=rows, straggler_rank=top.rank if top else None,
                                   hta_potential_stragglers=hta_ranks, hta_metric_kernel=hta_kernel, claim=claim),
        slowest_rank=slowest, notes=notes, clock_offsets_us={int(r): float(v) for r, v in offsets.items()})


def _sync_rows(coll: pd.DataFrame) -> pd.DataFrame:
    return coll[coll["implicit_sync"] & (coll["n_ranks"] > 1)]


def _resolved_claim(coll: pd.DataFrame, rows: list[StragglerRow], world: int) -> tuple[Any, str]:
    """The straggler claim over the collectives whose arrival order the aligned clocks resolve
    (start spread > end spread: module docstring), and why none is made when the unresolved ones
    hide a rank that arrives last by the clocks as they are."""
    sync = _sync_rows(coll)
    if sync.empty:
        return None, ""
    resolved = sync[sync["skew_start_us"] > sync["skew_end_us"]]
    last = {int(r): int(n) for r, n in resolved["last_arrival_rank"].value_counts().items()}
    claim = straggler_claim(rows, world, last_resolved=last)
    if claim is not None or straggler_claim(rows, world) is None:
        return claim, ""
    return None, (f"the arrival order is resolved at {len(resolved)} of {len(sync)} synchronising collectives only: "
                  f"their start spread (median {float(sync['skew_start_us'].median()):.1f} us) does not exceed the "
                  f"spread of their ends after aligning the clocks (median {float(sync['skew_end_us'].median()):.1f} "
                  "us), so the clock skew between ranks exceeds what the arrival order can resolve: no straggler named")


def _clock_notes(offsets: dict[int, float], n_used: int, coll: pd.DataFrame) -> list[str]:
    """A note when the clock offsets exceed what is left of the ends' spread (they changed something)."""
    sync = _sync_rows(coll)
    if not n_used or sync.empty:
        return []
    spread = float(sync["skew_end_us"].median())
    if max(abs(v) for v in offsets.values()) <= spread:
        return []
    ref = min(offsets)
    return [f"ranks' clocks aligned on the ends of {n_used} synchronising collectives (all ranks leave one together): "
            + ", ".join(f"rank {r} {v:+.1f} us" for r, v in sorted(offsets.items()) if r != ref)
            + f" from rank {ref}'s clock; arrival order and waits use the aligned clocks (ends then spread by a median "
              f"{spread:.1f} us)"]


def aggregate_ranks(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Reduce step of the fan-out: per-rank busy/idle/exposed-communication table, collectives by
    kind and size with bus bandwidth, straggler summary and claim, slowest rank. JSON-able dict
    (the :class:`CollectiveReport` fields). Raises InputError on an empty list."""
    return build_report(results).model_dump(mode="json")


def analyze_collectives(rank_traces: dict[int, str | os.PathLike], *, cache_dir: str | None = None,
                        workers: int = 0, num_candidates: int = 1, cross_check: bool = False) -> CollectiveReport:
    """Multi-rank report for ``{rank: trace path}`` (kineto ``.json``/``.json.gz``), ranks analysed
    in parallel worker processes (see :func:`analyze_ranks`) and cached by content hash.

    Raises InputError (no traces, a missing/empty/truncated trace), NoGpuEventsError."""
    if not rank_traces:
        raise InputError("no rank traces given")
    results = analyze_ranks(rank_traces, cache_dir=cache_dir, workers=workers, cross_check=cross_check)
    return build_report(results, num_candidates=num_candidates)


def find_stragglers(rank_traces: dict[int, str | os.PathLike] | None = None, *,
                    results: list[dict[str, Any]] | None = None, cache_dir: str | None = None,
                    num_candidates: int = 1) -> StragglerReport:
    """Straggler findings only, from traces (``{rank: path}``) or from analyze_rank results.

    Raises InputError when neither is given."""
    if results is None:
        if not rank_traces:
            raise InputError("find_stragglers needs rank traces or rank results")
        results = analyze_ranks(rank_traces, cache_dir=cache_dir, cross_check=False)
    return build_report(results, num_candidates=num_candidates).stragglers


def comm_kernel_stats(result: dict[str, Any], *, hta_window: bool = True) -> list[dict[str, Any]]:
    """Per communication-kernel name of one rank: ``count``, ``sum_us``, ``max_us``, ``min_us``,
    ``mean_us``, ``std_us`` (sample std), largest sum first — the communication rows of HTA's
    ``get_gpu_kernel_breakdown`` when ``hta_window`` (kernels launched before the last
    ProfilerStep), else over every linked communication kernel."""
    import pandas as pd  # lazy: only multi-rank collectives need it (~40 MB)
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




def rederive_claim(metric: str, rank_results: list[dict[str, Any]]):
    """Re-derive a cross-rank claim (straggler rank, busbw) by the verifier's independent path,
    :func:`ai4s_graph.tools.trace.crossrank_check.rederive_claim` (the full-load reader, its own
    arrival-order and bandwidth arithmetic): ``(value, tolerance, method)``; value None with the
    reason when that path cannot re-derive it."""
    from .crossrank_check import rederive_claim as independent

    return independent(metric, rank_results)
