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

import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from ...state.steps import HOST_CATEGORIES, StepBreakdown
from ..errors import InputError
from .host_names import OUTSIDE, PRECEDENCE, copy_blocks, op_category, runtime_category
from .hygiene import STEP_NAME_RE
from .kineto_reader import MEMCPY, KinetoLoader, KinetoTrace, _Links, _stream_events

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


class Annotations:
    """The annotations the verifier's reader does not keep (``user_annotation`` events: regions and
    record_function names; and which thread each ``ProfilerStep#N`` ran on), fed one event at a time."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, str, tuple]] = []
        self.step_threads: dict[int, tuple] = {}

    def feed(self, ev) -> None:
        if type(ev) is not dict or ev.get("cat") != "user_annotation" or ev.get("ph", "X") != "X":
            return
        try:
            ts, dur = float(ev["ts"]), float(ev.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            return
        name = ev.get("name") or ""
        key = (ev.get("pid"), ev.get("tid"))
        m = STEP_NAME_RE.match(name)
        if m:
            self.step_threads[int(m.group(1))] = key
        elif math.isfinite(ts) and math.isfinite(dur) and dur >= 0:
            self.rows.append((ts, ts + dur, name, key))


def _cells(a: np.ndarray, b: np.ndarray, s0: float, w: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The cells ``[c0, c1)`` whose midpoints ``s0 + (c + 1/2) w`` fall in ``[a, b)``."""
    c0 = np.clip(np.ceil((a - s0) / w - 0.5), 0, n).astype(np.int64)
    c1 = np.clip(np.ceil((b - s0) / w - 0.5), 0, n).astype(np.int64)
    return c0, c1


def _paint(layer: np.ndarray, c0: np.ndarray, c1: np.ndarray, val: np.ndarray, order: np.ndarray) -> None:
    for i in order.tolist():
        if c1[i] > c0[i]:
            layer[c0[i]:c1[i]] = val[i]


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
    rt = trace.runtime
    rt_rows = [rt[i] for i in range(len(rt))]
    r_ts = np.array([r[0] for r in rt_rows])
    r_end = np.array([r[1] for r in rt_rows])
    r_thr = np.array([r[4] for r in rt_rows], dtype=np.int64)
    r_cat = np.array([PRECEDENCE[runtime_category(r[2], r[3] in blocking_ids)] for r in rt_rows], dtype=np.int8)
    ops = trace.cpu_ops
    op_rows = [ops[i] for i in range(len(ops))] + [(a, b, n, threads[k]) for a, b, n, k in notes.rows]
    o_ts = np.array([r[0] for r in op_rows])
    o_end = np.array([r[1] for r in op_rows])
    o_thr = np.array([r[3] for r in op_rows], dtype=np.int64)
    region = {}
    o_reg = np.array([region.setdefault(r[2], PRECEDENCE.get(op_category(r[2]) or "", _NONE)) for r in op_rows],
                     dtype=np.int8)
    gpu = [g for g in trace.gpu if g.linked or not trace.linked_only]
    g_ts = np.array([g.ts for g in gpu])
    g_end = np.array([g.end for g in gpu])
    g_cols = (g_ts, g_end, np.full(g_ts.size, -1, dtype=np.int64), np.zeros(g_ts.size, dtype=np.int8))
    del names
    out = []
    for ts, dur, num in trace.steps:
        s0, s1 = float(ts), float(ts) + float(dur)
        if not dur > 0:
            continue
        w = (s1 - s0) / cells
        primary = threads.get(notes.step_threads.get(num), -1)
        out.append(_sample_one(num, s0, s1, w, cells, primary, (r_ts, r_end, r_thr, r_cat),
                               (o_ts, o_end, o_thr, o_reg), g_cols))
    return out


def _layer(cols, thr: int, s0: float, s1: float, w: float, n: int, bounds: list, value=None) -> np.ndarray:
    """One painted layer of thread ``thr`` from columns ``(ts, end, thread, value)``: per cell the value of
    the innermost event with a value open at its midpoint (``_NONE`` where none; events valued ``_NONE``
    are not painted: an unnamed op leaves its region showing), or whether any is open with ``value=True``."""
    ts, end, th, val = cols
    sel = np.flatnonzero((th == thr) & (ts < s1) & (end > s0) & (True if value is True else val != _NONE))
    bounds += [ts[sel], end[sel]]
    c0, c1 = _cells(ts[sel], end[sel], s0, w, n)
    order = np.lexsort((-end[sel], ts[sel]))  # start order, outer first: the innermost is painted last
    if value is True:
        lay = np.zeros(n, dtype=bool)
        _paint(lay, c0, c1, np.ones(sel.size, dtype=bool), order)
    else:
        lay = np.full(n, _NONE, dtype=np.int8)
        _paint(lay, c0, c1, val[sel], order)
    return lay


def _sample_one(num: int, s0: float, s1: float, w: float, n: int, primary: int, rt, op, gp) -> SampledStep:
    bounds: list = []
    best = np.full(n, _OUT + 1, dtype=np.int8)
    live = set(rt[2][(rt[0] < s1) & (rt[1] > s0)].tolist()) | set(op[2][(op[0] < s1) & (op[1] > s0)].tolist())
    for thr in sorted(live | {primary}, key=lambda t: (t != primary, t)):
        rt_l = _layer(rt, thr, s0, s1, w, n, bounds)
        reg_l = _layer(op, thr, s0, s1, w, n, [])
        any_op = _layer(op, thr, s0, s1, w, n, bounds, value=True)
        cat = np.where(rt_l != _NONE, rt_l, np.where(reg_l != _NONE, reg_l, np.where(any_op, _OP, _NONE)))
        if thr == primary:
            cat = np.where(cat == _NONE, _OUT, cat)
        best = np.minimum(best, cat.astype(np.int8))
    best = np.where(best > _OUT, _OUT, best)
    busy = _layer(gp, -1, s0, s1, w, n, bounds, value=True)
    allb = np.concatenate(bounds) if bounds else np.zeros(0)
    allb = allb[(allb > s0) & (allb < s1)]
    bcells = np.unique(np.minimum(((allb - s0) / w).astype(np.int64), n - 1))
    host = np.bincount(best.astype(np.int64), minlength=len(HOST_CATEGORIES)) * w
    idle = np.bincount(best[~busy].astype(np.int64), minlength=len(HOST_CATEGORIES)) * w
    return SampledStep(step=num, cells=n, cell_us=w, boundary_cells=int(bcells.size), tolerance_us=float(bcells.size * w),
                       host_us={c: float(v) for c, v in zip(HOST_CATEGORIES, host)},
                       idle_by_host_us={c: float(v) for c, v in zip(HOST_CATEGORIES, idle)},
                       gpu_idle_us=float((~busy).sum() * w))


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
