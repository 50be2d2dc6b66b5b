"""A small, real PyTorch training job with a known bottleneck character, for the local cluster
and for the bundled GPU example.

Self-contained on purpose: stdlib + torch (+ optional pynvml through ``telemetry.py``), no
pydantic and no other ai4s_graph import, because it also runs on GPU machines that have only torch.

Models (``--model``):

- ``gnn``: message-passing interatomic potential (radius graph, 3 interaction layers, energy +
  force loss through a double backward) -- many small kernels, so dispatch/launch-bound on a GPU
  (like ``../shared/data/perf-runs/91001``);
- ``vit``: ViT-style transformer encoder over patch tokens -- GEMM-heavy, compute-bound;
- ``mlp``: a tiny regression MLP for CPU smoke runs.

Data (``--dataset``): ``map`` builds one whole batch per ``__getitem__`` and sleeps
``--data-latency-ms`` there (standing for I/O), so ``--num-workers 0`` starves the model by
construction and ``--num-workers > 0`` hides it; ``iterable`` shards the epoch's samples over the
workers and each worker batches its own shard, so more workers realize smaller/partial batches
(the seed's lesson 23/31 artifact; the realized size is logged as ``samples S``).

Outputs in ``--out-dir`` (default ``$AI4S_PERF_RUN_DIR``): the log on stdout (rank 0 only;
``batch`` format ``Batch N: loss L time T seconds samples S`` / ``Epoch N completed``, or the
ORBIT-2 ``edm`` format), ``run_info.json``, ``traces/trace_rank<rank>.json.gz`` when
``AI4S_PROFILE=1`` (3 steady-state steps after warm-up), ``telemetry/export.jsonl`` and, with
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
import torch.nn as nn
import torch.nn.functional as F

if __package__:  # run as ``python -m ai4s_graph.workloads.train``
    from . import telemetry as _telemetry
else:  # run as a file on a GPU node that has only torch
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import telemetry as _telemetry  # type: ignore  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.float32}


# ----------------------------------------------------------------------------- data
class _Batches:
    """Deterministic synthetic batches (batch ``i`` is the same in every run)."""

    def __init__(self, model: str, cfg: dict, latency_ms: float):
        self.model, self.cfg, self.latency_s = model, cfg, latency_ms / 1000.0

    def make(self, idx: int, n: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(1234 + idx)
        c = self.cfg
        if self.latency_s > 0:
            time.sleep(self.latency_s)  # stands for reading a shard from storage
        if self.model == "gnn":
            a = c["atoms"]
            pos = torch.rand(n, a, 3, generator=g) * c["box"]
            z = torch.randint(0, c["species"], (n, a), generator=g)
            # targets from a smooth pair potential (harmonic springs between close atoms)
            d = torch.cdist(pos, pos)
            mask = (d < c["cutoff"]) & (d > 0)
            e = (0.5 * (d - 1.0) ** 2 * mask).sum(dim=(1, 2)) / 2
            return {"pos": pos.reshape(n * a, 3), "z": z.reshape(-1), "energy": e,
                    "graph": torch.arange(n).repeat_interleave(a), "n": torch.tensor(n)}
        if self.model == "vit":
            x = torch.randn(n, c["tokens"], c["in_dim"], generator=g)
            y = torch.randn(n, c["out_dim"], generator=g)
            return {"x": x, "y": y, "n": torch.tensor(n)}
        x = torch.randn(n, c["in_dim"], generator=g)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        return {"x": x, "y": y, "n": torch.tensor(n)}


class MapBatches(torch.utils.data.Dataset):
    """One full batch per index; ``steps`` indices per epoch."""

    def __init__(self, src: _Batches, steps: int, batch_size: int, epoch_offset: int = 0):
        self.src, self.steps, self.bs, self.off = src, steps, batch_size, epoch_offset

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.src.make(self.off + i, self.bs)


class IterableShards(torch.utils.data.IterableDataset):
    """``steps * batch_size`` samples per epoch, split evenly over the DataLoader workers (the
    remainder dropped); each worker batches its own shard, so with W workers a step realizes at
    most ``batch_size`` samples and each worker ends on a partial batch (seed lessons 23, 31)."""

    def __init__(self, src: _Batches, steps: int, batch_size: int, epoch_offset: int = 0):
        self.src, self.steps, self.bs, self.off = src, steps, batch_size, epoch_offset

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, nw = (info.id, info.num_workers) if info else (0, 1)
        per_worker = (self.steps * self.bs) // nw
        k = 0
        while per_worker > 0:
            n = min(self.bs, per_worker)
            yield self.src.make(self.off + w * 100003 + k, n)
            per_worker -= n
            k += 1


# ----------------------------------------------------------------------------- models
class RBF(nn.Module):
    def __init__(self, n: int, cutoff: float):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0, cutoff, n))
        self.gamma = 10.0 / cutoff

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        return torch.exp(-self.gamma * (d.unsqueeze(-1) - self.centers) ** 2)


class MessagePassingPotential(nn.Module):
    """SchNet-like interatomic potential: radius graph per molecule, continuous-filter messages
    gathered with ``index_select`` and scattered with ``index_add_``; energy = sum of atom terms."""

    def __init__(self, species: int, hidden: int, layers: int, cutoff: float, rbf: int = 16):
        super().__init__()
        self.cutoff = cutoff
        self.embed = nn.Embedding(species, hidden)
        self.rbf = RBF(rbf, cutoff)
        self.filters = nn.ModuleList(nn.Sequential(nn.Linear(rbf, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
                                     for _ in range(layers))
        self.updates = nn.ModuleList(nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
                                     for _ in range(layers))
        self.readout = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.SiLU(), nn.Linear(hidden // 2, 1))

    def forward(self, pos: torch.Tensor, z: torch.Tensor, graph: torch.Tensor, n_graphs: int) -> torch.Tensor:
        with torch.no_grad():
            same = graph.unsqueeze(0) == graph.unsqueeze(1)
            d0 = torch.cdist(pos, pos)
            src, dst = torch.nonzero(same & (d0 < self.cutoff) & (d0 > 0), as_tuple=True)
        vec = pos.index_select(0, src) - pos.index_select(0, dst)
        dist = torch.sqrt((vec * vec).sum(-1) + 1e-9)
        env = 0.5 * (torch.cos(math.pi * dist / self.cutoff) + 1.0)
        e_rbf = self.rbf(dist)
        h = self.embed(z).to(pos.dtype)
        for filt, upd in zip(self.filters, self.updates):
            w = filt(e_rbf) * env.unsqueeze(-1)
            msg = h.index_select(0, src) * w
            agg = torch.zeros_like(h).index_add_(0, dst, msg)
            h = h + upd(agg)
        atom_e = self.readout(h).squeeze(-1)
        return torch.zeros(n_graphs, dtype=atom_e.dtype, device=atom_e.device).index_add_(0, graph, atom_e)


class ViTEncoder(nn.Module):
    """Patch-token transformer encoder (pre-norm), mean-pooled regression head."""

    def __init__(self, in_dim: int, dim: int, depth: int, heads: int, out_dim: int):
        super().__init__()
        self.proj = nn.Linear(in_dim, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="gelu")
        self.enc = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.proj(x)).mean(dim=1))


def model_config(name: str, device: str, args: argparse.Namespace) -> dict:
    """Model sizes: the GPU sizes match the shared runs' character (384 atoms/batch GNN; ViT
    dim 1024 x 12 layers x 256 tokens); CPU sizes are small enough for a 2-core test machine."""
    gpu = device == "cuda"
    if name == "gnn":
        return {"atoms": 24, "box": 6.0, "cutoff": 3.0, "species": 8, "hidden": args.hidden or (128 if gpu else 32),
                "layers": 3}
    if name == "vit":
        return {"tokens": args.tokens or (256 if gpu else 32), "in_dim": 64, "dim": args.hidden or (1024 if gpu else 64),
                "depth": args.depth or (12 if gpu else 2), "heads": 16 if gpu else 4, "out_dim": 8}
    return {"in_dim": 32, "hidden": args.hidden or 64, "out_dim": 1}


def build_model(name: str, cfg: dict) -> nn.Module:
    if name == "gnn":
        return MessagePassingPotential(cfg["species"], cfg["hidden"], cfg["layers"], cfg["cutoff"])
    if name == "vit":
        return ViTEncoder(cfg["in_dim"], cfg["dim"], cfg["depth"], cfg["heads"], cfg["out_dim"])
    return nn.Sequential(nn.Linear(cfg["in_dim"], cfg["hidden"]), nn.Tanh(), nn.Linear(cfg["hidden"], cfg["hidden"]),
                         nn.Tanh(), nn.Linear(cfg["hidden"], 1))


def loss_fn(name: str, model: nn.Module, b: dict, dtype: torch.dtype) -> torch.Tensor:
    """gnn: energy MSE + force MSE (forces = -dE/dpos with create_graph=True: a double backward,
    like HydraGNN's energy_force_loss, seed lesson 6); others: MSE."""
    if name == "gnn":
        pos = b["pos"].to(dtype).requires_grad_(True)
        n = int(b["n"])
        e = model(pos, b["z"], b["graph"], n)
        (grad,) = torch.autograd.grad(e.sum(), pos, create_graph=True)
        forces = -grad
        per_atom = pos.shape[0] / n  # compare per-atom energies so the loss is O(1)
        return F.mse_loss(e / per_atom, b["energy"].to(dtype) / per_atom) + 0.1 * (forces ** 2).mean()
    return F.mse_loss(model(b["x"].to(dtype)).float(), b["y"].float())


# ----------------------------------------------------------------------------- helpers
def _env_int(*names: str, default: int = 0) -> int:
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v)
            except ValueError:
                pass
    return default


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
    ap = argparse.ArgumentParser(description="ai4s-graph toy training workload (gnn | vit | mlp)")
    ap.add_argument("--model", choices=["gnn", "vit", "mlp"], default="mlp")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "fp64", "bf16"], default="fp32")
    ap.add_argument("--batch-size", type=int, default=16, help="per-rank batch size (graphs / images / rows)")
    ap.add_argument("--steps-per-epoch", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch default)")
    ap.add_argument("--data-latency-ms", type=float, default=0.0, help="sleep per batch inside the Dataset")
    ap.add_argument("--dataset", choices=["map", "iterable"], default="map")
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--log-format", choices=["batch", "edm"], default="batch")
    ap.add_argument("--out-dir", default=os.environ.get("AI4S_PERF_RUN_DIR"))
    ap.add_argument("--jobid", default=os.environ.get("SLURM_JOB_ID"))
    ap.add_argument("--write-manifest", action="store_true")
    ap.add_argument("--hidden", type=int, default=0, help="override the model width")
    ap.add_argument("--depth", type=int, default=0, help="override the ViT depth")
    ap.add_argument("--tokens", type=int, default=0, help="override the ViT token count")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--no-telemetry", action="store_true")
    a = ap.parse_args(argv)
    if not a.out_dir:
        ap.error("--out-dir is required when AI4S_PERF_RUN_DIR is unset")
    if a.batch_size < 1 or a.steps_per_epoch < 1 or a.epochs < 1:
        ap.error("--batch-size, --steps-per-epoch and --epochs must be >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    rank = _env_int("RANK", "SLURM_PROCID", default=0)
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
    local_rank = _env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
    out = Path(a.out_dir)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    jobid = str(a.jobid or "local")
    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(f"cuda:{local_rank % max(1, torch.cuda.device_count())}" if a.device == "cuda" else "cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)

    distributed = world > 1 and bool(os.environ.get("MASTER_ADDR"))
    if distributed:
        import torch.distributed as dist

        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world)

    sampler = None
    if not a.no_telemetry and local_rank == 0:
        inst = _telemetry.instance_name()
        sampler = _telemetry.Sampler(out / "telemetry", jobid,
                                     file_name="export.jsonl" if rank == 0 else f"export_{inst}.jsonl")
        sampler.start()

    torch.manual_seed(0)
    cfg = model_config(a.model, a.device, a)
    dtype = DTYPES[a.precision]
    model = build_model(a.model, cfg).to(device=dev, dtype=dtype)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    src = _Batches(a.model, cfg, a.data_latency_ms)
    autocast = (torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if a.precision == "bf16" else None)

    total_steps = a.epochs * a.steps_per_epoch
    prof = None
    trace_path = out / "traces" / f"trace_rank{rank}.json.gz"
    if os.environ.get("AI4S_PROFILE") == "1":
        from torch.profiler import ProfilerActivity, profile, schedule

        # skip warm-up (first epoch's early steps, allocator growth), then 3 steady-state steps
        wait = max(1, min(total_steps - 4, max(3, total_steps // 3)))
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        prof = profile(activities=acts, schedule=schedule(wait=wait, warmup=1, active=3, repeat=1),
                       on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)), record_shapes=False)
        prof.start()

    def log(msg: str) -> None:
        if rank == 0:
            print(msg, flush=True)

    if rank == 0:
        print(f"ai4s-workload: model={a.model} device={dev} precision={a.precision} batch_size={a.batch_size} "
              f"world_size={world} num_workers={a.num_workers} dataset={a.dataset} jobid={jobid}", file=sys.stderr)
    t_start = time.time()
    step = 0
    realized: list[int] = []
    epoch_losses: list[float] = []
    for epoch in range(a.epochs):
        off = (epoch * 1000 + rank) * 1_000_003
        ds_cls = MapBatches if a.dataset == "map" else IterableShards
        ds = ds_cls(src, a.steps_per_epoch, a.batch_size, off)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False, num_workers=a.num_workers,
                                         pin_memory=a.pin_memory and dev.type == "cuda",
                                         persistent_workers=False)
        losses = []
        t_prev = time.perf_counter()
        for bidx, b in enumerate(dl):
            b = {k: v.to(dev, non_blocking=True) for k, v in b.items()}
            opt.zero_grad(set_to_none=True)
            if autocast is not None:
                with autocast:
                    loss = loss_fn(a.model, model, b, dtype)
            else:
                loss = loss_fn(a.model, model, b, dtype)
            loss.backward()
            opt.step()
            lv = float(loss.detach())  # syncs the device: the step time below is real
            t_now = time.perf_counter()
            dt, t_prev = t_now - t_prev, t_now
            n = int(b["n"])
            realized.append(n)
            losses.append(lv)
            if a.log_format == "batch":
                log(f"Batch {bidx}: loss {lv:.5f} time {dt:.4f} seconds samples {n * world}")
            else:
                dname = "cuda:0" if dev.type == "cuda" else "cpu"
                log(f"epoch: {epoch} batch_idx {bidx} world_size {world} loss tensor({lv:.4f}, device='{dname}')")
                log(f"my rank {rank}. tic4-tic1 in {dt:.4f} seconds")
            if prof is not None:
                prof.step()
            step += 1
        epoch_losses.append(sum(losses) / max(1, len(losses)))
        if a.log_format == "batch":
            log(f"Epoch {epoch} completed")
    t_end = time.time()
    if prof is not None:
        prof.stop()
    if distributed:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    tele_path = sampler.stop() if sampler is not None else None

    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    hbm = int(torch.cuda.max_memory_reserved(dev)) if dev.type == "cuda" else None
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else (platform.processor() or "cpu")
    full = sum(1 for n in realized if n == a.batch_size)
    info = {
        "jobid": jobid, "model": a.model, "device": dev.type, "device_name": device_name, "precision": a.precision,
        "global_batch_size": a.batch_size * world, "batch_size_per_rank": a.batch_size, "world_size": world,
        "num_workers": a.num_workers, "dataset": a.dataset, "data_latency_ms": a.data_latency_ms,
        "threads": torch.get_num_threads(), "pin_memory": a.pin_memory, "log_format": a.log_format,
        "epochs": a.epochs, "steps_per_epoch_nominal": a.steps_per_epoch, "steps": step,
        "max_batches_per_epoch": math.ceil(step / a.epochs),
        "realized_batch_mean": (sum(realized) / len(realized)) if realized else None,
        "partial_step_fraction": (1 - full / len(realized)) if realized else None,
        "epoch_losses": epoch_losses,
        "hbm_reserved_bytes": hbm,  # torch.cuda.max_memory_reserved (GPU runs only)
        "peak_rss_bytes": peak_rss,  # host peak resident set size of rank 0 (CPU and GPU runs)
        "torch": torch.__version__, "hostname": socket.gethostname(), "instance": _telemetry.instance_name(),
        "start_unix": t_start, "end_unix": t_end, "train_seconds": t_end - t_start,
        "profiled": prof is not None, "checkpoint_saved": False,
        "model_config": cfg,
    }
    if rank == 0:
        (out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
        if a.write_manifest:
            nodes = slurm_nodes()
            arts = {"train_log": "train.log",
                    "traces": sorted(str(p.relative_to(out)) for p in (out / "traces").glob("*.json.gz")),
                    "telemetry": sorted(str(p.relative_to(out)) for p in (out / "telemetry").glob("*.jsonl"))}
            manifest = {
                "jobid": jobid, "state": "COMPLETED", "nodes_list": nodes, "model": a.model,
                "num_nodes": len(nodes), "gpus_per_node": torch.cuda.device_count() if dev.type == "cuda" else 0,
                "gpu": device_name if dev.type == "cuda" else None, "torch": torch.__version__,
                "precision": a.precision, "global_batch_size": a.batch_size * world, "num_workers": a.num_workers,
                "steps": step, "start_unix": t_start, "end_unix": t_end, "hbm_reserved_bytes": hbm,
                "peak_rss_bytes": peak_rss, "artifacts": arts,
            }
            (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"ai4s-workload: {step} steps in {t_end - t_start:.1f} s; trace="
              f"{trace_path if prof is not None else 'off'}; telemetry={tele_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
