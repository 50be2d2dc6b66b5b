"""Injected faults with a known cause, for the accuracy benchmark (``bench/accuracy``).

Self-contained on purpose: stdlib + torch only. Each fault is one knob of ``train.py`` whose
default is the healthy setting (the lever that removes a cause sets its knob back; see
``bench/accuracy/cases.py`` ``LEVERS``); ``--fault NAME`` is kept as an alias for the first ones:

- ``host-sync`` (``--host-sync``): the loop asks the host for device values every step: a NaN check
  (``.item()``) on the output of every Linear layer in the forward and a per-parameter gradient
  norm (``.item()``) after the backward. Each ``.item()`` drains the stream, so the GPU idles
  while the CPU launches the next kernels; ``--grad-norm-sync after|hook``: one call site only,
  ``p.grad.norm().item()`` per parameter after the backward, or inside per-parameter gradient
  hooks during it (under DDP this serializes the gradient all-reduce);
- host-side work in the step (issue 34), each one marked ``# injected: <cause>`` so the truth can
  name its ``file:line`` (:func:`site`): ``--d2h-params`` (every parameter copied to the host each
  step), ``--empty-cache`` (``torch.cuda.empty_cache()`` twice a step: cudaFree/cudaMalloc
  churn), ``--python-work-ms`` (pure-Python metrics bookkeeping), ``--gc-collect`` (a full
  ``gc.collect()`` each step over ``--host-objects`` live objects), ``--save-every-step``
  (``torch.save`` of the model each step, deleted at the end: lesson 30 holds), ``--preprocess
  cpu`` (tensor preprocessing on the CPU in the main process between steps);
- ``straggler``: rank ``--straggler-rank`` runs ``--straggler-matmuls`` extra bf16 matmuls of
  ``--straggler-dim``^3 every step before its backward; the other ranks wait for it in the
  gradient all-reduce; ``--straggler-host-ms``: that rank spins its CPU instead (slowed on the
  host, not the GPU);
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
import gc
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

FAULTS = ("none", "host-sync", "straggler", "sdpa-math", "recompile")
"""``--fault`` values (the first faults; newer ones are knobs of their own)."""

ALIASES = {"host-sync": {"host_sync": True}, "sdpa-math": {"sdpa_backend": "math"},
           "recompile": {"compile": "static", "vary_batch": True}, "straggler": {}}
"""``--fault`` alias -> the knobs it sets (only where the knob still has its default); ``straggler``
is a label: ``--straggler-matmuls`` / ``--straggler-host-ms`` make the straggler."""

_SOURCES = (Path(__file__).resolve(), Path(__file__).resolve().with_name("models.py"))


def site(cause: str) -> dict | None:
    """Where the code injecting ``cause`` sits: the line marked ``# injected: <cause>`` in
    ``faults.py`` or ``models.py`` and its enclosing function, as
    ``{"file": "workloads/<f>.py", "line": N, "function": name, "def_line": M}`` (``def_line``
    is the line kineto's Python tracer puts in a ``python_function`` event's name,
    ``<file>(<def_line>): <function>``); None when no line carries the marker."""
    mark = f"# injected: {cause}"
    for path in _SOURCES:
        lines = path.read_text().splitlines()
        for i, ln in enumerate(lines):
            if ln.rstrip().endswith(mark):
                for j in range(i, -1, -1):
                    s = lines[j].lstrip()
                    if s.startswith("def ") and len(lines[j]) - len(s) < len(ln) - len(ln.lstrip()):
                        return {"file": f"workloads/{path.name}", "line": i + 1,
                                "function": s[4:].split("(")[0], "def_line": j + 1}
                return {"file": f"workloads/{path.name}", "line": i + 1, "function": None, "def_line": None}
    return None


def spin(ms: float) -> int:
    """Keep the CPU busy for ``ms`` milliseconds in pure Python bytecode (no function calls in
    the inner loop, so kineto's Python tracer records a handful of events, not millions);
    returns the iteration count."""
    t_end = time.perf_counter() + ms / 1000.0
    n = 0
    acc = 0
    while True:
        for i in range(5000):
            acc += i * i % 7
        n += 5000
        if time.perf_counter() >= t_end:
            return n


class GradNormSync:
    """``--grad-norm-sync``: the norm of every parameter's gradient read on the host with
    ``.item()`` (one call site): ``after`` the backward (:meth:`after_backward`) or ``hook``
    inside per-parameter gradient hooks during it. ``syncs`` counts them."""

    def __init__(self, model: nn.Module, mode: str):
        self.mode, self.syncs, self.total = mode, 0, 0.0
        self.params = [p for p in model.parameters() if p.requires_grad]
        if mode == "hook":
            for p in self.params:
                p.register_hook(self._hook)

    def _norm(self, g: torch.Tensor) -> None:
        self.total += g.detach().norm().item()  # injected: host-sync
        self.syncs += 1

    def _hook(self, g: torch.Tensor) -> torch.Tensor:
        self._norm(g)
        return g

    def after_backward(self) -> None:
        """Mode ``after``: read every gradient's norm on the host (one sync each)."""
        if self.mode == "after":
            for p in self.params:
                if p.grad is not None:
                    self._norm(p.grad)


class StepFaults:
    """The host-side work injected into each training step (issue 34), each at one marked line.
    Call :meth:`before_forward`, :meth:`after_backward`, :meth:`after_optimizer` and
    :meth:`after_sync` (after the step's loss has been read on the host) from the loop; each does
    nothing unless its knob is set. ``counts`` records what ran."""

    def __init__(self, a: argparse.Namespace, model: nn.Module, opt, dev: torch.device):
        self.a, self.model, self.opt, self.dev = a, model, opt, dev
        self.counts: dict[str, int] = {}
        self.history: list[float] = []
        self.host_copy: dict[str, torch.Tensor] = {}
        self.save_path = Path(a.save_dir or "/tmp") / f"ai4s-ckpt-{os.getpid()}.pt" if a.save_every_step else None
        self.ballast = host_objects(a.host_objects)

    def _count(self, k: str) -> None:
        self.counts[k] = self.counts.get(k, 0) + 1

    def before_forward(self, step: int) -> torch.Tensor | None:
        """``--preprocess cpu|cuda``: a standardized, sorted random block (1024 x 4096 fp32) made
        on that device; returns its mean (added to the loss x 0) or None."""
        if self.a.preprocess == "none":
            return None
        self._count("preprocess")
        if self.a.preprocess == "cpu":
            return cpu_preprocess(step).to(self.dev)
        return device_preprocess(step, self.dev)

    def after_backward(self) -> None:
        """``--empty-cache``: return the cached segments (CUDA only)."""
        if self.a.empty_cache and self.dev.type == "cuda":
            empty_cache()
            self._count("empty_cache")

    def after_optimizer(self) -> None:
        """``--empty-cache`` again, ``--d2h-params`` (host copy of every parameter),
        ``--save-every-step`` (``torch.save`` to ``--save-dir``)."""
        if self.a.empty_cache and self.dev.type == "cuda":
            empty_cache()
            self._count("empty_cache")
        if self.a.d2h_params:
            self.host_copy = copy_params_to_host(self.model)
            self._count("d2h_params")
        if self.save_path is not None:
            save_checkpoint(self.model, self.save_path)
            self._count("save")

    def after_sync(self, loss: float) -> None:
        """After the loss is on the host (the GPU idle): ``--gc-collect``, ``--python-work-ms``."""
        if self.a.gc_collect:
            gc_pause()
            self._count("gc_collect")
        if self.a.python_work_ms > 0:
            python_metrics(self.a.python_work_ms, self.history, loss)
            self._count("python_work")

    def close(self) -> None:
        """Delete the per-step checkpoint file (perf runs never persist checkpoints, lesson 30)."""
        if self.save_path is not None:
            self.save_path.unlink(missing_ok=True)


def host_objects(n: int) -> list:
    """``n`` small live Python lists (a file index held in memory): what a full
    ``gc.collect()`` has to traverse."""
    return [[i, i + 1] for i in range(n)]


def empty_cache() -> None:
    """Return every cached block of the caching allocator to the driver (cudaFree); the next
    allocations cudaMalloc again."""
    torch.cuda.empty_cache()  # injected: allocator-churn


def copy_params_to_host(model: nn.Module) -> dict[str, torch.Tensor]:
    """A host copy of every parameter and buffer (a 'best model' snapshot or a host EMA kept
    every step): ~parameter bytes of pageable device-to-host copies per step."""
    return {k: v.detach().to("cpu") for k, v in model.state_dict().items()}  # injected: d2h-param-copy


def save_checkpoint(model: nn.Module, path: Path) -> None:
    """``torch.save`` of the model's state dict to ``path`` (file I/O every step)."""
    torch.save(model.state_dict(), path)  # injected: checkpoint-io-per-step


def gc_pause() -> None:
    """A full garbage collection (all generations)."""
    gc.collect()  # injected: gc-pause


def python_metrics(ms: float, history: list, loss: float) -> None:
    """Per-step metrics kept in Python lists and formatted as strings: ``ms`` of pure-Python work
    outside every recorded op."""
    history.append(loss)
    spin(ms)  # injected: python-outside-ops


def cpu_preprocess(step: int) -> torch.Tensor:
    """Tensor preprocessing on the CPU in the main process (aten ops on the host, between the
    steps): a 1024 x 4096 random block, sorted per row and standardized; returns the row means."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(1024, 4096, generator=g)
    x = torch.sort(x, dim=1).values  # injected: cpu-preprocess-in-step
    return ((x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)).mean(1)


def device_preprocess(step: int, dev: torch.device) -> torch.Tensor:
    """:func:`cpu_preprocess` on ``dev`` (the lever: the same preprocessing as device kernels)."""
    g = torch.Generator(device=dev).manual_seed(step)
    x = torch.randn(1024, 4096, generator=g, device=dev)
    x = torch.sort(x, dim=1).values
    return ((x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)).mean(1)


def gpu_transform(x: torch.Tensor) -> torch.Tensor:
    """The per-batch augmentation as device kernels (``--transform-device cuda``): jitter and
    rescale, a few elementwise kernels instead of ``--transform-ms`` of CPU work in the Dataset."""
    return (x * 1.01 + 0.01).clamp_(-10.0, 10.0)


def compile_model(model: nn.Module, mode: str, backend: str = "inductor") -> nn.Module:
    """``--compile``: ``off`` returns ``model``; ``static`` is :func:`compile_static`;
    ``dynamic`` is ``torch.compile(dynamic=True)`` (one shape-generic graph, seed 001 T16's fix);
    ``default`` is ``torch.compile(model)``. Raises ValueError for another mode."""
    if mode == "off":
        return model
    if mode == "static":
        return compile_static(model, backend)
    if mode == "dynamic":
        return torch.compile(model, dynamic=True, backend=backend)
    if mode == "default":
        return torch.compile(model, backend=backend)
    raise ValueError(f"unknown --compile {mode!r} (off, default, static, dynamic)")


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


def straggler_host_work(ms: float) -> None:
    """The host-side straggler: ``ms`` of CPU work in the step of one rank (a slow host-side
    transform or logging on that rank only); the other ranks wait for it in the collectives."""
    if ms > 0:
        spin(ms)  # injected: straggler-host


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


def fault_context(sdpa_backend: str):
    """The context manager the forward/backward of one step runs in: SDPA forced onto the MATH
    backend for ``math``, nothing for ``auto``."""
    return sdpa_math() if sdpa_backend == "math" else contextlib.nullcontext()


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
