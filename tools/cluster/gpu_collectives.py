"""Collective benchmarks of ``gpu_bench.py``: all-reduce, all-gather, reduce-scatter.

See the functions' docstrings for the formulas (nccl-tests ``doc/PERFORMANCE.md``).

Part of ``gpu_bench.py`` (SELF-CONTAINED: standard library + torch + optional NVML/amdsmi; no
pydantic, typer or ai4s_graph import), split out to keep each file under 700 lines. Imported as
``ai4s_graph.tools.cluster.gpu_collectives`` in-process, or as a sibling file when ``gpu_bench.py`` runs
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
    from .gpu_common import (now_utc, parse_iec, format_iec)
else:  # a plain script on a GPU node
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_common import (now_utc, parse_iec, format_iec)  # type: ignore  # noqa: E402

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



def _spawn_ranks(ngpus: int, prefix: str, timeout_s: float, what: str, make) -> dict[str, Any]:
    """Run one spawned process per rank, rendezvousing through a ``file://`` store, and return the
    result rank 0 puts on the queue plus ``ranks``; ``{"error": ...}`` when none arrives within
    ``timeout_s`` s. ``make(rank, init_url, queue)`` gives each rank's ``(target, args)``. Processes
    still alive 30 s after are killed."""
    import torch.multiprocessing as mp  # noqa: PLC0415

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    fd, path = tempfile.mkstemp(prefix=prefix)
    os.close(fd)
    os.unlink(path)
    procs = []
    for r in range(ngpus):
        target, args = make(r, f"file://{path}", q)
        procs.append(ctx.Process(target=target, args=args))
    for p in procs:
        p.start()
    result: dict[str, Any] = {}
    try:
        result = q.get(timeout=timeout_s)
    except Exception:  # noqa: BLE001
        result = {"error": f"{what} did not finish in {timeout_s:.0f} s"}
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    result["ranks"] = ngpus
    return result

def allreduce_single_node(ngpus: int, payloads: list[int], iters: int = 20, timeout_s: float = 300) -> dict[str, Any]:
    """All-reduce over the node's ``ngpus`` GPUs (one spawned process each, NCCL/RCCL).

    Returns ``{"ranks", "rows": [{bytes, time_us, algbw_gbps, busbw_gbps, correct}]}`` or
    ``{"skipped": reason}`` for fewer than 2 GPUs, or ``{"error": ...}`` on failure/timeout
    (seed 000 lesson 19: an NCCL ring timeout is one of the per-node faults the probe must catch)."""
    if ngpus < 2:
        return {"skipped": f"{ngpus} GPU on this node: an all-reduce needs at least 2 GPUs", "ranks": ngpus}
    return _spawn_ranks(ngpus, "ai4s-ar-", timeout_s, f"all-reduce over {ngpus} GPUs",
                        lambda r, init, q: (_allreduce_worker, (r, ngpus, init, payloads, iters, q)))


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
# collective sweep: all-reduce, all-gather, reduce-scatter by message size (nccl-tests style)
# ----------------------------------------------------------------------------------------------

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
"""The collectives of the sweep, named as nccl-tests and torch.distributed name them."""

BUSBW_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n}
"""busbw = algbw x factor (nccl-tests ``doc/PERFORMANCE.md``): all-reduce 2(n-1)/n, all-gather and
reduce-scatter (n-1)/n."""


def _one_collective(dist, torch, op: str, nbytes: int, world: int, rank: int, iters: int,
                    device: str = "cuda") -> dict[str, Any]:
    """Time ``iters`` of ``op`` at message size ``nbytes`` (nccl-tests' size: the all-reduce
    buffer, the all-gather OUTPUT, the reduce-scatter INPUT), bf16. Checks the result once."""
    n = max(world, (nbytes // 2) // world * world)  # bf16 elements, divisible by the world
    size = n * 2
    if op == "all_reduce":
        x = torch.ones(n, dtype=torch.bfloat16, device=device)
        run = lambda: dist.all_reduce(x)  # noqa: E731
    elif op == "all_gather":
        x = torch.full((n // world,), float(rank + 1), dtype=torch.bfloat16, device=device)
        y = torch.empty(n, dtype=torch.bfloat16, device=device)
        run = lambda: dist.all_gather_into_tensor(y, x)  # noqa: E731
    else:
        x = torch.ones(n, dtype=torch.bfloat16, device=device)
        y = torch.empty(n // world, dtype=torch.bfloat16, device=device)
        run = lambda: dist.reduce_scatter_tensor(y, x)  # noqa: E731
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        run()
    sync()
    if op == "all_reduce":
        x.fill_(1)
        run()
        correct = bool(torch.all(x == world).item())
    elif op == "all_gather":
        run()
        want = torch.arange(1, world + 1, dtype=torch.bfloat16, device=device).repeat_interleave(n // world)
        correct = bool(torch.equal(y, want))
    else:
        run()
        correct = bool(torch.all(y == world).item())
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    sync()
    t = (time.perf_counter() - t0) / iters
    tt = torch.tensor([t], device=device, dtype=torch.float64)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    t = float(tt.item())
    algbw = size / t / 1e9
    return {"op": op, "bytes": size, "time_us": round(t * 1e6, 1), "algbw_gbps": round(algbw, 2),
            "busbw_gbps": round(algbw * BUSBW_FACTOR[op](world), 2), "correct": correct}


def _sweep_worker(rank: int, world: int, init: str, ops: list[str], payloads: list[int], iters: int,
                  env: dict[str, str], q, device: str = "cuda") -> None:
    for k, v in env.items():  # before NCCL reads its environment (at the first communicator)
        os.environ[k] = v
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    try:
        kw: dict[str, Any] = {}
        if device == "cuda":
            torch.cuda.set_device(rank)
            kw["device_id"] = torch.device("cuda", rank)
        dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=init, rank=rank,
                                world_size=world, timeout=_dt.timedelta(seconds=120), **kw)
        rows = []
        for op in ops:
            for nbytes in payloads:
                it = iters if nbytes <= (64 << 20) else max(5, iters // 4)
                rows.append(_one_collective(dist, torch, op, nbytes, world, rank, it, device))
                if device == "cuda":
                    torch.cuda.empty_cache()
        if rank == 0:
            q.put({"rows": rows})
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        q.put({"error": f"rank {rank}: {type(e).__name__}: {e}"})


def collective_sweep(ngpus: int, payloads: list[int], ops: tuple[str, ...] | list[str] = COLLECTIVES,
                     iters: int = 20, env: dict[str, str] | None = None, timeout_s: float = 300,
                     device: str = "cuda") -> dict[str, Any]:
    """All-reduce / all-gather / reduce-scatter over the node's ``ngpus`` GPUs, one spawned process
    each (NCCL), at each message size in ``payloads`` (bytes, nccl-tests' size convention), bf16.

    ``env`` is set in each worker before NCCL starts (e.g. ``{"NCCL_P2P_DISABLE": "1"}``, so the
    collectives go through host shared memory instead of NVLink/PCIe peer-to-peer); NVLink
    multicast stays off (``NCCL_NVLS_ENABLE=0``) unless ``env`` says otherwise.
    Returns ``{"ranks", "env", "rows": [{op, bytes, time_us, algbw_gbps, busbw_gbps, correct}]}``
    with algbw = bytes / time and busbw = algbw x :data:`BUSBW_FACTOR` (GB/s = 1e9 B/s), or
    ``{"skipped": reason}`` below 2 GPUs, or ``{"error": ...}`` on failure or timeout.
    ``device="cpu"`` runs ``ngpus`` gloo processes on the CPU (a rehearsal of the code path)."""
    env = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
           **(env or {})}
    if ngpus < 2:
        return {"skipped": f"{ngpus} GPU on this node: a collective needs at least 2 GPUs", "ranks": ngpus, "env": env}
    result = _spawn_ranks(ngpus, "ai4s-coll-", timeout_s, f"collective sweep over {ngpus} GPUs",
                          lambda r, init, q: (_sweep_worker, (r, ngpus, init, list(ops), payloads, iters, env, q,
                                                              device)))
    result["env"] = env
    return result
