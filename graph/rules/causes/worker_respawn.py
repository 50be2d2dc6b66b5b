"""DataLoader workers re-spawned every epoch (seed 001 T5: ``persistent_workers=False`` re-forks and
re-initializes the workers at each epoch start): a bursty stall, one per epoch, that per-step
averages and the profiled steps alone blame on the profiler (issue 24 point 2).

Signature, in the log's steady step times (the first epoch is warm-up: ``tools/trainlog/fom.py``):
in at least :data:`EPOCH_FRACTION` of the steady epochs (and at least :data:`MIN_EPOCHS` of them)
the epoch's first step lasts at least :data:`START_RATIO` times the median of the epoch's other
steps. ``share`` = the time those first steps spend above that median, summed over the steady
epochs, over the steady steps' total time (the share of the run's step time the control without
the respawn would not spend; measured on the log, not on the profiled steps, because one epoch
start at most falls in a profiled window).

Detects from the analyst's read of the log (``log.step_times_s``, ``batches_per_epoch``,
``warmup_steps_skipped``); re-derived from the verifier's own re-read of the log (its per-epoch
step lists, :mod:`ai4s_graph.tools.trainlog.reread`). Lever ``persistent_workers``."""

from __future__ import annotations

import statistics
from typing import Any

from .base import Cause, Constant, Finding, LeverSpec, ev
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

CLAIM_ID = "triage.t5.worker_respawn"
START_RATIO = 3.0
"""Measured on the bundled H200 runs: worker-respawn (93124, 2 workers starting in 400 ms) has its
epoch-first steps 20-24x the median of the other steps (449-488 ms vs ~20 ms); its control
persistent-workers (93125) at most 1.7x (34 vs 20 ms). 3x leaves margin both sides."""
EPOCH_FRACTION = 0.5
"""A per-epoch cause shows in most epochs; one slow epoch start (the profiler's trace export lands on
one step of a run: 327-466 ms in every bundled control) must not read as one. Measured: 93124 7 of 7
steady epochs, 93125 0 of 7."""
MIN_EPOCHS = 2
"""Two steady epochs at least: a single epoch start cannot be told from a one-off stall."""


def epochs_of(step_times_s: list[float], batches_per_epoch: int | None, skipped: int | None) -> list[list[float]]:
    """The steady step times (s) cut into epochs of ``batches_per_epoch`` steps; [] when the epoch
    structure is unknown or the warm-up skip (``skipped`` steps) does not end on an epoch boundary.
    A trailing partial epoch is dropped."""
    if not step_times_s or not batches_per_epoch or batches_per_epoch < 2 or skipped is None \
            or skipped % batches_per_epoch:
        return []
    n = batches_per_epoch
    return [step_times_s[i:i + n] for i in range(0, len(step_times_s) - n + 1, n)]


def epoch_start_excess(epochs: list[list[float]]) -> dict[str, Any] | None:
    """``{"epochs", "slow_starts", "excess_s", "total_s", "share", "median_start_s", "median_rest_s"}``
    of steady epochs (lists of step times, s, each of two steps at least): ``slow_starts`` = epochs
    whose first step is at least :data:`START_RATIO` x the median of its other steps; ``excess_s``
    = the sum over all epochs of ``max(0, first - median of the others)``; ``share`` = excess /
    total step time (0..1). None without an epoch of two steps."""
    eps = [e for e in epochs if len(e) >= 2]
    if not eps:
        return None
    slow, excess = 0, 0.0
    for e in eps:
        rest = statistics.median(e[1:])
        slow += e[0] >= START_RATIO * rest
        excess += max(0.0, e[0] - rest)
    total = sum(sum(e) for e in eps)
    return {"epochs": len(eps), "slow_starts": slow, "excess_s": round(excess, 6), "total_s": round(total, 6),
            "share": round(excess / total, 6) if total > 0 else 0.0,
            "median_start_s": statistics.median(e[0] for e in eps),
            "median_rest_s": statistics.median(t for e in eps for t in e[1:])}


def respawns(stats: dict[str, Any] | None) -> bool:
    """Whether the epoch-start statistics (:func:`epoch_start_excess`) show the per-epoch stall."""
    return bool(stats) and stats["epochs"] >= MIN_EPOCHS and stats["slow_starts"] >= EPOCH_FRACTION * stats["epochs"]


def from_log(log: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`epoch_start_excess` of the analyst's log facts (``step_times_s``, ``batches_per_epoch``,
    ``warmup_steps_skipped``), or None when they do not give whole epochs."""
    eps = epochs_of(list(log.get("step_times_s") or []), log.get("batches_per_epoch"), log.get("warmup_steps_skipped"))
    return epoch_start_excess(eps) if eps else None


def has_workers(x: Inputs) -> bool:
    """Whether the job may have DataLoader worker processes (``persistent_workers`` and
    ``prefetch_factor`` need them): ``num_workers`` > 0 in the manifest, or unknown."""
    nw = getattr(x.manifest, "num_workers", None) if x.manifest is not None else None
    return nw is None or int(nw) > 0


class WorkerRespawn(Cause):
    """A stall at every epoch start: DataLoader workers re-forked each epoch (seed 001 T5)."""

    seed = "seed 001 T5"
    causes = {"dataloader-worker-respawn": "persistent_workers=False with a slow worker start: every epoch begins "
                                           "with the workers re-forked and re-initialized"}
    analyst = "trace_analyst"
    reads = ("log", "manifest")
    figures = (Figure("dataloader.epoch_start_excess_share", "fraction", "time the epochs' first steps spend above "
                      "the median of the other steps, share of the steady step time (the log)", "cause",
                      Tolerance(abs=0.02), from_evidence=lambda returned: next(
                          (r["share"] for r in returned if isinstance(r, dict) and "share" in r), None)),)
    constants = {"START_RATIO": Constant(START_RATIO, "measured: bundled runs 93124 (20-24x) vs 93125 (<= 1.7x)"),
                 "EPOCH_FRACTION": Constant(EPOCH_FRACTION, "measured: 93124 7/7 epochs, 93125 0/7"),
                 "MIN_EPOCHS": Constant(MIN_EPOCHS, "two epoch starts at least (one is a one-off stall)")}
    levers = (LeverSpec("persistent_workers", "DataLoader(..., persistent_workers=True): the workers survive the "
                        "epoch instead of being re-forked and re-initialized at each epoch start (seed 001 T5)",
                        when=has_workers),)
    verifier_needs = ("log",)

    def detect(self, x: Inputs) -> list[Finding]:
        st = from_log(x.log or {})
        if not respawns(st):
            return []
        assert st is not None
        path = (x.log or {}).get("path")
        evidence = [ev("trainlog.step_times", "steady epochs: first step vs the median of the others", st,
                       **({"path": path} if path else {}))]
        c = self.claim(CLAIM_ID, f"{st['slow_starts']} of {st['epochs']} steady epochs start with a stall: the first "
                       f"step takes {st['median_start_s'] * 1e3:.0f} ms against {st['median_rest_s'] * 1e3:.0f} ms for "
                       f"the others; those stalls are {st['share'] * 100:.0f}% of the step time: the DataLoader "
                       "workers are re-spawned every epoch (seed 001 T5)",
                       "dataloader.epoch_start_excess_share", st["share"], "fraction", evidence, 0.75)
        return [Finding(("dataloader-worker-respawn",), c, (self.lever("persistent_workers"),), share=st["share"])]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        method = "the verifier's re-read of the log: its epochs' step times, first epoch as warm-up"
        eps = list((r.log or {}).get("epochs") or [])[1:]
        st = epoch_start_excess([list(e) for e in eps])
        return Rederived(st["share"] if st else None, method, Tolerance(abs=0.02))


CAUSE = WorkerRespawn()
