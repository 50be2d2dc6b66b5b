"""Python work in the step outside every recorded op (metrics bookkeeping, logging, pure-Python
loops): the GPU idles while the host runs code the profiler records no op for.

Reads the step accounting (``graph/rules/step_budget.py``): the GPU-idle time the host spent outside every
recorded op (``outside_ops``), minus the time of Python functions a more specific cause explains
(:data:`SPECIFIC`: ``gc.collect``, ``torch.save``; their summed ``dur`` per step from the one pass,
``rank["name_dur_us"]``), and with Python stacks the innermost user ``file:line (function)``.
Claim: ``steps.idle.outside_ops.share``, re-derived by the verifier's host sampler. Finding
``share``: the GPU-idle µs outside ops per step not explained by :data:`SPECIFIC`, over the step
wall time. Lever ``no_python_work_in_step``."""

from __future__ import annotations

import re

from .base import Constant, Finding, LeverSpec, ev, file_name
from ..step_budget import FIGURE, StepCause, budget, mean_wall_us, missing, share, top_site, where_text
from ..figures import Inputs

GC_COLLECT = re.compile(r"^<built-in function collect>$|^gc\.collect$")
"""``gc.collect()`` as a ``python_function`` event (CPython builtins are named ``<built-in function name>``)."""
SAVE = re.compile(r"^torch/serialization\.py\(\d+\): save$|^torch/distributed/checkpoint/\S+\(\d+\): (save|"
                  r"save_state_dict|async_save)$|^safetensors/torch\.py\(\d+\): save_file$")
"""Checkpoint writers as ``python_function`` events (``torch.save``, ``torch.distributed.checkpoint``, safetensors)."""
SPECIFIC = (GC_COLLECT, SAVE)
SHARE_MIN = Constant(0.25, "measurement, bundled H200 runs: python-outside-ops (93206) 0.85 of the step GPU-idle "
                           "outside every op; controls gemm-base 0.07, gemm-base-stacks 0.10, aux-head-batched 0.12, "
                           "preprocess-on-gpu 0.05: 0.25 is 2x the largest control and 3.4x below the case; seed 001 "
                           "T19 (GPU idle with the host busy = host-bound)")


def explained_us(dur_us: dict[str, float], n_steps: int) -> float:
    """µs per step of the Python functions of :data:`SPECIFIC` (summed ``dur`` over the trace / steps)."""
    if n_steps <= 0:
        return 0.0
    return sum(v for k, v in (dur_us or {}).items() if any(p.search(k) for p in SPECIFIC)) / n_steps


class PythonOutsideOps(StepCause):
    """GPU-idle host time outside every recorded op that no more specific cause explains."""

    seed = "seed 001 T19; issue 34 (outside every recorded op); measurement on bundled runs"
    causes = {"python-outside-ops": "pure-Python work in the step (metrics bookkeeping) outside every recorded op, "
                                    "the GPU idle meanwhile"}
    where, category = "idle", "outside_ops"
    figures = (FIGURE,)
    constants = {"SHARE_MIN": SHARE_MIN}
    levers = (LeverSpec("no_python_work_in_step", "move the Python work out of the step (do it every N steps, "
                        "vectorize it on tensors, or hand it to another thread/process) so the host keeps the "
                        "GPU's queue full"),)
    event_name_patterns = SPECIFIC

    def detect(self, x: Inputs) -> list[Finding]:
        b = budget(x)
        if b is None:
            return []
        wall = mean_wall_us(b)
        sh = share(b, "idle", "outside_ops")
        other = explained_us((x.rank or {}).get("name_dur_us") or {}, len(b["steps"]))
        own = max(0.0, sh - other / wall) if wall > 0 else 0.0
        if own < SHARE_MIN.value:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        site, site_us = top_site(b, "outside_ops")
        extra = [ev("trace.step_accounting", f"{file_name(path)}: outside-ops call site",
                    {"site": site or None, "site_us_per_step": round(site_us, 3),
                     "explained_us_per_step": round(other, 3),
                     "python_stacks": bool(b.get("has_python_stacks"))}, path=path, rank=rank)]
        where = where_text(b, site)
        stmt = (f"the GPU idles {sh:.0%} of each profiled step ({sh * wall / 1e3:.1f} ms of {wall / 1e3:.1f} ms) while "
                f"the host runs code outside every recorded op{where}")
        c = self.share_claim(x, b, "triage.steps.python_outside_ops", stmt, extra)
        return [Finding(("python-outside-ops",), c, (self.lever("no_python_work_in_step"),), share=own)]

    def not_checked(self, x: Inputs) -> list[str]:
        """One line for every host-side cause of the step accounting when the pass made none."""
        why = missing(x)
        if why is None:
            return []
        return [f"not checked: host-side causes (d2h-param-copy, allocator-churn, gc-pause, checkpoint-io-per-step, "
                f"python-outside-ops): need the step accounting ({why})"]


CAUSE = PythonOutsideOps()
