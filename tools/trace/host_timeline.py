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

import math
import os
import statistics
from array import array
from collections import Counter
from typing import Any, Callable

import numpy as np

from ...state.steps import (HOST_CATEGORIES, Attribution, GpuSplit, Saving, SiteShare, StepAccount, StepBreakdown,
                             StepStructure)
from ..errors import InputError
from . import cpu_ops
from .guard import named_malformed_events
from . import critical_path as cp
from .host_names import PRECEDENCE, copy_blocks, op_category, runtime_category
from .hygiene import STEP_NAME_RE, as_id
from .pystack import NO_STACKS_NOTE, is_user_frame, site_of
from .step_structure import Signatures, batch1, distribution, lead, preceding_states, structure
from .step_window import (CAT_INHERIT, KIND_OP, KIND_PY, KIND_RUNTIME, GpuColumns, HostColumns, StateTable, StepView,
                          build_view)
from .stream import (GPU_CATS, KIND_MEMCPY, TraceScan, clip_stream_overlaps, feed_events, tracelens_classes,
                     window_mask)

_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})
_CPU_SIDE = frozenset({"cpu_op", "user_annotation", "python_function", "gpu_user_annotation"})
_OP_CATS = frozenset({"cpu_op", "user_annotation"})
_I32 = 1 << 31
_INF = float("inf")
#: The event keys and ``args`` keys :meth:`StepAccountant.feed` reads (``tests/test_lane_fields.py``
#: checks them against this module's source): a read that feeds only the accountant decodes only
#: these (:func:`.fastscan.decoders`; the step accountant's lane, :func:`.onepass.steps_part`).
FIELDS = (("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"),
          ("Device Type", "Total Allocated", "Input Dims", "correlation", "stream", "device", "bytes"))


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


_I64 = float(1 << 63)


def _count(v: Any) -> int | None:
    """A byte count (``bytes``, ``Total Allocated``) as an int of the int64 columns it goes to: a
    finite number (:func:`_num`) within [-2**63, 2**63) after its conversion to float, else None (a
    value of 2**63 or more is no count the profiler writes; it raised OverflowError)."""
    x = _num(v)
    return int(x) if x is not None and -_I64 <= x < _I64 else None


class StepAccountant:
    """Per-event consumer building the step accounting (see the module docstring).

    ``top``: how many attributions / path shares to keep per step; ``keep_paths``: keep every step's
    critical-path segments in the result; ``keep_views``: keep the steps' :class:`StepView` for
    :meth:`saving` (otherwise a step's view is rebuilt when asked); ``param_bytes``: the model's
    parameter bytes from the manifest, when known (device-to-host bytes per step are compared with it)."""

    def __init__(self, path: str | os.PathLike = "", *, top: int = 10, keep_paths: bool = False,
                 keep_views: bool = False, param_bytes: int | None = None) -> None:
        self.path = str(path)
        self.param_bytes = param_bytes
        self.top, self.keep_paths, self.keep_views = top, keep_paths, keep_views
        self.n = 0
        self.n_python = 0
        self.n_memory = 0
        self.base: float | None = None  # the first timestamp seen; kept times are relative to it
        self.g_ts, self.g_dur = array("d"), array("d")
        self.g_name, self.g_stream, self.g_device = array("i"), array("i"), array("i")
        self.g_kind = array("b")
        self.g_corr, self.g_bytes = array("q"), array("q")
        self.h_ts, self.h_end = array("d"), array("d")
        self.h_name, self.h_thr, self.h_sig = array("i"), array("i"), array("i")
        self.h_kind = array("b")
        self.h_corr = array("q")
        self.flow_ids = array("q")
        self.m_ts, self.m_alloc = array("d"), array("q")
        self.steps: list[tuple[int, float, float, int]] = []
        self.gnames: list[str] = []
        self._gix: dict[str, int] = {}
        self.hnames: list[str] = []
        self._hix: dict[str, int] = {}
        self._user: dict[str, bool] = {}
        self._dev: dict = {}
        self.threads: dict[tuple, int] = {}
        self.sigs = Signatures()
        self.has_shapes = False
        self.bad = 0
        # set by finish()
        self.host: HostColumns | None = None
        self.gpu: GpuColumns | None = None
        self.states = StateTable()
        self.windows: list[tuple[int, float, float, int]] = []
        self.views: list[StepView] = []

    # ------------------------------------------------------------------ feeding

    def _ts(self, v: Any) -> float | None:
        """A timestamp relative to the trace's first one (epoch-µs clocks keep sub-ns precision that
        way: an end computed as start + dur at 5e12 µs would round to ~1 ns)."""
        t = _num(v)
        if t is None:
            return None
        if self.base is None:
            self.base = t
        return t - self.base

    def _hid(self, name: str) -> int:
        i = self._hix.get(name)
        if i is None:
            i = self._hix[name] = len(self.hnames)
            self.hnames.append(name)
        return i

    def _thread(self, ev: dict) -> int:
        key = (ev.get("pid"), ev.get("tid"))
        try:
            t = self.threads.get(key)
        except TypeError:  # an unhashable pid/tid
            key = (repr(key[0]), repr(key[1]))
            t = self.threads.get(key)
        if t is None:
            t = self.threads[key] = len(self.threads)
        return t

    def feed(self, ev: Any) -> None:
        """Take one trace event (a dict of ``traceEvents``); anything else is skipped. O(1). A field
        of the wrong JSON type is read as the engine's loop reads it (:class:`.scan_loop.ScanColumns`),
        never raised on: an unhashable category is none, a name that is not a string its text, ``args``
        that is not an object no args, a byte count outside int64 none (:func:`_count`)."""
        if type(ev) is not dict:
            return
        self.n += 1
        cat = ev.get("cat")
        if type(cat) is not str and cat is not None:
            try:
                hash(cat)
            except TypeError:  # a list or an object: no category (the engine's rule)
                cat = None
        kind = GPU_CATS.get(cat) if type(cat) is str else None
        if kind is not None:
            self._feed_gpu(ev, kind)
            return
        if cat == "python_function":
            self.n_python += 1
            name = ev.get("name")
            if type(name) is not str:
                return
            user = self._user.get(name)
            if user is None:
                user = self._user[name] = is_user_frame(name)
            if user:
                self._feed_host(ev, name, KIND_PY, -1)
            return
        ph = ev.get("ph")
        if cat == "ac2g":
            if ph == "s":
                fid = as_id(ev.get("id"))
                if fid is not None:
                    self.flow_ids.append(fid)
            return
        if ph in ("i", "I"):
            if ev.get("name") == "[memory]":
                self.n_memory += 1
                args = ev.get("args")
                if type(args) is dict and args.get("Device Type") == 1:  # c10::DeviceType::CUDA (ROCm: HIP too)
                    t, a = self._ts(ev.get("ts")), _count(args.get("Total Allocated"))
                    if t is not None and a is not None:
                        self.m_ts.append(t)
                        self.m_alloc.append(a)
            return
        if ph not in ("X", None) or cat == "gpu_user_annotation":
            return
        name = ev.get("name")
        if type(name) is not str:
            name = "" if name is None else str(name)
        if name.startswith("ProfilerStep") and cat in ("user_annotation", "cpu_op", None):
            m = STEP_NAME_RE.match(name)
            t, d = self._ts(ev.get("ts")), _num(ev.get("dur"))
            if m and t is not None and d is not None and d >= 0:
                self.steps.append((int(m.group(1)), t, d, self._thread(ev)))
            return
        if cat in _OP_CATS:
            sig = -1
            if cat == "cpu_op":
                args = ev.get("args")
                dims = args.get("Input Dims") if type(args) is dict else None
                if dims is not None:
                    self.has_shapes = True
                    if batch1(dims):  # only batch-1 ops take part in the repetition figure
                        sig = self.sigs.get(self._hid(name), dims)
            self._feed_host(ev, name, KIND_OP, -1, sig)
            return
        args = ev.get("args")
        corr = as_id(args.get("correlation")) if type(args) is dict else None
        if cat in _RUNTIME_CATS or (corr is not None and cat not in _CPU_SIDE):
            self._feed_host(ev, name, KIND_RUNTIME, -1 if corr is None else corr)

    def _feed_host(self, ev: dict, name: str, kind: int, corr: int, sig: int = -1) -> None:
        try:
            t, d = float(ev["ts"]), float(ev.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            self.bad += 1
            return
        if not (-_INF < t < _INF and 0.0 <= d < _INF):  # NaN fails both
            self.bad += 1
            return
        base = self.base
        if base is None:
            base = self.base = t
        t -= base
        key = (ev.get("pid"), ev.get("tid"))
        try:
            th = self.threads.get(key)
        except TypeError:  # an unhashable pid/tid
            th = None
        if th is None:
            th = self._thread(ev)
        nid = self._hix.get(name)
        if nid is None:
            nid = self._hid(name)
        self.h_ts.append(t)
        self.h_end.append(t + d)
        self.h_name.append(nid)
        self.h_thr.append(th)
        self.h_kind.append(kind)
        self.h_corr.append(corr)
        self.h_sig.append(sig)

    def _feed_gpu(self, ev: dict, kind: int) -> None:
        t, d = self._ts(ev.get("ts")), _num(ev.get("dur"))
        if t is None or d is None or d < 0:
            self.bad += 1
            return
        name = ev.get("name")
        if type(name) is not str:
            name = "" if name is None else str(name)
        i = self._gix.get(name)
        if i is None:
            i = self._gix[name] = len(self.gnames)
            self.gnames.append(name)
        args = ev.get("args")
        if type(args) is not dict:
            args = {}
        s = as_id(args.get("stream"), _I32)
        dv = args.get("device", ev.get("pid"))
        dev = as_id(dv, _I32)
        if dev is None:
            try:
                dev = self._dev.setdefault(dv, -2 - len(self._dev))
            except TypeError:
                dev = -1
        c = as_id(args.get("correlation"))
        b = _count(args.get("bytes")) if kind == KIND_MEMCPY else None
        self.g_ts.append(t)
        self.g_dur.append(d)
        self.g_name.append(i)
        self.g_kind.append(kind)
        self.g_stream.append(-1 if s is None else s)
        self.g_device.append(dev)
        self.g_corr.append(-1 if c is None else c)
        self.g_bytes.append(-1 if b is None else b)

    # ------------------------------------------------------------------ finishing

    def _columns(self) -> None:
        """The fed columns as sorted numpy columns (:class:`HostColumns`, :class:`GpuColumns`)."""
        g_ts = np.frombuffer(self.g_ts, dtype=np.float64)
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
        h_ts = np.frombuffer(self.h_ts, dtype=np.float64)
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
        self.host = HostColumns(ts=h_ts[horder], end=np.frombuffer(self.h_end, dtype=np.float64)[horder],
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
        for col in ("g_ts", "g_dur", "g_name", "g_stream", "g_device", "g_corr", "g_bytes", "h_ts", "h_end", "h_name",
                    "h_thr", "h_sig", "h_corr", "flow_ids"):
            setattr(self, col, array(getattr(self, col).typecode))
        self.h_kind = array("b")
        self.g_kind = array("b")

    def _windows(self, warnings: list[str]) -> list[tuple[int, float, float, int]]:
        steps = sorted(self.steps, key=lambda s: s[1])
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
        mem = (np.frombuffer(self.m_ts, dtype=np.float64), np.frombuffer(self.m_alloc, dtype=np.int64))
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


def step_breakdown(path: str | os.PathLike, *, also: tuple[Callable[[dict[str, Any]], None], ...] = (),
                   **kw: Any) -> StepBreakdown:
    """The step accounting of one trace file (``.json`` / ``.json.gz``), read once through the engine's
    reader (:func:`.stream.feed_events`); ``also``: other consumers fed the same events; ``kw``: the
    :class:`StepAccountant` options. Raises InputError (missing, empty, truncated, not a trace, or an
    event a consumer still fails on, named in one line: :func:`.guard.named_malformed_events`)."""
    acc = StepAccountant(path, **kw)
    with named_malformed_events(path):
        feed_events(path, (acc.feed, *also), fields="all" if also else FIELDS)
    return acc.finish()


def accountant_for(path: str | os.PathLike, **kw: Any) -> StepAccountant:
    """A finished :class:`StepAccountant` over one file (for :meth:`StepAccountant.saving` and views);
    its breakdown is ``.result``. Raises InputError as :func:`step_breakdown`."""
    acc = StepAccountant(path, **kw)
    with named_malformed_events(path):
        feed_events(path, (acc.feed,), fields=FIELDS)
    acc.result = acc.finish()  # type: ignore[attr-defined]
    return acc
