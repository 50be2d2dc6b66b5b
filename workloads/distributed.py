"""Process group and data-parallel wrapping for the project's workload (``train.py``).

Self-contained on purpose: stdlib + torch only.

- Ranks come from torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) or srun (``SLURM_PROCID``,
  ``SLURM_NTASKS``, ``SLURM_LOCALID``); the run is distributed when the world has more than one
  rank and ``MASTER_ADDR`` is set (torchrun sets it; the sbatch templates set it from SLURM).
- Backend: NCCL on GPUs, gloo on CPUs.
- ``--parallel ddp``: ``DistributedDataParallel`` (gradient all-reduce in buckets of
  ``--bucket-cap-mb``, overlapped with the backward by DDP's autograd hooks);
  ``--parallel fsdp``: FSDP2 ``fully_shard`` on every child block then the root (parameters
  all-gathered before each block's forward and backward, gradients reduce-scattered after it).
- NVLink multicast stays off (``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``,
  ``NVSHMEM_DISABLE_NVLS=1``): set here with ``setdefault`` before the process group exists, as
  the device machines require.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass

import torch
import torch.nn as nn

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""Environment that keeps NVLink multicast off (the device machines' rule, KINDS.md)."""


def env_int(*names: str, default: int = 0) -> int:
    """The first of the environment variables ``names`` that holds an integer, else ``default``."""
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v)
            except ValueError:
                pass
    return default


@dataclass
class Ranks:
    """This process's place in the job."""

    rank: int
    world: int
    local_rank: int
    distributed: bool


def ranks() -> Ranks:
    """Rank, world size and local rank from torchrun or srun variables (see the module docstring)."""
    rank = env_int("RANK", "SLURM_PROCID", default=0)
    world = env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
    local = env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
    return Ranks(rank, world, local, world > 1 and bool(os.environ.get("MASTER_ADDR")))


def init(r: Ranks, dev: torch.device) -> None:
    """Start the process group (NCCL on CUDA with ``device_id`` bound, gloo on CPU); no-op when
    the run is not distributed. Raises what ``init_process_group`` raises (timeout 300 s)."""
    if not r.distributed:
        return
    import torch.distributed as dist

    for k, v in NO_MULTICAST.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("MASTER_PORT", "29500")
    kw = {"device_id": dev} if dev.type == "cuda" else {}
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=r.rank, world_size=r.world,
                            timeout=_dt.timedelta(seconds=300), **kw)


def finish(r: Ranks) -> None:
    """Barrier then destroy the process group (no-op when not distributed)."""
    if not r.distributed:
        return
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def wrap(model: nn.Module, parallel: str, dev: torch.device, bucket_cap_mb: float = 25.0, *,
         find_unused: bool = False, fsdp_prefetch: str = "full") -> nn.Module:
    """Wrap ``model`` for data parallelism: ``none`` returns it unchanged, ``ddp`` in
    ``DistributedDataParallel`` (``bucket_cap_mb``, ``find_unused_parameters=find_unused``),
    ``fsdp`` with FSDP2 ``fully_shard`` on each child block (the ``ModuleList``/``Sequential``
    members that hold parameters) and on the root, ``fsdp1`` with FSDP1
    ``FullyShardedDataParallel`` wrapping the same blocks, with ``fsdp_prefetch`` ``full``
    (``backward_prefetch=BACKWARD_PRE``, ``forward_prefetch=True``, seed 001 T23) or ``none``
    (neither: each block's all-gather waits for the previous block's compute). Raises ValueError
    for another ``parallel``."""
    if parallel == "none":
        return model
    if parallel == "ddp":
        return nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                                                   bucket_cap_mb=bucket_cap_mb, find_unused_parameters=find_unused)
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for blk in _blocks(model):
            fully_shard(blk)
        fully_shard(model)
        return model
    if parallel == "fsdp1":
        from torch.distributed.fsdp import BackwardPrefetch, FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        kinds = {type(b) for b in _blocks(model)}
        full = fsdp_prefetch == "full"
        return FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy(kinds), device_id=dev,
                                        backward_prefetch=BackwardPrefetch.BACKWARD_PRE if full else None,
                                        forward_prefetch=full, use_orig_params=True)
    raise ValueError(f"unknown --parallel {parallel!r} (none, ddp, fsdp, fsdp1)")


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of a model: members of its ModuleLists / Sequentials that hold
    parameters (the transformer layers, the MLP's Linear layers)."""
    out: list[nn.Module] = []
    for m in model.modules():
        if isinstance(m, (nn.ModuleList, nn.Sequential)) and m is not model:
            out += [c for c in m.children() if any(True for _ in c.parameters())]
    if isinstance(model, nn.Sequential):
        out += [c for c in model.children() if any(True for _ in c.parameters())]
    seen, uniq = set(), []
    for b in out:  # outermost first; drop blocks nested in a block already listed
        if id(b) in seen:
            continue
        uniq.append(b)
        seen.update(id(x) for x in b.modules())
    return uniq
