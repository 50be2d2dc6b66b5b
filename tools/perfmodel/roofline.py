"""Roofline per op category from one kineto trace recorded with ``record_shapes=True``.

For every modelled op (:mod:`.opcost`; the outermost modelled op when they nest, so
``aten::linear`` is not counted again as its ``aten::addmm``) the GPU kernel time is the sum of
the kernels it launched (kernel ``External id`` -> launching cpu_op, nested inside the op on its
thread). Per category: FLOPs, bytes, kernel time, achieved TFLOP/s and TB/s, arithmetic intensity
(FLOP/B), and the verdict of the roofline model (Williams, Waterman, Patterson, "Roofline", CACM
52(4), 2009): below the ridge point ``peak FLOP/s / peak B/s`` a category is memory-bound, above it
compute-bound. "Memory-bound" is thus measured from shapes, not guessed from kernel names.

MFU (model FLOPs utilization) is kept in two figures (seed 000 lesson 4: never compare them):
``mfu_time_averaged`` = modelled FLOPs / (profiled window x peak) and ``mfu_burst`` = modelled
FLOPs / (kernel time of the modelled ops x peak).
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from .datasheet import GPUSpec, find_gpu, peak_tflops
from .opcost import op_cost
from ..trace.hygiene import as_id

CATEGORIES = ("GEMM", "CONV", "SDPA", "elementwise", "normalization", "reduction")


RUNTIME_CATS = ("cuda_runtime", "hip_runtime", "cuda_driver")
#: cpu_ops without ``Input Dims`` after which a trace counts as recorded without shapes (a profile
#: with record_shapes gives every aten op ``Input Dims``; 10k cpu_ops are ~4 profiled steps of the
#: GNN bench trace, measured at 2.3k cpu_ops per step)
PROBE_OPS = 10_000
LINKS = ("external_id", "correlation")


def _device_name(data: dict) -> str:
    props = data.get("deviceProperties") or []
    return str(props[0].get("name", "")) if props else ""


def _dur(ev: dict) -> float:
    d = ev.get("dur")
    return float(d) if type(d) in (int, float) and d == d and d >= 0 else 0.0


class RooflineCollector:
    """Collects, from trace events fed one at a time (:meth:`feed`), what the roofline needs, in
    compact columns: the modelled ops (thread, start, end, cost: only ops with recorded shapes have a
    cost), every ``cpu_op``'s ``External id`` and every runtime call's ``correlation`` with (thread,
    start), and every kernel's two link ids (:func:`~ai4s_graph.tools.trace.hygiene.as_id`), start and
    end. ``shapes``: some ``cpu_op`` carries ``Input Dims`` (recorded with ``record_shapes``). When
    :data:`PROBE_OPS` cpu_ops have gone by without one, the trace was recorded without shapes: the
    columns are dropped and only the kernel window is kept (on the 176 MB bench trace that is ~10 MiB
    not held; with ``record_shapes`` every aten op carries ``Input Dims``, the first op sometimes not)."""

    #: The event keys and ``args`` keys :meth:`feed` reads (and :func:`.opcost.op_cost` of a
    #: cpu_op's args): a read that feeds only this collector may decode only these
    #: (:func:`ai4s_graph.tools.trace.fastscan.decoders`).
    FIELDS = (("ph", "cat", "name", "tid", "ts", "dur", "args"),
              ("External id", "correlation", "Input Dims", "Input type", "Concrete Inputs"))

    def __init__(self) -> None:
        self.shapes = False
        self.no_shapes = False  # decided: PROBE_OPS cpu_ops without Input Dims
        self.n_ops = 0
        self.k_first, self.k_last = float("inf"), float("-inf")
        self.modelled: list[tuple] = []  # (thread, ts, end, OpCost)
        self.threads: dict = {}
        self.ids: dict[str, tuple[array, array, array]] = {lk: (array("q"), array("i"), array("d")) for lk in LINKS}
        self.k_ext, self.k_corr = array("q"), array("q")  # -1: no id
        self.k_ts, self.k_end = array("d"), array("d")
        self.error: str | None = None

    def _drop(self) -> None:
        """No shapes in this trace: release the columns, keep the kernel window only."""
        self.no_shapes = True
        self.modelled = []
        self.ids = {lk: (array("q"), array("i"), array("d")) for lk in LINKS}
        self.k_ext, self.k_corr, self.k_ts, self.k_end = array("q"), array("q"), array("d"), array("d")

    def _thr(self, ev: dict) -> int:
        t = ev.get("tid")
        try:
            c = self.threads.get(t)
        except TypeError:  # an unhashable tid: its own thread
            return -1
        if c is None:
            c = self.threads[t] = len(self.threads)
        return c

    def feed(self, ev: Any) -> None:
        """Take one trace event (dict); non-``X`` events and anything else are skipped. An event it
        cannot take stops the collector (``error``; :meth:`totals` raises it), not the feeding pass."""
        self.feed_batch((ev,))

    def feed_batch(self, evs: list | tuple) -> None:
        """:meth:`feed` of every event of ``evs``, in order (one call for a piece of the parse)."""
        if self.error is None:
            feed = self._feed
            try:
                for ev in evs:
                    feed(ev)
            except Exception as e:  # noqa: BLE001 - reported by totals(), as feed's
                self.error = f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"

    def _feed(self, ev: Any) -> None:
        if type(ev) is not dict or ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        ts = ev.get("ts")
        if type(ts) not in (int, float):  # no usable start: not an interval (the readers skip it too)
            return
        if cat == "kernel":
            args = ev.get("args") or {}
            ts = float(ts)
            end = ts + _dur(ev)
            self.k_first, self.k_last = min(self.k_first, ts), max(self.k_last, end)
            if self.no_shapes:
                return
            for v, col in ((args.get("External id"), self.k_ext), (args.get("correlation"), self.k_corr)):
                x = as_id(v)
                col.append(-1 if x is None else x)
            self.k_ts.append(ts)
            self.k_end.append(end)
        elif self.no_shapes:
            return
        elif cat == "cpu_op":
            args = ev.get("args") or {}
            ts = float(ts)
            thr = self._thr(ev)
            self.n_ops += 1
            if not self.shapes and self.n_ops >= PROBE_OPS and "Input Dims" not in args:
                self._drop()
                return
            if "Input Dims" in args:
                self.shapes = True
                c = op_cost(ev.get("name") or "", args)
                if c is not None:
                    self.modelled.append((thr, ts, ts + _dur(ev), c))
            x = as_id(args.get("External id"))
            if x is not None:
                col = self.ids["external_id"]
                col[0].append(x)
                col[1].append(thr)
                col[2].append(ts)
        elif cat in RUNTIME_CATS:
            x = as_id((ev.get("args") or {}).get("correlation"))
            if x is not None:
                col = self.ids["correlation"]
                col[0].append(x)
                col[1].append(self._thr(ev))
                col[2].append(float(ts))

    def totals(self, link: str = "external_id") -> dict[str, Any]:
        """Per category (of the outermost modelled ops that launched kernels, found through
        ``link``): ``{ops, flops, bytes, kernel_us, precision_flops: {precision: FLOP}}``, plus
        ``shapes_recorded``, ``window_us`` (first kernel start to last kernel end) and
        ``unattributed_kernel_us``. JSON-able; independent of the GPU (see :func:`roofline_of`)."""
        if link not in LINKS:
            raise ValueError(f"link must be one of {LINKS}, not {link!r}")
        if self.error is not None:
            raise InputError(f"roofline: the trace could not be read: {self.error}")
        out: dict[str, Any] = {"link": link, "shapes_recorded": bool(self.shapes), "window_us": 0.0,
                               "unattributed_kernel_us": 0.0, "categories": {}}
        if self.k_last >= self.k_first:
            out["window_us"] = self.k_last - self.k_first
        if not self.shapes:
            return out
        modelled = sorted(self.modelled, key=lambda x: (x[0], x[1], -x[2]))
        outer: dict[int, list[tuple[float, float, Any]]] = defaultdict(list)
        for thr, ts, end, c in modelled:
            lst = outer[thr]
            if lst and ts >= lst[-1][0] and end <= lst[-1][1]:
                continue  # nested inside an outer modelled op
            lst.append((ts, end, c))
        starts = {thr: [x[0] for x in lst] for thr, lst in outer.items()}
        ids, thr_col, ts_col = self.ids[link]
        kernel_ids = np.frombuffer(self.k_ext if link == "external_id" else self.k_corr, dtype=np.int64)
        # the op / launch of each kernel's id (the last one written with that id), by a sorted search
        id_arr = np.frombuffer(ids, dtype=np.int64)
        order = np.argsort(id_arr, kind="stable")
        pos = np.searchsorted(id_arr[order], kernel_ids, side="right") - 1
        ok = (pos >= 0) & (kernel_ids >= 0)
        pos = np.where(ok, pos, 0)
        found = ok & (id_arr[order][pos] == kernel_ids) if id_arr.size else np.zeros(kernel_ids.size, dtype=bool)
        which = np.where(found, order[pos] if id_arr.size else 0, -1).tolist()
        kt: dict[int, float] = defaultdict(float)  # id(outer op) -> kernel µs
        owners: dict[int, Any] = {}
        for i, ks, ke in zip(which, self.k_ts, self.k_end):
            hit = None
            if i >= 0 and thr_col[i] in outer:
                thr, t = thr_col[i], ts_col[i]
                lst = outer[thr]
                j = bisect.bisect_right(starts[thr], t) - 1
                if j >= 0 and lst[j][0] <= t <= lst[j][1]:
                    hit = lst[j]
            if hit is None:
                out["unattributed_kernel_us"] += ke - ks
                continue
            kt[id(hit)] += ke - ks
            owners[id(hit)] = hit[2]
        for key, us in kt.items():
            c = owners[key]
            a = out["categories"].setdefault(c.category, {"ops": 0, "flops": 0.0, "bytes": 0.0, "kernel_us": 0.0,
                                                          "precision_flops": {}})
            a["ops"] += 1
            a["flops"] += c.flops
            a["bytes"] += c.bytes
            a["kernel_us"] += us
            a["precision_flops"][c.precision] = a["precision_flops"].get(c.precision, 0.0) + (c.flops or c.bytes)
        return out


def roofline(path: str | Path, gpu: GPUSpec | str | None = None, link: str = "external_id",
             data: dict | None = None) -> dict[str, Any]:
    """Roofline figures of one trace. ``gpu``: a datasheet row or device name; default the
    trace's ``deviceProperties`` name. ``link``: how a kernel finds the op that launched it —
    ``external_id`` (the kernel's ``External id`` names the cpu_op) or ``correlation`` (the
    kernel's ``correlation`` names the runtime launch call, whose time and thread place it
    inside an op): two independent paths, the second is the verifier's. ``data``: the trace
    already parsed; otherwise the file is streamed (memory: the collector's columns, never the
    event list). Returns :func:`roofline_of`'s dict. Raises InputError for an unreadable trace or
    unknown GPU."""
    from ..trace.stream import feed_events, read_header

    col = RooflineCollector()
    if data is not None:
        for ev in data.get("traceEvents") or []:
            col.feed(ev)
        device = _device_name(data)
    else:
        feed_events(path, (col.feed,))
        device = _device_name(read_header(path, ("deviceProperties",), trailer=True))
    return roofline_of(col.totals(link), gpu or device, Path(path).name)


def roofline_of(totals: dict[str, Any], gpu: GPUSpec | str | None, label: str = "trace") -> dict[str, Any]:
    """The roofline of :meth:`RooflineCollector.totals` on one GPU (a datasheet row or name).
    Returns ``{gpu, shapes_recorded, modelled_ops, window_us, categories: {cat: {ops, flops, bytes,
    kernel_us, tflops, tbps, intensity, ridge, bound, pct_peak_flops, pct_peak_bw, above_peak_bw,
    above_peak_flops, precision}},
    mfu_time_averaged, mfu_burst, unattributed_kernel_us}`` (times µs, FLOP, B, TFLOP/s, TB/s).
    ``shapes_recorded`` False (no ``Input Dims``) means no roofline: categories are empty. Raises
    InputError for a GPU not in the datasheet table."""
    spec = gpu if isinstance(gpu, GPUSpec) else find_gpu(gpu or "")
    if spec is None:
        raise InputError(f"{label}: GPU {gpu!r} is not in the datasheet table")
    out: dict[str, Any] = {"gpu": spec.name, "shapes_recorded": totals["shapes_recorded"],
                           "peak_bf16_tflops": spec.tflops.get("bf16"), "hbm_tbps": spec.hbm_tbps, "categories": {},
                           "modelled_ops": 0, "mfu_time_averaged": None, "mfu_burst": None,
                           "window_us": totals["window_us"], "unattributed_kernel_us": totals["unattributed_kernel_us"]}
    if not totals["shapes_recorded"]:
        return out
    agg: dict[str, dict[str, Any]] = {}
    total_flops, peak_weighted = 0.0, 0.0
    for cat, t in totals["categories"].items():
        a = {k: t[k] for k in ("ops", "flops", "bytes", "kernel_us")}
        prec = max(t["precision_flops"].items(), key=lambda kv: kv[1])[0]
        pk = peak_tflops(spec, prec) or peak_tflops(spec, "fp32") or 0.0
        if cat in ("elementwise", "normalization", "reduction"):  # vector units, not matrix peaks
            pk = peak_tflops(spec, "fp32") or pk
        secs = a["kernel_us"] * 1e-6
        a["precision"] = prec
        a["tflops"] = a["flops"] / secs / 1e12 if secs else 0.0
        a["tbps"] = a["bytes"] / secs / 1e12 if secs else 0.0
        a["intensity"] = a["flops"] / a["bytes"] if a["bytes"] else None  # None: no bytes modelled (JSON-safe)
        a["ridge"] = pk / spec.hbm_tbps
        a["bound"] = "memory" if a["intensity"] is not None and a["intensity"] < a["ridge"] else "compute"
        a["peak_tflops"] = pk
        a["pct_peak_flops"] = 100 * a["tflops"] / pk if pk else None
        a["pct_peak_bw"] = 100 * a["tbps"] / spec.hbm_tbps
        # above the datasheet's peak no kernel goes: the model counts more bytes (FLOPs) than HBM
        # (the units) moved, e.g. operands served from L2 or broadcast; a contradiction between the
        # shape model and the measured kernel time, reported as such (never as an achieved figure)
        a["above_peak_bw"] = a["pct_peak_bw"] > 100.0
        a["above_peak_flops"] = bool(pk) and a["tflops"] > pk
        if cat in ("GEMM", "CONV", "SDPA"):
            total_flops += a["flops"]
            peak_weighted += a["flops"] * pk
        agg[cat] = a
    out["categories"] = {c: agg[c] for c in CATEGORIES if c in agg}
    out["modelled_ops"] = sum(a["ops"] for a in agg.values())
    if total_flops:
        peak = peak_weighted / total_flops  # FLOP-weighted peak of the precisions used
        mm_us = sum(agg[c]["kernel_us"] for c in ("GEMM", "CONV", "SDPA") if c in agg)
        out["mfu_time_averaged"] = total_flops / (out["window_us"] * 1e-6 * peak * 1e12) if out["window_us"] else None
        out["mfu_burst"] = total_flops / (mm_us * 1e-6 * peak * 1e12) if mm_us else None
        out["matrix_peak_tflops"] = peak
    return out
