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
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..trace.kineto import read_trace_json
from .datasheet import GPUSpec, find_gpu, peak_tflops
from .opcost import op_cost

CATEGORIES = ("GEMM", "CONV", "SDPA", "elementwise", "normalization", "reduction")


def _device_name(data: dict) -> str:
    props = data.get("deviceProperties") or []
    return str(props[0].get("name", "")) if props else ""


def roofline(path: str | Path, gpu: GPUSpec | str | None = None, link: str = "external_id",
             data: dict | None = None) -> dict[str, Any]:
    """Roofline figures of one trace. ``gpu``: a datasheet row or device name; default the
    trace's ``deviceProperties`` name. ``link``: how a kernel finds the op that launched it —
    ``external_id`` (the kernel's ``External id`` names the cpu_op) or ``correlation`` (the
    kernel's ``correlation`` names the runtime launch call, whose time and thread place it
    inside an op): two independent paths, the second is the verifier's. ``data``: the trace
    already parsed (``read_trace_json(path)``), to read a big trace once. Returns ``{gpu, shapes_recorded, modelled_ops, window_us,
    categories: {cat: {ops, flops, bytes, kernel_us, tflops, tbps, intensity, ridge, bound,
    pct_peak_flops, pct_peak_bw, precision}}, mfu_time_averaged, mfu_burst, unattributed_kernel_us}``
    (times µs, FLOP, B, TFLOP/s, TB/s). ``shapes_recorded`` False (no ``Input Dims``) means no
    roofline: categories are empty. Raises InputError for an unreadable trace or unknown GPU."""
    data = data if data is not None else read_trace_json(path)
    spec = gpu if isinstance(gpu, GPUSpec) else find_gpu(gpu or _device_name(data))
    if spec is None:
        raise InputError(f"{Path(path).name}: GPU {gpu or _device_name(data)!r} is not in the datasheet table")
    ev = data.get("traceEvents") or []
    cpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    kernels = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"]
    shapes = any("Input Dims" in (e.get("args") or {}) for e in cpu)
    out: dict[str, Any] = {"gpu": spec.name, "shapes_recorded": shapes, "peak_bf16_tflops": spec.tflops.get("bf16"),
                           "hbm_tbps": spec.hbm_tbps, "categories": {}, "modelled_ops": 0,
                           "mfu_time_averaged": None, "mfu_burst": None, "window_us": 0.0, "unattributed_kernel_us": 0.0}
    if kernels:
        out["window_us"] = max(k["ts"] + k.get("dur", 0) for k in kernels) - min(k["ts"] for k in kernels)
    if not shapes:
        return out
    # outermost modelled ops per thread, as sorted disjoint intervals
    modelled = []
    for e in cpu:
        c = op_cost(e["name"], e.get("args") or {})
        if c is not None:
            modelled.append((e.get("tid"), e["ts"], e["ts"] + e.get("dur", 0), c))
    modelled.sort(key=lambda x: (str(x[0]), x[1], -x[2]))
    outer: dict[Any, list[tuple[float, float, Any]]] = defaultdict(list)
    for tid, ts, end, c in modelled:
        lst = outer[tid]
        if lst and ts >= lst[-1][0] and end <= lst[-1][1]:
            continue  # nested inside an outer modelled op
        lst.append((ts, end, c))
    starts = {tid: [x[0] for x in lst] for tid, lst in outer.items()}
    by_ext = {}
    if link == "correlation":
        for e in ev:
            if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "hip_runtime", "cuda_driver"):
                x = (e.get("args") or {}).get("correlation")
                if x is not None:
                    by_ext[x] = (e.get("tid"), e["ts"])
    else:
        for e in cpu:
            x = (e.get("args") or {}).get("External id")
            if x is not None:
                by_ext[x] = (e.get("tid"), e["ts"])
    key = "correlation" if link == "correlation" else "External id"
    kt: dict[int, float] = defaultdict(float)  # id(outer op) -> kernel µs
    owners: dict[int, Any] = {}
    for k in kernels:
        x = (k.get("args") or {}).get(key)
        launch = by_ext.get(x)
        hit = None
        if launch is not None and launch[0] in outer:
            lst = outer[launch[0]]
            i = bisect.bisect_right(starts[launch[0]], launch[1]) - 1
            if i >= 0 and lst[i][0] <= launch[1] <= lst[i][1]:
                hit = lst[i]
        if hit is None:
            out["unattributed_kernel_us"] += k.get("dur", 0)
            continue
        kt[id(hit)] += k.get("dur", 0)
        owners[id(hit)] = hit[2]
    agg: dict[str, dict[str, Any]] = {}
    prec_flops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key, us in kt.items():
        c = owners[key]
        a = agg.setdefault(c.category, {"ops": 0, "flops": 0.0, "bytes": 0.0, "kernel_us": 0.0})
        a["ops"] += 1
        a["flops"] += c.flops
        a["bytes"] += c.bytes
        a["kernel_us"] += us
        prec_flops[c.category][c.precision] += c.flops or c.bytes
    total_flops, peak_weighted = 0.0, 0.0
    for cat, a in agg.items():
        prec = max(prec_flops[cat].items(), key=lambda kv: kv[1])[0]
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
        if cat in ("GEMM", "CONV", "SDPA"):
            total_flops += a["flops"]
            peak_weighted += a["flops"] * pk
    out["categories"] = {c: agg[c] for c in CATEGORIES if c in agg}
    out["modelled_ops"] = sum(a["ops"] for a in agg.values())
    if total_flops:
        peak = peak_weighted / total_flops  # FLOP-weighted peak of the precisions used
        mm_us = sum(agg[c]["kernel_us"] for c in ("GEMM", "CONV", "SDPA") if c in agg)
        out["mfu_time_averaged"] = total_flops / (out["window_us"] * 1e-6 * peak * 1e12) if out["window_us"] else None
        out["mfu_burst"] = total_flops / (mm_us * 1e-6 * peak * 1e12) if mm_us else None
        out["matrix_peak_tflops"] = peak
    return out
