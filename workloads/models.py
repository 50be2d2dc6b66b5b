"""Models and synthetic data of the project's workload (``train.py``).

Self-contained on purpose: stdlib + torch only (it runs on GPU machines that have only torch).

Models (``--model``):

- ``gnn``: message-passing interatomic potential (radius graph, 3 interaction layers, energy +
  force loss through a double backward) -- many small kernels, dispatch/launch-bound on a GPU;
- ``vit``: ViT-style transformer encoder over patch tokens -- GEMM-heavy, compute-bound;
- ``mlp``: a tiny regression MLP for CPU smoke runs;
- ``wide``: ``--depth`` square Linear layers of width ``--hidden`` on a tiny batch: with a large
  width, DDP's gradient all-reduce outweighs the compute (exposed communication); with a small
  width, each step is a few hundred tiny kernels (launch-bound);
- ``gemm``: the same MLP on a large batch in bf16 -- big GEMMs, compute-bound;
- ``elementwise``: a chain of per-channel scale/shift/activation ops on a large activation --
  bandwidth-bound elementwise kernels;
- ``attn``: pre-norm attention blocks calling ``F.scaled_dot_product_attention`` directly (so
  the SDPA backend can be forced, see ``faults.py``).

``wide``, ``gemm``, ``elementwise`` and ``attn`` draw their inputs on the device from a seed the
DataLoader hands over (a 256 MB host tensor per step would make them data-loader-bound).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ON_DEVICE_INPUT = ("wide", "gemm", "elementwise", "attn")
"""Models whose batch is drawn on the device from a seed (see the module docstring)."""


def busy_cpu(ms: float) -> None:
    """Spin the CPU for ``ms`` milliseconds (a slow Python transform, not a sleep)."""
    t_end = time.perf_counter() + ms / 1000.0
    x = 0.0
    while time.perf_counter() < t_end:
        for i in range(200):
            x += math.sqrt(i + x % 7)


# ----------------------------------------------------------------------------- data
class _Batches:
    """Deterministic synthetic batches (batch ``i`` is the same in every run)."""

    def __init__(self, model: str, cfg: dict, latency_ms: float, transform_ms: float = 0.0):
        self.model, self.cfg, self.latency_s = model, cfg, latency_ms / 1000.0
        self.transform_ms = transform_ms

    def make(self, idx: int, n: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(1234 + idx)
        c = self.cfg
        if self.latency_s > 0:
            time.sleep(self.latency_s)  # stands for reading a shard from storage
        if self.transform_ms > 0:
            busy_cpu(self.transform_ms)  # a slow per-batch transform (augmentation) on the CPU
        if self.model in ON_DEVICE_INPUT:
            return {"seed": torch.tensor(1234 + idx), "n": torch.tensor(n)}
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


class ElementwiseNet(nn.Module):
    """``layers`` x (scale, shift, GELU, residual) over ``channels``: every kernel streams the whole
    activation through HBM once or twice and does O(1) flops per element (bandwidth-bound)."""

    def __init__(self, channels: int, layers: int):
        super().__init__()
        self.scale = nn.ParameterList(nn.Parameter(torch.ones(channels)) for _ in range(layers))
        self.shift = nn.ParameterList(nn.Parameter(torch.zeros(channels)) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for s, b in zip(self.scale, self.shift):
            x = x + 0.1 * F.gelu(x * s + b)
        return x.mean(dim=1, keepdim=True)


class AttnBlock(nn.Module):
    """Pre-norm attention block with an explicit ``F.scaled_dot_product_attention`` call."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x))


class AttnNet(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int):
        super().__init__()
        self.blocks = nn.ModuleList(AttnBlock(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.head(x.mean(dim=1))


def model_config(name: str, device: str, args: argparse.Namespace) -> dict:
    """Model sizes: the GPU sizes match the shared runs' character (384 atoms/batch GNN; ViT
    dim 1024 x 12 layers x 256 tokens); CPU sizes are small enough for a 2-core test machine.
    ``--hidden``, ``--depth``, ``--tokens`` override them."""
    gpu = device == "cuda"
    if name == "gnn":
        return {"atoms": 24, "box": 6.0, "cutoff": 3.0, "species": 8, "hidden": args.hidden or (128 if gpu else 32),
                "layers": 3}
    if name == "vit":
        return {"tokens": args.tokens or (256 if gpu else 32), "in_dim": 64, "dim": args.hidden or (1024 if gpu else 64),
                "depth": args.depth or (12 if gpu else 2), "heads": 16 if gpu else 4, "out_dim": 8}
    if name in ("wide", "gemm"):
        return {"in_dim": args.hidden or (4096 if gpu else 64), "hidden": args.hidden or (4096 if gpu else 64),
                "depth": args.depth or (16 if gpu else 3), "out_dim": 1}
    if name == "elementwise":
        return {"channels": args.hidden or (8192 if gpu else 256), "layers": args.depth or (24 if gpu else 4)}
    if name == "attn":
        return {"tokens": args.tokens or (2048 if gpu else 64), "dim": args.hidden or (1024 if gpu else 64),
                "depth": args.depth or (4 if gpu else 2), "heads": 16 if gpu else 4}
    return {"in_dim": 32, "hidden": args.hidden or 64, "out_dim": 1}


def build_model(name: str, cfg: dict) -> nn.Module:
    """The model ``name`` (see the module docstring) for the config of :func:`model_config`."""
    if name == "gnn":
        return MessagePassingPotential(cfg["species"], cfg["hidden"], cfg["layers"], cfg["cutoff"])
    if name == "vit":
        return ViTEncoder(cfg["in_dim"], cfg["dim"], cfg["depth"], cfg["heads"], cfg["out_dim"])
    if name in ("wide", "gemm"):
        layers: list[nn.Module] = [nn.Linear(cfg["in_dim"], cfg["hidden"])]
        for _ in range(cfg["depth"]):
            layers += [nn.ReLU(), nn.Linear(cfg["hidden"], cfg["hidden"])]
        return nn.Sequential(*layers, nn.ReLU(), nn.Linear(cfg["hidden"], cfg["out_dim"]))
    if name == "elementwise":
        return ElementwiseNet(cfg["channels"], cfg["layers"])
    if name == "attn":
        return AttnNet(cfg["dim"], cfg["depth"], cfg["heads"])
    return nn.Sequential(nn.Linear(cfg["in_dim"], cfg["hidden"]), nn.Tanh(), nn.Linear(cfg["hidden"], cfg["hidden"]),
                         nn.Tanh(), nn.Linear(cfg["hidden"], 1))


def device_input(name: str, cfg: dict, b: dict, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The input of an ``ON_DEVICE_INPUT`` model, drawn on ``device`` from the batch's seed."""
    g = torch.Generator(device=device).manual_seed(int(b["seed"]))
    n = int(b["n"])
    if name in ("wide", "gemm"):
        shape = (n, cfg["in_dim"])
    elif name == "elementwise":
        shape = (n, cfg["channels"])
    else:
        shape = (n, cfg["tokens"], cfg["dim"])
    return torch.randn(*shape, generator=g, device=device, dtype=dtype)


def loss_fn(name: str, model: nn.Module, b: dict, dtype: torch.dtype, cfg: dict | None = None) -> torch.Tensor:
    """gnn: energy MSE + force MSE (forces = -dE/dpos with create_graph=True: a double backward,
    like HydraGNN's energy_force_loss, seed lesson 6); on-device-input models: mean square of
    the output; others: MSE."""
    if name == "gnn":
        pos = b["pos"].to(dtype).requires_grad_(True)
        n = int(b["n"])
        e = model(pos, b["z"], b["graph"], n)
        (grad,) = torch.autograd.grad(e.sum(), pos, create_graph=True)
        forces = -grad
        per_atom = pos.shape[0] / n  # compare per-atom energies so the loss is O(1)
        return F.mse_loss(e / per_atom, b["energy"].to(dtype) / per_atom) + 0.1 * (forces ** 2).mean()
    if name in ON_DEVICE_INPUT:
        x = device_input(name, cfg or {}, b, dtype, b["seed"].device)
        return model(x).float().pow(2).mean()
    return F.mse_loss(model(b["x"].to(dtype)).float(), b["y"].float())
