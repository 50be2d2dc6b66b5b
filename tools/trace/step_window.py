"""One profiled step as arrays (:class:`StepView`): the host threads' states swept into segments,
combined across threads into one host timeline, and the GPU work of the step's window, for the
step accounting (:mod:`.host_timeline`), the critical path and the savings replay
(:mod:`.critical_path`) and the structure figures (:mod:`.step_structure`).

Times are µs on the trace's clock. A step's window is its ``ProfilerStep#N`` interval on the host;
every host event and GPU event overlapping it is clipped to it, so the host timeline and the GPU
split each cover the window exactly.

**Host sweep.** Per thread, events in (start, longer first) order build a call stack (an event
that runs past its parent's end is cut at that end); between consecutive starts and ends the
innermost frame's state holds (see :mod:`.host_names` for the categories and the inheritance
rule), with the top-level recorded op and the innermost user Python frame (:mod:`.pystack`).
**Combination.** At each instant the thread in a recorded op whose category ranks first in
:data:`.host_names.PRECEDENCE` names it (the step's own thread first on ties); with no thread in an
op, the step's thread's state (outside ops, with its Python frame) names it. A site missing on the
chosen thread (the autograd engine's threads run no Python) is the step thread's site then.
**GPU split.** TraceLens's gpu_timeline definitions (:mod:`.stream`) over the GPU events clipped to
the window: computation, exposed communication, exposed memcpy, busy, idle = window - busy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .host_names import OUTSIDE, PRECEDENCE
from .stream import CLS_COMM, CLS_COMP, merged_intervals, union_length

from .step_feed import KIND_OP, KIND_PY, KIND_RUNTIME  # noqa: F401 (the feed's host event kinds)
OUTSIDE_CODE = PRECEDENCE[OUTSIDE]
#: ``cat`` column value of an op that names no category of its own (it inherits its parent's)
CAT_INHERIT = -1


@dataclass
class HostColumns:
    """Every kept host event, sorted by start: ``ts``/``end`` (µs), ``thr`` (thread code), ``name`` (id
    into ``names``), ``kind`` (KIND_OP: cpu_op or annotation, KIND_RUNTIME: runtime/driver call, KIND_PY:
    a user Python frame), ``cat`` (the category code the event itself names, or CAT_INHERIT), ``corr``
    (correlation id of a runtime call, -1), ``sig`` (Input Dims signature id of a cpu_op, -1). ``top`` /
    ``site``: set by the sweep for runtime calls (name id of their top-level op / user frame, -1)."""

    ts: np.ndarray
    end: np.ndarray
    thr: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    cat: np.ndarray
    corr: np.ndarray
    sig: np.ndarray
    names: list[str]
    top: np.ndarray = field(default=None)  # type: ignore[assignment]
    site: np.ndarray = field(default=None)  # type: ignore[assignment]
    long_idx: np.ndarray = field(default=None)  # type: ignore[assignment]
    long_cut: float = 0.0

    def __post_init__(self) -> None:
        n = self.ts.size
        self.top = np.full(n, -1, dtype=np.int32)
        self.site = np.full(n, -1, dtype=np.int32)
        self.set_long_cut(float("inf"))

    def set_long_cut(self, cut: float) -> None:
        """Events longer than ``cut`` µs are looked up by a scan of their own (few: outer frames and
        annotations); shorter ones by a search on the start times."""
        self.long_cut = cut
        self.long_idx = np.flatnonzero((self.end - self.ts) > cut)

    def overlapping(self, s0: float, s1: float) -> np.ndarray:
        """Indices of the events overlapping ``[s0, s1)`` (sorted)."""
        lo = np.searchsorted(self.ts, s0 - self.long_cut if np.isfinite(self.long_cut) else -np.inf, "left")
        hi = np.searchsorted(self.ts, s1, "left")
        cand = np.arange(lo, hi)
        cand = cand[self.end[cand] > s0]
        if self.long_idx.size:
            li = self.long_idx[(self.ts[self.long_idx] < s1) & (self.end[self.long_idx] > s0)]
            cand = np.union1d(cand, li)
        return cand


@dataclass
class GpuColumns:
    """The linked GPU events (the engine's rule), clipped on their streams, sorted by start: ``ts``,
    ``end`` (µs), ``cls`` (CLS_COMP / CLS_COMM / CLS_MEMCPY), ``skey`` (device and stream), ``name``
    (id into ``names``), ``kind`` (kernel / memcpy / memset), ``nbytes`` (memcpy ``bytes``, -1),
    ``launch`` (index of the launching runtime call in :class:`HostColumns`, -1), ``prev`` (index of the
    previous event on the same stream, -1)."""

    ts: np.ndarray
    end: np.ndarray
    cls: np.ndarray
    skey: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    nbytes: np.ndarray
    launch: np.ndarray
    prev: np.ndarray
    names: list[str]
    max_dur: float = 0.0
    by_launch: np.ndarray = field(default=None)  # type: ignore[assignment]

    by_end: np.ndarray = field(default=None)  # type: ignore[assignment]
    ends_sorted: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.max_dur = float((self.end - self.ts).max()) if self.ts.size else 0.0
        self.by_launch = np.argsort(self.launch, kind="stable")
        self.by_end = np.argsort(self.end, kind="stable")
        self.ends_sorted = self.end[self.by_end]

    def binding(self, k: int, launch_start: float, launch_end: float) -> tuple[str, int, float]:
        """What GPU event ``k`` waited for last before it started, and its launch's *ready* time: when
        the launch call (``launch_start``-``launch_end``, NaN for none) returned before the event
        started, its return; when it returned after (a blocking copy returns once its copy is done),
        its start, the latest the work can have been enqueued. ``("cross", x, ready)`` when an event
        ``x`` on another stream of its device ended after both that ready time and its stream
        predecessor's end (a cross-stream event wait: nothing else holds a ready kernel back), else
        ``("launch", -1, ready)`` when the ready time is after the predecessor's end, ``("pred", p,
        ready)`` when it was queued behind predecessor ``p``, ``("none", -1, nan)`` with neither."""
        p = int(self.prev[k])
        e_p = float(self.end[p]) if p >= 0 else -np.inf
        s_k = float(self.ts[k])
        has = launch_end == launch_end
        l_ready = (launch_end if launch_end <= s_k else launch_start) if has else np.nan
        ready = max(e_p, l_ready) if has else e_p
        if ready > -np.inf and ready < s_k:
            j = int(self.ends_sorted.searchsorted(s_k, "right")) - 1
            dev, key = int(self.skey[k]) >> 32, int(self.skey[k])
            while j >= 0 and self.ends_sorted[j] > ready:
                x = int(self.by_end[j])
                if int(self.skey[x]) != key and int(self.skey[x]) >> 32 == dev and self.ts[x] < s_k:
                    return "cross", x, l_ready
                j -= 1
        if has and (p < 0 or e_p < l_ready):
            return "launch", -1, l_ready
        if p >= 0:
            return "pred", p, l_ready
        return "none", -1, l_ready

    def launched_by(self, calls: np.ndarray) -> np.ndarray:
        """Indices of the GPU events launched by the host calls ``calls`` (host indices)."""
        ls = self.launch[self.by_launch]
        lo, hi = np.searchsorted(ls, calls, "left"), np.searchsorted(ls, calls, "right")
        cnt = hi - lo
        total = int(cnt.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        starts = np.repeat(lo, cnt)
        offs = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        return self.by_launch[starts + offs]

    def overlapping(self, s0: float, s1: float) -> np.ndarray:
        """Indices of the GPU events overlapping ``[s0, s1)`` (sorted by start)."""
        lo = np.searchsorted(self.ts, s0 - self.max_dur, "left")
        hi = np.searchsorted(self.ts, s1, "left")
        cand = np.arange(lo, hi)
        return cand[self.end[cand] > s0]


@dataclass
class StepView:
    """One step's window ``[s0, s1)``: the combined host timeline ``c_*`` (a partition of the window:
    ``c_t0``, ``c_t1``, ``c_sid`` (state id), ``c_top`` / ``c_site`` (name ids, -1), ``c_thr``), the GPU
    events overlapping it (``gpu``: indices into the :class:`GpuColumns`), the GPU busy blocks
    (``busy_s``/``busy_e``, clipped), the GPU split (µs), the host events overlapping it (``host``),
    and the top-level cpu_ops per thread in time order (``top_ops``: thread -> host indices)."""

    step: int
    s0: float
    s1: float
    c_t0: np.ndarray
    c_t1: np.ndarray
    c_sid: np.ndarray
    c_top: np.ndarray
    c_site: np.ndarray
    c_thr: np.ndarray
    gpu: np.ndarray
    busy_s: np.ndarray
    busy_e: np.ndarray
    split: dict[str, float]
    host: np.ndarray
    top_ops: dict[int, list[int]]

    def idle_before(self, t: np.ndarray) -> np.ndarray:
        """GPU-idle µs in ``[s0, t]`` for each ``t`` in the window (piecewise linear in ``t``)."""
        t = np.asarray(t, dtype=np.float64)
        if self.busy_s.size == 0:
            return t - self.s0
        lens = self.busy_e - self.busy_s
        cum = np.concatenate([[0.0], np.cumsum(lens)])
        k = np.searchsorted(self.busy_s, t, "right")  # blocks starting at or before t
        inside = np.where(k > 0, np.minimum(t, self.busy_e[np.maximum(k - 1, 0)]) - self.busy_s[np.maximum(k - 1, 0)], 0.0)
        busy = cum[np.maximum(k - 1, 0)] + np.where(k > 0, inside, 0.0)
        return (t - self.s0) - busy


class StateTable:
    """Host states ``(category code, name id)`` as small ints; state 0 is outside ops (no name)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, int], int] = {(OUTSIDE_CODE, -1): 0}
        self.cat: list[int] = [OUTSIDE_CODE]
        self.name: list[int] = [-1]

    def get(self, cat: int, name: int) -> int:
        """The id of state ``(cat, name)``, added when new."""
        key = (cat, name)
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.cat)
            self.cat.append(cat)
            self.name.append(name)
        return i

    def cat_array(self) -> np.ndarray:
        """Category code per state id."""
        return np.asarray(self.cat, dtype=np.int8)


def sweep(host: HostColumns, sel: np.ndarray, s0: float, s1: float, states: StateTable
          ) -> tuple[dict[int, tuple[np.ndarray, ...]], dict[int, list[int]]]:
    """Per thread, the state segments of the events ``sel`` clipped to ``[s0, s1)``: ``{thread: (t0, t1,
    state id, top name id, site name id)}``, and the top-level cpu_ops per thread (host indices, time
    order). Sets ``host.top`` / ``host.site`` of the runtime calls swept. O(len(sel)) after a sort."""
    if sel.size == 0:
        return {}, {}
    ts = np.maximum(host.ts[sel], s0)
    en = np.minimum(host.end[sel], s1)
    th = host.thr[sel]
    rank = np.where(host.kind[sel] == KIND_PY, 0, np.where(host.kind[sel] == KIND_OP, 1, 2))
    order = np.lexsort((rank, -en, ts, th))
    idx_l = sel[order].tolist()
    ts_l, en_l, th_l = ts[order].tolist(), en[order].tolist(), th[order].tolist()
    kind_l = host.kind[sel][order].tolist()
    cat_l = host.cat[sel][order].tolist()
    name_l = host.name[sel][order].tolist()
    h_top, h_site = host.top, host.site
    get_state = states.get
    out: dict[int, tuple[list, ...]] = {}
    tops: dict[int, list[int]] = {}
    stack: list[tuple[float, int, int, int, bool]] = []  # (end, state, top, site, in_op)
    cur_thr = None
    cursor = s0
    seg: tuple[list, ...] = ([], [], [], [], [])

    def close_to(limit: float | None) -> float:
        """Pop the frames ending at or before ``limit`` (all when None), emitting their segments."""
        c = cursor
        while stack and (limit is None or stack[-1][0] <= limit):
            fr = stack.pop()
            if fr[0] > c:
                seg[0].append(c), seg[1].append(fr[0]), seg[2].append(fr[1]), seg[3].append(fr[2]), seg[4].append(fr[3])
                c = fr[0]
        return c

    for j, k in enumerate(idx_l):
        t = th_l[j]
        s, e = ts_l[j], en_l[j]
        if t != cur_thr:
            if cur_thr is not None:
                close_to(None)
            stack = []
            cur_thr = t
            cursor = s
            seg = out.setdefault(t, ([], [], [], [], []))
            tops.setdefault(t, [])
        cursor = close_to(s)
        if stack:
            par = stack[-1]
            if s > cursor:
                seg[0].append(cursor), seg[1].append(s), seg[2].append(par[1]), seg[3].append(par[2]), seg[4].append(par[3])
            if e > par[0]:
                e = par[0]
        else:
            par = None
        cursor = s
        kd, nm = kind_l[j], name_l[j]
        if kd == KIND_PY:
            fr = (e, par[1], par[2], nm, par[4]) if par else (e, 0, -1, nm, False)
        else:
            top = par[2] if par is not None and par[2] >= 0 else nm
            site = par[3] if par is not None else -1
            c = cat_l[j]
            if c >= 0:
                sid = get_state(c, nm)
            elif par is not None and par[4]:
                sid = par[1]
            else:
                sid = get_state(PRECEDENCE["op"], nm)
            fr = (e, sid, top, site, True)
            if kd == KIND_RUNTIME:
                h_top[k] = top
                h_site[k] = site
            elif par is None or not par[4]:
                tops[t].append(k)
        stack.append(fr)
    close_to(None)
    arrays = {t: (np.asarray(v[0]), np.asarray(v[1]), np.asarray(v[2], dtype=np.int32),
                  np.asarray(v[3], dtype=np.int32), np.asarray(v[4], dtype=np.int32)) for t, v in out.items()}
    return arrays, tops


def combine(per_thread: dict[int, tuple[np.ndarray, ...]], s0: float, s1: float, primary: int,
            state_cat: np.ndarray) -> tuple[np.ndarray, ...]:
    """One host timeline over ``[s0, s1)`` from the threads' segments (see the module docstring):
    ``(t0, t1, state, top, site, thread)`` arrays, a partition of the window, adjacent equal rows merged."""
    bounds = [np.array([s0, s1])] + [a for v in per_thread.values() for a in (v[0], v[1])]
    b = np.unique(np.concatenate(bounds))
    b = b[(b >= s0) & (b <= s1)]
    if b.size < 2:
        b = np.array([s0, s1])
    mid = (b[:-1] + b[1:]) / 2.0
    n = mid.size
    best_rank = np.full(n, OUTSIDE_CODE + 1, dtype=np.int16)
    sid = np.zeros(n, dtype=np.int32)
    top = np.full(n, -1, dtype=np.int32)
    site = np.full(n, -1, dtype=np.int32)
    thr = np.full(n, primary, dtype=np.int32)
    prim_site = np.full(n, -1, dtype=np.int32)
    order = sorted(per_thread, key=lambda t: (t != primary, t))
    for t in order:
        t0, t1, st, tp, sv = per_thread[t]
        if t0.size == 0:
            continue
        i = np.searchsorted(t0, mid, "right") - 1
        ok = (i >= 0) & (t1[np.maximum(i, 0)] > mid)
        ii = np.maximum(i, 0)
        rank = np.where(ok, state_cat[st[ii]], OUTSIDE_CODE + 1).astype(np.int16)
        if t != primary:  # another thread outside every op is idle, not the host's work
            rank = np.where(rank == OUTSIDE_CODE, OUTSIDE_CODE + 1, rank)
        else:
            prim_site = np.where(ok, sv[ii], -1)
        win = rank < best_rank
        best_rank = np.where(win, rank, best_rank)
        sid = np.where(win, st[ii], sid)
        top = np.where(win, tp[ii], top)
        site = np.where(win, sv[ii], site)
        thr = np.where(win, t, thr)
    site = np.where(site < 0, prim_site, site)
    keys = np.stack([sid, top, site, thr])
    change = np.ones(n, dtype=bool)
    if n > 1:
        change[1:] = np.any(keys[:, 1:] != keys[:, :-1], axis=0)
    first = np.flatnonzero(change)
    last_end = np.append(first[1:], n)
    return (b[:-1][first], b[1:][last_end - 1], sid[first], top[first], site[first], thr[first])


def gpu_split(gpu: GpuColumns, sel: np.ndarray, s0: float, s1: float) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """The GPU split of ``[s0, s1)`` (µs; TraceLens's definitions over the events ``sel`` clipped to the
    window) and the busy blocks ``(starts, ends)``."""
    s = np.maximum(gpu.ts[sel], s0) - s0  # relative times keep float64 precision on epoch-µs clocks
    e = np.minimum(gpu.end[sel], s1) - s0
    keep = e > s
    s, e, cls = s[keep], e[keep], gpu.cls[sel][keep]
    comp, comm = cls == CLS_COMP, cls == CLS_COMM
    comp_t = union_length(s[comp], e[comp])
    cc = comp | comm
    comp_comm_t = union_length(s[cc], e[cc])
    bs, be = merged_intervals(s, e)
    busy = float(np.sum(be - bs)) if bs.size else 0.0
    split = {"computation_us": comp_t, "exposed_comm_us": comp_comm_t - comp_t,
             "exposed_memcpy_us": busy - comp_comm_t, "busy_us": busy, "idle_us": (s1 - s0) - busy}
    return split, bs + s0, be + s0


def build_view(step: int, s0: float, s1: float, host: HostColumns, gpu: GpuColumns, primary: int,
               states: StateTable) -> StepView:
    """The :class:`StepView` of the window ``[s0, s1)`` (see the module docstring)."""
    hsel = host.overlapping(s0, s1)
    per_thread, tops = sweep(host, hsel, s0, s1, states)
    c = combine(per_thread, s0, s1, primary, states.cat_array())
    gsel = gpu.overlapping(s0, s1)
    split, bs, be = gpu_split(gpu, gsel, s0, s1)
    return StepView(step=step, s0=s0, s1=s1, c_t0=c[0], c_t1=c[1], c_sid=c[2], c_top=c[3], c_site=c[4], c_thr=c[5],
                    gpu=gsel, busy_s=bs, busy_e=be, split=split, host=hsel, top_ops=tops)
