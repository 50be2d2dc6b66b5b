"""Communication figures of one rank trace, per profiled step (issue 30), from one read: the step
accounting's consumer (:class:`~.host_timeline.StepAccountant`: its host timeline, its linked and
clipped GPU columns, its views and critical paths) and :class:`~.comm_collect.CommCollector` are fed
the same events, then :func:`rank_comm` derives a :class:`~ai4s_graph.state.comm.RankComm`.

Per step (a ``ProfilerStep#N`` window on the host; a collective belongs to the step in which it was
issued, a kernel to the step in which it was launched):

* **collectives by type, dtype and phase** (:class:`~ai4s_graph.state.comm.CollectiveStat`): count,
  element count, message size (nccl-tests' convention), kernel time and exposed kernel time;
* **overlap**: the union of the step's communication kernels, the part overlapped by any
  computation kernel (hidden; the kernels on the communication stream cannot overlap what shares
  their stream, so the computation is on other streams) and the rest (exposed), TraceLens's
  definitions (``GPUEventAnalyser``: exposed communication = communication not covered by
  computation);
* **against the backward**: the host window of the autograd ops (``autograd::engine::evaluate_function:``,
  the autograd engine's record per node, torch/csrc/autograd/engine.cpp) and the GPU window of the
  computation kernels they launched; where the communication kernels start and end against it and
  the share of their time before the backward's GPU end. DDP launches each gradient bucket's
  all-reduce from an autograd hook as soon as the bucket is ready (torch DDP design note,
  "Reducer"; seed 001 T23): its all-reduces run inside the backward; a job whose collectives all
  start after it has nothing to overlap with;
* **buckets**: the floating-point all-reduces issued in the backward, their sizes, and their mean
  over DDP's default bucket (``bucket_cap_mb``: "If None, a default size of 25 MiB will be used",
  ``torch.nn.parallel.DistributedDataParallel``'s docstring, torch 2.13);
* **all-gathers** (FSDP): each one's kernel time hidden behind computation and exposed, by phase, and
  the module its parameters belong to (``FSDP::... (<module>)`` annotations);
* **host syncs**: every blocking call by where it sits (forward, backward, between the backward and
  the optimizer step, in it, after it) and those during which a collective finished (a communication
  kernel ends inside the call: the host was held until it completed), whether the chain of GPU
  events the call awaited (the latest GPU event ending inside it, then each one's binding
  predecessor, :meth:`~.step_window.GpuColumns.binding`, while it ended inside the call) holds that
  communication kernel, and the GPU idle time the call's return leaves before the next GPU event;
* the communication kernel time on the step's critical path (the step accounting's).

Memory: the accountant's columns (tens of bytes per event) plus O(collectives) here; the
:class:`RankTimeline` kept for the cross-rank figures holds merged GPU blocks and the host timeline
of the steps (O(events)).
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ...state.comm import CollectiveStat, GatherRow, RankComm, StepComm, SyncOnComm, Window
from .comm_collect import CommCollector, IssueRecord, KernelArgs, issue_records
from .critical_path import at_launch
from .host_names import PRECEDENCE, SYNC
from .host_timeline import StepAccountant
from .pystack import site_of
from .step_window import KIND_OP, KIND_RUNTIME
from .stream import CLS_COMM, CLS_COMP, feed_events, merged_intervals, read_header

#: DDP's default gradient bucket: ``bucket_cap_mb=None`` -> 25 MiB (torch.nn.parallel.DistributedDataParallel
#: docstring, torch 2.13: "If None, a default size of 25 MiB will be used").
DDP_DEFAULT_BUCKET_BYTES = 25 * 2**20
#: The autograd engine's record of each node it runs (torch/csrc/autograd/engine.cpp, ``evaluate_function``).
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function"
#: torch.optim's record_function name of ``Optimizer.step`` (torch/optim/optimizer.py).
OPTIMIZER_PREFIX = "Optimizer.step#"
#: Floating-point dtypes (c10 names): gradient buckets are of these; an integer all-reduce in the
#: backward is DDP's used-parameter map under ``find_unused_parameters=True`` (reducer.cpp,
#: ``all_reduce_local_used_map``: one int per parameter tensor).
FLOAT_DTYPES = frozenset({"Float", "Double", "Half", "BFloat16", "Float8_e4m3fn", "Float8_e5m2", "Float8_e4m3fnuz",
                          "Float8_e5m2fnuz", "ComplexFloat", "ComplexDouble", "ComplexHalf"})
_SYNC_CODE = PRECEDENCE[SYNC]
#: Scalar StepComm fields summarized by their median over the steps (RankComm.median).
MEDIAN_FIELDS = ("wall_us", "comm_us", "hidden_us", "exposed_us", "hidden_share", "comm_before_backward_end_share",
                 "comm_kernels", "buckets", "bucket_mean_bytes", "bucket_over_default", "comm_on_critical_path_us")


def covered(bs: np.ndarray, be: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Length of each ``[s_i, e_i]`` covered by the disjoint sorted blocks ``[bs, be)`` (µs in, µs
    out), O((n + m) log m)."""
    s, e = np.asarray(s, dtype=np.float64), np.asarray(e, dtype=np.float64)
    if bs.size == 0:
        return np.zeros(s.shape)
    lens = be - bs
    cum = np.concatenate([[0.0], np.cumsum(lens)])

    def before(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(bs, t, "right")
        km = np.maximum(k - 1, 0)
        return np.where(k > 0, cum[km] + np.clip(t - bs[km], 0.0, lens[km]), 0.0)

    return np.maximum(before(e) - before(s), 0.0)


@dataclass
class RankTimeline:
    """What the cross-rank figures need of one rank (:mod:`.comm_ranks`): ``base`` (the trace clock's µs
    at relative 0), ``comm`` (columns of the communication kernels, absolute ``ts``, for the collective
    matcher of :mod:`.collectives`, and ``step``: the profiled step it was launched in, -1), merged GPU blocks
    relative to ``base`` (``comp`` computation, ``comm_b`` communication, ``busy`` everything), the host
    timeline of the steps (``seg_t0``/``seg_t1``/``seg_cat``: category codes into ``HOST_CATEGORIES``), the
    steps' total wall time (µs), ``step_wall`` (step -> µs) and ``step_split``: step -> its accounting (``gpu:computation``,
    ``gpu:exposed_comm``, ``gpu:exposed_memcpy``, ``host:<category>`` = GPU idle by host state, µs)."""

    rank: int
    base: float
    comm: dict[str, list] = field(default_factory=dict)
    comp: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))
    comm_b: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))
    busy: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))
    seg_t0: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seg_t1: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seg_cat: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    wall_us: float = 0.0
    step_split: dict[int, dict[str, float]] = field(default_factory=dict)
    step_wall: dict[int, float] = field(default_factory=dict)


class _Ctx:
    """One finished rank: the accountant's columns plus the collector's records, on the accountant's
    relative clock."""

    def __init__(self, acc: StepAccountant, col: CommCollector) -> None:
        self.acc, self.host, self.gpu = acc, acc.host, acc.gpu
        base = acc.base or 0.0
        self.base = base
        h, g = self.host, self.gpu
        names = h.names
        self.is_bwd = np.array([n.startswith(BACKWARD_OP_PREFIX) for n in names] + [False], dtype=bool)
        self.is_opt = np.array([n.startswith(OPTIMIZER_PREFIX) for n in names] + [False], dtype=bool)
        ops = h.kind == KIND_OP
        self.bwd_ops = np.flatnonzero(ops & self.is_bwd[h.name])
        self.opt_ops = np.flatnonzero(ops & self.is_opt[h.name])
        li = g.launch
        top = at_launch(h.top, li, -1)
        self.bwd_kernel = (g.cls == CLS_COMP) & (top >= 0) & self.is_bwd[np.where(top >= 0, top, len(names))]
        self.launch_ts = at_launch(h.ts, li, g.ts)
        rel = {(t - base, s): a for (t, s), a in col.kernels.items()}
        self.comm_idx = np.flatnonzero(g.cls == CLS_COMM)
        order = np.argsort(g.end[self.comm_idx], kind="stable")
        self.comm_by_end = self.comm_idx[order]
        self.comm_ends = g.end[self.comm_by_end]
        self.kargs: dict[int, KernelArgs] = {}
        for k in self.comm_idx.tolist():
            a = rel.get((float(g.ts[k]), int(g.skey[k]) & 0xFFFFFFFF))
            if a is not None:
                self.kargs[k] = a
        self.records = issue_records(col)
        for r in self.records:
            r.ts, r.end = r.ts - base, r.end - base
        self.rec_by_ext = {r.ext: r for r in self.records if r.ext is not None}
        self.comp = merged_intervals(g.ts[g.cls == CLS_COMP], g.end[g.cls == CLS_COMP])
        self.comm_b = merged_intervals(g.ts[self.comm_idx], g.end[self.comm_idx])
        self.busy = merged_intervals(g.ts, g.end)

    def kernel_collective(self, k: int) -> str:
        a = self.kargs.get(k)
        return a.collective if a is not None else "unknown"


def _window(idx: np.ndarray, ts: np.ndarray, end: np.ndarray, s0: float) -> Window:
    if idx.size == 0:
        return Window()
    return Window(start_us=float(ts[idx].min()) - s0, end_us=float(end[idx].max()) - s0)


def _phase(t: float, bwd: Window, opt0: float | None) -> str:
    """The phase (:data:`~ai4s_graph.state.comm.PHASES`) of a collective issued at ``t`` (µs in the step)."""
    if bwd.start_us is None:
        return "step"
    if t < bwd.start_us:
        return "forward"
    return "optimizer" if opt0 is not None and t >= opt0 else "backward"


def _position(t: float, bwd: Window, opt: Window) -> str:
    """Where a host sync starting at ``t`` sits (:data:`~ai4s_graph.state.comm.SYNC_POSITIONS`)."""
    if bwd.start_us is None and opt.start_us is None:
        return "step"
    if bwd.start_us is not None and t < bwd.start_us:
        return "forward"
    if bwd.start_us is not None and t < bwd.end_us:
        return "backward"
    if opt.start_us is not None and t < opt.start_us:
        return "before_optimizer" if bwd.start_us is not None else "forward"
    if opt.start_us is not None and t < opt.end_us:
        return "optimizer"
    return "after_optimizer" if opt.start_us is not None else "before_optimizer"


def _stats(key: tuple[str, str | None, str], recs: list[IssueRecord], kern: list[int], cx: _Ctx) -> CollectiveStat:
    g = cx.gpu
    sizes, nel, src = [], [], ""
    if recs:
        for r in recs:
            a = next((cx.kargs[k] for k in kern if cx.kargs[k].ext == r.ext), None) if r.ext is not None else None
            if r.msg_bytes is not None:
                sizes.append(r.msg_bytes)
                src = src or r.size_source
            elif a is not None and a.msg_bytes is not None:
                sizes.append(a.msg_bytes)
                src = src or "kernel args"
            n = r.nelems if r.nelems is not None else (None if a is None else
                                                        (a.out_nelems if a.collective == "allgather" else a.in_nelems))
            if n is not None:
                nel.append(n)
    else:
        for k in kern:
            a = cx.kargs[k]
            n = a.out_nelems if a.collective == "allgather" else a.in_nelems
            if n is not None:
                nel.append(n)
            if a.msg_bytes is not None:
                sizes.append(a.msg_bytes)
                src = "kernel args"
    ks = np.asarray(kern, dtype=np.int64)
    kus = float(np.sum(g.end[ks] - g.ts[ks])) if ks.size else 0.0
    ub, ue = merged_intervals(g.ts[ks], g.end[ks]) if ks.size else (np.zeros(0), np.zeros(0))
    exp = float(np.sum(ue - ub) - np.sum(covered(*cx.comp, ub, ue))) if ub.size else 0.0
    return CollectiveStat(
        collective=key[0], dtype=key[1], phase=key[2], count=len(recs) if recs else len(kern),
        nelems=float(sum(nel)) if nel else None, total_bytes=float(sum(sizes)) if sizes else None,
        mean_bytes=float(statistics.fmean(sizes)) if sizes else None, min_bytes=min(sizes) if sizes else None,
        max_bytes=max(sizes) if sizes else None, size_source=src, kernels=len(kern), kernel_us=kus,
        exposed_us=max(exp, 0.0))


def _awaited_comm(cx: _Ctx, a: float, b: float, limit: int) -> int:
    """The communication kernel on the chain of GPU events a blocking call ``[a, b]`` awaited (module
    docstring), -1 when none."""
    g, h = cx.gpu, cx.host
    p = int(np.searchsorted(g.ends_sorted, b, "right")) - 1
    if p < 0 or g.ends_sorted[p] <= a:
        return -1
    j = int(g.by_end[p])
    seen: set[int] = set()
    while j >= 0 and j not in seen and len(seen) < limit:
        seen.add(j)
        if g.cls[j] == CLS_COMM:
            return j
        li = int(g.launch[j])
        ls, le = (float(h.ts[li]), float(h.end[li])) if li >= 0 else (np.nan, np.nan)
        how, q, _ready = g.binding(j, ls, le)
        if how in ("pred", "cross") and q >= 0 and float(g.end[q]) > a:
            j = q
            continue
        break
    return -1


def _syncs(cx: _Ctx, s0: float, s1: float, bwd: Window, opt: Window, limit: int
           ) -> tuple[dict[str, int], dict[str, float], list[SyncOnComm]]:
    h, g = cx.host, cx.gpu
    lo, hi = np.searchsorted(h.ts, s0, "left"), np.searchsorted(h.ts, s1, "left")
    idx = np.arange(lo, hi)
    idx = idx[(h.kind[idx] == KIND_RUNTIME) & (h.cat[idx] == _SYNC_CODE)]
    counts: dict[str, int] = defaultdict(int)
    us: dict[str, float] = defaultdict(float)
    rows: list[SyncOnComm] = []
    bs, be = cx.busy
    for k in idx.tolist():
        a, b = float(h.ts[k]), float(h.end[k])
        pos = _position(a - s0, bwd, opt)
        counts[pos] += 1
        us[pos] += b - a
        e0, e1 = int(np.searchsorted(cx.comm_ends, a, "right")), int(np.searchsorted(cx.comm_ends, b, "right"))
        if e1 <= e0:
            continue  # no collective finished while the host waited
        j = int(cx.comm_by_end[e1 - 1])
        awaited = _awaited_comm(cx, a, b, limit) >= 0
        kb = int(np.searchsorted(bs, b, "right")) - 1
        if kb >= 0 and be[kb] > b:
            idle = 0.0
        else:
            nxt = float(bs[kb + 1]) if kb + 1 < bs.size else s1
            idle = max(0.0, min(nxt, s1) - b)
        ka = cx.kargs.get(j)
        top, site = int(h.top[k]), int(h.site[k])
        rows.append(SyncOnComm(
            name=h.names[h.name[k]], op=h.names[top] if top >= 0 else "", site=site_of(h.names[site]) if site >= 0 else "",
            position=pos, start_us=a - s0, dur_us=b - a, collective=cx.kernel_collective(j),
            msg_bytes=ka.msg_bytes if ka is not None else None,
            comm_in_call_us=float(covered(*cx.comm_b, np.array([a]), np.array([b]))[0]), awaited=awaited,
            gpu_idle_after_us=idle))
    return dict(counts), dict(us), rows


def _step(cx: _Ctx, num: int, s0: float, s1: float, crit: dict[str, float]) -> StepComm:
    g, h = cx.gpu, cx.host
    bo = cx.bwd_ops[(h.ts[cx.bwd_ops] >= s0) & (h.ts[cx.bwd_ops] < s1)]
    bwd = _window(bo, h.ts, h.end, s0)
    oo = cx.opt_ops[(h.ts[cx.opt_ops] >= s0) & (h.ts[cx.opt_ops] < s1)]
    if bwd.start_us is not None:
        after = oo[h.ts[oo] - s0 >= bwd.start_us]
        oo = after if after.size else oo
    opt = _window(oo, h.ts, h.end, s0)
    bk = np.flatnonzero(cx.bwd_kernel & (cx.launch_ts >= s0) & (cx.launch_ts < s1))
    bwd_gpu = _window(bk, g.ts, g.end, s0)
    ck = cx.comm_idx[(cx.launch_ts[cx.comm_idx] >= s0) & (cx.launch_ts[cx.comm_idx] < s1)]
    recs = [r for r in cx.records if s0 <= r.ts < s1]
    groups: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
    rec_key: dict[int, tuple] = {}
    for r in recs:
        key = (r.collective, r.dtype, _phase(r.ts - s0, bwd, opt.start_us))
        groups[key][0].append(r)
        if r.ext is not None:
            rec_key[r.ext] = key
    for k in ck.tolist():
        a = cx.kargs.get(k)
        key = rec_key.get(a.ext) if a is not None and a.ext is not None else None
        if key is None:
            key = (a.collective if a else "unknown", a.dtype if a else None,
                   _phase(float(cx.launch_ts[k]) - s0, bwd, opt.start_us))
        groups[key][1].append(k)
    colls = [_stats(key, rs, ks, cx) for key, (rs, ks) in groups.items()]
    colls.sort(key=lambda c: (-c.kernel_us, -c.count, c.collective, c.phase))
    st = StepComm(step=num, ts_us=s0 + cx.base, wall_us=s1 - s0, collectives=colls, backward_host=bwd,
                  backward_gpu=bwd_gpu, optimizer_host=opt, comm_kernels=int(ck.size),
                  comm_on_critical_path_us=float(crit.get("gpu:communication", 0.0)))
    if ck.size:
        cs, ce = g.ts[ck], g.end[ck]
        ub, ue = merged_intervals(cs, ce)
        st.comm_us = float(np.sum(ue - ub))
        st.hidden_us = float(np.sum(covered(*cx.comp, ub, ue)))
        st.exposed_us = max(st.comm_us - st.hidden_us, 0.0)
        st.hidden_share = st.hidden_us / st.comm_us if st.comm_us > 0 else None
        st.first_comm_start_us, st.last_comm_end_us = float(cs.min()) - s0, float(ce.max()) - s0
        if bwd_gpu.end_us is not None:
            bend = bwd_gpu.end_us + s0
            tot = float(np.sum(ce - cs))
            st.comm_before_backward_end_share = float(np.sum(np.clip(np.minimum(ce, bend) - cs, 0, None))) / tot \
                if tot > 0 else None
            st.comm_started_in_backward = int(np.sum(cs < bend))
    buckets = [r.msg_bytes for r in recs if r.collective == "allreduce" and r.dtype in FLOAT_DTYPES
               and _phase(r.ts - s0, bwd, opt.start_us) == "backward"]
    if not recs:  # kernels only
        buckets = [cx.kargs[k].msg_bytes for k in ck.tolist() if k in cx.kargs and cx.kargs[k].collective == "allreduce"
                   and cx.kargs[k].dtype in FLOAT_DTYPES
                   and _phase(float(cx.launch_ts[k]) - s0, bwd, opt.start_us) == "backward"]
    st.buckets = len(buckets)
    sized = [b for b in buckets if b is not None]
    if sized:
        st.bucket_mean_bytes = float(statistics.fmean(sized))
        st.bucket_min_bytes, st.bucket_max_bytes = float(min(sized)), float(max(sized))
        st.bucket_over_default = st.bucket_mean_bytes / DDP_DEFAULT_BUCKET_BYTES
    _gathers(cx, st, ck, s0, bwd, opt)
    st.syncs_by_position, st.sync_us_by_position, st.syncs_on_comm = _syncs(cx, s0, s1, bwd, opt,
                                                                            limit=int(cx.gpu.ts.size) + 8)
    return st


def _gathers(cx: _Ctx, st: StepComm, ck: np.ndarray, s0: float, bwd: Window, opt: Window) -> None:
    g = cx.gpu
    ag = [k for k in ck.tolist() if cx.kernel_collective(k) == "allgather"]
    ag.sort(key=lambda k: float(g.ts[k]))
    if not ag:
        return
    ks = np.asarray(ag, dtype=np.int64)
    hid = covered(*cx.comp, g.ts[ks], g.end[ks])
    us: dict[str, float] = defaultdict(float)
    exp: dict[str, float] = defaultdict(float)
    for n, (k, hd) in enumerate(zip(ag, hid.tolist())):
        a = cx.kargs.get(k)
        r = cx.rec_by_ext.get(a.ext) if a is not None and a.ext is not None else None
        ph = _phase((r.ts if r is not None else float(cx.launch_ts[k])) - s0, bwd, opt.start_us)
        d = float(g.end[k] - g.ts[k])
        st.gathers.append(GatherRow(index=n, phase=ph, module=r.module if r is not None else "",
                                    start_us=float(g.ts[k]) - s0, dur_us=d, hidden_us=hd, exposed_us=max(d - hd, 0.0),
                                    msg_bytes=(r.msg_bytes if r is not None and r.msg_bytes is not None else
                                               (a.msg_bytes if a is not None else None))))
        us[ph] += d
        exp[ph] += max(d - hd, 0.0)
    st.gather_us, st.gather_exposed_us = dict(us), dict(exp)


def _median(steps: list[StepComm]) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in MEDIAN_FIELDS:
        vals = [getattr(s, f) for s in steps if getattr(s, f) is not None]
        if vals:
            out[f] = float(statistics.median(vals))
    counts: dict[str, list[float]] = defaultdict(list)
    for s in steps:
        per: dict[str, int] = defaultdict(int)
        for c in s.collectives:
            per[c.collective] += c.count
        for c in {c.collective for x in steps for c in x.collectives}:
            counts[c].append(per.get(c, 0))
    out.update({f"count.{c}": float(statistics.median(v)) for c, v in counts.items()})
    return out


def _timeline(cx: _Ctx, rank: int, views: list, steps: list) -> RankTimeline:
    g = cx.gpu
    comm: dict[str, list] = {k: [] for k in ("ts", "dur", "stream", "name", "collective", "args_name", "pg",
                                             "pg_ranks", "group_size", "dtype", "in_nelems", "out_nelems", "step")}
    wins = cx.acc.windows
    for k in cx.comm_idx.tolist():
        a = cx.kargs.get(k)
        lt = float(cx.launch_ts[k])
        comm["step"].append(next((n for n, s0, s1, _t in wins if s0 <= lt < s1), -1))
        comm["ts"].append(float(g.ts[k]) + cx.base)
        comm["dur"].append(float(g.end[k] - g.ts[k]))
        comm["stream"].append(int(g.skey[k]) & 0xFFFFFFFF)
        comm["name"].append(g.names[g.name[k]])
        comm["collective"].append(a.collective if a else "unknown")
        for col, v in (("args_name", a.args_name if a else None), ("pg", a.pg if a else None),
                       ("pg_ranks", a.pg_ranks if a else None), ("group_size", a.group_size if a else None),
                       ("dtype", a.dtype if a else None), ("in_nelems", a.in_nelems if a else None),
                       ("out_nelems", a.out_nelems if a else None)):
            comm[col].append(v)
    cat = np.asarray(cx.acc.states.cat, dtype=np.int64)
    t0 = [v.c_t0 for v in views]
    return RankTimeline(rank=rank, base=cx.base, comm=comm, comp=cx.comp, comm_b=cx.comm_b, busy=cx.busy,
                        seg_t0=np.concatenate(t0) if t0 else np.zeros(0),
                        seg_t1=np.concatenate([v.c_t1 for v in views]) if views else np.zeros(0),
                        seg_cat=np.concatenate([cat[v.c_sid] for v in views]) if views else np.zeros(0, np.int64),
                        wall_us=float(sum(s.wall_us for s in steps)),
                        step_split={s.step: {"gpu:computation": s.gpu.computation_us, "gpu:exposed_comm": s.gpu.exposed_comm_us,
                                             "gpu:exposed_memcpy": s.gpu.exposed_memcpy_us,
                                             **{f"host:{c}": v for c, v in s.idle_by_host_us.items()}} for s in steps},
                        step_wall={s.step: s.wall_us for s in steps})


def rank_comm(path: str | os.PathLike, rank: int | None = None) -> tuple[RankComm, RankTimeline]:
    """The communication figures of one rank trace (``.json`` / ``.json.gz``; module docstring) and the
    :class:`RankTimeline` the cross-rank figures need. ``rank``: default ``distributedInfo.rank``, else 0.

    Raises InputError (missing, empty, truncated, not a trace)."""
    head = read_header(path, ("distributedInfo",))
    di = head.get("distributedInfo") if isinstance(head.get("distributedInfo"), dict) else {}
    if rank is None:
        r = di.get("rank")
        rank = int(r) if isinstance(r, (int, float)) and not isinstance(r, bool) and r >= 0 else 0
    acc = StepAccountant(path, keep_views=True)
    col = CommCollector()
    feed_events(path, (acc.feed, col.feed))
    bd = acc.finish()
    cx = _Ctx(acc, col)
    steps = [_step(cx, num, s0, s1, bd.steps[i].critical_path.by_category)
             for i, (num, s0, s1, _thr) in enumerate(acc.windows)]
    names: dict[str, set[str]] = defaultdict(set)
    for k, a in cx.kargs.items():
        names[a.collective].add(a.name)
    warnings = list(bd.warnings)
    if col.bad:
        warnings.append(f"{col.bad} communication event(s) without a usable ts/dur left out")
    if cx.comm_idx.size and not any(a.args_name or a.in_nelems is not None for a in cx.kargs.values()):
        warnings.append("communication kernels carry no collective metadata (PyTorch >= 2.1 with record_shapes "
                        "copies it onto them): types from the kernel names, no message sizes from the GPU side")
    if not cx.records and not cx.comm_idx.size:
        warnings.append("no collective in this trace (no c10d:: op, record_param_comms or communication kernel)")
    ws = di.get("world_size")
    rc = RankComm(rank=rank, path=str(path), backend=di.get("backend") if isinstance(di.get("backend"), str) else None,
                  world_size=int(ws) if isinstance(ws, (int, float)) and not isinstance(ws, bool) else None,
                  n_steps=len(steps), steps=steps, median=_median(steps),
                  kernel_names={c: sorted(v) for c, v in sorted(names.items())}, warnings=warnings)
    return rc, _timeline(cx, rank, acc.views, bd.steps)

