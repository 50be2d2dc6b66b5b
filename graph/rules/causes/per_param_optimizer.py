"""Per-parameter optimizer kernels (issue 24): the optimizer updates each parameter tensor with its
own few kernels (``Adam(foreach=False)``-style, ``torch/optim/adam.py:_single_tensor_adam``) instead
of multi-tensor ``_foreach_*`` ops or one fused kernel (``_fused_adam_``). The per-tensor path's
signature is one ``aten::addcdiv_`` per parameter tensor per step (the update
``param.addcdiv_(exp_avg, denom)`` of Adam / AdamW / RMSprop / Adagrad, ``torch/optim/*.py``
``_single_tensor_*``); the multi-tensor path calls ``aten::_foreach_addcdiv_`` once per group.

Detects from the trace's event-name counts and the rank's step count; re-derived from the raw-text
count of ``aten::addcdiv_"`` in the same trace. Lever ``foreach_optimizer``. Finding ``share``: the
GPU-idle µs per profiled step the host spent in the optimizer step (the step accounting's
``optimizer`` state; the launch calls inside it are the ``launch`` state, so a lower bound) over
the step wall time; None without the accounting."""

from __future__ import annotations

from .base import Cause, Constant, Finding, LeverSpec, ev, file_name, raw_count
from ..step_budget import budget, share
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

PER_TENSOR_OP = "aten::addcdiv_"
MULTI_TENSOR_OPS = ("aten::_foreach_addcdiv_", "aten::_fused_adam_", "aten::_fused_adamw_")
MIN_PER_TENSOR_UPDATES_PER_STEP = 100
CLAIM_ID = "triage.per_param_optimizer"


class PerParamOptimizer(Cause):
    """An optimizer stepping tensor by tensor (no foreach / fused implementation)."""

    seed = "seed 001 (dispatch-bound levers); issue 24"
    causes = {"per-parameter-optimizer": "the optimizer launches a few kernels per parameter tensor "
                                         "(foreach=False) over many tensors"}
    analyst = "trace_analyst"
    reads = ("event_names", "rank")
    figures = (Figure("per_tensor_optimizer_updates", "calls", "per-tensor optimizer updates (aten::addcdiv_) in "
                      "one rank trace", "cause", Tolerance()),)
    constants = {"MIN_PER_TENSOR_UPDATES_PER_STEP": Constant(
        MIN_PER_TENSOR_UPDATES_PER_STEP,
        "measurement on the bundled runs: 2048 aten::addcdiv_ a step on per-parameter-optimizer (2048 tensors, "
        "16 420 kernels a step, 4.99x its control) and 0 on every other bundled run (foreach AdamW); at ~10 kernels "
        "per tensor and ~6 us a launch on H200 (issue 24) 100 tensors cost ~6 ms of launches a step")}
    levers = (LeverSpec("foreach_optimizer", "construct the optimizer with foreach=True (or fused=True), e.g. "
                        "torch.optim.AdamW(params, foreach=True): multi-tensor kernels instead of a few per tensor"),)
    event_names = (PER_TENSOR_OP,) + MULTI_TENSOR_OPS
    raw_patterns = {"per_tensor_update": PER_TENSOR_OP + '"'}

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank:
            return []
        n = int(x.event_names.get(PER_TENSOR_OP, 0))
        steps = int(x.rank.get("n_steps") or 0)
        if steps <= 0 or n < MIN_PER_TENSOR_UPDATES_PER_STEP * steps:
            return []
        multi = sum(int(x.event_names.get(k, 0)) for k in MULTI_TENSOR_OPS)
        path = str(x.rank["path"])
        c = self.claim(CLAIM_ID, f"{n} per-tensor optimizer updates ({PER_TENSOR_OP}) in {steps} profiled steps "
                       f"({n / steps:.0f} a step) and {multi} multi-tensor ones: the optimizer steps tensor by tensor "
                       "(foreach=False), a few kernel launches per parameter tensor", "per_tensor_optimizer_updates",
                       n, "calls", [ev("trace.event_names", f"{file_name(path)}: count {PER_TENSOR_OP}", n, path=path,
                                       rank=x.rank.get("rank"), n_steps=steps)], 0.85)
        b = budget(x)
        return [Finding(("per-parameter-optimizer",), c, (self.lever("foreach_optimizer"),),
                        share=share(b, "idle", "optimizer") if b is not None else None)]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        return raw_count(r, "per_tensor_update", "raw-text count of aten::addcdiv_ in the trace file")


CAUSE = PerParamOptimizer()
