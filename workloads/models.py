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
  the SDPA backend can be forced, see ``faults.py``);
- ``conv``: a plain convolutional net (patchify stem, ``--depth`` 3x3 convolutions of ``--hidden``
  channels, global pool) over host images ``3 x --tokens x --tokens`` (NCHW or channels_last);
- ``experts``: ``--depth`` tiny experts (two ``--hidden``-square Linear weights with biases each, so
  4 parameter tensors per expert) applied as one batched matmul over stacked weights: a step of
  few kernels but thousands of parameter tensors (the per-parameter optimizer case).

Options of the injected causes (``faults.py``, set through ``cfg``): ``checkpointing`` (activation
checkpointing of every ViT layer), ``graph_breaks`` (``torch._dynamo.graph_break()`` after every
hidden Linear of ``wide``/``gemm``), ``aux_head``/``per_sample`` (an auxiliary head over the first K
samples, batched or one sample at a time in a Python loop).

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

ON_DEVICE_INPUT = ("wide", "gemm", "elementwise", "attn", "experts")
"""Models whose batch is drawn on the device from a seed (see the module docstring)."""


def busy_cpu(ms: float) -> None:
    """Spin the CPU for ``ms`` milliseconds (a slow Python transform, not a sleep)."""
    t_end = time.perf_counter() + ms / 1000.0
    x = 0.0
    while time.perf_counter() < t_end:
        for i in range(200):
            x += math.sqrt(i + x % 7)


# ----------------------------------------------------------------------------- data
def cpu_matmuls(count: int, dim: int, seed: int) -> float:
    """``count`` float32 products of ``dim`` x ``dim`` matrices on the CPU through torch (intra-op
    threads: what ``torch.set_num_threads`` sets); returns a checksum so the work is not dead."""
    if count <= 0:
        return 0.0
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(dim, dim, generator=g) / dim ** 0.5
    c = a
    for _ in range(count):
        c = torch.tanh(a @ c)
    return float(c[0, 0])


class WorkerInit:
    """DataLoader ``worker_init_fn``: sleep ``sleep_ms`` (standing for a worker that opens its
    files or loads an index when it starts) and set ``torch.set_num_threads(threads)`` when
    ``threads`` > 0 (PyTorch's own worker default is 1 thread)."""

    def __init__(self, sleep_ms: float = 0.0, threads: int = 0):
        self.sleep_ms, self.threads = sleep_ms, threads

    def __call__(self, _worker_id: int) -> None:
        if self.threads > 0:
            torch.set_num_threads(self.threads)
        if self.sleep_ms > 0:
            time.sleep(self.sleep_ms / 1000.0)


class _Batches:
    """Deterministic synthetic batches (batch ``i`` is the same in every run).

    Per batch, in the Dataset (so in a DataLoader worker when there are workers): ``latency_ms``
    of sleep (I/O), ``transform_ms`` of CPU spin (a Python transform), ``burst_ms`` more sleep on
    every ``burst_every``-th batch of an epoch (bursty fetch times), ``transform_matmuls`` torch
    matmuls of ``transform_dim`` on the CPU (a multi-threaded tensor transform). ``conv`` images
    come from a pool of ``POOL`` host batches made once (pinned when ``pin`` is set), so building
    a batch costs nothing and the host-to-device copy is what the step pays for."""

    POOL = 4

    def __init__(self, model: str, cfg: dict, latency_ms: float, transform_ms: float = 0.0, *,
                 burst_every: int = 0, burst_ms: float = 0.0, transform_matmuls: int = 0,
                 transform_dim: int = 256, pin: bool = False):
        self.model, self.cfg, self.latency_s = model, cfg, latency_ms / 1000.0
        self.transform_ms = transform_ms
        self.burst_every, self.burst_s = burst_every, burst_ms / 1000.0
        self.transform_matmuls, self.transform_dim = transform_matmuls, transform_dim
        self.pin = pin
        self._pool: dict[int, list[dict[str, torch.Tensor]]] = {}

    def _conv_batch(self, idx: int, n: int) -> dict[str, torch.Tensor]:
        pool = self._pool.setdefault(n, [])
        if not pool:
            c = self.cfg
            for k in range(self.POOL):
                g = torch.Generator().manual_seed(4321 + k)
                b = {"x": torch.rand(n, 3, c["image"], c["image"], generator=g),
                     "y": torch.randn(n, c["out_dim"], generator=g)}
                if self.pin:
                    b = {k2: v.pin_memory() for k2, v in b.items()}
                pool.append(b)
        return {**pool[idx % self.POOL], "n": torch.tensor(n)}

    def make(self, idx: int, n: int, local: int | None = None) -> dict[str, torch.Tensor]:
        """Batch ``idx`` of ``n`` samples; ``local`` is its index in the epoch (for the bursts)."""
        g = torch.Generator().manual_seed(1234 + idx)
        c = self.cfg
        if self.latency_s > 0:
            time.sleep(self.latency_s)  # stands for reading a shard from storage
        if self.burst_every > 0 and (idx if local is None else local) % self.burst_every == 0:
            time.sleep(self.burst_s)  # a slow shard now and then (bursty fetch times)
        if self.transform_ms > 0:
            busy_cpu(self.transform_ms)  # a slow per-batch transform (augmentation) on the CPU
        if self.transform_matmuls > 0:
            cpu_matmuls(self.transform_matmuls, self.transform_dim, 1234 + idx)
        if self.model == "conv":
            return self._conv_batch(idx, n)
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
        return self.src.make(self.off + i, self.bs, local=i)


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
    """Patch-token transformer encoder (pre-norm), mean-pooled regression head. With
    ``checkpointing`` every encoder layer runs under ``torch.utils.checkpoint`` (non-reentrant):
    its activations are recomputed in the backward instead of stored (seed 001 T17)."""

    def __init__(self, in_dim: int, dim: int, depth: int, heads: int, out_dim: int, checkpointing: bool = False):
        super().__init__()
        self.proj = nn.Linear(in_dim, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="gelu")
        self.enc = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(dim, out_dim)
        self.checkpointing = checkpointing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if self.checkpointing and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            for layer in self.enc.layers:
                h = checkpoint(layer, h, use_reentrant=False)  # injected: activation-checkpointing
        else:
            h = self.enc(h)
        return self.head(h.mean(dim=1))


class ConvNet(nn.Module):
    """Patchify stem (``stem`` x ``stem`` convolution of stride ``stem``, 3 -> ``width``
    channels), ``depth`` x (3x3 convolution ``width`` -> ``width`` + ReLU), global average pool,
    Linear head. Shapes: input (n, 3, H, W), output (n, out_dim)."""

    def __init__(self, width: int, depth: int, stem: int, out_dim: int):
        super().__init__()
        self.stem = nn.Conv2d(3, width, kernel_size=stem, stride=stem)
        self.convs = nn.ModuleList(nn.Conv2d(width, width, kernel_size=3, padding=1) for _ in range(depth))
        self.head = nn.Linear(width, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.stem(x))
        for conv in self.convs:
            h = F.relu(conv(h))
        return self.head(h.mean(dim=(2, 3)))


class ExpertsNet(nn.Module):
    """``experts`` independent 2-layer MLPs of width ``dim``, each with its own four parameter
    tensors (w1, b1, w2, b2), applied to their own ``tokens`` rows as one batched matmul over the
    stacked weights. Input (experts * tokens, dim) -> output (experts * tokens, 1)."""

    def __init__(self, experts: int, dim: int):
        super().__init__()
        self.experts, self.dim = experts, dim
        self.w1 = nn.ParameterList(nn.Parameter(torch.randn(dim, dim) / dim ** 0.5) for _ in range(experts))
        self.b1 = nn.ParameterList(nn.Parameter(torch.zeros(dim)) for _ in range(experts))
        self.w2 = nn.ParameterList(nn.Parameter(torch.randn(dim, dim) / dim ** 0.5) for _ in range(experts))
        self.b2 = nn.ParameterList(nn.Parameter(torch.zeros(dim)) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.experts
        h = x.view(e, -1, self.dim)
        h = F.gelu(torch.baddbmm(torch.stack(list(self.b1)).unsqueeze(1), h, torch.stack(list(self.w1))))
        h = torch.baddbmm(torch.stack(list(self.b2)).unsqueeze(1), h, torch.stack(list(self.w2)))
        return h.reshape(-1, self.dim).mean(dim=1, keepdim=True)


class BreakingLinear(nn.Module):
    """A Linear whose forward calls ``torch._dynamo.graph_break()`` after the matmul: under
    ``torch.compile`` every such layer is split into fragments with eager Python between them
    (it stands for an untraceable call in a layer, e.g. a logging helper); a no-op in eager mode.
    Holds the Linear as ``lin``."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.lin = nn.Linear(n_in, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch._dynamo as dynamo

        h = self.lin(x)
        dynamo.graph_break()  # injected: graph-break
        return h


class WithAuxHead(nn.Module):
    """``body`` plus an auxiliary head (Linear in_dim -> 256, GELU, Linear 256 -> 1) over the
    first ``k`` samples of the batch, appended to the output: batched, or with ``per_sample``
    one sample at a time in a Python loop (k launches of the same modules on batch-1 shapes).
    Output (n + k, 1)."""

    def __init__(self, body: nn.Module, in_dim: int, k: int, per_sample: bool = False):
        super().__init__()
        self.body, self.k, self.per_sample = body, k, per_sample
        self.aux = nn.Sequential(nn.Linear(in_dim, 256), nn.GELU(), nn.Linear(256, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        xs = x[: self.k]
        if self.per_sample:
            a = torch.cat([self.aux(xs[i:i + 1]) for i in range(xs.shape[0])])  # injected: per-sample-loop
        else:
            a = self.aux(xs)
        return torch.cat([y, a.to(y.dtype)])


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
        return {"tokens": args.tokens or (256 if gpu else 32), "in_dim": 64,
                "dim": args.hidden or (1024 if gpu else 64),
                "depth": args.depth or (12 if gpu else 2), "heads": 16 if gpu else 4, "out_dim": 8}
    if name in ("wide", "gemm"):
        return {"in_dim": args.hidden or (4096 if gpu else 64), "hidden": args.hidden or (4096 if gpu else 64),
                "depth": args.depth or (16 if gpu else 3), "out_dim": 1}
    if name == "elementwise":
        return {"channels": args.hidden or (8192 if gpu else 256), "layers": args.depth or (24 if gpu else 4)}
    if name == "attn":
        return {"tokens": args.tokens or (2048 if gpu else 64), "dim": args.hidden or (1024 if gpu else 64),
                "depth": args.depth or (4 if gpu else 2), "heads": 16 if gpu else 4}
    if name == "conv":
        return {"image": args.tokens or (224 if gpu else 32), "width": args.hidden or (128 if gpu else 8),
                "depth": args.depth or (8 if gpu else 2), "stem": 4, "out_dim": 8}
    if name == "experts":
        return {"experts": args.depth or (512 if gpu else 64), "dim": args.hidden or (64 if gpu else 16),
                "tokens": args.tokens or (256 if gpu else 4)}
    return {"in_dim": 32, "hidden": args.hidden or 64, "out_dim": 1}


def with_options(cfg: dict, args: argparse.Namespace) -> dict:
    """``cfg`` with the injected-cause options of ``args`` the model builders read:
    ``checkpointing``, ``graph_breaks``, ``aux_head`` (K), ``per_sample``."""
    return {**cfg, "checkpointing": bool(getattr(args, "checkpointing", False)),
            "graph_breaks": bool(getattr(args, "graph_breaks", False)),
            "aux_head": int(getattr(args, "aux_head", 0) or 0),
            "per_sample": bool(getattr(args, "per_sample_loop", False))}


def build_model(name: str, cfg: dict) -> nn.Module:
    """The model ``name`` (see the module docstring) for the config of :func:`model_config`."""
    if name == "gnn":
        return MessagePassingPotential(cfg["species"], cfg["hidden"], cfg["layers"], cfg["cutoff"])
    if name == "vit":
        return ViTEncoder(cfg["in_dim"], cfg["dim"], cfg["depth"], cfg["heads"], cfg["out_dim"],
                          checkpointing=cfg.get("checkpointing", False))
    if name in ("wide", "gemm"):
        lin = BreakingLinear if cfg.get("graph_breaks") else nn.Linear
        layers: list[nn.Module] = [lin(cfg["in_dim"], cfg["hidden"])]
        for _ in range(cfg["depth"]):
            layers += [nn.ReLU(), lin(cfg["hidden"], cfg["hidden"])]
        body = nn.Sequential(*layers, nn.ReLU(), nn.Linear(cfg["hidden"], cfg["out_dim"]))
        if cfg.get("aux_head"):
            return WithAuxHead(body, cfg["in_dim"], cfg["aux_head"], cfg.get("per_sample", False))
        return body
    if name == "conv":
        return ConvNet(cfg["width"], cfg["depth"], cfg["stem"], cfg["out_dim"])
    if name == "experts":
        return ExpertsNet(cfg["experts"], cfg["dim"])
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
    elif name == "experts":
        shape = (cfg["experts"] * cfg["tokens"], cfg["dim"])
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
