"""CPU tensor work in the step (issue 24, seed 001 T19): the main process preprocesses the batch
with CPU tensor ops between steps (``aten::randn`` / ``aten::sort`` / ``aten::std`` / ``aten::div``
on CPU tensors), ops that launch no GPU work, so the GPU idles while the host computes.

Reads the step accounting (``graph/rules/step_budget.py``): per step, the GPU-idle µs in the CPU
side of top-level recorded ops that launched no kernel or copy (``idle_cpu_only_ops_us``, by op
name, from the one pass: ``tools/trace/cpu_ops.py``), without the framework's own kernel-less
bookkeeping nodes (:data:`FRAMEWORK`: autograd engine nodes, optimizer regions, Dynamo's cache
lookup: those are the backward pass, the optimizer or torch.compile, not the user's tensor work),
and with Python stacks the innermost user ``file:line (function)`` of the op time. Claim:
``steps.idle.op.share`` (the GPU-idle time in ops' CPU side over the step), re-derived by the
verifier's host sampler. Finding ``share``: GPU-idle µs per step in kernel-less user ops over the
step wall time. Lever ``preprocess_on_gpu``."""

from __future__ import annotations

import re
from typing import Any

from .base import Constant, Finding, LeverSpec, ev, file_name
from ..step_budget import StepCause, budget, figure, mean_wall_us, share, top_site, where_text
from ..figures import Inputs

FRAMEWORK = re.compile(r"^autograd::engine::evaluate_function|^Optimizer\.|^TorchDynamo |^Torch-Compiled Region|"
                       r"^enumerate\(DataLoader\)|^ProfilerStep#")
"""Kernel-less top-level regions of the framework itself (a gradient accumulated by reference, an
optimizer's ``zero_grad(set_to_none=True)``, Dynamo's guard check): not CPU tensor work of the user."""
SHARE_MIN = Constant(0.5, "measurement, bundled H200 runs (all 55): GPU-idle time in kernel-less user ops over the "
                          "step: cpu-preprocess (93209) 0.81; every other run <= 0.21 (anomaly-mode 0.205: the view "
                          "ops anomaly mode records; grad-norm-sync 0.019), every control <= 0.017, preprocess-on-gpu "
                          "0.000; 0.5 is 2.4x the largest other run and 1.6x below the case; seed 001 T19 (GPU idle "
                          "while the host is busy)")


def cpu_ops_per_step(b: dict[str, Any]) -> dict[str, float]:
    """Op name -> mean GPU-idle µs per profiled step in the CPU side of kernel-less top-level ops that
    are not :data:`FRAMEWORK` regions (the accounting's ``idle_cpu_only_ops_us``); {} without steps."""
    st = b.get("steps") or []
    tot: dict[str, float] = {}
    for s in st:
        for k, v in (s.get("idle_cpu_only_ops_us") or {}).items():
            if not FRAMEWORK.search(k):
                tot[k] = tot.get(k, 0.0) + float(v)
    return {k: v / len(st) for k, v in tot.items()} if st else {}


class CpuPreprocess(StepCause):
    """CPU tensor ops (no kernel) in the step's GPU-idle time: preprocessing on the host."""

    seed = "seed 001 T19; issue 24; measurement on bundled runs"
    causes = {"cpu-preprocess-in-step": "the batch is preprocessed with CPU tensor ops in the main process inside "
                                        "the step, the GPU idle meanwhile"}
    where, category = "idle", "op"
    figures = (figure("idle", "op"),)
    constants = {"SHARE_MIN": SHARE_MIN}
    levers = (LeverSpec("preprocess_on_gpu", "run the preprocessing as device ops (create/move the tensor to the GPU "
                        "first: torch.randn(..., device='cuda'), x.cuda().sort()) or in the DataLoader's workers "
                        "(a transform in the Dataset), not as CPU tensor ops in the training loop"),)

    def detect(self, x: Inputs) -> list[Finding]:
        b = budget(x)
        if b is None:
            return []
        wall = mean_wall_us(b)
        ops = cpu_ops_per_step(b)
        own_us = sum(ops.values())
        own = own_us / wall if wall > 0 else 0.0
        if own < SHARE_MIN.value:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:5]
        site, site_us = top_site(b, "op")
        extra = [ev("trace.step_accounting", f"{file_name(path)}: GPU-idle µs per step in kernel-less top-level ops",
                    {"ops_us_per_step": {k: round(v, 3) for k, v in top}, "cpu_ops_us_per_step": round(own_us, 3),
                     "site": site or None, "site_us_per_step": round(site_us, 3),
                     "python_stacks": bool(b.get("has_python_stacks"))}, path=path, rank=rank)]
        names = ", ".join(f"{k} {v / 1e3:.1f} ms" for k, v in top[:3])
        where = where_text(b, site)
        stmt = (f"the GPU idles {own_us / 1e3:.1f} ms of each {wall / 1e3:.1f} ms profiled step ({own:.0%}) while the "
                f"host runs CPU tensor ops that launch no GPU work ({names}){where}; GPU-idle time in ops' CPU side: "
                f"{share(b, 'idle', 'op'):.0%} of the step")
        c = self.share_claim(x, b, "triage.steps.cpu_preprocess", stmt, extra)
        return [Finding(("cpu-preprocess-in-step",), c, (self.lever("preprocess_on_gpu"),), share=own)]


CAUSE = CpuPreprocess()
