"""Synchronous host-to-device copies from pageable memory (seed 001 T6): the batch is copied with
``.to(device)`` from pageable host memory, so the driver stages it through a pinned buffer and the
copy blocks the step; ``pin_memory=True`` + ``non_blocking=True`` lets it overlap compute.

Signature: ``Memcpy HtoD (Pageable -> Device)`` copies take at least :data:`MIN_SHARE` of the
profiled window. ``share`` = their copy time / the GPU timeline's total time (an upper bound of
the exposed copy time the lever removes).

Detects from the analyst's GPU time by name (the one pass's name counter, copies included);
re-derived from the verifier reader's copies over its own timeline
(:class:`~..kernel_share.KernelFamilyCause`). Lever ``pinned_nonblocking_h2d``."""

from __future__ import annotations

import re

from .base import Constant, LeverSpec
from ..figures import Figure
from ..kernel_share import KernelFamilyCause

PAGEABLE_H2D = re.compile(r"^Memcpy HtoD \(Pageable -> Device\)")
"""The CUDA runtime's name of a host-to-device copy from pageable memory (kineto ``gpu_memcpy``);
ROCm's copies carry no source-memory kind in their name, so this needs the CUDA name."""
MIN_SHARE = 0.10


class PageableH2d(KernelFamilyCause):
    """Blocking pageable host-to-device copies of the batch (seed 001 T6)."""

    seed = "seed 001 T6"
    causes = {"pageable-h2d-copy": "the batch copied host-to-device from pageable memory, blocking the step"}
    reads = ("rank",)
    include, min_share = PAGEABLE_H2D, MIN_SHARE
    claim_id, metric, cause_id, lever_name = ("triage.t6.pageable_h2d", "pageable_h2d.copy_share", "pageable-h2d-copy",
                                              "pinned_nonblocking_h2d")
    method = "pageable host-to-device copy time of the verifier reader's copies over its own GPU timeline"
    figures = (Figure("pageable_h2d.copy_share", "fraction", "pageable HtoD copy time / GPU timeline total time",
                      "cause", KernelFamilyCause.tolerance),)
    constants = {"MIN_SHARE": Constant(MIN_SHARE, "measurement on the bundled H200 runs (bench/accuracy/cases): "
                                       "pageable-h2d 0.52 of the window in pageable HtoD copies; every other run "
                                       "<= 0.015 (ddp-overlapped, ddp-straggler): margin both sides")}
    levers = (LeverSpec("pinned_nonblocking_h2d", "DataLoader(pin_memory=True) and x.to(device, non_blocking=True) "
                        "so the host-to-device copy runs asynchronously and overlaps compute (seed 001 T6)"),)

    def statement(self, s: float, part_us: float, context_us: float) -> str:
        return (f"host-to-device copies from pageable memory take {s:.0%} of the profiled window "
                f"({part_us / 1e3:.1f} ms): a blocking copy of the batch (seed 001 T6)")


CAUSE = PageableH2d()
