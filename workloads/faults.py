"""Injected faults with a known cause, for the accuracy benchmark (``bench/accuracy``).

Self-contained on purpose: stdlib + torch only. ``train.py --fault NAME`` applies one:

- ``host-sync``: the loop asks the host for device values every step: a NaN check
  (``.item()``) on the output of every Linear layer in the forward and a per-parameter gradient
  norm (``.item()``) after the backward. Each ``.item()`` drains the stream, so the GPU idles
  while the CPU launches the next kernels;
- ``straggler``: rank ``--straggler-rank`` runs ``--straggler-matmuls`` extra bf16 matmuls of
  ``--straggler-dim``^3 every step before its backward; the other ranks wait for it in the
  gradient all-reduce;
- ``sdpa-math``: every ``F.scaled_dot_product_attention`` is forced onto the MATH backend
  (``torch.nn.attention.sdpa_kernel``): the attention matrix is materialised and softmaxed in
  HBM instead of running the fused flash kernel;
- ``recompile``: the model runs under ``torch.compile(dynamic=False)`` and the batch size changes
  every step, so Dynamo recompiles every step (the recompile limit is lifted so it never falls
  back to eager);
- faults set by the driver, not by this module: ``NCCL_P2P_DISABLE=1`` (slow link),
  ``CUDA_LAUNCH_BLOCKING=1``, a DataLoader with too few workers and a slow transform
  (``--num-workers``, ``--data-latency-ms``, ``--transform-ms``), and a second process on the
  same GPU (``python3 faults.py hog``).

Never touches GPU clocks or power settings.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import torch
import torch.nn as nn

FAULTS = ("none", "host-sync", "straggler", "sdpa-math", "recompile")


class HostSync:
    """The ``host-sync`` fault: forward hooks with ``.item()`` on every Linear output, and
    :meth:`after_backward` with a per-parameter ``.item()``. ``syncs`` counts the host syncs."""

    def __init__(self, model: nn.Module):
        self.syncs = 0
        self.handles = [m.register_forward_hook(self._hook) for m in model.modules() if isinstance(m, nn.Linear)]
        self.model = model

    def _hook(self, _mod: nn.Module, _inp, out) -> None:
        if torch.is_tensor(out) and bool(torch.isnan(out.detach()).any().item()):
            print("warning: NaN in a Linear output", file=sys.stderr)
        self.syncs += 1

    def after_backward(self) -> float:
        """Per-parameter gradient norms through ``.item()`` (one host sync each); their sum."""
        total = 0.0
        for p in self.model.parameters():
            if p.grad is not None:
                total += float(p.grad.detach().norm().item())
                self.syncs += 1
        return total


def straggler_work(dev: torch.device, matmuls: int, dim: int) -> None:
    """``matmuls`` bf16 (fp32 on CPU) products of ``dim`` x ``dim`` matrices on ``dev``: extra
    GPU work that slows one rank by construction (about ``2 dim^3 matmuls`` flop)."""
    if matmuls <= 0:
        return
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a = torch.ones(dim, dim, device=dev, dtype=dt) / dim
    c = a
    for _ in range(matmuls):
        c = a @ c
    del c


def sdpa_math():
    """Context manager that forces SDPA's MATH backend (torch >= 2.3 ``sdpa_kernel``)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def compile_static(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """``torch.compile(model, dynamic=False)`` with Dynamo's recompile limit lifted, so a new
    input shape recompiles every time instead of falling back to eager after 8."""
    import torch._dynamo as dynamo

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, 100000)
    if hasattr(dynamo.config, "automatic_dynamic_shapes"):
        dynamo.config.automatic_dynamic_shapes = False
    return torch.compile(model, dynamic=False, backend=backend)


def recompile_batch(step: int, batch_size: int) -> int:
    """The ``recompile`` fault's batch size at ``step``: ``batch_size + step % 97``, a new shape
    every step of a run shorter than 97 steps."""
    return batch_size + step % 97


def fault_context(fault: str):
    """The context manager the forward/backward of one step runs in for ``fault``."""
    return sdpa_math() if fault == "sdpa-math" else contextlib.nullcontext()


def hog(device: int, seconds: float, dim: int = 8192) -> int:
    """The competing process: back-to-back bf16 ``dim``^3 matmuls on GPU ``device`` for
    ``seconds`` (or until killed). Returns the number of matmuls run."""
    dev = torch.device("cuda", device)
    a = torch.randn(dim, dim, device=dev, dtype=torch.bfloat16)
    b = torch.randn(dim, dim, device=dev, dtype=torch.bfloat16)
    n, t_end = 0, time.monotonic() + seconds
    while time.monotonic() < t_end:
        for _ in range(20):
            torch.matmul(a, b)
        torch.cuda.synchronize(dev)
        n += 20
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fault helpers: `hog` runs a competing GPU process")
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hog", help="back-to-back bf16 matmuls on one GPU")
    h.add_argument("--device", type=int, default=0)
    h.add_argument("--seconds", type=float, default=60.0)
    h.add_argument("--dim", type=int, default=8192)
    a = ap.parse_args(argv)
    n = hog(a.device, a.seconds, a.dim)
    print(f"hog: {n} matmuls of {a.dim}^3 on cuda:{a.device}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
