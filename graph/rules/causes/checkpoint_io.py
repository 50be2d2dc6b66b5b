"""A checkpoint written every step (``torch.save`` / ``torch.distributed.checkpoint`` / safetensors
in the step): the state dict is copied device-to-host and serialized while the GPU idles.

Reads the ``python_function`` events of the checkpoint writers (:data:`~.python_outside_ops.SAVE`;
their summed ``dur`` from the one pass; Python stacks needed) per profiled step against the step
accounting's wall time, the step's device-to-host bytes and the call site. Claim:
``steps.host.outside_ops.share`` (serialization and the file write run outside every recorded op),
re-derived by the verifier's host sampler. Finding ``share``: µs inside the writer per step / step
wall time. Lever ``no_checkpoint_per_step``."""

from __future__ import annotations

from .base import Constant, Finding, LeverSpec, ev, file_name
from .python_outside_ops import SAVE
from ..step_budget import figure, StepCause, budget, mean_wall_us, median_count, python_fn_share, top_site
from ..figures import Inputs

SHARE_MIN = Constant(0.05, "measurement, bundled H200 runs: checkpoint-per-step (93208) 0.95 of the step inside "
                           "torch.save; no control saves in the profiled steps (0.0); seed 000 lesson 30 "
                           "(throughput runs must not persist checkpoints)")


class CheckpointIo(StepCause):
    """A checkpoint writer inside the step, seen in the Python stacks."""

    seed = "seed 000 lesson 30; measurement on bundled runs"
    causes = {"checkpoint-io-per-step": "torch.save of the model/optimizer state every step"}
    where, category = "host", "outside_ops"
    figures = (figure("host", "outside_ops"),)
    constants = {"SHARE_MIN": SHARE_MIN}
    levers = (LeverSpec("no_checkpoint_per_step", "save checkpoints every N steps / per epoch, not every step; "
                        "use an asynchronous writer (torch.distributed.checkpoint.async_save) when it must be often"),)
    event_name_patterns = (SAVE,)

    def detect(self, x: Inputs) -> list[Finding]:
        b = budget(x)
        if b is None or not b.get("has_python_stacks"):
            return []
        durs, per_step, sh = python_fn_share(x, b, SAVE)
        wall = mean_wall_us(b)
        if sh < SHARE_MIN.value:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        site, _us = top_site(b, "outside_ops")
        extra = [ev("trace.python_functions", f"{file_name(path)}: checkpoint writer per profiled step",
                    {"writer": sorted(durs), "us_per_step": round(per_step, 3),
                     "d2h_bytes": median_count(b, "d2h_bytes"), "site": site or None}, path=path, rank=rank)]
        where = f", at {site}" if site else ""
        stmt = (f"a checkpoint is written every step: {'/'.join(sorted(durs))} takes {per_step / 1e3:.1f} ms of the "
                f"{wall / 1e3:.1f} ms step ({sh:.0%}), {median_count(b, 'd2h_bytes') / 1e6:.1f} MB copied "
                f"device-to-host{where}")
        c = self.share_claim(x, b, "triage.steps.checkpoint_io", stmt, extra)
        return [Finding(("checkpoint-io-per-step",), c, (self.lever("no_checkpoint_per_step"),), share=sh)]


CAUSE = CheckpointIo()
