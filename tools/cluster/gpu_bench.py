#!/usr/bin/env python3
"""GPU, host and storage measurements for ``ai4s-graph probe`` and ``ai4s-graph eval-cluster``.

SELF-CONTAINED on purpose: standard library + torch + (optional) ``pynvml`` from
``nvidia-ml-py`` (or ``amdsmi`` on AMD). GPU nodes often carry only a torch install, so this file
must run there as a plain script::

    NCCL_NVLS_ENABLE=0 python3 gpu_bench.py probe --json $OUT/probe.json
    NCCL_NVLS_ENABLE=0 python3 gpu_bench.py eval  --json $OUT/eval.json --local-dir /tmp --fio .fio/fio

and must not import pydantic, typer or anything of ai4s_graph. ``ai4s_graph.tools.cluster.node_probe`` and
``ai4s_graph.tools.cluster.evalcluster`` import the functions below in-process where torch exists.

What is measured, and where each method comes from (seed 003, "evaluate-cluster" runbook):

- kernel launch latency: back-to-back empty kernels (``torch.cuda._sleep(0)``), µs per launch
  (seed 000 lesson 18 saw 3.5-3.8 µs per HIP launch on every GPU of every node);
- device-to-device copy: ``dst.copy_(src)`` of 1 GiB, GB/s counting bytes read plus written;
- MAMF / MSMF: a short matmul shape search (M x N x K, bf16) with board power and SM clock read
  through NVML while each shape runs; MSMF shapes must hold the board near its power limit, and on
  a node with several GPUs the sustainable run happens while every other GPU runs a continuous
  matmul (seed 003, "GPU performance benchmarks");
- lemon GEMM: fixed 16384^3 bf16 matmul on every GPU, siblings idle, three passes (seed 003);
- all-reduce: NCCL (RCCL on ROCm) over payload sizes, algbw = bytes / time, busbw = algbw x
  2(n-1)/n (the ring formula of nccl-tests' PERFORMANCE.md);
- storage: Debian's ``fio`` (16 jobs, 4 KiB blocks, libaio, O_DIRECT, --unlink=1) over file sizes
  16 KiB / 1 MiB / 1 GiB, read and write (seed 003, "Storage").
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

SCHEMA = "ai4s-gpu-bench/1"
LEMON_DIM = 16384
"""Seed 003, "Find underperforming GPUs": fixed 16384^3 bf16 matmul on every GPU."""
LEMON_TILE = (128, 256)
"""Seed 003: SM coverage is computed for 128x256 output tiles (one CTA each)."""
SLOW_GPU_FRACTION = 0.02
"""Seed 003: a GPU is under-performing only if >2% below its node median in all three passes."""
MSMF_POWER_FRACTION = 0.90
"""An MSMF shape counts only if mean board power reached >= 90% of the enforced power limit
(seed 003: MSMF is measured once the shape pins the board at its power limit; mamf-finder labels
shapes that never reach it SUSPECT)."""
FIO_SIZES = ("16KiB", "1MiB", "1GiB")
"""Seed 003, fio-scan: file sizes 16 KiB, 1 MiB and 1 GiB, each read and write."""

_IEC = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def now_utc() -> str:
    """UTC time as ``2026-11-29T14:35:02Z``."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iec(text: str) -> int:
    """``'16KiB'`` -> 16384 bytes. Accepts ``KiB MiB GiB TiB`` (with or without a space) or a
    plain byte count. Raises ValueError on anything else (decimal units are refused: fio sizes in
    this project are binary)."""
    t = str(text).strip().replace(" ", "")
    for unit, mult in _IEC.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    if t.isdigit():
        return int(t)
    raise ValueError(f"not an IEC size: {text!r} (use e.g. 16KiB, 1MiB, 1GiB)")


def format_iec(n: int) -> str:
    """16384 -> ``'16 KiB'`` (largest unit that divides exactly; bytes otherwise)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        m = _IEC[unit]
        if n >= m and n % m == 0:
            return f"{n // m} {unit}"
    return f"{n} B"


def _run(cmd: list[str], timeout: float = 30.0) -> tuple[int, str]:
    """Run a command; (returncode, stdout+stderr). (127, message) when it is not installed."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).strip()
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not installed"
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: timed out after {timeout:.0f} s"


# ----------------------------------------------------------------------------------------------
# torch and the management library (NVML / amdsmi)
# ----------------------------------------------------------------------------------------------


def torch_or_none():
    """The torch module, or None when torch is not importable."""
    try:
        import torch  # noqa: PLC0415

        return torch
    except Exception:  # pragma: no cover - torch missing
        return None


def gpu_count() -> tuple[int, str]:
    """(number of visible GPUs, reason when 0)."""
    torch = torch_or_none()
    if torch is None:
        return 0, "torch is not installed"
    if not torch.cuda.is_available():
        return 0, "no GPU visible to torch (torch.cuda.is_available() is False)"
    return torch.cuda.device_count(), ""


class Telemetry:
    """Board power (W) and SM clock (MHz) per GPU through NVML (``pynvml``) or, on AMD,
    ``amdsmi``. ``available`` is False with ``reason`` when neither library works."""

    def __init__(self) -> None:
        self.kind = ""
        self.reason = ""
        self._nv = None
        self._amd = None
        self._handles: list[Any] = []
        try:
            import pynvml  # noqa: PLC0415

            pynvml.nvmlInit()
            self._nv = pynvml
            self.kind = "nvml"
            n = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
            return
        except Exception as e:  # noqa: BLE001
            self.reason = f"pynvml: {type(e).__name__}: {e}"
        try:
            import amdsmi  # noqa: PLC0415

            amdsmi.amdsmi_init()
            self._amd = amdsmi
            self.kind = "amdsmi"
            self._handles = list(amdsmi.amdsmi_get_processor_handles())
            self.reason = ""
        except Exception as e:  # noqa: BLE001
            self.reason += f"; amdsmi: {type(e).__name__}: {e}"

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def sample(self, i: int) -> tuple[float | None, float | None]:
        """(power W, SM clock MHz) of GPU ``i`` now; Nones when unreadable."""
        try:
            if self._nv is not None:
                h = self._handles[i]
                w = self._nv.nvmlDeviceGetPowerUsage(h) / 1000.0
                mhz = float(self._nv.nvmlDeviceGetClockInfo(h, self._nv.NVML_CLOCK_SM))
                return w, mhz
            if self._amd is not None:
                h = self._handles[i]
                p = self._amd.amdsmi_get_power_info(h)
                w = p.get("current_socket_power") or p.get("average_socket_power")
                c = self._amd.amdsmi_get_clock_info(h, self._amd.AmdSmiClkType.GFX)
                return float(w), float(c.get("clk") or c.get("cur_clk"))
        except Exception:  # noqa: BLE001
            pass
        return None, None

    def static(self, i: int) -> dict[str, Any]:
        """Power limit (W), max SM clock (MHz), name, memory (bytes), driver of GPU ``i``."""
        out: dict[str, Any] = {}
        try:
            if self._nv is not None:
                nv, h = self._nv, self._handles[i]
                out["power_limit_w"] = nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
                out["max_sm_mhz"] = float(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
                out["idle_sm_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                out["idle_power_w"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
                out["memory_total_bytes"] = int(nv.nvmlDeviceGetMemoryInfo(h).total)
                name = nv.nvmlDeviceGetName(h)
                out["name"] = name.decode() if isinstance(name, bytes) else name
                drv = nv.nvmlSystemGetDriverVersion()
                out["driver"] = drv.decode() if isinstance(drv, bytes) else drv
                with contextlib.suppress(Exception):
                    out["pcie_gen_max"] = int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h))
                    out["pcie_width_max"] = int(nv.nvmlDeviceGetMaxPcieLinkWidth(h))
        except Exception as e:  # noqa: BLE001
            out["error"] = f"{type(e).__name__}: {e}"
        return out


class Sampler:
    """Background thread sampling (time, W, MHz) of one GPU every ``interval`` seconds.

    ``window(t0, t1)`` -> mean/max power and mean/min SM clock of the samples in [t0, t1]."""

    def __init__(self, tel: Telemetry, index: int, interval: float = 0.05):
        self.tel, self.index, self.interval = tel, index, interval
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            w, mhz = self.tel.sample(self.index)
            if w is not None and mhz is not None:
                self.samples.append((time.perf_counter(), w, mhz))
            self._stop.wait(self.interval)

    def __enter__(self) -> "Sampler":
        if self.tel.available:
            self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._t.is_alive():
            self._t.join(timeout=2)

    def window(self, t0: float, t1: float) -> dict[str, float | None]:
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {"power_w": None, "power_w_max": None, "sm_mhz": None, "sm_mhz_min": None, "samples": 0}
        ws = [x[1] for x in s]
        ms = [x[2] for x in s]
        return {
            "power_w": round(statistics.fmean(ws), 1),
            "power_w_max": round(max(ws), 1),
            "sm_mhz": round(statistics.fmean(ms)),
            "sm_mhz_min": round(min(ms)),
            "samples": len(s),
        }


# ----------------------------------------------------------------------------------------------
# probe: launch latency, device-to-device copy
# ----------------------------------------------------------------------------------------------


def launch_latency_us(device: int, launches: int = 2000, reps: int = 5) -> float:
    """Mean wall time per empty-kernel launch on GPU ``device``, in µs (median of ``reps`` runs
    of ``launches`` back-to-back ``torch.cuda._sleep(0)`` kernels, synchronised once per run).

    Healthy reference: 3.5-3.8 µs per launch on every GPU of every node (seed 000 lesson 18, HIP)."""
    import torch  # noqa: PLC0415

    with torch.cuda.device(device):
        for _ in range(200):
            torch.cuda._sleep(0)
        torch.cuda.synchronize()
        vals = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(launches):
                torch.cuda._sleep(0)
            torch.cuda.synchronize()
            vals.append((time.perf_counter() - t0) / launches * 1e6)
    return round(statistics.median(vals), 3)


def d2d_copy_gbs(device: int, nbytes: int = 1 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth of GPU ``device`` in GB/s (10^9 bytes/s), counting bytes
    read plus bytes written (2 x ``nbytes`` per copy), best of three timed runs of ``iters``
    copies (CUDA events)."""
    import torch  # noqa: PLC0415

    with torch.cuda.device(device):
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        best = 0.0
        for _ in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters):
                dst.copy_(src)
            b.record()
            b.synchronize()
            s = a.elapsed_time(b) / 1000.0
            best = max(best, 2 * nbytes * iters / s / 1e9)
        del src, dst
        torch.cuda.empty_cache()
    return round(best, 1)


# ----------------------------------------------------------------------------------------------
# all-reduce (single node: one process per GPU; multi-node: under srun/torchrun env)
# ----------------------------------------------------------------------------------------------


def default_payloads(max_bytes: int) -> list[int]:
    """Payload sizes 32 KiB, 256 KiB, 2 MiB, ... (x8) up to ``max_bytes`` (seed 003:
    all_reduce_bench sweeps 32 KiB to 16 GiB)."""
    out, n = [], 32 << 10
    while n <= max_bytes:
        out.append(n)
        n *= 8
    if out and out[-1] != max_bytes:
        out.append(max_bytes)
    return out


def _allreduce_measure(rank: int, world: int, payloads: list[int], iters: int) -> list[dict[str, Any]]:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    rows = []
    for nbytes in payloads:
        n = nbytes // 2  # bf16 elements
        x = torch.ones(n, dtype=torch.bfloat16, device="cuda")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        x.fill_(1)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        correct = bool(torch.all(x == world).item())
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        t = (time.perf_counter() - t0) / iters
        tt = torch.tensor([t], device="cuda", dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        t = float(tt.item())
        algbw = nbytes / t / 1e9
        busbw = algbw * 2 * (world - 1) / world
        rows.append({"bytes": nbytes, "time_us": round(t * 1e6, 1), "algbw_gbps": round(algbw, 2),
                     "busbw_gbps": round(busbw, 2), "correct": correct})
        del x
    return rows


def _allreduce_worker(rank: int, world: int, init: str, payloads: list[int], iters: int, q) -> None:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world,
                                timeout=_dt.timedelta(seconds=120), device_id=torch.device("cuda", rank))
        rows = _allreduce_measure(rank, world, payloads, iters)
        if rank == 0:
            q.put({"rows": rows})
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        q.put({"error": f"rank {rank}: {type(e).__name__}: {e}"})


def allreduce_single_node(ngpus: int, payloads: list[int], iters: int = 20, timeout_s: float = 300) -> dict[str, Any]:
    """All-reduce over the node's ``ngpus`` GPUs (one spawned process each, NCCL/RCCL).

    Returns ``{"ranks", "rows": [{bytes, time_us, algbw_gbps, busbw_gbps, correct}]}`` or
    ``{"skipped": reason}`` for fewer than 2 GPUs, or ``{"error": ...}`` on failure/timeout
    (seed 000 lesson 19: an NCCL ring timeout is one of the per-node faults the probe must catch)."""
    if ngpus < 2:
        return {"skipped": f"{ngpus} GPU on this node: an all-reduce needs at least 2 GPUs", "ranks": ngpus}
    import torch.multiprocessing as mp  # noqa: PLC0415

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    fd, path = tempfile.mkstemp(prefix="ai4s-ar-")
    os.close(fd)
    os.unlink(path)
    init = f"file://{path}"
    procs = [ctx.Process(target=_allreduce_worker, args=(r, ngpus, init, payloads, iters, q)) for r in range(ngpus)]
    for p in procs:
        p.start()
    result: dict[str, Any] = {}
    try:
        result = q.get(timeout=timeout_s)
    except Exception:  # noqa: BLE001
        result = {"error": f"all-reduce over {ngpus} GPUs did not finish in {timeout_s:.0f} s"}
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    result["ranks"] = ngpus
    return result


def allreduce_distributed(payloads: list[int], iters: int = 20) -> dict[str, Any]:
    """All-reduce across nodes, one process per GPU, started by ``srun`` (reads SLURM_PROCID,
    SLURM_NTASKS, SLURM_LOCALID) or torchrun (RANK, WORLD_SIZE, LOCAL_RANK); MASTER_ADDR and
    MASTER_PORT must be set. Rank 0 returns the rows; other ranks return ``{"rank": r}``."""
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    env = os.environ
    rank = int(env.get("RANK", env.get("SLURM_PROCID", "0")))
    world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", "1")))
    local = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", "0")))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", rank=rank, world_size=world, timeout=_dt.timedelta(seconds=300),
                            device_id=torch.device("cuda", local))
    rows = _allreduce_measure(rank, world, payloads, iters)
    dist.destroy_process_group()
    return {"ranks": world, "rows": rows} if rank == 0 else {"rank": rank}


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


# ----------------------------------------------------------------------------------------------
# storage: fio
# ----------------------------------------------------------------------------------------------


def find_fio(explicit: str | None = None) -> str | None:
    """Path of the fio binary: ``explicit``, $AI4S_FIO, or ``fio`` on PATH; None if absent."""
    for c in (explicit, os.environ.get("AI4S_FIO"), shutil.which("fio")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _du_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def fio_scan(path: str, sizes: list[str] | tuple[str, ...] = FIO_SIZES, runtime_s: int = 180, numjobs: int = 16,
             fio: str | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """fio on directory ``path``: for each file size in ``sizes`` (IEC strings), a read and a
    write run of ``numjobs`` jobs, 4 KiB blocks, libaio, O_DIRECT (falls back to psync when the
    filesystem refuses libaio+O_DIRECT — recorded as ``engine``), ``runtime_s`` seconds each,
    ``--unlink=1``. Scratch lives in one directory ``<path>/ai4s-fio-<utc>``; after the runs it
    is removed when empty, otherwise moved to ``<path>/trash/`` (seed 003: move, never rm) and
    named in ``scratch_left``.

    Returns ``{"path", "fs", "rows": [{size, size_bytes, rw, latency_msec, bw_mibps, iops_m}],
    "runtime_s", "numjobs", "engine", "scratch_left"}``; ``{"error"}`` when fio is absent."""
    fio = find_fio(fio)
    if fio is None:
        return {"path": path, "error": "fio is not installed on this node"}
    if not os.path.isdir(path) or not os.access(path, os.W_OK):
        return {"path": path, "error": f"{path}: not a writable directory"}
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    scratch = os.path.join(path, f"ai4s-fio-{stamp}-{os.getpid()}")
    os.makedirs(scratch)
    rows = []
    engine = "libaio"
    direct = 1
    _rc, ver = _run([fio, "--version"])
    try:
        for size in sizes:
            nbytes = parse_iec(size)
            for rw in ("read", "write"):
                base = [fio, f"--name=ai4s-{rw}-{nbytes}", f"--directory={scratch}", f"--rw={rw}", "--bs=4k",
                        f"--filesize={nbytes}", f"--numjobs={numjobs}", "--time_based", f"--runtime={runtime_s}",
                        "--group_reporting", "--unlink=1", "--output-format=json"]
                to = timeout_s or (runtime_s * 4 + 300)
                rc, out = _run(base + [f"--ioengine={engine}", f"--direct={direct}"], timeout=to)
                if rc != 0 and engine == "libaio":
                    engine, direct = "psync", 1
                    rc, out = _run(base + [f"--ioengine={engine}", f"--direct={direct}"], timeout=to)
                    if rc != 0:
                        engine, direct = "psync", 0
                        rc, out = _run(base + [f"--ioengine={engine}", f"--direct={direct}"], timeout=to)
                if rc != 0:
                    raise RuntimeError(f"fio {rw} {size} on {path} failed: {out.splitlines()[-1] if out else rc}")
                j = json.loads(out[out.index("{"):])
                job = j["jobs"][0][rw]
                rows.append({
                    "size": format_iec(nbytes), "size_bytes": nbytes, "rw": rw,
                    "latency_msec": round(job["lat_ns"]["mean"] / 1e6, 3),
                    "bw_mibps": round(job["bw_bytes"] / (1 << 20), 1),
                    "iops_m": round(job["iops"] / 1e6, 4),
                })
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    else:
        err = ""
    left = _du_bytes(scratch)
    scratch_left = ""
    if left == 0:
        shutil.rmtree(scratch, ignore_errors=True)  # empty directories only: fio unlinked its files
    else:
        trash = os.path.join(path, "trash", stamp)
        os.makedirs(trash, exist_ok=True)
        shutil.move(scratch, trash)
        scratch_left = f"{trash} ({left} bytes)"
    out = {"path": path, "fs": fs_info(path), "rows": rows, "runtime_s": runtime_s, "numjobs": numjobs,
           "engine": engine, "direct": direct, "fio_version": ver.strip(), "scratch_left": scratch_left}
    if err:
        out["error"] = err
    return out


def fs_info(path: str) -> dict[str, Any]:
    """Mount point, filesystem type, size (bytes) and source device/server of ``path`` (from
    ``findmnt``; ``df`` as fallback). Capacity only, never use (seed 003)."""
    rc, out = _run(["findmnt", "-n", "-b", "-o", "TARGET,FSTYPE,SIZE,SOURCE", "-T", path])
    if rc == 0 and out:
        parts = out.split()
        if len(parts) >= 4:
            with contextlib.suppress(ValueError):
                return {"mount": parts[0], "type": parts[1], "size_bytes": int(parts[2]), "source": parts[3]}
    st = os.statvfs(path)
    return {"mount": path, "type": "", "size_bytes": st.f_blocks * st.f_frsize, "source": ""}


# ----------------------------------------------------------------------------------------------
# environment dump
# ----------------------------------------------------------------------------------------------


def _os_pretty() -> str:
    with contextlib.suppress(OSError):
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    return platform.platform()


def _numa_nodes() -> int:
    with contextlib.suppress(OSError):
        return len([d for d in os.listdir("/sys/devices/system/node") if d.startswith("node") and d[4:].isdigit()])
    return 1


def env_dump(paths: list[str] | None = None) -> dict[str, Any]:
    """Seed 003 "Environment dump": date, host, kernel, CPUs/NUMA, RAM, OS, Python, torch/CUDA/
    NCCL versions, per-GPU static facts (NVML), topology, fabric inventory, filesystems, NCCL env,
    compute apps. Everything is a reading; nothing is assumed."""
    torch = torch_or_none()
    env: dict[str, Any] = {
        "datetime_utc": now_utc(), "hostname": socket.gethostname().split(".")[0], "uname": " ".join(platform.uname()),
        "kernel": platform.release(), "nproc": os.cpu_count(), "numa_nodes": _numa_nodes(), "os": _os_pretty(),
        "python": platform.python_version(),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "FI_", "AWS_OFI", "TORCH_SYMM", "NVSHMEM_"))},
    }
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                env["mem_total_bytes"] = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                env["cpu_model"] = line.split(":", 1)[1].strip()
                break
    if torch is not None:
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["hip"] = getattr(torch.version, "hip", None)
        with contextlib.suppress(Exception):
            v = torch.cuda.nccl.version()
            env["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        gpus = []
        if torch.cuda.is_available():
            tel = Telemetry()
            env["telemetry"] = tel.kind or f"unavailable ({tel.reason.strip('; ')})"
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                g = {"index": i, "name": p.name, "sm_count": p.multi_processor_count,
                     "memory_total_bytes": int(p.total_memory), "capability": f"{p.major}.{p.minor}"}
                if tel.available:
                    g.update({k: v for k, v in tel.static(i).items() if k not in ("name",)})
                gpus.append(g)
        env["gpus"] = gpus
    rc, out = _run(["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,memory.total,power.limit,power.max_limit,"
                    "clocks.max.sm,clocks.sm,power.draw,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.max",
                    "--format=csv"])
    env["nvidia_smi_query"] = out if rc == 0 else ""
    rc, out = _run(["nvidia-smi", "topo", "-m"])
    env["topo"] = out if rc == 0 else ""
    rc, out = _run(["nvidia-smi", "--query-compute-apps=pid,used_memory,process_name", "--format=csv"])
    env["compute_apps"] = out if rc == 0 else ""
    ib = "/sys/class/infiniband"
    nics = []
    if os.path.isdir(ib):
        for d in sorted(os.listdir(ib)):
            rate = ""
            with contextlib.suppress(OSError):
                rate = open(os.path.join(ib, d, "ports", "1", "rate")).read().strip()
            nics.append({"name": d, "rate": rate})
    env["ib_devices"] = nics
    rc, out = _run(["rdma", "link"])
    env["rdma_link"] = out if rc == 0 else ""
    fss = []
    for p in ["/"] + list(paths or []):
        if os.path.exists(p):
            fss.append({"path": p, **fs_info(p)})
    env["filesystems"] = fss
    return env


# ----------------------------------------------------------------------------------------------
# top level
# ----------------------------------------------------------------------------------------------


def dcgm_diag(level: int = 2, timeout_s: float = 1200) -> dict[str, Any]:
    """``dcgmi diag -r <level>`` (seed 003 "Hardware health": level 2 checks GPU memory, memory
    bandwidth and PCIe/NVLink, about 10 minutes on 8 GPUs). ``{"ran": False, "reason"}`` when
    dcgmi is not installed; else ``{"ran": True, "rc", "failed": [lines with Fail], "output"}``."""
    if not shutil.which("dcgmi"):
        return {"ran": False, "reason": "dcgmi is not installed on this node"}
    if shutil.which("nv-hostengine"):
        _run(["nv-hostengine"], timeout=30)
    rc, out = _run(["dcgmi", "diag", "-r", str(level)], timeout=timeout_s)
    failed = [ln.strip() for ln in out.splitlines() if "fail" in ln.lower()]
    return {"ran": rc == 0 or bool(failed), "rc": rc, "level": level, "failed": failed, "output": out[-20000:],
            **({} if rc == 0 or failed else {"reason": f"dcgmi diag exited {rc}: {out.splitlines()[-1] if out else ''}"})}


def probe_gpus(allreduce: bool = True, ar_max_bytes: int = 256 << 20) -> dict[str, Any]:
    """GPU parts of the node probe: launch latency and D2D copy per GPU, and the single-node
    all-reduce. ``{"skipped": reason}`` when no GPU is visible."""
    n, why = gpu_count()
    if n == 0:
        return {"skipped": why}
    out: dict[str, Any] = {"gpus": []}
    for i in range(n):
        g: dict[str, Any] = {"index": i}
        try:
            g["launch_us"] = launch_latency_us(i)
        except Exception as e:  # noqa: BLE001
            g["launch_error"] = f"{type(e).__name__}: {e}"
        try:
            g["d2d_gbps"] = d2d_copy_gbs(i)
        except Exception as e:  # noqa: BLE001
            g["d2d_error"] = f"{type(e).__name__}: {e}"
        out["gpus"].append(g)
    if allreduce:
        out["allreduce"] = allreduce_single_node(n, default_payloads(ar_max_bytes))
    return out


def run_eval(args: argparse.Namespace) -> dict[str, Any]:
    """Every eval phase on this node; each phase's failure is recorded, never fatal."""
    t0 = time.time()
    shared = [p for p in (args.shared_dir or []) if p]
    res: dict[str, Any] = {"schema": SCHEMA, "kind": "eval", "started_utc": now_utc(), "gaps": [],
                           "env": env_dump([args.local_dir] + shared)}
    res["node"] = res["env"]["hostname"]
    n, why = gpu_count()
    tel = Telemetry() if n else None
    comp: dict[str, Any] = {}
    if n == 0:
        res["gaps"].append(f"compute: {why}")
    else:
        if tel is not None and not tel.available:
            res["gaps"].append(f"compute: no power/clock telemetry ({tel.reason.strip('; ')})")
        try:
            comp["probe"] = probe_gpus(allreduce=False)
        except Exception as e:  # noqa: BLE001
            res["gaps"].append(f"compute: launch/copy probe failed: {type(e).__name__}: {e}")
        try:
            dims = [int(x) for x in args.mamf_dims.split(",")]
            comp["mamf"] = mamf_search(0, dims, tel, iters=args.mamf_iters, budget_s=args.mamf_budget)
            big = [r["shape"] for r in comp["mamf"]["all"] if min(r["shape"]) >= args.msmf_min_dim]
            extra = [[d, d, d] for d in (8192, 16384)]
            cands = []
            for s in big[: args.msmf_candidates] + extra:
                if s not in cands:
                    cands.append(s)
            comp["msmf"] = msmf(n, cands[: args.msmf_candidates + 1], tel, args.msmf_seconds)
        except Exception as e:  # noqa: BLE001
            res["gaps"].append(f"compute: MAMF/MSMF failed: {type(e).__name__}: {e}")
        try:
            comp["lemon"] = lemon(n, passes=3)
        except Exception as e:  # noqa: BLE001
            res["gaps"].append(f"compute: lemon GEMM failed: {type(e).__name__}: {e}")
        comp["dcgm"] = dcgm_diag(args.dcgm_level) if args.dcgm_level else {"ran": False, "reason": "not requested (--dcgm-level 0)"}
    res["compute"] = comp
    net: dict[str, Any] = {}
    if n:
        net["intra"] = allreduce_single_node(n, default_payloads(parse_iec(args.ar_max)))
        if "error" in net["intra"]:
            res["gaps"].append(f"network: intra-node all-reduce failed: {net['intra']['error']}")
    res["network"] = net
    st: dict[str, Any] = {}
    sizes = [s.strip() for s in args.fio_sizes.split(",")]
    for label, path in [("local", args.local_dir)] + [("shared", p) for p in shared]:
        r = fio_scan(path, sizes, runtime_s=args.fio_runtime, numjobs=args.fio_jobs, fio=args.fio)
        st.setdefault(label, []).append(r)
        if r.get("error"):
            res["gaps"].append(f"storage: fio on {path}: {r['error']}")
    res["storage"] = st
    res["elapsed_s"] = round(time.time() - t0, 1)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe", help="GPU parts of the node health probe")
    p.add_argument("--json", default="-")
    p.add_argument("--no-allreduce", action="store_true")
    e = sub.add_parser("eval", help="every eval-cluster measurement on this node")
    e.add_argument("--json", default="-")
    e.add_argument("--local-dir", default="/tmp")
    e.add_argument("--shared-dir", action="append", default=[])
    e.add_argument("--fio", default=None)
    e.add_argument("--fio-sizes", default=",".join(FIO_SIZES))
    e.add_argument("--fio-runtime", type=int, default=180)
    e.add_argument("--fio-jobs", type=int, default=16)
    e.add_argument("--mamf-dims", default="2048,4096,6144,8192,10240,12288,14336,16384")
    e.add_argument("--mamf-iters", type=int, default=10)
    e.add_argument("--mamf-budget", type=float, default=120.0)
    e.add_argument("--msmf-candidates", type=int, default=3)
    e.add_argument("--msmf-min-dim", type=int, default=8192)
    e.add_argument("--msmf-seconds", type=float, default=10.0)
    e.add_argument("--ar-max", default="4GiB")
    e.add_argument("--dcgm-level", type=int, default=2, help="dcgmi diag level; 0 skips it")
    d = sub.add_parser("allreduce", help="multi-node all-reduce rank (under srun/torchrun)")
    d.add_argument("--json", default="-")
    d.add_argument("--ar-max", default="4GiB")
    f = sub.add_parser("fio", help="fio scan of one directory")
    f.add_argument("path")
    f.add_argument("--json", default="-")
    f.add_argument("--fio", default=None)
    f.add_argument("--sizes", default=",".join(FIO_SIZES))
    f.add_argument("--runtime", type=int, default=180)
    f.add_argument("--jobs", type=int, default=16)
    a = ap.parse_args(argv)
    if a.cmd == "probe":
        res = {"schema": SCHEMA, "kind": "probe", "node": socket.gethostname().split(".")[0],
               "started_utc": now_utc(), **probe_gpus(allreduce=not a.no_allreduce)}
    elif a.cmd == "eval":
        res = run_eval(a)
    elif a.cmd == "allreduce":
        res = allreduce_distributed(default_payloads(parse_iec(a.ar_max)))
        if "rows" not in res:
            return 0
    else:
        res = fio_scan(a.path, a.sizes.split(","), runtime_s=a.runtime, numjobs=a.jobs, fio=a.fio)
    text = json.dumps(res, indent=1, default=str)
    if a.json == "-":
        print(text)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
