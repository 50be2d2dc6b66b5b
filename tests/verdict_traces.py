"""Hand-built kineto traces, logs and manifests with known answers for tests/test_verdict.py.

A step of each rank is a list of ``(kind, start_ms, dur_ms)`` with kind ``"gemm"`` or
``"allreduce"``; every kernel gets a CPU op, a ``cudaLaunchKernel`` with its correlation id and
an ``ac2g`` flow, as the PyTorch profiler writes them. All-reduce kernels carry the collective
metadata PyTorch records (``Collective name``, ``In msg nelems``, ``dtype``, ``Group size``,
process group), so arrival times and busbw can be computed across ranks.
"""

from __future__ import annotations

import json
from pathlib import Path

BASE_NS = 1_790_857_026_000_000_000  # unix ns of the trace origin (as in the bundled traces)
T0_US = 5_000_000.0                  # first step starts 5 s after the origin


def kineto_trace(rank: int, world: int, steps: list[list[tuple[str, float, float]]], step_ms: float,
                 nelems: int = 64 << 20) -> dict:
    """One rank's trace: ``steps[i]`` holds that step's kernels (ms from the step start)."""
    ev: list[dict] = []
    corr = 1
    for i, kernels in enumerate(steps):
        s0 = T0_US + i * step_ms * 1e3
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 10}", "pid": 100, "tid": 100,
                   "ts": s0, "dur": step_ms * 1e3, "args": {"External id": 10_000 + i}})
        cpu_t = s0 + 1.0
        for kind, start, dur in kernels:
            ext = 20_000 + corr
            op = "aten::mm" if kind == "gemm" else "c10d::allreduce_"
            ev.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 100, "tid": 100, "ts": cpu_t, "dur": 6.0,
                       "args": {"External id": ext}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
                       "ts": cpu_t + 1.0, "dur": 4.0, "args": {"correlation": corr, "External id": ext}})
            ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 100, "tid": 100,
                       "ts": cpu_t + 1.0, "bp": "e"})
            kt = s0 + start * 1e3
            args = {"device": 0, "stream": 7 if kind == "gemm" else 20, "correlation": corr, "External id": ext}
            if kind == "allreduce":
                name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                args.update({"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                             "dtype": "Float", "Group size": world, "Process Group Name": "0",
                             "Process Group Ranks": str(list(range(world)))})
            else:
                name = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": args["stream"], "ts": kt,
                       "dur": dur * 1e3, "args": args})
            ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": args["stream"],
                       "ts": kt, "bp": "e"})
            corr += 1
            cpu_t += 10.0
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": ev,
            "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_NS}


def write_run(d: Path, jobid: str, ranks: dict[int, list[list[tuple[str, float, float]]]], step_ms: float,
              log_step_s: float | None = None, n_log_steps: int = 60, state: str = "COMPLETED",
              start: float | None = None, end: float | None = None, planned_steps: int | None = None,
              precision: str = "fp32", model: str = "toy") -> Path:
    """A perf-run directory: manifest.json, traces/trace_rank<r>.json, train.log."""
    (d / "traces").mkdir(parents=True, exist_ok=True)
    for r, steps in ranks.items():
        (d / "traces" / f"trace_rank{r}.json").write_text(json.dumps(kineto_trace(r, len(ranks), steps, step_ms)))
    st = log_step_s if log_step_s is not None else step_ms / 1e3
    lines = [f"Batch {i}: loss {5.0 / (i + 1):.5f} time {st if i else st * 20:.4f} seconds samples 16"
             for i in range(n_log_steps)]
    (d / "train.log").write_text("\n".join(lines) + "\n")
    t0 = start if start is not None else BASE_NS / 1e9
    m = {"jobid": jobid, "state": state, "nodes_list": ["node1"], "model": model, "num_nodes": 1,
         "gpus_per_node": len(ranks), "gpu": "NVIDIA H200", "precision": precision, "global_batch_size": 16,
         "start_unix": t0, "end_unix": end if end is not None else t0 + 60.0,
         "artifacts": {"train_log": "train.log",
                       "traces": [f"traces/trace_rank{r}.json" for r in sorted(ranks)], "telemetry": []}}
    if planned_steps is not None:
        m["steps"] = planned_steps
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def straggler_steps(n: int = 4) -> dict[int, list[list[tuple[str, float, float]]]]:
    """Rank 1 computes 8 ms per 10 ms step, rank 0 2 ms; both then all-reduce 256 MiB, ending at
    9 ms. Rank 0 waits 6 ms per step in the all-reduce for rank 1 (known answer); the transfer
    itself takes 1 ms: busbw 268.4 GB/s (2 ranks: busbw = algbw)."""
    return {0: [[("gemm", 0.0, 2.0), ("allreduce", 2.0, 7.0)] for _ in range(n)],
            1: [[("gemm", 0.0, 8.0), ("allreduce", 8.0, 1.0)] for _ in range(n)]}


def balanced_steps(n: int = 4) -> dict[int, list[list[tuple[str, float, float]]]]:
    """Both ranks compute 4 ms, then all-reduce 4 ms together (rank 1 arrives 1 µs late; both leave
    at 8 ms, as ranks on one clock leave a collective together): exposed comm 40%."""
    return {r: [[("gemm", 0.0, 4.0), ("allreduce", 4.0 + 0.001 * r, 4.0 - 0.001 * r)] for _ in range(n)]
            for r in (0, 1)}
