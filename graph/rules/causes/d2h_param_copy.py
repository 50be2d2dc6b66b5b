"""Device-to-host copies of the model's parameters each step (``.cpu()`` / ``.to("cpu")`` /
``aten::copy_`` per parameter into pageable memory): the host blocks in the copy while the GPU
copies instead of computing.

Reads the step accounting (``graph/rules/step_budget.py``): device-to-host bytes per steady step (median),
compared with the model's parameter bytes when the accounting knows them (manifest or memory
events: ``d2h_over_param``), else with :data:`BYTES_MIN`; and the host's share of the step blocked
on the device (``sync``). Claim: ``steps.host.sync.share``, re-derived by the verifier's host
sampler. Finding ``share``: the same (host µs blocked in synchronous calls per step / step wall
time; an upper bound of what the copies cost: the step's scalar reads are in it too).
Lever ``no_per_step_param_copy``."""

from __future__ import annotations

from .base import Constant, Finding, LeverSpec, ev, file_name
from ..step_budget import figure, StepCause, budget, mean_wall_us, median_count, share, top_site, where_text
from ..figures import Inputs

BYTES_MIN = Constant(float(1 << 20), "measurement, bundled H200 runs: d2h-param-copy (93201/93202) 83.9 MB "
                                     "device-to-host per step; the controls gemm-base/-stacks, aux-head-batched, "
                                     "preprocess-on-gpu 28 B (4 scalar .item() reads): 1 MiB is 80x below the one "
                                     "and 37000x above the other")
OVER_PARAM_MIN = Constant(0.5, "a per-step copy of at least half the parameter bytes is a copy of the model "
                               "(issue 34 point 4: device-to-host bytes per step against the parameter bytes)")
SYNC_SHARE_MIN = Constant(0.10, "measurement, bundled H200 runs: host blocked on the device 0.73 (93201) and 0.78 "
                                "(93202) of the step; controls 0.005-0.05 (gemm-base 0.05, 93211 0.005); seed 001 "
                                "T23: an eager .cpu() in the step serializes the stream")


class D2hParamCopy(StepCause):
    """Parameter-sized device-to-host copies each step with the host blocked on them."""

    seed = "seed 001 T23 (eager .cpu() in the step); issue 34 point 4; measurement on bundled runs"
    causes = {"d2h-param-copy": "every parameter copied device-to-host each step (~parameter bytes of pageable "
                                "copies a step)"}
    where, category = "host", "sync"
    figures = (figure("host", "sync"),)
    constants = {"BYTES_MIN": BYTES_MIN, "OVER_PARAM_MIN": OVER_PARAM_MIN, "SYNC_SHARE_MIN": SYNC_SHARE_MIN}
    levers = (LeverSpec("no_per_step_param_copy", "do not copy parameters/state to the host every step (.cpu(), "
                        ".to('cpu'), .numpy()): copy every N steps, asynchronously into pinned memory "
                        "(non_blocking=True), or keep the statistic on the GPU"),)

    def detect(self, x: Inputs) -> list[Finding]:
        b = budget(x)
        if b is None:
            return []
        nbytes, n = median_count(b, "d2h_bytes"), median_count(b, "d2h_copies")
        ratio = b.get("d2h_over_param")
        big = ratio >= OVER_PARAM_MIN.value if ratio is not None else nbytes >= BYTES_MIN.value
        sh = share(b, "host", "sync")
        if not big or sh < SYNC_SHARE_MIN.value:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        site, _us = top_site(b, "sync")
        returned = {"d2h_copies": n, "d2h_bytes": nbytes, "d2h_over_param": ratio,
                    "param_bytes": b.get("param_bytes"), "site": site or None}
        extra = [ev("trace.step_accounting", f"{file_name(path)}: device-to-host copies per steady step", returned,
                    path=path, rank=rank)]
        of_params = f" ({ratio:.2f}x the parameter bytes)" if ratio is not None else ""
        where = where_text(b, site)
        wall = mean_wall_us(b)
        stmt = (f"each step copies {nbytes / 1e6:.1f} MB device-to-host in {n:.0f} copies{of_params}; the host is "
                f"blocked on the device {sh * wall / 1e3:.1f} ms of the {wall / 1e3:.1f} ms step ({sh:.0%}){where}: "
                "per-step parameter copies to the host")
        c = self.share_claim(x, b, "triage.steps.d2h_param_copy", stmt, extra)
        return [Finding(("d2h-param-copy",), c, (self.lever("no_per_step_param_copy"),), share=sh)]


CAUSE = D2hParamCopy()
