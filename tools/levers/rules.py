"""The generic lever rules: which levers fit each bottleneck class, in cost order, and whether a
lever fits a given job. Used after a model's own catalog (:mod:`.catalog`) by the recommendation
(:mod:`.recommend`), which the synthesizer and the optimizer share."""

from __future__ import annotations

import re

from ...state import BottleneckClass

MECHANISMS: dict[str, str] = {
    "torch_compile": "TorchDynamo + AOT Autograd compilation: every torch.compile mode (default, reduce-overhead, "
                     "max-autotune) goes through it, and it cannot differentiate twice (seed 000 lesson 6: "
                     "'torch.compile with aot_autograd does not currently support double backward')",
    "cuda_graphs": "CUDA/HIP graph capture and replay: static shapes and static memory addresses per captured "
                   "region (seed 001 T15)",
    "torch_jit": "TorchScript (torch.jit.script / trace)",
}
"""The mechanisms a lever may imply (``implies`` of a catalog lever, :data:`TRAITS` for the generic
levers): a catalog that blocks a lever blocks the mechanisms it implies, and every other lever that
implies one of them is dropped with it (:mod:`ai4s_graph.tools.levers.policy`)."""

EVIDENCE: dict[str, tuple[re.Pattern[str], str]] = {
    "sdpa_math": (re.compile(r"^aten::_scaled_dot_product_attention_math"),
                  "attention on SDPA's unfused math backend (aten::_scaled_dot_product_attention_math)"),
    "fsdp": (re.compile(r"FSDP|FullyShardedDataParallel"),
             "FSDP in use (FullyShardedDataParallel / FSDP:: record functions)"),
}
"""Evidence family -> (the event or kernel names the trace's one pass counts for it, what it means):
a lever's precondition (``requires``). The one pass counts every name a pattern accepts
(:func:`wants_name`, read by ``graph/rules/registry.py:event_name_wanted``); the lever choice keeps a
lever only when some rank counted one of them. ``sdpa_math``: a fused-backend lever changes nothing
for attention that already runs a fused kernel (the bundled ViT runs use cuDNN's flash SDPA:
``cudnn_generated_fort_native_sdpa_sm90_flash_*``); ``fsdp``: FSDP prefetch needs FSDP (a DDP job has
no all-gather to prefetch, issue 24)."""


def wants_name(name: str) -> bool:
    """Whether the trace's one pass must count events of this name for a lever precondition
    (:data:`EVIDENCE`)."""
    return any(p.search(name) for p, _ in EVIDENCE.values())


TRAITS: dict[str, dict[str, tuple[str, ...]]] = {
    "torch_compile_reduce_overhead": {"implies": ("torch_compile", "cuda_graphs")},
    "torch_compile": {"implies": ("torch_compile",)},
    "sdpa_efficient": {"requires": ("sdpa_math",)},
    "fsdp_prefetch": {"requires": ("fsdp",)},
}
"""The mechanisms (``implies``) and preconditions (``requires``) of the generic levers of
:data:`LEVERS`, the same fields a catalog lever declares (``state/loop.py:Lever``); a lever absent here
implies nothing and needs nothing beyond :func:`lever_applies`."""

# Levers by class, in cost order (seed 001: dataloader knobs, TF32, bf16, SDPA, torch.compile, overlap;
# seed 000 lessons 13, 17, 22, 23, 26, 31 for what did and did not work on real clusters).
LEVERS: dict[BottleneckClass, list[tuple[str, str]]] = {
    BottleneckClass.dispatch: [
        ("torch_compile_reduce_overhead", "CUDA/HIP graphs remove per-kernel launch overhead (seed 001 T15); check the "
         "catalog first: blocked for HydraGNN MLIP (double backward, lesson 6)"),
        ("fuse_small_kernels", "fewer, larger kernels: upstream fusion or mega-kernels (lesson 13)"),
        ("larger_batch_per_launch", "more work per launch amortizes launch latency (seed 001 T18); re-check the "
         "batch-size guards (lessons 23, 31)"),
        ("rccl_high_priority", "TORCH_NCCL_HIGH_PRIORITY=1 GPU_MAX_HW_QUEUES=2 (ROCm): the one accepted HydraGNN "
         "lever (lesson 17)"),
    ],
    BottleneckClass.compute: [
        ("precision_bf16", "bf16/TF32 tensor-core math (seed 001 T9, T13; lesson 22: 2.38× on ORBIT-2)"),
        ("sdpa_efficient", "fused attention backend (seed 001 T14; lesson 21: EFFICIENT, never MATH primary)"),
        ("scale_out", "more nodes: compute-bound work strong-scales (lesson 26: 2.02× on 2 nodes)"),
        ("bigger_effective_batch", "larger per-step batch where data allows (lessons 24, 25)"),
    ],
    BottleneckClass.memory: [
        ("torch_compile", "torch.compile/Inductor fuses bandwidth-bound elementwise chains (seed 001 T15)"),
        ("bf16_activations", "halve bytes moved (seed 001 T13)"),
        ("batch_packing", "fewer launches over more data (lesson 13, memory-bound branch)"),
    ],
    BottleneckClass.data_loader: [
        ("num_workers", "overlap data loading with compute (seed 001 T4); high variance: replicate within ±5% "
         "(lesson 9); check realized batch (lessons 23, 31)"),
        ("persistent_workers", "no worker respawn each epoch (seed 001 T5)"),
        ("pin_memory_non_blocking", "async host-to-device copy (seed 001 T6)"),
        ("prefetch_factor", "deeper queue for bursty fetch (seed 001 T7)"),
    ],
    BottleneckClass.communication: [
        ("ddp_bucket_cap_mb", "fewer, larger all-reduces that overlap backward (seed 001 T23)"),
        ("remove_host_syncs", "no .item()/print per step: they serialize the stream (seed 001 T23)"),
        ("fsdp_prefetch", "backward/forward prefetch hides all-gathers (seed 001 T23)"),
        ("nccl_env", "check GID/NIC consistency before tuning (lesson 26)"),
    ],
    BottleneckClass.unknown: [],
}


def lever_applies(name: str, *, precision: str | None, vendor: str | None, ranks: int) -> bool:
    """Whether a lever of :data:`LEVERS` fits the job: no precision lever for a job already at
    bf16/fp16/fp8, the ROCm-only ``rccl_high_priority`` only on AMD GPUs, no communication lever
    for a single rank."""
    if name == "precision_bf16" and (precision or "").lower() in ("bf16", "fp16", "fp8"):
        return False
    if name == "rccl_high_priority" and vendor != "amd":
        return False
    if name in ("ddp_bucket_cap_mb", "fsdp_prefetch", "nccl_env") and ranks < 2:
        return False
    return True
