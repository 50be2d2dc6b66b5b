"""The step accounting of one rank trace (issue 34): a host timeline beside the GPU timeline, per
profiled step, from the one pass over the trace.

:class:`StepAccountant` is fed every event of the engine's read (``feed(event)``, like the
verifier's reader and the roofline's collector); :meth:`StepAccountant.finish` returns a
:class:`~ai4s_graph.state.steps.StepBreakdown`. :func:`step_breakdown` runs it over a file through
the engine's reader (:func:`.stream.feed_events`).

Per ``ProfilerStep#N`` window: the GPU split (computation, exposed communication, exposed memcpy,
idle: TraceLens's definitions as the engine computes them, :mod:`.step_window`); the host's
state at every instant (:mod:`.host_names`: launch, sync, allocator, DataLoader, optimizer, other
runtime calls, an op's CPU side by top-level op, outside every recorded op) over the whole step
and over its GPU-idle time, both summing to their totals exactly; the Python call site behind each
attribution when the trace has stacks (:mod:`.pystack`); the critical path (:mod:`.critical_path`);
the structure figures and the lead (:mod:`.step_structure`). HTA's idle-time breakdown
(``hta/analyzers/breakdown_analysis.py``) splits a stream's gaps into host wait / kernel wait / other
by comparing each kernel's launch time with the previous kernel's end; this says what the host was
doing during each gap.

**Memory.** Kept while feeding, per event: GPU events 45 B (start, duration, name id, kind, device,
stream, correlation, bytes), host events 37 B (cpu_ops, annotations, runtime/driver calls, and only
the *user* Python frames: torch and library frames are dropped as they arrive), device memory
events 16 B, one copy of each distinct name and Input Dims signature; never the event dicts. A
step's working set (its segments and GPU events) lives while that step is accounted. Feeding is
O(1) per event (a few dict lookups and array appends).
"""

from __future__ import annotations

import os
import statistics
from array import array
from collections import Counter
from typing import Any, BinaryIO, Callable

import numpy as np

from ...state.steps import (HOST_CATEGORIES, Attribution, GpuSplit, Saving, SiteShare, StepAccount, StepBreakdown,
                             StepStructure)
from ..errors import InputError
from . import cpu_ops
from .guard import named_malformed_events
from . import critical_path as cp
from .host_names import PRECEDENCE, copy_blocks, op_category, runtime_category
from .pystack import NO_STACKS_NOTE, site_of
from .step_feed import FIELDS, StepFeed  # noqa: F401 (FIELDS re-exported: the feed's keys)
from .step_structure import distribution, lead, preceding_states, structure
from .step_window import (CAT_INHERIT, KIND_PY, KIND_RUNTIME, GpuColumns, HostColumns, StateTable, StepView,
                          build_view)
from .stream import (KIND_MEMCPY, TraceScan, clip_stream_overlaps, feed_events, tracelens_classes,
                     window_mask)

class StepAccountant(StepFeed):
    """Per-event consumer building the step accounting (see the module docstring): the feed is
    :class:`.step_feed.StepFeed`'s (a feed joined from pieces, :meth:`~.step_feed.StepFeed.absorb`,
    finishes the same).

    ``top``: how many attributions / path shares to keep per step; ``keep_paths``: keep every step's
    critical-path segments in the result; ``keep_views``: keep the steps' :class:`StepView` for
    :meth:`saving` (otherwise a step's view is rebuilt when asked); ``param_bytes``: the model's
    parameter bytes from the manifest, when known (device-to-host bytes per step are compared with it)."""

    def __init__(self, path: str | os.PathLike = "", *, top: int = 10, keep_paths: bool = False,
                 keep_views: bool = False, param_bytes: int | None = None) -> None:
        super().__init__()
        self.path = str(path)
        self.param_bytes = param_bytes
        self.top, self.keep_paths, self.keep_views = top, keep_paths, keep_views
        # set by finish()
        self.host: HostColumns | None = None
        self.gpu: GpuColumns | None = None
        self.states = StateTable()
        self.windows: list[tuple[int, float, float, int]] = []
        self.views: list[StepView] = []

    # ------------------------------------------------------------------ finishing

    def _rel(self, col: array) -> np.ndarray:
        """Times as written minus :attr:`base` (the per-event subtraction, over the column)."""
        a = np.frombuffer(col, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            return a - self.base if self.base is not None and a.size else a.copy()

    def _columns(self) -> None:
        """The fed columns as sorted numpy columns (:class:`HostColumns`, :class:`GpuColumns`), times
        relative to the first one taken (:attr:`base`)."""
        g_ts = self._rel(self.g_ts)
        h_ts = self._rel(self.h_ts)
        with np.errstate(over="ignore", invalid="ignore"):
            h_end = h_ts + np.frombuffer(self.h_dur, dtype=np.float64)
        self.m_rel = self._rel(self.m_ts)
        scan = TraceScan(path=self.path, n_events=self.n, ts=g_ts, dur=np.frombuffer(self.g_dur, dtype=np.float64).copy(),
                         dur_raw=np.frombuffer(self.g_dur, dtype=np.float64),
                         name_id=np.frombuffer(self.g_name, dtype=np.int32), kind=np.frombuffer(self.g_kind, dtype=np.int8),
                         stream=np.frombuffer(self.g_stream, dtype=np.int32),
                         device=np.frombuffer(self.g_device, dtype=np.int32),
                         corr=np.frombuffer(self.g_corr, dtype=np.int64), names=self.gnames,
                         launch_corr=np.frombuffer(self.h_corr, dtype=np.int64)[np.frombuffer(self.h_corr, dtype=np.int64) >= 0],
                         launch_ts=np.zeros(0), flow_ids=np.frombuffer(self.flow_ids, dtype=np.int64))
        if g_ts.size:
            clip_stream_overlaps(scan)  # the engine's rule: issue order on a stream
            keep = window_mask(scan, "linked")  # the engine's (TraceLens's) linked events
            cls = tracelens_classes(scan)
        else:
            keep, cls = np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int8)
        horder = np.argsort(h_ts, kind="stable")
        h_corr = np.frombuffer(self.h_corr, dtype=np.int64)[horder]
        h_kind = np.frombuffer(self.h_kind, dtype=np.int8)[horder]
        h_name = np.frombuffer(self.h_name, dtype=np.int32)[horder]
        g_sel = np.flatnonzero(keep)
        g_sel = g_sel[np.argsort(scan.ts[g_sel], kind="stable")]
        g_corr = scan.corr[g_sel]
        # the launching call of each GPU event: the first runtime call with its correlation id
        rt = np.flatnonzero((h_kind == KIND_RUNTIME) & (h_corr >= 0))
        rt = rt[np.argsort(h_corr[rt], kind="stable")]
        pos = np.searchsorted(h_corr[rt], g_corr)
        posc = np.minimum(pos, max(rt.size - 1, 0))
        found = (rt.size > 0) & (pos < rt.size) & (h_corr[rt][posc] == g_corr) if rt.size else np.zeros(g_sel.size, bool)
        launch = np.where(found, rt[posc] if rt.size else -1, -1).astype(np.int64)
        # host categories: runtime calls by name (an async copy into pageable memory blocks), ops by name
        g_names = scan.name_id[g_sel]
        cat = np.full(h_ts.size, CAT_INHERIT, dtype=np.int8)
        blocking = np.zeros(h_ts.size, dtype=bool)
        mem = scan.kind[g_sel] == KIND_MEMCPY
        blocks_by_name = np.array([copy_blocks(n) for n in self.gnames], dtype=bool) if self.gnames else np.zeros(0, bool)
        hit = launch[mem & found]
        blocking[hit[blocks_by_name[g_names[mem & found]]]] = True
        memo: dict[tuple[int, int, bool], int] = {}
        for i, (k, nm, bl) in enumerate(zip(h_kind.tolist(), h_name.tolist(), blocking.tolist())):
            if k == KIND_PY:
                continue
            key = (k, nm, bl)
            c = memo.get(key)
            if c is None:
                name = self.hnames[nm]
                if k == KIND_RUNTIME:
                    c = PRECEDENCE[runtime_category(name, bl)]
                else:
                    oc = op_category(name)
                    c = PRECEDENCE[oc] if oc else CAT_INHERIT
                memo[key] = c
            cat[i] = c
        self.host = HostColumns(ts=h_ts[horder], end=h_end[horder],
                                thr=np.frombuffer(self.h_thr, dtype=np.int32)[horder], name=h_name, kind=h_kind, cat=cat,
                                corr=h_corr, sig=np.frombuffer(self.h_sig, dtype=np.int32)[horder], names=self.hnames)
        skey = (scan.device[g_sel].astype(np.int64) << 32) + scan.stream[g_sel].astype(np.int64)
        order = np.lexsort((scan.ts[g_sel], skey))
        prev = np.full(g_sel.size, -1, dtype=np.int64)
        same = skey[order][1:] == skey[order][:-1]
        prev[order[1:][same]] = order[:-1][same]
        prev[np.flatnonzero(scan.stream[g_sel] < 0)] = -1  # no stream: no issue order known
        self.gpu = GpuColumns(ts=scan.ts[g_sel], end=scan.ts[g_sel] + scan.dur[g_sel], cls=cls[g_sel], skey=skey,
                              name=g_names, kind=scan.kind[g_sel], nbytes=np.frombuffer(self.g_bytes, dtype=np.int64)[g_sel],
                              launch=launch, prev=prev, names=self.gnames)
        self.overlaps = len(scan.overlaps)
        for col in ("g_ts", "g_dur", "g_name", "g_stream", "g_device", "g_corr", "g_bytes", "h_ts", "h_dur", "h_name",
                    "h_thr", "h_sig", "h_corr", "flow_ids", "h_kind", "g_kind"):
            setattr(self, col, array(getattr(self, col).typecode))

    def _windows(self, warnings: list[str]) -> list[tuple[int, float, float, int]]:
        base = self.base if self.base is not None else 0.0
        steps = sorted(((n, t - base, d, th) for n, t, d, th in self.steps), key=lambda s: s[1])
        if steps:
            return [(n, t, t + d, th) for n, t, d, th in steps]
        h, g = self.host, self.gpu
        starts = ([float(h.ts[0])] if h.ts.size else []) + ([float(g.ts[0])] if g.ts.size else [])
        ends = ([float(h.end.max())] if h.ts.size else []) + ([float(g.end.max())] if g.ts.size else [])
        if not starts:
            return []
        lo, hi = min(starts), max(ends)
        warnings.append("no ProfilerStep annotations: the whole trace is accounted as one window (step -1)")
        thr = Counter(h.thr.tolist()).most_common(1)[0][0] if h.ts.size else 0
        return [(-1, lo, hi, int(thr))] if hi > lo else []

    def finish(self) -> StepBreakdown:
        """The :class:`StepBreakdown` of what was fed. Raises InputError when nothing was fed (not a
        PyTorch profiler trace)."""
        if self.n == 0:
            raise InputError(f"{os.path.basename(self.path) or 'trace'}: JSON has no traceEvents list (not a PyTorch "
                             "profiler trace)")
        warnings: list[str] = []
        self._columns()
        host, gpu = self.host, self.gpu
        self.windows = self._windows(warnings)
        if self.windows:
            host.set_long_cut(min(s1 - s0 for _n, s0, s1, _t in self.windows))
        if gpu.ts.size == 0:
            warnings.append("no GPU events linked to a host launch: the GPU is idle in every step (a CPU-only trace?)")
        if self.bad:
            warnings.append(f"{self.bad} event(s) without a usable ts/dur left out")
        mem = (self.m_rel, np.frombuffer(self.m_alloc, dtype=np.int64))
        mo = np.argsort(mem[0], kind="stable")
        mem = (mem[0][mo], mem[1][mo])
        steps: list[StepAccount] = []
        before: list[dict[int, str]] = []
        launching = cpu_ops.launching_calls(host, gpu)
        for num, s0, s1, thr in self.windows:
            view = build_view(num, s0, s1, host, gpu, thr, self.states)
            links = cp.walk(view, host, gpu, self.states)
            acc = self._account(view, links)
            acc.structure = structure(view, host, gpu, self.sigs, mem)
            state_cat = np.asarray(self.states.cat, dtype=np.int64)  # the sweep may add states each step
            acc.idle_cpu_only_ops_us = cpu_ops.cpu_only_op_idle(view, host, launching, state_cat,
                                                                HOST_CATEGORIES.index("op"))
            steps.append(acc)
            before.append(preceding_states(view, self.states.cat, self._label))
            if self.keep_views:
                self.views.append(view)
        ld = lead(steps)
        if ld is not None:  # what most often comes right before the lead's longest stretch; its saving on the median step
            code = HOST_CATEGORIES.index(ld.category)
            preceding = Counter(b[code] for b in before if b.get(code))
            ld = lead(steps, preceding.most_common(1)[0][0] if preceding else "")
            mid = sorted(range(len(steps)), key=lambda i: steps[i].wall_us)[len(steps) // 2]
            sv = self.saving(mid, [ld.category])
            ld.context.update(saving_step=sv.step, saving_replay_us=sv.replay_us, saving_upper_us=sv.upper_us)
        n = len(steps)
        counts = {k: statistics.median(getattr(s.structure, k) for s in steps) for k, f in
                  StepStructure.model_fields.items() if f.annotation is int} if n else {}
        pb, src = self.param_bytes, "manifest" if self.param_bytes else ""
        if not pb:
            mins = [s.structure.device_min_allocated_bytes for s in steps if s.structure.device_min_allocated_bytes]
            pb, src = (min(mins), "memory events") if mins else (None, "")
        ratio = counts["d2h_bytes"] / pb if pb and counts else None
        if ld is not None and ratio is not None:
            ld.context["d2h_over_param"] = ratio
        mean = (lambda key: {c: statistics.fmean(getattr(s, key).get(c, 0.0) for s in steps) for c in HOST_CATEGORIES}) \
            if n else (lambda key: {})
        mgpu = GpuSplit(**{k: statistics.fmean(getattr(s.gpu, k) for s in steps) for k in GpuSplit.model_fields}) \
            if n else GpuSplit()
        return StepBreakdown(
            path=self.path, n_steps=n, steps=steps, mean_host_us=mean("host_us"), mean_idle_by_host_us=mean("idle_by_host_us"),
            mean_gpu=mgpu, distribution=distribution([s.wall_us for s in steps]), lead=ld,
            has_python_stacks=self.n_python > 0, python_stack_note="" if self.n_python else NO_STACKS_NOTE,
            has_shapes=self.has_shapes, has_memory_events=self.n_memory > 0,
            threads=len(set(host.thr.tolist())), median_counts=counts, param_bytes=pb, param_bytes_source=src,
            d2h_over_param=ratio, warnings=warnings)

    def _label(self, sid: int) -> str:
        c, nm = self.states.cat[sid], self.states.name[sid]
        return HOST_CATEGORIES[c] + (f" {self.hnames[nm]}" if nm >= 0 else "")

    def _account(self, view: StepView, links: list) -> StepAccount:
        host = self.host
        d = view.c_t1 - view.c_t0
        idle = view.idle_before(view.c_t1) - view.idle_before(view.c_t0)
        cats = np.asarray(self.states.cat, dtype=np.int64)[view.c_sid]
        nc = len(HOST_CATEGORIES)
        host_us = np.bincount(cats, weights=d, minlength=nc)
        idle_us = np.bincount(cats, weights=idle, minlength=nc)
        key = view.c_sid.astype(np.int64) * (len(host.names) + 1) + (view.c_top.astype(np.int64) + 1)
        uk, inv = np.unique(key, return_inverse=True)
        tot = np.bincount(inv, weights=idle)
        top_rows = []
        for j in np.argsort(-tot, kind="stable")[: self.top].tolist():
            if tot[j] <= 0:
                break
            sid, tp = int(uk[j] // (len(host.names) + 1)), int(uk[j] % (len(host.names) + 1)) - 1
            nm = self.states.name[sid]
            top_rows.append(Attribution(category=HOST_CATEGORIES[self.states.cat[sid]], name=host.names[nm] if nm >= 0 else "",
                                        op=host.names[tp] if tp >= 0 else "", us=float(tot[j])))
        sites = []
        has = view.c_site >= 0
        if has.any():
            skey = view.c_site[has].astype(np.int64) * nc + cats[has]
            us_, inv2 = np.unique(skey, return_inverse=True)
            t2 = np.bincount(inv2, weights=idle[has])
            for j in np.argsort(-t2, kind="stable")[: self.top].tolist():
                if t2[j] <= 0:
                    break
                sites.append(SiteShare(site=site_of(host.names[int(us_[j] // nc)]), category=HOST_CATEGORIES[int(us_[j] % nc)],
                                       us=float(t2[j])))
        return StepAccount(
            step=view.step, ts_us=view.s0 + (self.base or 0.0), wall_us=view.s1 - view.s0, gpu=GpuSplit(**view.split),
            host_us={c: float(v) for c, v in zip(HOST_CATEGORIES, host_us)},
            idle_by_host_us={c: float(v) for c, v in zip(HOST_CATEGORIES, idle_us)},
            idle_top=top_rows, idle_sites=sites,
            critical_path=cp.summarize(links, host, self.gpu, top=self.top, keep_segments=self.keep_paths))

    # ------------------------------------------------------------------ after finish

    def view(self, i: int) -> StepView:
        """The :class:`StepView` of the ``i``-th step window (kept or rebuilt). Raises IndexError."""
        if self.keep_views:
            return self.views[i]
        num, s0, s1, thr = self.windows[i]
        return build_view(num, s0, s1, self.host, self.gpu, thr, self.states)

    def saving(self, i: int, remove: list[str], *, with_gpu_work: bool = False) -> Saving:
        """What removing ``remove`` saves from the ``i``-th step's critical path
        (:func:`.critical_path.savings`). Call after :meth:`finish`."""
        return cp.savings(self.view(i), self.host, self.gpu, self.states, remove, with_gpu_work=with_gpu_work)


def read_steps(path: str | os.PathLike, *, raw: BinaryIO | None = None, workers: int | None = None,
               **kw: Any) -> StepAccountant:
    """A :class:`StepAccountant` (options ``kw``) fed every event of one trace file (``raw``: the
    file already open), not yet finished: by ``workers`` processes of the parallel pass
    (:func:`.scan_parallel.read_parallel`, kind ``steps``: each feeds a :class:`.step_feed.StepFeed`
    a chunk, joined here in file order; default :func:`.scan_parallel.workers_for`, at least 2 to
    apply, and the fast parser only), else, or when that pass hands back, by one read of its fields
    (:func:`.stream.feed_events`). Either way the same columns (``tests/test_step_feed.py``).
    Raises InputError (missing, empty, truncated, not a trace)."""
    from pathlib import Path

    from . import fastscan, scan_parallel

    p = Path(path)
    if fastscan.parser_name() == "fast":
        w = scan_parallel.workers_for(p) if workers is None else workers
        if w >= 2:
            acc = StepAccountant(path, **kw)
            if scan_parallel.read_parallel(p, w, "steps", acc, raw=raw):
                return acc
    acc = StepAccountant(path, **kw)
    feed_events(path, (acc.feed,), fields=FIELDS, raw=raw)
    return acc


def step_breakdown(path: str | os.PathLike, *, also: tuple[Callable[[dict[str, Any]], None], ...] = (),
                   **kw: Any) -> StepBreakdown:
    """The step accounting of one trace file (``.json`` / ``.json.gz``), read once through the engine's
    reader (:func:`.stream.feed_events`), or without ``also`` by :func:`read_steps`; ``also``: other
    consumers fed the same events; ``kw``: the :class:`StepAccountant` options. Raises InputError
    (missing, empty, truncated, not a trace, or an event a consumer still fails on, named in one
    line: :func:`.guard.named_malformed_events`)."""
    with named_malformed_events(path):
        if not also:
            return read_steps(path, **kw).finish()
        acc = StepAccountant(path, **kw)
        feed_events(path, (acc.feed, *also), fields="all")
    return acc.finish()


def accountant_for(path: str | os.PathLike, **kw: Any) -> StepAccountant:
    """A finished :class:`StepAccountant` over one file (for :meth:`StepAccountant.saving` and views),
    read by :func:`read_steps`; its breakdown is ``.result``. Raises InputError as :func:`step_breakdown`."""
    with named_malformed_events(path):
        acc = read_steps(path, **kw)
    acc.result = acc.finish()  # type: ignore[attr-defined]
    return acc
