"""Matmul benchmarks of ``gpu_bench.py``: MAMF shape search, MSMF with busy siblings, lemon GEMM.

Methods: seed 003, "GPU performance benchmarks" and "Find underperforming GPUs".

Part of ``gpu_bench.py`` (SELF-CONTAINED: standard library + torch + optional NVML/amdsmi; no
pydantic, typer or ai4s_graph import), split out to keep each file under 700 lines. Imported as
``ai4s_graph.tools.cluster.gpu_matmul`` in-process, or as a sibling file when ``gpu_bench.py`` runs
as a plain script on a GPU node.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

if __package__:
    from .gpu_common import (LEMON_DIM, LEMON_TILE, SLOW_GPU_FRACTION, MSMF_POWER_FRACTION, Telemetry, Sampler, gpu_count)
else:  # a plain script on a GPU node
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_common import (LEMON_DIM, LEMON_TILE, SLOW_GPU_FRACTION, MSMF_POWER_FRACTION, Telemetry, Sampler, gpu_count)  # type: ignore  # noqa: E402

# ----------------------------------------------------------------------------------------------
# matmul: MAMF search, MSMF with busy siblings, lemon GEMM
# ----------------------------------------------------------------------------------------------


def _sibling_worker(index: int, dim: int, stop, counter) -> None:
    """Continuous bf16 matmul on GPU ``index`` until ``stop`` is set (keeps the node's power and
    cooling budget shared, as in a real workload; seed 003)."""
    import torch  # noqa: PLC0415

    torch.cuda.set_device(index)
    a = torch.randn(dim, dim, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(dim, dim, dtype=torch.bfloat16, device="cuda")
    while not stop.is_set():
        for _ in range(8):
            torch.mm(a, b)
        torch.cuda.synchronize()
        with counter.get_lock():
            counter.value += 1


class BusySiblings:
    """Context manager: every GPU but ``index`` runs a continuous matmul (spawned processes).
    ``idle()`` lists siblings whose matmul made no progress in a window (seed 003: a
    'saw idle siblings' warning means that GPU's MSMF reads high)."""

    def __init__(self, ngpus: int, index: int, dim: int = 8192):
        self.others = [i for i in range(ngpus) if i != index]
        self.dim = dim
        self.procs: list[Any] = []
        self.counters: dict[int, Any] = {}

    def __enter__(self) -> "BusySiblings":
        if not self.others:
            return self
        import torch.multiprocessing as mp  # noqa: PLC0415

        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        for i in self.others:
            c = ctx.Value("l", 0)
            self.counters[i] = c
            p = ctx.Process(target=_sibling_worker, args=(i, self.dim, self.stop, c), daemon=True)
            p.start()
            self.procs.append(p)
        t0 = time.time()  # wait until every sibling computes
        while time.time() - t0 < 120 and any(c.value < 2 for c in self.counters.values()):
            time.sleep(0.2)
        return self

    def snapshot(self) -> dict[int, int]:
        return {i: c.value for i, c in self.counters.items()}

    def __exit__(self, *exc: Any) -> None:
        if not self.procs:
            return
        self.stop.set()
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def _flat_buffers(torch, max_elems: int, device: int):
    g = torch.Generator(device=f"cuda:{device}").manual_seed(0)
    bufs = [torch.randn(max_elems, dtype=torch.bfloat16, device=f"cuda:{device}", generator=g) for _ in range(2)]
    out = torch.empty(max_elems, dtype=torch.bfloat16, device=f"cuda:{device}")
    return bufs[0], bufs[1], out


def time_matmul(torch, a, b, c, m: int, n: int, k: int, iters: int, warmup: int = 2,
                tel: "Telemetry | None" = None, index: int = 0, min_s: float = 0.0) -> tuple[float, dict[str, Any]]:
    """Mean seconds per ``m x k @ k x n`` bf16 matmul over back-to-back calls (at least
    ``iters``, more until the timed loop lasts ``min_s``), and the board power / SM clock read
    through ``tel`` WHILE the GPU runs the loop (polled until the end event completes)."""
    A = a[: m * k].view(m, k)
    B = b[: k * n].view(k, n)
    C = c[: m * n].view(m, n)
    for _ in range(warmup):
        torch.mm(A, B, out=C)
    if min_s > 0:
        s0, e0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s0.record()
        torch.mm(A, B, out=C)
        e0.record()
        e0.synchronize()
        one = max(s0.elapsed_time(e0) / 1000.0, 1e-6)
        iters = max(iters, int(min_s / one) + 1)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        torch.mm(A, B, out=C)
    e.record()
    ws: list[float] = []
    ms: list[float] = []
    if tel is not None and tel.available:
        while not e.query():
            w, mhz = tel.sample(index)
            if w is not None:
                ws.append(w)
                ms.append(mhz)
            time.sleep(0.002)
    e.synchronize()
    tele = {"power_w": round(statistics.fmean(ws), 1) if ws else None,
            "sm_mhz": round(statistics.fmean(ms)) if ms else None}
    return s.elapsed_time(e) / 1000.0 / iters, tele


def mamf_search(device: int, dims: list[int], tel: Telemetry, iters: int = 10, budget_s: float = 90.0) -> dict[str, Any]:
    """Short MAMF search on GPU ``device``: every (M, N, K) in ``dims``^3, bf16, ``iters`` timed
    matmuls each (more until a shape's loop lasts 20 ms), board power / SM clock polled
    through NVML while each loop ran (NVML's power reading averages over up to a second, so a
    short burst reads low; the SM clock is current). Returns ``{"tried", "best":
    {shape, tflops, power_w, sm_mhz}, "top": [...10 best...]}`` (TFLOPS = 2MNK / s / 1e12).
    Stops early after ``budget_s`` seconds (``truncated`` True)."""
    import torch  # noqa: PLC0415

    torch.cuda.set_device(device)
    mx = max(dims) ** 2
    a, b, c = _flat_buffers(torch, mx, device)
    results = []
    t_start = time.perf_counter()
    truncated = False
    for m in dims:
        for n in dims:
            for k in dims:
                if time.perf_counter() - t_start > budget_s:
                    truncated = True
                    break
                s, w = time_matmul(torch, a, b, c, m, n, k, iters, tel=tel, index=device, min_s=0.02)
                results.append({"shape": [m, n, k], "tflops": round(2 * m * n * k / s / 1e12, 1),
                                "power_w": w["power_w"], "sm_mhz": w["sm_mhz"]})
    del a, b, c
    torch.cuda.empty_cache()
    results.sort(key=lambda r: -r["tflops"])
    return {"tried": len(results), "dims": dims, "iters": iters, "best": results[0] if results else None,
            "top": results[:10], "all": results, "truncated": truncated}


def sustained_matmul(device: int, shape: list[int], tel: Telemetry, seconds: float) -> dict[str, Any]:
    """Run ``shape`` back-to-back on GPU ``device`` for ``seconds``; TFLOPS, mean board power
    and SM clock over the second half (after the clock has settled)."""
    import torch  # noqa: PLC0415

    torch.cuda.set_device(device)
    m, n, k = shape
    a, b, c = _flat_buffers(torch, max(m * k, k * n, m * n), device)
    A, B, C = a[: m * k].view(m, k), b[: k * n].view(k, n), c[: m * n].view(m, n)
    flop = 2 * m * n * k
    half_times: list[float] = []
    with Sampler(tel, device) as smp:
        t_start = time.perf_counter()
        t_half = t_start + seconds / 2
        count_half = 0
        t_h0 = None
        while True:
            for _ in range(10):
                torch.mm(A, B, out=C)
            torch.cuda.synchronize()
            now = time.perf_counter()
            if now >= t_half:
                if t_h0 is None:
                    t_h0 = now
                else:
                    count_half += 10
            if now - t_start >= seconds:
                break
        t_end = time.perf_counter()
        w = smp.window(t_h0 or t_start, t_end)
        half_times.append(t_end - (t_h0 or t_start))
    del a, b, c, A, B, C
    torch.cuda.empty_cache()
    secs = half_times[0]
    tflops = flop * count_half / secs / 1e12 if count_half else 0.0
    return {"shape": list(shape), "tflops": round(tflops, 1), "seconds": round(seconds, 1), **w}


def msmf(ngpus: int, candidates: list[list[int]], tel: Telemetry, seconds: float) -> dict[str, Any]:
    """MSMF: on GPU0, each candidate shape sustained for ``seconds`` while every other GPU
    computes; the best whose mean power reached ``MSMF_POWER_FRACTION`` of the power limit wins
    (others are ``suspect``). Then every other GPU measures that winning shape, siblings busy.
    Returns ``{"gpu0_candidates", "shape", "per_gpu": [{gpu, tflops, power_w, sm_mhz,
    idle_siblings}], "siblings_busy": bool, "note"}``."""
    limit = tel.static(0).get("power_limit_w") if tel.available else None
    cands = []
    with BusySiblings(ngpus, 0) as sib:
        for shape in candidates:
            before = sib.snapshot()
            r = sustained_matmul(0, shape, tel, seconds)
            after = sib.snapshot()
            r["idle_siblings"] = [i for i in before if after[i] == before[i]]
            r["suspect"] = bool(limit and r.get("power_w") and r["power_w"] < MSMF_POWER_FRACTION * limit)
            if limit is None or r.get("power_w") is None:
                r["suspect"] = True
            cands.append(r)
    good = [c for c in cands if not c["suspect"]] or cands
    win = max(good, key=lambda c: c["tflops"])
    per_gpu = [{"gpu": 0, **{k: win[k] for k in ("tflops", "power_w", "sm_mhz", "idle_siblings")}}]
    for g in range(1, ngpus):
        with BusySiblings(ngpus, g) as sib:
            before = sib.snapshot()
            r = sustained_matmul(g, win["shape"], tel, seconds)
            after = sib.snapshot()
        per_gpu.append({"gpu": g, "tflops": r["tflops"], "power_w": r["power_w"], "sm_mhz": r["sm_mhz"],
                        "idle_siblings": [i for i in before if after[i] == before[i]]})
    return {"gpu0_candidates": cands, "shape": win["shape"], "winner_suspect": win["suspect"],
            "power_limit_w": limit, "seconds": seconds, "per_gpu": per_gpu, "siblings_busy": ngpus > 1,
            "note": "" if ngpus > 1 else "only GPU of the node: no siblings computed during the sustained run"}


def lemon(ngpus: int, passes: int = 3, iters: int = 20, dim: int = LEMON_DIM) -> dict[str, Any]:
    """Lemon GEMM (seed 003): ``dim``^3 bf16 matmul on every GPU in turn, siblings idle,
    ``passes`` passes. ``slow`` lists GPUs >2% under the node median in EVERY pass; ``dead``
    lists GPUs whose matmul raised. SM coverage at 128x256 tiles from this GPU's SM count."""
    import torch  # noqa: PLC0415

    res: list[list[float | None]] = []
    errors: dict[int, str] = {}
    for _p in range(passes):
        row: list[float | None] = []
        for g in range(ngpus):
            try:
                torch.cuda.set_device(g)
                a, b, c = _flat_buffers(torch, dim * dim, g)
                s, _w = time_matmul(torch, a, b, c, dim, dim, dim, iters, warmup=3)
                row.append(round(2 * dim**3 / s / 1e12, 1))
                del a, b, c
                torch.cuda.empty_cache()
            except Exception as e:  # noqa: BLE001
                errors[g] = f"{type(e).__name__}: {e}"
                row.append(None)
        res.append(row)
    return {"dim": dim, "passes": res, "iters": iters, "errors": {str(k): v for k, v in errors.items()},
            **judge_lemon(res), **sm_coverage(torch.cuda.get_device_properties(0).multi_processor_count, dim)}


def judge_lemon(passes: list[list[float | None]]) -> dict[str, Any]:
    """From per-pass per-GPU TFLOPS: node median per pass, ``slow`` = GPUs >2% below the median
    in every pass (seed 003), ``dead`` = GPUs with no result in any pass."""
    meds = []
    below: list[set[int]] = []
    dead: set[int] = set()
    for row in passes:
        vals = [v for v in row if v is not None]
        med = statistics.median(vals) if vals else None
        meds.append(med)
        s = set()
        for g, v in enumerate(row):
            if v is None:
                dead.add(g)
            elif med and v < (1 - SLOW_GPU_FRACTION) * med:
                s.add(g)
        below.append(s)
    slow = sorted(set.intersection(*below) - dead) if below else []
    return {"medians": meds, "slow": slow, "dead": sorted(dead)}


def sm_coverage(sms: int, dim: int = LEMON_DIM) -> dict[str, Any]:
    """CTA waves of a ``dim``^3 matmul at 128x256 tiles on ``sms`` SMs (seed 003): CTAs =
    dim/128 x dim/256, full waves = CTAs // SMs, tail = CTAs % SMs, efficiency = 1 - tail/CTAs.
    132 SMs -> 8192 CTAs, 62 waves, 8-CTA tail, 99.9%."""
    ctas = (dim // LEMON_TILE[0]) * (dim // LEMON_TILE[1])
    return {"sms": sms, "ctas": ctas, "waves": ctas // sms, "tail": ctas % sms,
            "wave_efficiency": round(1 - (ctas % sms) / ctas, 4)}


