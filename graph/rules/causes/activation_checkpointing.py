"""Activation checkpointing (recompute) on a model that runs it every step (seed 001 T17:
checkpointing "recomputes activations in backward instead of storing them — trading ~20–30% extra
compute"; turn it off where the model fits without it).

Signature: the forward kernels of the families that have a distinct backward kernel (layer norm,
GELU, fused attention, softmax: :data:`FAMILIES`) run more often than their backward kernels. Each
forward kernel of a layer has one backward kernel in a step without recompute (forward / backward
= 1); a checkpointed segment runs its forward a second time inside the backward, so a fully
checkpointed model reaches 2. The cause fires at :data:`RECOMPUTE_RATIO` and above, with at least
:data:`MIN_BACKWARD` backward kernels of those families in the trace (the step trains).

``share`` = the recomputed forward's estimated share of the profiled window: the extra forward
fraction ``r = (forward - backward) / backward`` of the GPU computing time, with a backward costing
twice its forward (:data:`BACKWARD_PER_FORWARD`): ``computing × r / (1 + BACKWARD_PER_FORWARD + r)``
(bundled activation-checkpointing: r = 1.0, computing 63.4% of the window -> 0.16; measured: 14.1
of 63.7 ms of GPU computation a step more than its control, 0.22 of the computation, 0.14 of the
102.6 ms profiled step).

Detects from the one pass's event-name counts (the kernel names matched by :data:`FAMILIES`);
re-derived from the raw-text counts of the same names in the trace file (no JSON parse). Lever
``no_activation_checkpointing``."""

from __future__ import annotations

import re
from typing import Any

from .base import Cause, Constant, Finding, LeverSpec, ev, file_name
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

FAMILIES: dict[str, tuple[str, str]] = {
    "layer_norm": (r"vectorized_layer_norm_kernel|LayerNormForwardCUDAKernel|layer_?norm_fwd",
                   r"layer_norm_grad_input_kernel|LayerNormBackwardCUDAKernel|layer_?norm_bwd"),
    "gelu": (r"GeluCUDAKernelImpl", r"GeluBackwardCUDAKernelImpl"),
    "attention": (r"flash_fprop|fmha_cutlassF|flash_fwd|fmha_fwd|attn_fwd",
                  r"flash_bprop|fmha_cutlassB|flash_bwd|fmha_bwd|attn_bwd|bwd_kernel"),
    "softmax": (r"softmax_warp_forward|cunn_SoftMaxForward", r"softmax_warp_backward|cunn_SoftMaxBackward"),
}
"""Kernel families with a forward and a distinct backward kernel, as regexes of the kernel name:
PyTorch's own kernels (``vectorized_layer_norm_kernel`` / ``layer_norm_grad_input_kernel``,
``GeluCUDAKernelImpl`` / ``GeluBackwardCUDAKernelImpl``, ``softmax_warp_forward`` / ``_backward``:
the same names in ROCm builds, hipified), cuDNN's fused attention (``..._sdpa_sm90_flash_fprop_...``
/ ``..._flash_bprop_...``), PyTorch's memory-efficient attention (``fmha_cutlassF`` / ``fmha_cutlassB``),
FlashAttention (``flash_fwd`` / ``flash_bwd``), Composable Kernel's ``fmha_fwd`` / ``fmha_bwd`` and
AOTriton's ``attn_fwd`` / ``bwd_kernel`` on ROCm. Kernel names only: the CPU ops' names
(``autograd::engine::evaluate_function: NativeLayerNormBackward0``) match none of them."""
_FWD = {k: re.compile(f) for k, (f, _b) in FAMILIES.items()}
_BWD = {k: re.compile(b) for k, (_f, b) in FAMILIES.items()}
RECOMPUTE_RATIO = 1.5
BACKWARD_PER_FORWARD = 2.0
MIN_BACKWARD = 1


def counts(names: dict[str, int]) -> tuple[int, int]:
    """(forward kernels, backward kernels) of the :data:`FAMILIES` that ran a backward kernel, from
    event name -> count. A family without backward kernels (an eval pass) is left out."""
    fwd = bwd = 0
    for k in FAMILIES:
        b = sum(n for name, n in names.items() if _BWD[k].search(name))
        if b >= MIN_BACKWARD:
            bwd += b
            fwd += sum(n for name, n in names.items() if _FWD[k].search(name) and not _BWD[k].search(name))
    return fwd, bwd


def recompute_share(ratio: float, computing_pct: float | None) -> float | None:
    """The recomputed forward's share (0..1) of the window: ``computing × r / (1 + B + r)`` with
    ``r = ratio - 1`` and ``B`` = :data:`BACKWARD_PER_FORWARD`; None without the computing share."""
    if computing_pct is None:
        return None
    r = max(0.0, ratio - 1.0)
    return round(float(computing_pct) / 100.0 * r / (1.0 + BACKWARD_PER_FORWARD + r), 4)


def _ratio(returned: list[Any]) -> float | None:
    f, b = returned[0], returned[1]
    return round(float(f) / float(b), 3) if b else None


class ActivationCheckpointing(Cause):
    """Forward kernels recomputed inside the backward (seed 001 T17)."""

    seed = "seed 001 T17"
    causes = {"activation-checkpointing": "activation checkpointing recomputes the forward in the backward every step"}
    reads = ("rank", "gpu_timeline.computation_time.percent")
    figures = (Figure("activation_checkpointing.forward_backward_ratio", "ratio",
                      "forward kernels / backward kernels of the families with a distinct backward kernel", "cause",
                      Tolerance(), from_evidence=_ratio),)
    constants = {
        "RECOMPUTE_RATIO": Constant(RECOMPUTE_RATIO, "seed 001 T17 (recompute runs each checkpointed forward "
                                    "again: ratio 2 when every layer is checkpointed, 1 without); measured on the "
                                    "bundled H200 runs: activation-checkpointing 2.00, every other run 1.00-1.07 "
                                    "(sdpa-flash, sdpa-math 1.07: 48 forward vs 45 backward kernels): the midpoint of 1 and 2"),
        "BACKWARD_PER_FORWARD": Constant(BACKWARD_PER_FORWARD, "a backward pass costs about twice its forward "
                                         "(gradients w.r.t. inputs and weights: Narayanan et al., SC'21, Megatron-LM "
                                         "sec. 3.5: recomputation adds one forward to the forward+backward's 3)"),
        "MIN_BACKWARD": Constant(MIN_BACKWARD, "a family counts only when its backward kernel ran (a training step)"),
    }
    levers = (LeverSpec("no_activation_checkpointing", "call the checkpointed modules directly instead of through "
                        "torch.utils.checkpoint.checkpoint (or model.gradient_checkpointing_disable()) where the "
                        "activations fit in memory; else checkpoint only the fewest, heaviest blocks (seed 001 T17)"),)
    event_name_patterns = tuple(_FWD.values()) + tuple(_BWD.values())
    raw_patterns = {f"ckpt_{d}_{k}": f'[^"]*(?:{rx.pattern})' for d, table in (("fwd", _FWD), ("bwd", _BWD))
                    for k, rx in table.items()}

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank:
            return []
        fwd, bwd = counts(x.event_names)
        if not bwd or fwd / bwd < RECOMPUTE_RATIO:
            return []
        ratio = round(fwd / bwd, 3)
        comp = x.figure("gpu_timeline.computation_time.percent")
        path = str(x.rank["path"])
        c = self.claim("triage.t17.activation_checkpointing",
                       f"forward kernels run {ratio:.2f}x as often as their backward kernels ({fwd} vs {bwd} of "
                       "layer norm / GELU / attention / softmax): the forward is recomputed inside the backward "
                       "(activation checkpointing, seed 001 T17)",
                       "activation_checkpointing.forward_backward_ratio", ratio, "ratio",
                       [ev("trace.event_names", f"{file_name(path)}: forward kernels of {', '.join(FAMILIES)}", fwd,
                           path=path, rank=x.rank.get("rank")),
                        ev("trace.event_names", f"{file_name(path)}: backward kernels of {', '.join(FAMILIES)}", bwd,
                           path=path, rank=x.rank.get("rank"))], 0.8)
        return [Finding(("activation-checkpointing",), c, (self.lever("no_activation_checkpointing"),),
                        share=recompute_share(ratio, comp))]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        raw = (r.rank or {}).get("raw_counts") or {}
        if not any(k.startswith("ckpt_") for k in raw):
            return Rederived(None, "no raw-text counts of the kernel families", Tolerance())
        bwd_by = {k: raw.get(f"ckpt_bwd_{k}", 0) for k in FAMILIES}
        fwd = sum(raw.get(f"ckpt_fwd_{k}", 0) for k in FAMILIES if bwd_by[k] >= MIN_BACKWARD)
        bwd = sum(v for v in bwd_by.values() if v >= MIN_BACKWARD)
        return Rederived(round(fwd / bwd, 3) if bwd else None,
                         "raw-text counts of the forward and backward kernel names in the trace file", Tolerance())


CAUSE = ActivationCheckpointing()
