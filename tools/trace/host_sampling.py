"""The verifier's re-derivation of the step accounting (issue 34 item 5), by a different method
through the verifier's own reader (:mod:`.kineto_reader`): each step's window is cut into ``N``
equal cells and the state at each cell's midpoint is read off "painted" timelines, instead of the
engine's sweep of every event boundary (:mod:`.step_window`).

**Painting.** Per host thread, three layers of one int8 per cell: the runtime/driver call open
there (its host category, :mod:`.host_names`), the region open there (``Optimizer.step#``,
DataLoader), whether any recorded op (cpu_op or annotation) is open there; the GPU layer whether any
linked GPU event (the reader's linking and clipping) is open there. Events are painted in start order (outer first, so the innermost wins). A cell's
host category on one thread is its runtime layer, else its region layer, else ``op`` when an op is
open, else outside ops (the step's thread) or nothing (another thread); across threads the same
precedence as the engine's (:data:`.host_names.PRECEDENCE`), applied here with this code.

**Tolerance.** The midpoint rule is exact on a cell where nothing starts or ends; on a cell
holding a boundary (of any host or GPU event) it can err by at most the cell's width, for any
one category. So for every category the sampled time is within ``boundary_cells x width`` of
the exact time (``tolerance_us``): the bound is counted on the trace itself, never assumed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from ...state.steps import HOST_CATEGORIES, StepBreakdown
from ..errors import InputError
from .host_names import OUTSIDE, PRECEDENCE, copy_blocks, op_category, runtime_category
from .scan import sorted_unique
from .kineto_reader import MEMCPY, NO_ID, KinetoLoader, KinetoTrace, _Links, _Rows, _stream_events
from .reader_feed import ANNOTATION_FIELDS, Annotations  # noqa: F401 (re-exported: the feed's, numpy-free)

#: Cells per step: 2^20 keeps the painted layers at 1 MiB per thread and layer.
CELLS_PER_STEP = 1 << 20
_NONE = 127  # int8 "nothing painted"
_OUT = PRECEDENCE[OUTSIDE]
_OP = PRECEDENCE["op"]


class SampledStep(BaseModel):
    """One step as the sampler reads it: ``cells`` of ``cell_us``, ``boundary_cells`` holding an event
    boundary, ``tolerance_us`` (= boundary_cells x cell_us), µs per host category over the step
    (``host_us``) and over its GPU-idle cells (``idle_by_host_us``), and ``gpu_idle_us``."""

    step: int
    cells: int
    cell_us: float
    boundary_cells: int
    tolerance_us: float
    host_us: dict[str, float] = Field(default_factory=dict)
    idle_by_host_us: dict[str, float] = Field(default_factory=dict)
    gpu_idle_us: float = 0.0


def _columns(rows, k: int, name_col: int) -> tuple[tuple, list[str]]:
    """``(columns, names)`` of a reader's rows (``k`` columns): its :class:`~.kineto_reader._Rows`
    columns as kept, or those of a plain list of row tuples; the name column as ids into ``names``."""
    if isinstance(rows, _Rows):
        return rows.columns(), rows.names
    cols = [list(c) for c in zip(*rows)] if len(rows) else [[] for _ in range(k)]
    names = list(dict.fromkeys(cols[name_col]))
    ids = {n: i for i, n in enumerate(names)}
    cols[name_col] = [ids[n] for n in cols[name_col]]
    return tuple(cols), names


def _cells(a: np.ndarray, b: np.ndarray, s0: float, w: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The cells ``[c0, c1)`` whose midpoints ``s0 + (c + 1/2) w`` fall in ``[a, b)``."""
    c0 = np.clip(np.ceil((a - s0) / w - 0.5), 0, n).astype(np.int64)
    c1 = np.clip(np.ceil((b - s0) / w - 0.5), 0, n).astype(np.int64)
    return c0, c1


def _last_cover(m: int, c0: np.ndarray, c1: np.ndarray) -> np.ndarray:
    """Per segment ``0..m-1``, the largest index ``i`` of the intervals ``[c0[i], c1[i])`` (segment
    indices) that cover it, -1 where none does: "painted in index order, the last one wins", for all
    intervals at once. A segment tree over the ``m`` segments: each interval is split into its
    O(log m) canonical nodes (level by level, numpy's ``maximum.at``), then every node's value is
    pushed down to the leaves."""
    size = 1 << max(0, int(m - 1).bit_length())
    tree = np.full(2 * size, -1, dtype=np.int64)
    keep = c1 > c0
    lo, hi, v = c0[keep] + size, c1[keep] + size, np.flatnonzero(keep)
    while lo.size:
        odd = (lo & 1).astype(bool)
        np.maximum.at(tree, lo[odd], v[odd])
        lo = lo + odd
        odd = (hi & 1).astype(bool)
        hi = hi - odd
        np.maximum.at(tree, hi[odd], v[odd])
        lo, hi = lo >> 1, hi >> 1
        keep = lo < hi
        lo, hi, v = lo[keep], hi[keep], v[keep]
    k = 2
    while k < 2 * size:  # level by level, top down: a node holds the max of itself and its parent
        idx = np.arange(k, 2 * k)
        tree[idx] = np.maximum(tree[idx], tree[idx >> 1])
        k *= 2
    return tree[size:size + m]


def sample_steps(trace: KinetoTrace, loader: KinetoLoader, notes: Annotations, *,
                 cells: int = CELLS_PER_STEP) -> list[SampledStep]:
    """Every profiled step of a loaded trace, sampled on ``cells`` cells (see the module docstring).
    ``loader`` is the :class:`KinetoLoader` that built ``trace`` (its link-id columns); ``notes`` the
    :class:`Annotations` fed the same events. Raises InputError when the trace has no step."""
    if not trace.steps:
        raise InputError(f"{trace.path.name}: no ProfilerStep annotations: nothing to sample")
    names = loader.names
    threads = dict(loader.threads)
    for *_x, key in notes.rows:
        threads.setdefault(key, len(threads))
    for key in notes.step_threads.values():
        threads.setdefault(key, len(threads))
    # blocking async copies: the runtime call whose GPU memcpy copies device-to-host into pageable memory
    g_link = _Links(loader.g_corr)
    blocking_ids = {g_link[i] for i, g in enumerate(trace.gpu) if g.kind == MEMCPY and copy_blocks(g.name)}
    blocking_ids.discard(None)
    # the readers' columns as arrays (no row tuples); a category once per distinct name
    (r_ts, r_end, r_name, r_link, r_thr), rnames = _columns(trace.runtime, 5, 2)
    r_ts, r_end, r_thr = np.array(r_ts, dtype=float), np.array(r_end, dtype=float), np.array(r_thr, dtype=np.int64)
    r_link = np.array(r_link.raw() if isinstance(r_link, _Links) else [NO_ID if v is None else v for v in r_link],
                      dtype=np.int64)
    blocking = np.isin(r_link, np.array(sorted(blocking_ids), dtype=np.int64))
    key, inv = np.unique(np.array(r_name, dtype=np.int64) * 2 + blocking, return_inverse=True)
    r_cat = np.array([PRECEDENCE[runtime_category(rnames[k >> 1], bool(k & 1))]
                      for k in key.tolist()], dtype=np.int8)[inv.reshape(-1)] if key.size else np.zeros(0, dtype=np.int8)
    ops = trace.cpu_ops
    region: dict[str, int] = {}

    def reg(name: str) -> int:
        got = region.get(name)
        if got is None:
            got = region[name] = PRECEDENCE.get(op_category(name) or "", _NONE)
        return got

    o_cols, onames = _columns(ops, 4, 2)
    o_id = np.array(o_cols[2], dtype=np.int64)
    uniq, o_inv = np.unique(o_id, return_inverse=True)
    o_reg_ops = np.array([reg(onames[i]) for i in uniq.tolist()],
                         dtype=np.int8)[o_inv.reshape(-1)] if uniq.size else np.zeros(0, dtype=np.int8)
    rows = notes.rows
    o_ts = np.concatenate([np.array(o_cols[0], dtype=float), np.array([r[0] for r in rows], dtype=float)])
    o_end = np.concatenate([np.array(o_cols[1], dtype=float), np.array([r[1] for r in rows], dtype=float)])
    o_thr = np.concatenate([np.array(o_cols[3], dtype=np.int64), np.array([threads[r[3]] for r in rows], dtype=np.int64)])
    o_reg = np.concatenate([o_reg_ops, np.array([reg(r[2]) for r in rows], dtype=np.int8)])
    gpu = [g for g in trace.gpu if g.linked or not trace.linked_only]
    g_ts = np.array([g.ts for g in gpu])
    g_end = np.array([g.end for g in gpu])
    g_cols = (g_ts, g_end, np.full(g_ts.size, -1, dtype=np.int64), np.zeros(g_ts.size, dtype=np.int8))
    del names
    lens = [float(d) for _t, d, _n in trace.steps if float(d) > 0]
    cut = min(lens) if lens else 0.0
    near = [_Near(_by_start(c), cut) for c in ((r_ts, r_end, r_thr, r_cat), (o_ts, o_end, o_thr, o_reg), g_cols)]
    del r_ts, r_end, r_thr, r_cat, o_ts, o_end, o_thr, o_reg, g_cols, g_ts, g_end  # the sorted copies stay
    out = []
    for ts, dur, num in trace.steps:
        s0, s1 = float(ts), float(ts) + float(dur)
        if not dur > 0:
            continue
        w = (s1 - s0) / cells
        primary = threads.get(notes.step_threads.get(num), -1)
        out.append(_sample_one(num, s0, s1, w, cells, primary, *(x.rows(s0, s1) for x in near)))
    return out


def _by_start(cols: tuple) -> tuple:
    """Columns ``(ts, end, ...)`` reordered by start (a stable sort: rows starting together keep their
    order, so a step's selection and its painting order are those of the columns as read)."""
    order = np.argsort(cols[0], kind="stable")
    return tuple(c[order] for c in cols)


class _Near:
    """The rows of columns ``(ts, end, ...)``, sorted by start (:func:`_by_start`), that can be open in a
    window ``[s0, s1)``, without a pass over every row per window: the rows starting in ``(s0 - cut -
    1 µs, s1)`` (a binary search; no row of at most ``cut`` µs starting earlier reaches ``s0``; the 1 µs
    covers the rounding of ``end - ts``) and the rows longer than ``cut`` (few) starting before them.
    :meth:`rows` keeps the columns' order. Memory: the indices of the long rows."""

    def __init__(self, cols: tuple, cut: float) -> None:
        ts, end = cols[0], cols[1]
        self.cols, self.cut = cols, cut
        self.long = np.flatnonzero(~((end - ts) <= cut))  # NaN lengths count as long

    def rows(self, s0: float, s1: float) -> tuple:
        ts = self.cols[0]
        a = int(ts.searchsorted(s0 - self.cut - 1.0, "left"))
        b = int(ts.searchsorted(s1, "left"))
        keep = np.concatenate([self.long[self.long < a], np.arange(a, max(a, b))])
        return tuple(c[keep] for c in self.cols)


def _select(cols, thr: int, s0: float, s1: float, w: float, n: int, bounds: list | None, value=None):
    """The events of thread ``thr`` from columns ``(ts, end, thread, value)`` open in ``[s0, s1)`` (those
    with a value unless ``value=True``), in start order, outer first (the innermost is painted last):
    ``(c0, c1, values)``, their cells ``[c0, c1)``; their bounds are added to ``bounds`` (when given)."""
    ts, end, th, val = cols
    sel = np.flatnonzero((th == thr) & (ts < s1) & (end > s0) & (True if value is True else val != _NONE))
    if bounds is not None:
        bounds += [ts[sel], end[sel]]
    c0, c1 = _cells(ts[sel], end[sel], s0, w, n)
    order = np.lexsort((-end[sel], ts[sel]))
    return c0[order], c1[order], val[sel][order]


def _layer(sel, edges: np.ndarray, value=None) -> np.ndarray:
    """One painted layer over the segments between ``edges`` (sorted cell indices holding every
    selected event's ``c0`` and ``c1``: the state is constant on a segment): per segment the value of
    the innermost event with a value open at its cells' midpoints (``_NONE`` where none; events
    valued ``_NONE`` are not selected: an unnamed op leaves its region showing), or whether any is
    open with ``value=True``. The same as painting each cell, event by event, in start order."""
    c0, c1, val = sel
    m = edges.size - 1
    i0, i1 = np.searchsorted(edges, c0), np.searchsorted(edges, c1)
    if value is True:
        on = i1 > i0
        cover = np.cumsum(np.bincount(i0[on], minlength=m + 1) - np.bincount(i1[on], minlength=m + 1))[:m]
        return cover > 0
    last = _last_cover(m, i0, i1)
    return np.where(last >= 0, val[np.maximum(last, 0)] if val.size else _NONE, _NONE).astype(np.int8)


def _sample_one(num: int, s0: float, s1: float, w: float, n: int, primary: int, rt, op, gp) -> SampledStep:
    bounds: list = []
    live = set(rt[2][(rt[0] < s1) & (rt[1] > s0)].tolist()) | set(op[2][(op[0] < s1) & (op[1] > s0)].tolist())
    order = sorted(live | {primary}, key=lambda t: (t != primary, t))
    layers = [(thr, _select(rt, thr, s0, s1, w, n, bounds), _select(op, thr, s0, s1, w, n, None),
               _select(op, thr, s0, s1, w, n, bounds, value=True)) for thr in order]
    gsel = _select(gp, -1, s0, s1, w, n, bounds, value=True)
    # the cells where anything starts or ends cut the step into segments of constant state
    edges = sorted_unique(np.concatenate([np.array([0, n], dtype=np.int64), gsel[0], gsel[1]]
                                     + [c for _, *sels in layers for sel in sels for c in sel[:2]]))
    width = np.diff(edges)  # cells per segment
    best = np.full(width.size, _OUT + 1, dtype=np.int8)
    for thr, rt_s, reg_s, op_s in layers:
        rt_l, reg_l, any_op = _layer(rt_s, edges), _layer(reg_s, edges), _layer(op_s, edges, value=True)
        cat = np.where(rt_l != _NONE, rt_l, np.where(reg_l != _NONE, reg_l, np.where(any_op, _OP, _NONE)))
        if thr == primary:
            cat = np.where(cat == _NONE, _OUT, cat)
        best = np.minimum(best, cat.astype(np.int8))
    best = np.where(best > _OUT, _OUT, best)
    busy = _layer(gsel, edges, value=True)
    allb = np.concatenate(bounds) if bounds else np.zeros(0)
    allb = allb[(allb > s0) & (allb < s1)]
    bcells = sorted_unique(np.minimum(((allb - s0) / w).astype(np.int64), n - 1))
    ncat = len(HOST_CATEGORIES)
    host = np.bincount(best.astype(np.int64), weights=width, minlength=ncat).astype(np.int64) * w
    idle = np.bincount(best[~busy].astype(np.int64), weights=width[~busy], minlength=ncat).astype(np.int64) * w
    return SampledStep(step=num, cells=n, cell_us=w, boundary_cells=int(bcells.size), tolerance_us=float(bcells.size * w),
                       host_us={c: float(v) for c, v in zip(HOST_CATEGORIES, host)},
                       idle_by_host_us={c: float(v) for c, v in zip(HOST_CATEGORIES, idle)},
                       gpu_idle_us=float(int(width[~busy].sum()) * w))


def sample_file(path: str | Path, *, cells: int = CELLS_PER_STEP) -> list[SampledStep]:
    """:func:`sample_steps` over a file read by the verifier's own reader (one pass feeding its
    :class:`KinetoLoader` and the :class:`Annotations`). Raises InputError / NoGpuEventsError."""
    p = Path(path)
    rank, events = _stream_events(p)
    loader, notes = KinetoLoader(p), Annotations()
    for ev in events:
        loader.feed(ev)
        notes.feed(ev)
    return sample_steps(loader.finish(rank), loader, notes, cells=cells)


def compare(breakdown: StepBreakdown, sampled: list[SampledStep]) -> list[dict]:
    """Per step and host category, the engine's µs (over the step and over its GPU idle) against the
    sampler's, with the sampler's tolerance: rows ``{step, category, what, engine_us, sampled_us,
    diff_us, tolerance_us, ok}``; steps matched by number."""
    by_num = {s.step: s for s in sampled}
    rows = []
    for st in breakdown.steps:
        sm = by_num.get(st.step)
        if sm is None:
            continue
        for what, eng, smp in (("host", st.host_us, sm.host_us), ("gpu_idle", st.idle_by_host_us, sm.idle_by_host_us)):
            for c in HOST_CATEGORIES:
                e, s = eng.get(c, 0.0), smp.get(c, 0.0)
                rows.append({"step": st.step, "category": c, "what": what, "engine_us": e, "sampled_us": s,
                             "diff_us": s - e, "tolerance_us": sm.tolerance_us, "ok": abs(s - e) <= sm.tolerance_us})
    return rows
