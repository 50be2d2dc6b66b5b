"""Kernel launch overhead (seed 001 T15): the step is many tiny kernels, each shorter than the host
call that launches it, so the GPU finishes every kernel before the next one is launched and idles
between them; CUDA graphs (``torch.compile(mode="reduce-overhead")``) replay the step's kernels with
one launch.

A class-level cause (``explains = "dispatch-bound"``): named only for a dispatch-bound job. Fires
when the trace's mean kernel duration is below the mean CPU time of its kernel-launch calls (both
measured in this trace by the engine, ``rank["launch"]``: the launch cost is the GPU's and the
host's own, never a constant of another GPU) and the GPU idles at least :data:`IDLE_MIN` of the
profiled steps (the step accounting). It does not fire when the step's host syncs drain the queue
(``sync_ops`` per step at least :data:`~.host_syncs.MIN_SYNCS_PER_STEP`: after a drained queue
every launch is exposed, the syncs are the more specific cause, seed 001 T23).

Claim: ``steps.idle.launch.share`` (the GPU-idle time the host spent in launch calls over the
step), re-derived by the verifier's host sampler; its evidence carries the mean kernel and launch
times. Finding ``share``: that same launch share, a lower bound of what CUDA graphs remove (the
ops' CPU side between launches goes too), so a more specific cause whose own share is larger is
named first. Lever ``cuda_graphs``."""

from __future__ import annotations

from .base import Constant, Finding, LeverSpec, ev, file_name
from .host_syncs import MIN_SYNCS_PER_STEP
from ..step_budget import StepCause, budget, figure, mean_wall_us, median_count, share
from ..figures import Inputs

IDLE_MIN = Constant(0.5, "seed 001 T19 / the class rules: a step whose GPU idles at least half of it is not GPU-"
                         "bound; bundled H200 runs with kernels shorter than their launches: launch-bound 0.97, "
                         "per-sample-loop 0.95, per-parameter-optimizer 0.94, experts-foreach 0.99 idle")


def launch_figures(x: Inputs) -> tuple[float, float] | None:
    """``(mean kernel µs, mean launch-call CPU µs)`` of the rank trace (the engine's ``launch``
    table), or None when either is missing or zero."""
    la = (x.rank or {}).get("launch") or {}
    mk, ml = la.get("mean_kernel_us"), la.get("mean_launch_cpu_us")
    if not isinstance(mk, (int, float)) or not isinstance(ml, (int, float)) or mk <= 0 or ml <= 0:
        return None
    return float(mk), float(ml)


class KernelLaunchOverhead(StepCause):
    """Kernels shorter than their launches with the GPU idle most of the step (seed 001 T15)."""

    seed = "seed 001 T15, T19; issue 24"
    causes = {"kernel-launch-overhead": "many tiny kernels, each shorter than its launch call: the GPU waits on the "
                                        "host's launches"}
    explains = "dispatch-bound"
    where, category = "idle", "launch"
    reads = ("step_accounting", "launch")
    figures = (figure("idle", "launch"),)
    constants = {"IDLE_MIN": IDLE_MIN}
    levers = (LeverSpec("cuda_graphs", "capture the step in a CUDA graph: torch.compile(model, "
                        "mode='reduce-overhead') (or torch.cuda.CUDAGraph / torch.cuda.make_graphed_callables): one "
                        "launch replays the step's many small kernels"),)

    def detect(self, x: Inputs) -> list[Finding]:
        if (x.rank or {}).get("insufficient_gpu_activity"):
            return []  # too little GPU work for any class (tools/trace/hygiene.py): no launch figure to read
        b = budget(x)
        lf = launch_figures(x)
        if b is None or lf is None:
            return []
        mk, ml = lf
        wall = mean_wall_us(b)
        idle = float((b.get("mean_gpu") or {}).get("idle_us") or 0.0) / wall if wall > 0 else 0.0
        if mk >= ml or idle < IDLE_MIN.value or median_count(b, "sync_ops") >= MIN_SYNCS_PER_STEP:
            return []
        sh = share(b, "idle", "launch")
        launches = median_count(b, "launches")
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        extra = [ev("trace.launch", f"{file_name(path)}: mean kernel and launch-call durations",
                    {"mean_kernel_us": round(mk, 3), "mean_launch_cpu_us": round(ml, 3),
                     "launches_per_step": launches, "gpu_idle_share": round(idle, 4)}, path=path, rank=rank)]
        total = share(b, "host", "launch")
        # one figure, one rounding (issue 27 report 5 point 3): the shares as the report's tables print
        # them (one decimal), the count named for what it counts (launch calls: kernels, async copies
        # and fills, tools/trace/host_names.py:LAUNCH_APIS; the kernels alone are `kernels_per_step`)
        stmt = (f"{launches:.0f} launch calls a step (kernels, async copies and fills), the mean kernel ({mk:.1f} µs) "
                f"shorter than its launch call ({ml:.1f} µs): the GPU idles {idle:.1%} of the {wall / 1e3:.2f} ms "
                f"profiled step waiting on launches, {sh:.1%} of the profiled step inside the launch calls while "
                f"the GPU idles ({total:.1%} in launch calls in all) (seed 001 T15)")
        c = self.share_claim(x, b, "triage.steps.kernel_launch", stmt, extra)
        return [Finding(("kernel-launch-overhead",), c, (self.lever("cuda_graphs"),), share=sh)]


CAUSE = KernelLaunchOverhead()
