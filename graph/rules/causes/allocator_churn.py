"""Allocator churn: the host spends the step in the device allocator (``cudaMalloc`` / ``cudaFree``,
``hipMalloc`` / ``hipFree``), typically ``torch.cuda.empty_cache()`` inside the step: the caching
allocator hands its segments back and every next allocation is a real driver call.

Reads the step accounting (``graph/rules/step_budget.py``): allocator calls per steady-state step (the
median over the profiled steps) and the host's share of the step in the allocator. Claim:
``steps.host.allocator.share``, re-derived by the verifier's host sampler. Finding ``share``: the
same (host µs in allocator calls per step / step wall time: what the allocator calls cost the
host; an upper bound of the step time they cost when the GPU has queued work). Lever ``no_empty_cache``."""

from __future__ import annotations

from .base import Constant, Finding, LeverSpec, ev, file_name
from ..step_budget import figure, StepCause, budget, median_count, share
from ..figures import Inputs

CALLS_MIN = Constant(4.0, "measurement, bundled H200 runs: allocator-churn (93203) 28 cudaMalloc/cudaFree per "
                          "steady step; gemm-base (93210), gemm-base-stacks (93211), aux-head-batched (93205), "
                          "preprocess-on-gpu (93212) 0: a caching allocator in steady state calls the driver ~never "
                          "(PyTorch CUDA caching allocator docs, 'Memory management')")
SHARE_MIN = Constant(0.05, "measurement, bundled H200 runs: allocator-churn host allocator share 0.29 of the step, "
                           "the four controls 0.00; 5% is below the case by 5x and far above the controls")


class AllocatorChurn(StepCause):
    """Host time in the device allocator each steady step (empty_cache in the step)."""

    seed = "seed 001 T19 (torch.profiler: what the host does while the GPU idles); measurement on bundled runs"
    causes = {"allocator-churn": "torch.cuda.empty_cache() (or an allocator-disabling setting) in the step: "
                                 "cudaMalloc/cudaFree every step"}
    where, category = "host", "allocator"
    figures = (figure("host", "allocator"),)
    constants = {"CALLS_MIN": CALLS_MIN, "SHARE_MIN": SHARE_MIN}
    levers = (LeverSpec("no_empty_cache", "remove torch.cuda.empty_cache() (and gc-driven frees) from the training "
                        "step; keep the caching allocator warm (call it, if ever, outside the timed loop)"),)

    def detect(self, x: Inputs) -> list[Finding]:
        b = budget(x)
        if b is None:
            return []
        calls, sh = median_count(b, "allocator_calls"), share(b, "host", "allocator")
        if calls < CALLS_MIN.value or sh < SHARE_MIN.value:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        extra = [ev("trace.step_accounting", f"{file_name(path)}: allocator calls per steady step",
                    {"allocator_calls": calls}, path=path, rank=rank)]
        stmt = (f"the host spends {sh:.0%} of each profiled step in the device allocator ({calls:.0f} "
                "cudaMalloc/cudaFree calls per steady step): the caching allocator is being emptied inside the "
                "step (torch.cuda.empty_cache)")
        c = self.share_claim(x, b, "triage.steps.allocator_churn", stmt, extra)
        return [Finding(("allocator-churn",), c, (self.lever("no_empty_cache"),), share=sh)]


CAUSE = AllocatorChurn()
