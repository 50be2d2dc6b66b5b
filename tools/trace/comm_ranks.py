"""Communication figures across the ranks of one job (issue 30): each rank's
:class:`~ai4s_graph.state.comm.RankComm` (:mod:`.comm_steps`), the collectives matched across ranks
with the analyst's matcher (:func:`.collectives.match_collectives` / :func:`.collectives.per_collective`:
TraceLens's process-group matching, nccl-tests' busbw), bus bandwidth per type and size against a
measured baseline (:mod:`.comm_context`), the communication variables set, and why the rank that
arrived last at the synchronising collectives was late.

**Arrival order.** At a synchronising collective (all-reduce, all-gather, reduce-scatter,
all-to-all: every rank waits for the last) the rank whose kernel starts last arrived last (TraceLens's
``skew in start``, :func:`.collectives.per_collective`). All ranks leave it together, so what is left
of the spread of its ends bounds what the clocks can tell apart: the order is counted only where the
start spread exceeds the end spread (the rule of the trace-field work on branch ``traces``,
dftracer#160); a tie is no last arrival.

**Why late.** Within a data-parallel step one rank's later collectives stay late because its first
one was (DDP queues every bucket on one NCCL stream; the waiting rank keeps computing meanwhile), so
the late rank is compared with the first-arriving one from the last point they share: every rank
leaves the previous step's last synchronising collective together (the optimizer's kernels wait for
the reduced gradients, and the next step's work comes after them on the compute stream). For each
step whose first synchronising collective resolves an order, each of the two ranks' span runs from
its end of the previous step's last one to its own arrival; the late rank's span minus the first
rank's is the lag it added, split by what each GPU and host did over its span (computation kernels,
communication not under computation, other GPU work, GPU idle by the host's state from the step
accounting's host timeline: launching, syncing, an op's CPU side, outside every op ...), late minus
first. A rank slowed by extra GPU work shows more computation there (93004); one slowed on the host
(a sleep, CPU work, Python) an idle GPU with its host outside ops or in an op. The same difference over
the two ranks' whole steps (the step accounting's split) is given beside it: it also counts a
waiting NCCL kernel slowing the early rank's computation (measured: rank 0's computation per step is
182 ms in 93003 and 207 ms in 93004, with no extra work, while its all-reduce kernels wait for rank 1), so the span figure is the one that isolates the lag.

**Clocks.** Each rank's trace has its own clock. By default each rank's offset from the lowest rank's
is the trace-field rule, :func:`.collectives.clock_offsets` (the median over the synchronising
collectives of the rank's kernel end minus the lowest rank's: every rank leaves one together), and
starts are compared after subtracting it; ``clock_offsets_us`` (rank -> µs) overrides it. The late
rank's spans are read back on its own clock.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from ...state.comm import BusbwRow, CommReport, EnvVar, LateRank, RankComm
from ...state.steps import HOST_CATEGORIES
from ..errors import InputError
from .collectives import clock_offsets, match_collectives, per_collective
from .comm_context import Sweep, baseline_at, load_collective_baseline
from .comm_steps import RankTimeline, covered, rank_comm
from .ranks import identify_ranks
from .stream import merged_intervals


def _long(tls: list[RankTimeline]):
    import pandas as pd  # lazy: only multi-rank figures need it (~40 MB)

    frames = []
    for tl in tls:
        if tl.comm.get("ts"):
            df = pd.DataFrame(tl.comm)
            df["rank"] = tl.rank
            frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _busbw(coll, n_ranks: int, base: dict[str, Sweep] | None) -> list[BusbwRow]:
    """One :class:`BusbwRow` per (type, message size) of the collectives matched on every rank."""
    ok = coll[(coll["n_ranks"] == n_ranks) & coll["msg_bytes"].notna()]
    rows = []
    for (ctype, mb), g in ok.groupby(["collective", "msg_bytes"], sort=True):
        bw = g["busbw_gbps"].dropna()
        r = BusbwRow(collective=str(ctype), msg_bytes=float(mb), count=int(len(g)),
                     busbw_gbps=float(bw.mean()) if len(bw) else None,
                     busbw_min_gbps=float(bw.min()) if len(bw) else None,
                     busbw_max_gbps=float(bw.max()) if len(bw) else None)
        sweep = (base or {}).get("default", {}).get(str(ctype))
        if sweep:
            r.baseline_gbps, r.baseline_bytes, r.extrapolated = baseline_at(sweep, float(mb))
            r.ratio = r.busbw_gbps / r.baseline_gbps if r.busbw_gbps is not None and r.baseline_gbps else None
        off = (base or {}).get("p2p_disabled", {}).get(str(ctype))
        if off:
            r.p2p_disabled_gbps = baseline_at(off, float(mb))[0]
            r.ratio_p2p_disabled = r.busbw_gbps / r.p2p_disabled_gbps if r.busbw_gbps is not None else None
        rows.append(r)
    return rows


def late_breakdown(tl: RankTimeline, start: float, end: float) -> tuple[float, dict[str, float]]:
    """``(length µs, parts)``: what rank ``tl`` did over ``[start, end]`` (µs on its trace clock), parts
    ``gpu:computation``, ``gpu:communication`` (communication not under computation), ``gpu:memcpy``
    (the rest of the busy time) and ``host:<category>`` (the GPU-idle time by host state; idle time
    outside every profiled step's host timeline is ``host:outside_ops``). The parts sum to the length."""
    a, b = start - tl.base, max(end, start) - tl.base
    sa, sb = np.array([a]), np.array([b])
    comp = float(covered(*tl.comp, sa, sb)[0])
    cc = merged_intervals(np.concatenate([tl.comp[0], tl.comm_b[0]]), np.concatenate([tl.comp[1], tl.comm_b[1]]))
    comm_or_comp = float(covered(*cc, sa, sb)[0])
    busy = float(covered(*tl.busy, sa, sb)[0])
    parts: dict[str, float] = {"gpu:computation": comp, "gpu:communication": max(comm_or_comp - comp, 0.0),
                               "gpu:memcpy": max(busy - comm_or_comp, 0.0)}
    lo, hi = int(np.searchsorted(tl.seg_t1, a, "right")), int(np.searchsorted(tl.seg_t0, b, "left"))
    seen = 0.0
    if hi > lo:
        sel = np.arange(lo, hi)
        s, e = np.maximum(tl.seg_t0[sel], a), np.minimum(tl.seg_t1[sel], b)
        idle = np.maximum((e - s) - covered(*tl.busy, s, e), 0.0)
        for c, v in zip(tl.seg_cat[sel].tolist(), idle.tolist()):
            if v > 0:
                key = f"host:{HOST_CATEGORIES[c]}"
                parts[key] = parts.get(key, 0.0) + v
                seen += v
    rest = (b - a) - busy - seen
    if rest > 0:  # idle between the profiled steps' windows
        parts["host:outside_ops"] = parts.get("host:outside_ops", 0.0) + rest
    return b - a, parts


def _late(long, coll, tls: dict[int, RankTimeline], offsets: dict[int, float]
          ) -> tuple[list[LateRank], dict[int, int], int, int]:
    """:class:`LateRank` per rank that arrived last at a step's first synchronising collective or
    anywhere (module docstring), the last-arrival counts (at resolved collectives), the synchronising
    collectives matched and how many of them resolve an arrival order."""
    n = len(tls)
    sync = coll[coll["implicit_sync"] & (coll["n_ranks"] == n)].sort_values("latest_start", kind="stable")
    resolved = (sync["skew_start_us"] > sync["skew_end_us"]).tolist()
    counts = {r: 0 for r in tls}
    waits: dict[int, float] = defaultdict(float)
    for last, skew, ok in zip(sync["last_arrival_rank"].astype(int), sync["skew_start_us"].astype(float), resolved):
        if ok:
            counts[last] += 1
            waits[last] = max(waits[last], skew)
    sel = long[long["collective_id"].isin(set(sync["collective_id"]))]
    per: dict[str, dict[int, tuple[float, float, int]]] = defaultdict(dict)
    for cid, r, t, d, st in zip(sel["collective_id"], sel["rank"].astype(int), sel["ts"], sel["dur"], sel["step"]):
        per[cid][r] = (float(t), float(t) + float(d), int(st))
    agg: dict[int, dict] = defaultdict(lambda: {"n": 0, "lag": 0.0, "parts": defaultdict(float),
                                                "step": defaultdict(float), "first": defaultdict(int),
                                                "wall": 0.0})
    prev, seen = None, set()
    lo_rank = min(tls)
    for cid, last, first, ok in zip(sync["collective_id"], sync["last_arrival_rank"].astype(int),
                                    sync["earliest_arrival_rank"].astype(int), resolved):
        step = per[cid][lo_rank][2]
        if ok and prev is not None and step >= 0 and step not in seen and per[prev][lo_rank][2] < step:
            spans = {r: (per[prev][r][1] + offsets.get(r, 0.0), per[cid][r][0] + offsets.get(r, 0.0)) for r in (last, first)}
            len_l, p_l = late_breakdown(tls[last], *spans[last])
            len_f, p_f = late_breakdown(tls[first], *spans[first])
            a = agg[last]
            a["n"] += 1
            a["lag"] += len_l - len_f
            a["first"][first] += 1
            a["wall"] += tls[last].step_wall.get(step, 0.0)
            for k in set(p_l) | set(p_f):
                a["parts"][k] += p_l.get(k, 0.0) - p_f.get(k, 0.0)
            sl, sf = tls[last].step_split.get(step, {}), tls[first].step_split.get(step, {})
            for k in set(sl) | set(sf):
                a["step"][k] += sl.get(k, 0.0) - sf.get(k, 0.0)
        seen.add(step)
        prev = cid
    out = []
    for r in sorted(set(agg) | {r for r, c in counts.items() if c}):
        a = agg.get(r)
        lr = LateRank(rank=r, n_last=counts.get(r, 0), max_wait_us=waits.get(r, 0.0))
        if a:
            lr.n_steps, lr.lag_us = a["n"], a["lag"]
            lr.first = max(a["first"], key=a["first"].get)
            lr.lag_parts_us = {k: v for k, v in sorted(a["parts"].items())}
            lr.lag_gpu_us = sum(v for k, v in lr.lag_parts_us.items() if k.startswith("gpu:"))
            lr.lag_host_us = sum(v for k, v in lr.lag_parts_us.items() if k.startswith("host:"))
            lr.lag_share = a["lag"] / a["wall"] if a["wall"] > 0 else None
            lr.step_diff_us = {k: v for k, v in sorted(a["step"].items())}
            pick = lr.lag_parts_us or lr.step_diff_us
            best = max(pick, key=pick.get) if pick else ""
            lr.largest = best if best and pick[best] > 0 else ""
        out.append(lr)
    return out, counts, int(len(sync)), int(sum(resolved))


def _rank_paths(traces: dict[int, str | os.PathLike] | list[str | os.PathLike]) -> tuple[dict[int, Path], list[str]]:
    if isinstance(traces, dict):
        return {int(r): Path(p) for r, p in traces.items()}, []
    files, notes = identify_ranks(list(traces))
    out: dict[int, Path] = {}
    for f in files:
        if f.duplicate_of is None:
            out[f.rank] = f.path
    return out, notes


def comm_report(traces: dict[int, str | os.PathLike] | list[str | os.PathLike], *,
                baseline: str | os.PathLike | None = None, env: list[EnvVar] | None = None,
                clock_offsets_us: dict[int, float] | None = None) -> CommReport:
    """The communication figures of a job from its rank traces (``{rank: path}``, or paths whose rank
    comes from :func:`.ranks.identify_ranks`; a duplicate rank's second file is left out with a note),
    with busbw against ``baseline`` (an eval-cluster raw JSON) and ``env`` (:func:`.comm_context.env_from_run`).
    Ranks are read one after the other (one trace in memory at a time, plus each rank's
    :class:`~.comm_steps.RankTimeline`).

    A baseline that cannot be read leaves busbw uncompared, with a note. Raises InputError (no trace,
    an unreadable trace)."""
    paths, notes = _rank_paths(traces)
    if not paths:
        raise InputError("no rank traces given")
    base, src, why = None, "", ""
    if baseline:
        try:
            base, src = load_collective_baseline(baseline)
        except InputError as e:  # the other figures stand without it
            why = f"{e}: busbw not compared with a baseline"
    ranks: list[RankComm] = []
    tls: dict[int, RankTimeline] = {}
    for r in sorted(paths):
        rc, tl = rank_comm(paths[r], r)
        ranks.append(rc)
        tls[r] = tl
    offsets = {r: float((clock_offsets_us or {}).get(r, 0.0)) for r in tls}
    rep = CommReport(ranks=ranks, baseline_source=src, env=list(env or []), clock_offsets_us=offsets,
                     notes=notes + ([why] if why else []))
    ws = {rc.world_size for rc in ranks if rc.world_size}
    if ws and max(ws) != len(ranks):
        rep.notes.append(f"{len(ranks)} of world_size={max(ws)} rank traces given: cross-rank figures cover those ranks only")
    if len(tls) < 2:
        rep.notes.append("one rank: no cross-rank figures (busbw, arrival order, late rank)")
        return rep
    long = _long(list(tls.values()))
    if long.empty:
        rep.notes.append("no communication kernels in these traces: no cross-rank figures")
        return rep
    long, simplified = match_collectives(long)
    if clock_offsets_us is None:  # the trace-field rule: every rank leaves a synchronising collective together
        found, n_used = clock_offsets(long, simplified)
        offsets = {r: float(found.get(r, 0.0)) for r in tls}
        rep.clock_offsets_us = offsets
        rep.notes.append(f"ranks' clocks aligned on the ends of {n_used} synchronising collectives "
                         "(collectives.clock_offsets): " + ", ".join(f"rank {r} {v:+.3f} us" for r, v in sorted(offsets.items())))
    long["ts"] = long["ts"] - long["rank"].map(offsets)
    coll = per_collective(long, simplified)
    rep.busbw = _busbw(coll, len(tls), base)
    if coll["msg_bytes"].isna().all():
        rep.notes.append("communication kernels carry no message size: busbw not computed")
    rep.late, rep.last_counts, rep.n_sync, rep.n_resolved = _late(long, coll, tls, offsets)
    return rep
