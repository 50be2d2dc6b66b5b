"""A small, real PyTorch training job with a known bottleneck character, for the local cluster
and for the bundled GPU example.

Self-contained on purpose: stdlib + torch (+ optional pynvml through ``telemetry.py``), no
pydantic and no other ai4s_graph import, because it also runs on GPU machines that have only torch.

Models (``--model``, see ``models.py``): ``gnn`` (message-passing potential, many small kernels,
dispatch-bound on a GPU like ``../shared/data/perf-runs/91001``), ``vit`` (GEMM-heavy,
compute-bound), ``mlp`` (CPU smoke runs), ``wide``, ``gemm``, ``elementwise``, ``attn``.

Multi-GPU (``distributed.py``): under ``torchrun --nproc-per-node N`` or ``srun`` every rank
trains, ``--parallel ddp|fsdp``; the profiler runs on every rank (``record_shapes`` on, so the
collectives carry their message sizes) and each trace carries ``distributedInfo``.
Injected faults (``faults.py``, ``--fault``) for the accuracy benchmark; ``--truth`` writes the
known cause to ``truth.json``.

Data (``--dataset``): ``map`` builds one whole batch per ``__getitem__`` and sleeps
``--data-latency-ms`` there (standing for I/O), so ``--num-workers 0`` starves the model by
construction and ``--num-workers > 0`` hides it; ``iterable`` shards the epoch's samples over the
workers and each worker batches its own shard, so more workers realize smaller/partial batches
(the seed's lesson 23/31 artifact; the realized size is logged as ``samples S``).

Outputs in ``--out-dir`` (default ``$AI4S_PERF_RUN_DIR``): the log on stdout (rank 0 only;
``batch`` format ``Batch N: loss L time T seconds samples S`` / ``Epoch N completed``, or the
ORBIT-2 ``edm`` format), ``run_info.json``, ``traces/trace_rank<rank>.json.gz`` when
``AI4S_PROFILE=1`` (``--profile-steps``, default 3, steady-state steps after warm-up), ``telemetry/export.jsonl`` and, with
``--write-manifest``, ``manifest.json``. No checkpoint is ever saved (seed lesson 30).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

if __package__:  # run as ``python -m ai4s_graph.workloads.train``
    from . import distributed as _dist
    from . import faults as _faults
    from . import models as _models
    from . import telemetry as _telemetry
else:  # run as a file on a GPU node that has only torch (also under torchrun)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import distributed as _dist  # type: ignore  # noqa: E402
    import faults as _faults  # type: ignore  # noqa: E402
    import models as _models  # type: ignore  # noqa: E402
    import telemetry as _telemetry  # type: ignore  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.float32}


# ----------------------------------------------------------------------------- helpers
def slurm_nodes() -> list[str]:
    """The job's nodes from SLURM (``scontrol show hostnames``), else this instance."""
    hl = os.environ.get("SLURM_JOB_NODELIST")
    if hl:
        try:
            cp = subprocess.run(["scontrol", "show", "hostnames", hl], capture_output=True, text=True, timeout=10)
            if cp.returncode == 0 and cp.stdout.split():
                return cp.stdout.split()
        except (OSError, subprocess.SubprocessError):
            pass
        if "[" not in hl:
            return hl.split(",")
    return [_telemetry.instance_name()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="ai4s-graph training workload (see models.py, faults.py)")
    ap.add_argument("--model", choices=["gnn", "vit", "mlp", "wide", "gemm", "elementwise", "attn"], default="mlp")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "fp64", "bf16"], default="fp32")
    ap.add_argument("--batch-size", type=int, default=16, help="per-rank batch size (graphs / images / rows)")
    ap.add_argument("--steps-per-epoch", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch default)")
    ap.add_argument("--data-latency-ms", type=float, default=0.0, help="sleep per batch inside the Dataset")
    ap.add_argument("--transform-ms", type=float, default=0.0, help="CPU busy time per batch inside the Dataset")
    ap.add_argument("--dataset", choices=["map", "iterable"], default="map")
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--log-format", choices=["batch", "edm"], default="batch")
    ap.add_argument("--out-dir", default=os.environ.get("AI4S_PERF_RUN_DIR"))
    ap.add_argument("--jobid", default=os.environ.get("SLURM_JOB_ID"))
    ap.add_argument("--write-manifest", action="store_true")
    ap.add_argument("--hidden", type=int, default=0, help="override the model width")
    ap.add_argument("--depth", type=int, default=0, help="override the model depth")
    ap.add_argument("--tokens", type=int, default=0, help="override the token count (vit, attn)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--no-telemetry", action="store_true")
    ap.add_argument("--parallel", choices=["auto", "none", "ddp", "fsdp"], default="auto",
                    help="data parallelism when distributed (auto: ddp)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    ap.add_argument("--fault", choices=list(_faults.FAULTS), default="none", help="an injected fault (faults.py)")
    ap.add_argument("--straggler-rank", type=int, default=1)
    ap.add_argument("--straggler-matmuls", type=int, default=0)
    ap.add_argument("--straggler-dim", type=int, default=8192)
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile backend of --fault recompile")
    ap.add_argument("--profile-steps", type=int, default=int(os.environ.get("AI4S_PROFILE_STEPS", "3")),
                    help="profiled steady-state steps when AI4S_PROFILE=1")
    ap.add_argument("--record-shapes", action="store_true",
                    help="profiler record_shapes (on by default when distributed: collective sizes)")
    ap.add_argument("--truth", default=None, help="JSON written to <out>/truth.json by rank 0 (known cause)")
    a = ap.parse_args(argv)
    if not a.out_dir:
        ap.error("--out-dir is required when AI4S_PERF_RUN_DIR is unset")
    if a.batch_size < 1 or a.steps_per_epoch < 1 or a.epochs < 1 or a.profile_steps < 1:
        ap.error("--batch-size, --steps-per-epoch, --epochs and --profile-steps must be >= 1")
    return a


def make_profiler(a: argparse.Namespace, dev: torch.device, total_steps: int, trace_path: Path, distributed: bool):
    """The torch profiler (``AI4S_PROFILE=1``): skip warm-up (a third of the run, at least 3 steps,
    leaving room for the active ones), 1 warm-up step, then ``--profile-steps`` active steps,
    exported gzipped to ``trace_path``. None when profiling is off."""
    if os.environ.get("AI4S_PROFILE") != "1":
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    active = a.profile_steps
    wait = max(1, min(total_steps - active - 1, max(3, total_steps // 3)))
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    return profile(activities=acts, schedule=schedule(wait=wait, warmup=1, active=active, repeat=1),
                   on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)),
                   record_shapes=a.record_shapes or distributed)


def write_outputs(a, r, out: Path, dev, info: dict, trace_path: Path, profiled: bool, tele_path) -> None:
    """Rank 0 writes ``run_info.json``, ``manifest.json`` (``--write-manifest``) and
    ``truth.json`` (``--truth``)."""
    if r.rank != 0:
        return
    (out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    if a.truth:
        (out / "truth.json").write_text(json.dumps(json.loads(a.truth), indent=1) + "\n")
    if a.write_manifest:
        nodes = slurm_nodes()
        arts = {"train_log": "train.log",
                "traces": sorted(str(p.relative_to(out)) for p in (out / "traces").glob("*.json.gz")),
                "telemetry": sorted(str(p.relative_to(out)) for p in (out / "telemetry").glob("*.jsonl"))}
        manifest = {
            "jobid": info["jobid"], "state": "COMPLETED", "nodes_list": nodes, "model": a.model,
            "num_nodes": len(nodes), "gpus_per_node": torch.cuda.device_count() if dev.type == "cuda" else 0,
            "gpu": info["device_name"] if dev.type == "cuda" else None, "torch": torch.__version__,
            "precision": a.precision, "global_batch_size": a.batch_size * r.world,
            "batch_size_per_rank": a.batch_size, "num_workers": a.num_workers, "ranks": r.world,
            "world_size": r.world, "parallel": info["parallel"], "fault": a.fault,
            "steps": info["steps"], "start_unix": info["start_unix"], "end_unix": info["end_unix"],
            "hbm_reserved_bytes": info["hbm_reserved_bytes"], "peak_rss_bytes": info["peak_rss_bytes"],
            "env": info["env"], "artifacts": arts,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"ai4s-workload: {info['steps']} steps in {info['train_seconds']:.1f} s; trace="
          f"{trace_path if profiled else 'off'}; telemetry={tele_path}", file=sys.stderr)


ENV_RECORDED = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "CUDA_LAUNCH_BLOCKING", "NCCL_NVLS_ENABLE",
                "CUDA_VISIBLE_DEVICES", "NCCL_ALGO", "NCCL_PROTO")
"""Environment variables that change what the run measures; recorded in run_info and manifest."""


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    r = _dist.ranks()
    out = Path(a.out_dir)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    jobid = str(a.jobid or "local")
    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(f"cuda:{r.local_rank % max(1, torch.cuda.device_count())}" if a.device == "cuda" else "cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    _dist.init(r, dev)
    parallel = ("ddp" if a.parallel == "auto" else a.parallel) if r.distributed else "none"

    sampler = None
    if not a.no_telemetry and r.local_rank == 0:
        inst = _telemetry.instance_name()
        sampler = _telemetry.Sampler(out / "telemetry", jobid,
                                     file_name="export.jsonl" if r.rank == 0 else f"export_{inst}.jsonl")
        sampler.start()

    torch.manual_seed(0)
    cfg = _models.model_config(a.model, a.device, a)
    dtype = DTYPES[a.precision]
    model = _models.build_model(a.model, cfg).to(device=dev, dtype=dtype)
    host_sync = _faults.HostSync(model) if a.fault == "host-sync" else None
    model = _dist.wrap(model, parallel, dev, a.bucket_cap_mb)
    fwd_model = _faults.compile_static(model, a.compile_backend) if a.fault == "recompile" else model
    opt = (torch.optim.AdamW(model.parameters(), lr=a.lr) if a.optimizer == "adamw"
           else torch.optim.SGD(model.parameters(), lr=a.lr))
    src = _models._Batches(a.model, cfg, a.data_latency_ms, a.transform_ms)
    autocast = (torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if a.precision == "bf16" else None)
    straggle = a.fault == "straggler" and r.rank == a.straggler_rank

    total_steps = a.epochs * a.steps_per_epoch
    trace_path = out / "traces" / f"trace_rank{r.rank}.json.gz"
    prof = make_profiler(a, dev, total_steps, trace_path, r.distributed)
    if prof is not None:
        prof.start()

    def log(msg: str) -> None:
        if r.rank == 0:
            print(msg, flush=True)

    if r.rank == 0:
        print(f"ai4s-workload: model={a.model} device={dev} precision={a.precision} batch_size={a.batch_size} "
              f"world_size={r.world} parallel={parallel} fault={a.fault} num_workers={a.num_workers} "
              f"dataset={a.dataset} jobid={jobid}", file=sys.stderr)
    t_start = time.time()
    step = 0
    realized: list[int] = []
    epoch_losses: list[float] = []
    for epoch in range(a.epochs):
        off = (epoch * 1000 + r.rank) * 1_000_003
        ds_cls = _models.MapBatches if a.dataset == "map" else _models.IterableShards
        ds = ds_cls(src, a.steps_per_epoch, a.batch_size, off)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False, num_workers=a.num_workers,
                                         pin_memory=a.pin_memory and dev.type == "cuda",
                                         persistent_workers=False)
        losses = []
        t_prev = time.perf_counter()
        for bidx, b in enumerate(dl):
            if a.fault == "recompile":
                b["n"] = torch.tensor(_faults.recompile_batch(step, a.batch_size))
            b = {k: v.to(dev, non_blocking=True) for k, v in b.items()}
            opt.zero_grad(set_to_none=True)
            with _faults.fault_context(a.fault):
                if autocast is not None:
                    with autocast:
                        loss = _models.loss_fn(a.model, fwd_model, b, dtype, cfg)
                else:
                    loss = _models.loss_fn(a.model, fwd_model, b, dtype, cfg)
                if straggle:
                    _faults.straggler_work(dev, a.straggler_matmuls, a.straggler_dim)
                loss.backward()
            if host_sync is not None:
                host_sync.after_backward()
            opt.step()
            lv = float(loss.detach())  # syncs the device: the step time below is real
            t_now = time.perf_counter()
            dt, t_prev = t_now - t_prev, t_now
            n = int(b["n"])
            realized.append(n)
            losses.append(lv)
            if a.log_format == "batch":
                log(f"Batch {bidx}: loss {lv:.5f} time {dt:.4f} seconds samples {n * r.world}")
            else:
                dname = "cuda:0" if dev.type == "cuda" else "cpu"
                log(f"epoch: {epoch} batch_idx {bidx} world_size {r.world} loss tensor({lv:.4f}, device='{dname}')")
                log(f"my rank {r.rank}. tic4-tic1 in {dt:.4f} seconds")
            if prof is not None:
                prof.step()
            step += 1
        epoch_losses.append(sum(losses) / max(1, len(losses)))
        if a.log_format == "batch":
            log(f"Epoch {epoch} completed")
    t_end = time.time()
    if prof is not None:
        prof.stop()
    _dist.finish(r)
    tele_path = sampler.stop() if sampler is not None else None

    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    hbm = int(torch.cuda.max_memory_reserved(dev)) if dev.type == "cuda" else None
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else (platform.processor() or "cpu")
    full = sum(1 for n in realized if n == a.batch_size)
    info = {
        "jobid": jobid, "model": a.model, "device": dev.type, "device_name": device_name, "precision": a.precision,
        "global_batch_size": a.batch_size * r.world, "batch_size_per_rank": a.batch_size, "world_size": r.world,
        "parallel": parallel, "fault": a.fault, "optimizer": a.optimizer,
        "num_workers": a.num_workers, "dataset": a.dataset, "data_latency_ms": a.data_latency_ms,
        "transform_ms": a.transform_ms, "threads": torch.get_num_threads(), "pin_memory": a.pin_memory,
        "log_format": a.log_format, "epochs": a.epochs, "steps_per_epoch_nominal": a.steps_per_epoch, "steps": step,
        "max_batches_per_epoch": math.ceil(step / a.epochs),
        "staged_samples": a.steps_per_epoch * a.batch_size * r.world,  # samples the dataset holds per epoch (lesson 25)
        "realized_batch_mean": (sum(realized) / len(realized)) if realized else None,
        "partial_step_fraction": (1 - full / len(realized)) if realized else None,
        "epoch_losses": epoch_losses,
        "hbm_reserved_bytes": hbm,  # torch.cuda.max_memory_reserved (GPU runs only)
        "peak_rss_bytes": peak_rss,  # host peak resident set size of rank 0 (CPU and GPU runs)
        "torch": torch.__version__, "hostname": socket.gethostname(), "instance": _telemetry.instance_name(),
        "start_unix": t_start, "end_unix": t_end, "train_seconds": t_end - t_start,
        "profiled": prof is not None, "profile_steps": a.profile_steps if prof is not None else 0,
        "host_syncs": host_sync.syncs if host_sync is not None else None,
        "straggler": {"rank": a.straggler_rank, "matmuls": a.straggler_matmuls, "dim": a.straggler_dim}
        if a.fault == "straggler" else None,
        "env": {k: os.environ[k] for k in ENV_RECORDED if k in os.environ},
        "checkpoint_saved": False, "model_config": cfg,
    }
    write_outputs(a, r, out, dev, info, trace_path, prof is not None, tele_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
