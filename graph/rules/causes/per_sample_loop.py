"""A per-sample Python loop in the step (issue 34 item 4, issue 24): one module's forward called
once per sample on batch-1 shapes, so the step runs the same op sequence k times with tiny kernels
instead of once on the batch.

Reads the step accounting's repetition (``structure.repeated`` of each profiled step: the same
top-level op sequence repeated ``k`` times on one thread on inputs of leading dimension 1, from
``record_shapes``; ``tools/trace/step_structure.py``), and with Python stacks the call site the
repeated ops run under. Claim: ``steps.host.op.share`` (the host time in ops' CPU side over the step),
re-derived by the verifier's host sampler; its evidence carries k, the period, the ops and their
shapes. Finding ``share``: the repeated run's host time (its forward ops, launches included) per
step over the step wall time, a lower bound (the run's backward nodes are not counted). Does not
fire without ``record_shapes`` (the repetition needs the shapes) or when the
job's own batch per rank is 1 (a batch-1 model repeats its layers on batch-1 shapes by design).
Lever ``batch_per_sample_loop``."""

from __future__ import annotations

from typing import Any

from .base import Constant, Finding, LeverSpec, ev, file_name
from ..step_budget import StepCause, budget, figure, mean_wall_us, where_text
from ..figures import Inputs

MIN_REPEATS = Constant(16, "issue 34 (a measured run: one module's forward 16 times a step on batch-1 shapes); "
                           "bundled H200 runs: per-sample-loop k=256; the only other repetition, profiler-stretched's "
                           "12 identical ViT layers, k=12 and 0.2% of the step")
SHARE_MIN = Constant(0.1, "measurement, bundled H200 runs: the repeated run's host time over the step: per-sample-loop "
                          "(93204) 0.36, profiler-stretched 0.002, no other run has a batch-1 repetition; 0.1 is 3.6x "
                          "below the case")


def repetition(b: dict[str, Any]) -> tuple[dict[str, Any] | None, float]:
    """The largest repetition of the profiled steps (most ``k * period``) and the mean µs per step
    of every step's repeated run (0 for a step without one); ``(None, 0.0)`` without any."""
    st = b.get("steps") or []
    reps = [(s.get("structure") or {}).get("repeated") for s in st]
    got = [r for r in reps if r]
    if not got:
        return None, 0.0
    best = max(got, key=lambda r: (int(r["k"]) * int(r["period"]), int(r["k"])))
    return best, sum(float(r["us"]) for r in got) / len(st)


class PerSampleLoop(StepCause):
    """The same op sequence on batch-1 shapes repeated many times a step (a per-sample loop)."""

    seed = "issue 34 item 4; seed 001 T18 (work per launch); measurement on bundled runs"
    causes = {"per-sample-loop": "a module called once per sample in a Python loop (batch-1 shapes, k times a step) "
                                 "instead of once on the batch"}
    where, category = "host", "op"
    figures = (figure("host", "op"),)
    constants = {"MIN_REPEATS": MIN_REPEATS, "SHARE_MIN": SHARE_MIN}
    levers = (LeverSpec("batch_per_sample_loop", "call the module once on the whole batch (stack the samples: "
                        "module(x) on [B, ...], or torch.vmap(module) over the samples) instead of once per sample "
                        "in a Python loop"),)

    def detect(self, x: Inputs) -> list[Finding]:
        b = budget(x)
        if b is None or not b.get("has_shapes") or self._batch_one(x):
            return []
        rep, us = repetition(b)
        wall = mean_wall_us(b)
        sh = us / wall if wall > 0 else 0.0
        if rep is None or int(rep["k"]) < MIN_REPEATS.value or sh < SHARE_MIN.value:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        site = rep.get("site") or ""
        extra = [ev("trace.step_accounting", f"{file_name(path)}: repeated batch-1 op sequence",
                    {"k": int(rep["k"]), "period": int(rep["period"]), "ops": list(rep.get("ops") or []),
                     "shape": rep.get("shape") or "", "us_per_step": round(us, 3), "top_ops": int(rep.get("top_ops") or 0),
                     "site": site or None,
                     "python_stacks": bool(b.get("has_python_stacks"))}, path=path, rank=rank)]
        ops = " -> ".join(rep.get("ops") or [])
        where = where_text(b, site)
        stmt = (f"the same {int(rep['period'])}-op sequence ({ops}) runs {int(rep['k'])} times a step on batch-1 shapes "
                f"({rep.get('shape') or '?'}): {us / 1e3:.1f} ms of the {wall / 1e3:.1f} ms step ({sh:.0%}) in a "
                f"per-sample loop{where}")
        c = self.share_claim(x, b, "triage.steps.per_sample_loop", stmt, extra)
        return [Finding(("per-sample-loop",), c, (self.lever("batch_per_sample_loop"),), share=sh)]

    @staticmethod
    def _batch_one(x: Inputs) -> bool:
        m = x.manifest
        return m is not None and (getattr(m, "batch_size_per_rank", None) == 1 or m.global_batch_size == 1)


CAUSE = PerSampleLoop()
