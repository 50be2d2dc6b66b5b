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
Injected causes for the accuracy benchmark (``faults.py``): one knob each (the "injected-cause
knobs" group of ``--help``), healthy by default, ``--fault`` kept as an alias of the first ones;
``--truth`` writes the known cause to ``truth.json`` (with the ``file:line`` of a host-side cause).
Profiler options from the environment: ``AI4S_PROFILE_WITH_STACK``, ``AI4S_PROFILE_RECORD_SHAPES``,
``AI4S_PROFILE_MEMORY`` (:func:`profiler_settings`).

Data (``--dataset``): ``map`` builds one whole batch per ``__getitem__`` and sleeps
``--data-latency-ms`` there (standing for I/O), so ``--num-workers 0`` starves the model by
construction and ``--num-workers > 0`` hides it; ``iterable`` shards the epoch's samples over the
workers and each worker batches its own shard, so more workers realize smaller/partial batches
(the seed's lesson 23/31 artifact; the realized size is logged as ``samples S``).

Outputs in ``--out-dir`` (default ``$AI4S_PERF_RUN_DIR``): the log on stdout (rank 0 only;
``batch`` format ``Batch N: loss L time T seconds samples S`` / ``Epoch N completed``, or the
ORBIT-2 ``edm`` format), ``run_info.json``, ``traces/trace_rank<rank>.json.gz`` when
``AI4S_PROFILE=1`` (``--profile-steps``, default 3, steady-state steps after warm-up), ``telemetry/export.jsonl`` and, with
``--write-manifest``, ``manifest.json``. No checkpoint is ever kept (seed lesson 30; the injected
``--save-every-step`` writes one to ``--save-dir`` each step and deletes it at the end).
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
    """The workload's flags (``--help``); the injected-cause knobs default to the healthy setting
    and ``--fault`` aliases set them (:data:`faults.ALIASES`). Exits 2 (argparse) on bad input."""
    ap = argparse.ArgumentParser(description="ai4s-graph training workload (see models.py, faults.py)")
    ap.add_argument("--model", choices=["gnn", "vit", "mlp", "wide", "gemm", "elementwise", "attn", "conv", "experts"],
                    default="mlp")
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
    ap.add_argument("--depth", type=int, default=0, help="override the model depth (experts: their number)")
    ap.add_argument("--tokens", type=int, default=0, help="override the token count (vit, attn), image side (conv)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--no-telemetry", action="store_true")
    ap.add_argument("--parallel", choices=["auto", "none", "ddp", "fsdp", "fsdp1"], default="auto",
                    help="data parallelism when distributed (auto: ddp)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    ap.add_argument("--find-unused-parameters", action="store_true", help="DDP find_unused_parameters=True")
    ap.add_argument("--fsdp-prefetch", choices=["full", "none"], default="full",
                    help="fsdp1: backward_prefetch=BACKWARD_PRE + forward_prefetch (full) or neither (none)")
    ap.add_argument("--fault", choices=list(_faults.FAULTS), default="none", help="an injected fault (faults.py)")
    ap.add_argument("--straggler-rank", type=int, default=1)
    ap.add_argument("--straggler-matmuls", type=int, default=0)
    ap.add_argument("--straggler-dim", type=int, default=8192)
    ap.add_argument("--straggler-host-ms", type=float, default=0.0,
                    help="CPU work per step on --straggler-rank (a rank slowed on the host)")
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile backend of --compile")
    ap.add_argument("--profile-steps", type=int, default=int(os.environ.get("AI4S_PROFILE_STEPS", "3")),
                    help="profiled steady-state steps when AI4S_PROFILE=1")
    ap.add_argument("--record-shapes", action="store_true",
                    help="profiler record_shapes (on by default when distributed: collective sizes; also "
                         "AI4S_PROFILE_RECORD_SHAPES=1)")
    ap.add_argument("--truth", default=None, help="JSON written to <out>/truth.json by rank 0 (known cause)")
    k = ap.add_argument_group("injected-cause knobs (faults.py; defaults are the healthy settings)")
    k.add_argument("--detect-anomaly", action="store_true", help="torch.autograd.set_detect_anomaly(True)")
    k.add_argument("--host-sync", action="store_true", help=".item() per Linear output and per parameter")
    k.add_argument("--grad-norm-sync", choices=["off", "after", "hook"], default="off",
                   help="per-parameter grad norm .item(): after the backward or in gradient hooks")
    k.add_argument("--sdpa-backend", choices=["auto", "math"], default="auto")
    k.add_argument("--compile", choices=["off", "default", "static", "dynamic"], default="off",
                   help="torch.compile the model (static: dynamic=False, recompile limit lifted)")
    k.add_argument("--vary-batch", action="store_true", help="a new batch size every step (batch + step %% 97)")
    k.add_argument("--graph-breaks", action="store_true", help="graph_break() after every Linear (wide/gemm)")
    k.add_argument("--checkpointing", action="store_true", help="activation checkpointing of every ViT layer")
    k.add_argument("--blocking-h2d", action="store_true", help=".to(device, non_blocking=False)")
    k.add_argument("--channels-last", action="store_true", help="model and input in torch.channels_last")
    k.add_argument("--optimizer-impl", choices=["default", "forloop", "foreach", "fused"], default="default")
    k.add_argument("--persistent-workers", action="store_true")
    k.add_argument("--prefetch-factor", type=int, default=0, help="DataLoader prefetch_factor (0: torch's 2)")
    k.add_argument("--worker-init-ms", type=float, default=0.0, help="sleep when a DataLoader worker starts")
    k.add_argument("--worker-threads", type=int, default=0, help="torch.set_num_threads in each worker (0: 1)")
    k.add_argument("--burst-every", type=int, default=0, help="every N-th batch of an epoch is slow")
    k.add_argument("--burst-ms", type=float, default=0.0, help="extra sleep of a slow batch")
    k.add_argument("--transform-matmuls", type=int, default=0, help="torch CPU matmuls per batch in the Dataset")
    k.add_argument("--transform-dim", type=int, default=256)
    k.add_argument("--transform-device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: --transform-ms of CPU work replaced by device kernels in the step")
    k.add_argument("--d2h-params", action="store_true", help="copy every parameter to the host each step")
    k.add_argument("--empty-cache", action="store_true", help="torch.cuda.empty_cache() twice a step")
    k.add_argument("--python-work-ms", type=float, default=0.0, help="pure-Python work per step after the sync")
    k.add_argument("--gc-collect", action="store_true", help="gc.collect() every step")
    k.add_argument("--host-objects", type=int, default=0, help="live Python objects held (a file index)")
    k.add_argument("--save-every-step", action="store_true", help="torch.save the model every step")
    k.add_argument("--save-dir", default=None, help="where --save-every-step writes (default /tmp)")
    k.add_argument("--preprocess", choices=["none", "cpu", "cuda"], default="none",
                   help="tensor preprocessing in the main process between steps, on that device")
    k.add_argument("--aux-head", type=int, default=0, help="auxiliary head over the first K samples (wide/gemm)")
    k.add_argument("--per-sample-loop", action="store_true", help="run the auxiliary head one sample at a time")
    a = ap.parse_args(argv)
    if not a.out_dir:
        ap.error("--out-dir is required when AI4S_PERF_RUN_DIR is unset")
    if a.batch_size < 1 or a.steps_per_epoch < 1 or a.epochs < 1 or a.profile_steps < 1:
        ap.error("--batch-size, --steps-per-epoch, --epochs and --profile-steps must be >= 1")
    for knob, value in _faults.ALIASES.get(a.fault, {}).items():
        if getattr(a, knob) == ap.get_default(knob):
            setattr(a, knob, value)
    if a.graph_breaks and a.model not in ("wide", "gemm"):
        ap.error("--graph-breaks applies to --model wide or gemm")
    if a.aux_head and a.model not in ("wide", "gemm"):
        ap.error("--aux-head applies to --model wide or gemm")
    if a.checkpointing and a.model != "vit":
        ap.error("--checkpointing applies to --model vit")
    if a.num_workers == 0 and (a.persistent_workers or a.prefetch_factor):
        ap.error("--persistent-workers and --prefetch-factor need --num-workers > 0")
    return a


def active_faults(a: argparse.Namespace) -> list[str]:
    """The injected-cause knobs set away from their healthy default, by flag name (for the
    manifest and run_info)."""
    on = []
    for name, healthy in (("detect_anomaly", False), ("host_sync", False), ("grad_norm_sync", "off"),
                          ("sdpa_backend", "auto"), ("vary_batch", False), ("graph_breaks", False),
                          ("checkpointing", False), ("blocking_h2d", False), ("d2h_params", False),
                          ("empty_cache", False), ("python_work_ms", 0.0), ("gc_collect", False),
                          ("save_every_step", False), ("preprocess", "none"), ("per_sample_loop", False),
                          ("straggler_host_ms", 0.0), ("find_unused_parameters", False)):
        if getattr(a, name) != healthy:
            on.append(name.replace("_", "-"))
    if a.compile == "static":
        on.append("compile-static")
    if a.optimizer_impl == "forloop":
        on.append("optimizer-forloop")
    if a.straggler_matmuls > 0:
        on.append("straggler")
    return on


SITE_CAUSES = {"d2h_params": "d2h-param-copy", "empty_cache": "allocator-churn", "python_work_ms": "python-outside-ops",
               "gc_collect": "gc-pause", "save_every_step": "checkpoint-io-per-step",
               "preprocess": "cpu-preprocess-in-step", "per_sample_loop": "per-sample-loop",
               "grad_norm_sync": "host-sync", "checkpointing": "activation-checkpointing",
               "graph_breaks": "graph-break"}
"""Knob -> the cause whose ``# injected:`` line :func:`faults.site` finds (``file:line`` in the truth)."""


def injected_sites(a: argparse.Namespace) -> dict[str, dict]:
    """``{cause: site}`` of every knob of :data:`SITE_CAUSES` that is on (``--preprocess cuda``
    is the lever, not a fault)."""
    out = {}
    for knob, cause in SITE_CAUSES.items():
        v = getattr(a, knob)
        if v and v not in ("off", "none", "cuda", 0.0):
            s = _faults.site(cause)
            if s:
                out[cause] = s
    return out


def profiler_settings(a: argparse.Namespace, distributed: bool) -> dict:
    """What the profiler records besides the CPU and CUDA activities: ``record_shapes``
    (``--record-shapes``, ``AI4S_PROFILE_RECORD_SHAPES=1``, or distributed: collective sizes),
    ``with_stack`` (``AI4S_PROFILE_WITH_STACK=1``: Python stacks, ``python_function`` events with
    each call's ``file(line): function``), ``profile_memory`` (``AI4S_PROFILE_MEMORY=1``)."""
    env = os.environ
    return {"record_shapes": bool(a.record_shapes or distributed or env.get("AI4S_PROFILE_RECORD_SHAPES") == "1"),
            "with_stack": env.get("AI4S_PROFILE_WITH_STACK") == "1",
            "profile_memory": env.get("AI4S_PROFILE_MEMORY") == "1"}


def make_profiler(a: argparse.Namespace, dev: torch.device, total_steps: int, trace_path: Path, distributed: bool):
    """The torch profiler (``AI4S_PROFILE=1``): skip warm-up (a third of the run, at least 3 steps,
    leaving room for the active ones), 1 warm-up step, then ``--profile-steps`` active steps,
    exported gzipped to ``trace_path``, with :func:`profiler_settings`. None when profiling is off."""
    if os.environ.get("AI4S_PROFILE") != "1":
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    active = a.profile_steps
    wait = max(1, min(total_steps - active - 1, max(3, total_steps // 3)))
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    return profile(activities=acts, schedule=schedule(wait=wait, warmup=1, active=active, repeat=1),
                   on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)),
                   **profiler_settings(a, distributed))


def write_outputs(a, r, out: Path, dev, info: dict, trace_path: Path, profiled: bool, tele_path) -> None:
    """Rank 0 writes ``run_info.json``, ``manifest.json`` (``--write-manifest``) and
    ``truth.json`` (``--truth``, with the ``file:line`` of each injected host-side cause added
    under ``sites`` when the truth has none)."""
    if r.rank != 0:
        return
    (out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    if a.truth:
        truth = json.loads(a.truth)
        if info["sites"] and "sites" not in truth:
            truth["sites"] = info["sites"]
        (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
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
            "batch_size_per_rank": a.batch_size, "num_workers": a.num_workers,
            "cpus_per_node": len(os.sched_getaffinity(0)), "ranks": r.world,
            "world_size": r.world, "parallel": info["parallel"], "fault": info["fault"],
            "faults": info["faults"], "steps": info["steps"], "start_unix": info["start_unix"],
            "end_unix": info["end_unix"], "hbm_reserved_bytes": info["hbm_reserved_bytes"],
            "peak_rss_bytes": info["peak_rss_bytes"], "param_count": info["param_count"],
            "param_tensors": info["param_tensors"], "param_bytes": info["param_bytes"],
            "profiler": info["profiler"], "env": info["env"], "artifacts": arts,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"ai4s-workload: {info['steps']} steps in {info['train_seconds']:.1f} s; trace="
          f"{trace_path if profiled else 'off'}; telemetry={tele_path}", file=sys.stderr)


ENV_RECORDED = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "CUDA_LAUNCH_BLOCKING", "NCCL_NVLS_ENABLE",
                "CUDA_VISIBLE_DEVICES", "NCCL_ALGO", "NCCL_PROTO", "AI4S_MATMUL_PRECISION", "AI4S_CUDNN_BENCHMARK",
                "AI4S_TORCH_COMPILE", "AI4S_PROFILE_WITH_STACK", "AI4S_PROFILE_RECORD_SHAPES", "AI4S_PROFILE_MEMORY",
                "PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS")
"""Environment variables that change what the run measures; recorded in run_info and manifest."""


class EpochSampler(torch.utils.data.Sampler):
    """Batch indices of one epoch, ``(epoch * 1000 + rank) * 1_000_003 + i`` for ``i`` in
    ``range(steps)`` (the same batches as one DataLoader per epoch gave); :meth:`set_epoch`
    before each ``iter(loader)``, so one DataLoader serves every epoch (persistent workers)."""

    def __init__(self, steps: int, rank: int):
        self.steps, self.rank, self.epoch = steps, rank, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        off = (self.epoch * 1000 + self.rank) * 1_000_003
        return iter(range(off, off + self.steps))

    def __len__(self) -> int:
        return self.steps


class GlobalBatches(torch.utils.data.Dataset):
    """Map-style dataset indexed by :class:`EpochSampler`'s global indices (one batch each)."""

    def __init__(self, src, batch_size: int):
        self.src, self.bs = src, batch_size

    def __len__(self) -> int:  # nominal: the sampler decides what is read
        return 1 << 62

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        return self.src.make(idx, self.bs, local=idx % 1_000_003)


def make_loader(a: argparse.Namespace, src, dev: torch.device, rank: int, epoch: int, cached=None):
    """The DataLoader of ``epoch``: for ``--dataset map`` one loader for the whole run (built on
    the first call, its sampler moved to ``epoch``) with ``--persistent-workers``,
    ``--prefetch-factor``, ``--worker-init-ms``/``--worker-threads`` (:class:`models.WorkerInit`);
    for ``iterable`` a new loader each epoch (its shards depend on the epoch).

    With ``--worker-threads`` the workers start through ``forkserver``, not ``fork``: GNU libgomp is
    not fork-safe (GCC bug 60035), so a worker forked from a parent whose OpenMP pool is up hangs in
    its first parallel region once it runs more than one thread (PyTorch sets 1 thread in its
    workers for this reason). Measured: 93132 (8 workers x 16 threads) hung on the H200 machine
    until the 180 s timeout, and hangs on CPU the same way; with ``forkserver`` it runs. The case
    and its control (``--worker-threads 1``) start their workers the same way."""
    pin = a.pin_memory and dev.type == "cuda"
    init = (_models.WorkerInit(a.worker_init_ms, a.worker_threads)
            if a.num_workers and (a.worker_init_ms or a.worker_threads) else None)
    kw = {"num_workers": a.num_workers, "pin_memory": pin, "worker_init_fn": init,
          "persistent_workers": a.persistent_workers}
    if a.num_workers and a.worker_threads:
        kw["multiprocessing_context"] = "forkserver"
    if a.num_workers and a.prefetch_factor:
        kw["prefetch_factor"] = a.prefetch_factor
    if a.dataset == "iterable":
        off = (epoch * 1000 + rank) * 1_000_003
        ds = _models.IterableShards(src, a.steps_per_epoch, a.batch_size, off)
        return torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False, **kw)
    if cached is None:
        sampler = EpochSampler(a.steps_per_epoch, rank)
        cached = torch.utils.data.DataLoader(GlobalBatches(src, a.batch_size), batch_size=None, sampler=sampler, **kw)
    cached.sampler.set_epoch(epoch)
    return cached


def make_optimizer(a: argparse.Namespace, params):
    """AdamW or SGD with ``--optimizer-impl``: ``forloop`` (foreach=False: a few kernels per
    parameter tensor), ``foreach`` (multi-tensor kernels), ``fused`` (one fused kernel per group),
    ``default`` (torch's choice: foreach on CUDA)."""
    impls = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    kw = impls.get(a.optimizer_impl, {})
    cls = torch.optim.AdamW if a.optimizer == "adamw" else torch.optim.SGD
    return cls(params, lr=a.lr, **kw)


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
    if a.detect_anomaly:
        torch.autograd.set_detect_anomaly(True)  # left on after a NaN hunt (seed 001 T12)
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
    cfg = _models.with_options(_models.model_config(a.model, a.device, a), a)
    dtype = DTYPES[a.precision]
    model = _models.build_model(a.model, cfg).to(device=dev, dtype=dtype)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    params = [p for p in model.parameters()]
    host_sync = _faults.HostSync(model) if a.host_sync else None
    model = _dist.wrap(model, parallel, dev, a.bucket_cap_mb, find_unused=a.find_unused_parameters,
                       fsdp_prefetch=a.fsdp_prefetch)
    grad_sync = _faults.GradNormSync(model, a.grad_norm_sync) if a.grad_norm_sync != "off" else None
    fwd_model = _faults.compile_model(model, a.compile, a.compile_backend)
    opt = make_optimizer(a, model.parameters())
    step_faults = _faults.StepFaults(a, model, opt, dev)
    src = _models._Batches(a.model, cfg, a.data_latency_ms, a.transform_ms if a.transform_device == "cpu" else 0.0,
                           burst_every=a.burst_every, burst_ms=a.burst_ms, transform_matmuls=a.transform_matmuls,
                           transform_dim=a.transform_dim, pin=a.pin_memory and dev.type == "cuda")
    autocast = (torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if a.precision == "bf16" else None)
    straggle = r.rank == a.straggler_rank and (a.straggler_matmuls > 0 or a.straggler_host_ms > 0)

    total_steps = a.epochs * a.steps_per_epoch
    trace_path = out / "traces" / f"trace_rank{r.rank}.json.gz"
    prof = make_profiler(a, dev, total_steps, trace_path, r.distributed)
    if prof is not None:
        prof.start()

    def log(msg: str) -> None:
        if r.rank == 0:
            print(msg, flush=True)

    faults_on = active_faults(a)
    if r.rank == 0:
        print(f"ai4s-workload: model={a.model} device={dev} precision={a.precision} batch_size={a.batch_size} "
              f"world_size={r.world} parallel={parallel} fault={a.fault} faults={','.join(faults_on) or 'none'} "
              f"num_workers={a.num_workers} dataset={a.dataset} jobid={jobid}", file=sys.stderr)
    t_start = time.time()
    step = 0
    realized: list[int] = []
    epoch_losses: list[float] = []
    loader = None
    for epoch in range(a.epochs):
        loader = make_loader(a, src, dev, r.rank, epoch, loader if a.dataset == "map" else None)
        losses = []
        t_prev = time.perf_counter()
        for bidx, b in enumerate(loader):
            if a.vary_batch:
                b["n"] = torch.tensor(_faults.recompile_batch(step, a.batch_size))
            b = {k: v.to(dev, non_blocking=not a.blocking_h2d) for k, v in b.items()}
            if a.channels_last and "x" in b and b["x"].dim() == 4:
                b["x"] = b["x"].contiguous(memory_format=torch.channels_last)
            if a.transform_device == "cuda" and a.transform_ms > 0 and "x" in b:
                b["x"] = _faults.gpu_transform(b["x"])
            pre = step_faults.before_forward(step)
            opt.zero_grad(set_to_none=True)
            with _faults.fault_context(a.sdpa_backend):
                if autocast is not None:
                    with autocast:
                        loss = _models.loss_fn(a.model, fwd_model, b, dtype, cfg)
                else:
                    loss = _models.loss_fn(a.model, fwd_model, b, dtype, cfg)
                if pre is not None:
                    loss = loss + 0.0 * pre.mean()
                if straggle:
                    _faults.straggler_work(dev, a.straggler_matmuls, a.straggler_dim)
                    _faults.straggler_host_work(a.straggler_host_ms)
                loss.backward()
            if host_sync is not None:
                host_sync.after_backward()
            if grad_sync is not None:
                grad_sync.after_backward()
            step_faults.after_backward()
            opt.step()
            step_faults.after_optimizer()
            lv = float(loss.detach())  # syncs the device: the step time below is real
            step_faults.after_sync(lv)
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
    step_faults.close()
    _dist.finish(r)
    tele_path = sampler.stop() if sampler is not None else None

    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    hbm = int(torch.cuda.max_memory_reserved(dev)) if dev.type == "cuda" else None
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else (platform.processor() or "cpu")
    full = sum(1 for n in realized if n == a.batch_size)
    knobs = {k: v for k, v in vars(a).items() if k not in ("truth", "out_dir", "jobid")}
    info = {
        "jobid": jobid, "model": a.model, "device": dev.type, "device_name": device_name, "precision": a.precision,
        "global_batch_size": a.batch_size * r.world, "batch_size_per_rank": a.batch_size, "world_size": r.world,
        "parallel": parallel, "fault": a.fault if a.fault != "none" else (",".join(faults_on) or "none"),
        "faults": faults_on, "optimizer": a.optimizer,
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
        "param_count": sum(p.numel() for p in params), "param_tensors": len(params),
        "param_bytes": sum(p.numel() * p.element_size() for p in params),
        "torch": torch.__version__, "hostname": socket.gethostname(), "instance": _telemetry.instance_name(),
        "start_unix": t_start, "end_unix": t_end, "train_seconds": t_end - t_start,
        "profiled": prof is not None, "profile_steps": a.profile_steps if prof is not None else 0,
        "profiler": profiler_settings(a, r.distributed) if prof is not None else None,
        "host_syncs": (host_sync.syncs if host_sync is not None else 0) + (grad_sync.syncs if grad_sync else 0)
        if (host_sync is not None or grad_sync is not None) else None,
        "step_faults": step_faults.counts, "sites": injected_sites(a),
        "straggler": {"rank": a.straggler_rank, "matmuls": a.straggler_matmuls, "dim": a.straggler_dim,
                      **({"host_ms": a.straggler_host_ms} if a.straggler_host_ms > 0 else {})}
        if (a.fault == "straggler" or a.straggler_matmuls > 0 or a.straggler_host_ms > 0) else None,
        "env": {k: os.environ[k] for k in ENV_RECORDED if k in os.environ},
        "checkpoint_saved": False, "model_config": cfg, "knobs": knobs,
    }
    write_outputs(a, r, out, dev, info, trace_path, prof is not None, tele_path)
    return 0


def _exit_now(rc: int) -> None:
    """End a distributed rank without the interpreter's C++ teardown: with gloo, a rank whose
    process group was already destroyed (``distributed.finish``) sometimes aborts in static
    destructors ("terminate called without an active exception", exit 134) after all its outputs
    are written -- measured on the local 2-node cluster, 1 of 4 runs of the 4-rank cpu-toy job --
    and ``srun --kill-on-bad-exit`` then fails the whole job. Flushes stdio and logging first."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    _rc = main()
    if _dist.ranks().distributed:
        _exit_now(int(_rc or 0))
    sys.exit(_rc)
