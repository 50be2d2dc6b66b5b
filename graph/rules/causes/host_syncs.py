"""Host syncs in the step (seed 001 T23; issue 24): ``.item()`` / ``.cpu()`` / ``print`` of a device
value blocks the host until the stream drains (``cudaStreamSynchronize`` under
``aten::_local_scalar_dense``; ``hipStreamSynchronize`` on ROCm), so the GPU idles while the host
catches up. A step or two of those (the loss read once a step) is normal; tens a step is the cause.

Detects from the trace's event-name counts and the rank's step count; the op that syncs is said
through the ``aten::item`` / ``aten::_local_scalar_dense`` counts. Re-derived from the raw-text count
of the sync calls in the same trace. Lever ``remove_host_syncs``. Finding ``share``: the GPU-idle µs
per profiled step the host spent blocked in synchronizing calls (the step accounting's ``sync``
state: ``cudaStreamSynchronize``, blocking copies, the wait inside ``aten::item``) over the step wall
time; None without the accounting. Anomaly mode (:mod:`.debug_apis`) also syncs after every
backward node; its own share (the time of its checks, the syncs included) is the larger there."""

from __future__ import annotations

from .base import Cause, Constant, Finding, LeverSpec, ev, file_name, raw_count
from ..step_budget import budget, share
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

SYNC_CALLS = ("cudaStreamSynchronize", "hipStreamSynchronize")
SCALAR_OPS = ("aten::item", "aten::_local_scalar_dense")
MIN_SYNCS_PER_STEP = 32
CLAIM_ID = "triage.t23.host_syncs"


class HostSyncs(Cause):
    """Stream drains from host reads of device values inside the step (seed 001 T23)."""

    seed = "seed 001 T23"
    causes = {"host-sync": ".item()/.cpu() on device values in the step: each drains the stream"}
    analyst = "trace_analyst"
    reads = ("event_names", "rank")
    figures = (Figure("host_syncs", "calls", "stream synchronizations in one rank trace", "cause", Tolerance()),)
    constants = {"MIN_SYNCS_PER_STEP": Constant(
        MIN_SYNCS_PER_STEP,
        "measurement on the bundled runs: cudaStreamSynchronize a step is <= 16 on every control and on the runs "
        "of other causes (checkpoint-per-step, d2h-param-copy: 16; most: 2-4), 92 on host-sync, 378 on "
        "anomaly-mode, 2053 on grad-norm-sync; 32 is twice the largest ordinary count")}
    levers = (LeverSpec("remove_host_syncs", "do not read device values on the host every step (.item(), .cpu(), "
                        "print of a tensor, Python if on a tensor): accumulate on the device and read every N steps; "
                        "torch.cuda.set_sync_debug_mode('warn') names each sync"),)
    event_names = SYNC_CALLS + SCALAR_OPS
    raw_patterns = {"stream_syncs": "(?:cuda|hip)StreamSynchronize\""}

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank:
            return []
        steps = int(x.rank.get("n_steps") or 0)
        n = sum(int(x.event_names.get(k, 0)) for k in SYNC_CALLS)
        if steps <= 0 or n < MIN_SYNCS_PER_STEP * steps:
            return []
        item = int(x.event_names.get("aten::_local_scalar_dense", 0))
        path = str(x.rank["path"])
        c = self.claim(CLAIM_ID, f"{n} stream synchronizations in {steps} profiled steps ({n / steps:.0f} a step), "
                       f"{item} host reads of a device scalar (aten::item -> aten::_local_scalar_dense): each drains "
                       "the stream and the GPU idles until the host launches again (seed 001 T23)", "host_syncs", n,
                       "calls", [ev("trace.event_names", f"{file_name(path)}: count {'/'.join(SYNC_CALLS)}", n,
                                    path=path, rank=x.rank.get("rank"), n_steps=steps)], 0.8)
        b = budget(x)
        return [Finding(("host-sync",), c, (self.lever("remove_host_syncs"),),
                        share=share(b, "idle", "sync") if b is not None else None)]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        return raw_count(r, "stream_syncs", "raw-text count of cuda/hipStreamSynchronize in the trace file")


CAUSE = HostSyncs()
