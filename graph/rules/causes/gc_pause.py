"""A full ``gc.collect()`` every step: the GPU idles while CPython walks every live object.

Reads the ``python_function`` events of ``gc.collect`` (their summed ``dur`` from the one pass,
``rank["name_dur_us"]``; Python stacks needed: ``with_stack=True``) per profiled step against the
step accounting's wall time, and the call site of the step's outside-ops time. Claim:
``steps.idle.outside_ops.share`` (a collection runs outside every recorded op), re-derived by the
verifier's host sampler. Finding ``share``: µs inside ``gc.collect`` per step / step wall time.
Lever ``no_gc_collect_per_step``."""

from __future__ import annotations

from .base import Constant, Finding, LeverSpec, ev, file_name
from .python_outside_ops import GC_COLLECT
from ..step_budget import figure, StepCause, budget, mean_wall_us, python_fn_share, top_site
from ..figures import Inputs

SHARE_MIN = Constant(0.05, "measurement, bundled H200 runs: gc-pause (93207) 0.98 of the step inside gc.collect; "
                           "no control calls gc.collect in the profiled steps (0.0); 5% keeps a wide margin both "
                           "sides; CPython gc docs: a full collection walks every tracked object")


class GcPause(StepCause):
    """gc.collect() inside the step, seen in the Python stacks."""

    seed = "seed 001 T19; measurement on bundled runs"
    causes = {"gc-pause": "a full gc.collect() every step over many live Python objects"}
    where, category = "idle", "outside_ops"
    figures = (figure("idle", "outside_ops"),)
    constants = {"SHARE_MIN": SHARE_MIN}
    levers = (LeverSpec("no_gc_collect_per_step", "do not call gc.collect() in the step: call it every N steps or "
                        "between epochs, or gc.freeze() the long-lived objects after setup"),)
    event_name_patterns = (GC_COLLECT,)

    def detect(self, x: Inputs) -> list[Finding]:
        b = budget(x)
        if b is None or not b.get("has_python_stacks"):
            return []
        _durs, per_step, sh = python_fn_share(x, b, GC_COLLECT)
        wall, n = mean_wall_us(b), len(b["steps"])
        if sh < SHARE_MIN.value:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        site, _us = top_site(b, "outside_ops")
        calls = sum(v for k, v in x.event_names.items() if GC_COLLECT.search(k))
        extra = [ev("trace.python_functions", f"{file_name(path)}: gc.collect per profiled step",
                    {"gc_collect_calls": calls, "gc_collect_us_per_step": round(per_step, 3), "site": site or None},
                    path=path, rank=rank)]
        where = f", called from {site}" if site else ""
        stmt = (f"gc.collect() runs {calls / n:.1f}x per profiled step and takes {per_step / 1e3:.1f} ms of the "
                f"{wall / 1e3:.1f} ms step ({sh:.0%}){where}; the GPU idles meanwhile")
        c = self.share_claim(x, b, "triage.steps.gc_pause", stmt, extra)
        return [Finding(("gc-pause",), c, (self.lever("no_gc_collect_per_step"),), share=sh)]

    def not_checked(self, x: Inputs) -> list[str]:
        b = budget(x)
        if x.rank and b is not None and not b.get("has_python_stacks"):
            return ["not checked: gc pause: needs Python stacks (profile with with_stack=True)"]
        return []


CAUSE = GcPause()
