"""A DataLoader queue too shallow for bursty fetch times (seed 001 T7: "with workers on, the GPU
still periodically stalls — every Nth step has a long idle gap because all workers were busy
producing the next batch"; ``prefetch_factor`` defaults to 2, i.e. ``2 x num_workers`` batches
ahead): the loader keeps up on average, the bursts do not, so a few steps within the epochs stall
while the others run at the steady rate.

Signature, in the log's steady step times (the same facts :mod:`.worker_respawn` reads): at least
:data:`MIN_STALLS` steps last at least :data:`STALL_RATIO` times the median of the counted steps,
where a counted step is neither an epoch's first step (a worker start: :mod:`.worker_respawn`'s
signature, which outranks this one) nor a step the profiler touches (from :data:`PROFILER_LEAD`
steps before the first profiled ``ProfilerStep#N`` to the step after the last one, whose end the
trace export stretches: 327-466 ms in every bundled run). Needs worker processes
(``num_workers`` > 0, or unknown): with ``num_workers=0`` nothing is prefetched.

``share`` = the time the stalls spend above the median, over the counted steps' total time (the
share of the steady step time the bursts cost; measured on the log, since a profiled window of a
few steps holds one burst at most: a lower bound of what the control saves, as the shallow queue
also slows the steps after a burst).

The profiled step numbers come from the analyst's trace (``per_step``) and, for the verifier,
from its own full-load reader (``step_numbers``); the steps from the analyst's parse of the log
(``tools/trainlog/fom.py``) and the verifier's own re-read (``tools/trainlog/reread.py``). Lever
``prefetch_factor_8``."""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from .base import Cause, Constant, Finding, LeverSpec, ev
from . import worker_respawn
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

CLAIM_ID = "triage.t7.shallow_prefetch"
STALL_RATIO = 2.5
"""Measured on the 55 bundled H200 runs (counted steps as defined above): shallow-prefetch (93126,
every 5th batch 120 ms slow, prefetch_factor 1) has its two largest steps 4.0x and 3.4x the median
(79.8, 68.5 vs 20.0 ms); no other run has a second step above 1.92x (d2h-param-copy; deep-prefetch,
the control, 1.47x). 2.5x leaves ~30% margin both sides."""
MIN_STALLS = 2
"""A recurring stall (seed 001 T7 "periodically"): one slow step is a one-off (three bundled runs,
grad-norm-sync, per-sample-loop and experts-foreach, have one step 24-43x the median, and none a
second above 1.9x)."""
PROFILER_LEAD = 1
"""Steps before the first profiled step the profiler stretches: torch.profiler's ``warmup`` step
(the schedule of every bundled run: the step before ``ProfilerStep#<first>`` is 1.6-3.1x the median
in the controls io-wait-8-workers, dataloader-stall-8-workers, deep-prefetch)."""


def profiler_steps(numbers: Iterable[int]) -> set[int]:
    """The global step indices the profiler touches: from :data:`PROFILER_LEAD` before the first
    profiled step number to one after the last (the export); empty without profiled steps."""
    ns = sorted(int(n) for n in numbers)
    return set(range(ns[0] - PROFILER_LEAD, ns[-1] + 2)) if ns else set()


def stall_stats(rows: list[tuple[int, int, float]], skip: set[int]) -> dict[str, Any] | None:
    """``{"counted", "median_s", "stalls", "stall_steps", "excess_s", "total_s", "share"}`` of the
    steps ``rows`` (``(global index, index in its epoch, seconds)``), counting neither epoch-first
    steps nor the global indices in ``skip``: ``stalls`` = counted steps at least
    :data:`STALL_RATIO` x their median, ``excess_s`` their time above it, ``share`` = excess /
    total counted time (0..1). None with fewer than three counted steps."""
    kept = [(g, t) for g, j, t in rows if j != 0 and g not in skip]
    if len(kept) < 3:
        return None
    med = statistics.median(t for _g, t in kept)
    stalls = [(g, t) for g, t in kept if med > 0 and t >= STALL_RATIO * med]
    excess = sum(t - med for _g, t in stalls)
    total = sum(t for _g, t in kept)
    return {"counted": len(kept), "median_s": round(med, 6), "stalls": len(stalls),
            "stall_steps": [g for g, _t in stalls], "excess_s": round(excess, 6), "total_s": round(total, 6),
            "share": round(excess / total, 6) if total > 0 else 0.0}


def rows_from_log(log: dict[str, Any]) -> list[tuple[int, int, float]]:
    """``(global index, index in epoch, s)`` of the analyst's steady steps (``step_times_s`` after
    ``warmup_steps_skipped``; epochs of ``batches_per_epoch`` steps, one epoch when unknown)."""
    times = list(log.get("step_times_s") or [])
    skip = int(log.get("warmup_steps_skipped") or 0)
    bpe = log.get("batches_per_epoch")
    return [(skip + i, (skip + i) % bpe if bpe else skip + i, float(t)) for i, t in enumerate(times)]


def rows_from_epochs(epochs: list[list[float]]) -> list[tuple[int, int, float]]:
    """``(global index, index in epoch, s)`` of the verifier's re-read epochs (all steps)."""
    rows, g = [], 0
    for e in epochs:
        for j, t in enumerate(e):
            rows.append((g, j, float(t)))
            g += 1
    return rows


class ShallowPrefetch(Cause):
    """Recurring stalls within the epochs while the loader keeps up on average (seed 001 T7)."""

    seed = "seed 001 T7"
    causes = {"dataloader-shallow-prefetch": "bursty per-batch fetch times that the DataLoader's prefetch queue "
                                             "(prefetch_factor x num_workers batches) is too shallow to absorb"}
    analyst = "trace_analyst"
    reads = ("log", "manifest", "rank")
    figures = (Figure("dataloader.burst_stall_share", "fraction", "time the recurring in-epoch stalls spend above "
                      "the median step, share of the counted steady step time (the log)", "cause",
                      Tolerance(abs=0.02), from_evidence=lambda returned: next(
                          (r["share"] for r in returned if isinstance(r, dict) and "share" in r), None)),)
    constants = {"STALL_RATIO": Constant(STALL_RATIO, "measured: 93126 stalls 3.4-4.0x; other bundled runs' second "
                                                      "step <= 1.92x"),
                 "MIN_STALLS": Constant(MIN_STALLS, "seed 001 T7 'periodically'; measured: one-off stalls in 3 runs"),
                 "PROFILER_LEAD": Constant(PROFILER_LEAD, "torch.profiler schedule warmup step; measured on the "
                                                          "bundled controls")}
    levers = (LeverSpec("prefetch_factor_8", "raise DataLoader(prefetch_factor=...) above its default 2 (e.g. 4-8): "
                        "each worker keeps more batches ready, so a slow batch no longer stalls the step "
                        "(seed 001 T7; costs host RAM per resident batch)", when=worker_respawn.has_workers),)
    verifier_needs = ("log",)

    def detect(self, x: Inputs) -> list[Finding]:
        log = x.log or {}
        if not worker_respawn.has_workers(x) or worker_respawn.respawns(worker_respawn.from_log(log)):
            return []
        profiled = [int(s["step"]) for s in ((x.rank or {}).get("per_step") or []) if "step" in s]
        st = stall_stats(rows_from_log(log), profiler_steps(profiled))
        if st is None or st["stalls"] < MIN_STALLS:
            return []
        path = log.get("path")
        # the trace first: the verifier matches a trace claim to its rank by the first evidence's path
        evidence = [ev("trace.profiler_steps", "ProfilerStep#N numbers of the profiled window", profiled,
                       path=str((x.rank or {}).get("path", "")))] if profiled else []
        evidence.append(ev("trainlog.step_times", "steady steps outside the epoch starts and the steps the profiler "
                           "touches", st, **({"path": path} if path else {})))
        c = self.claim(CLAIM_ID, f"{st['stalls']} of {st['counted']} steady steps (steps "
                       f"{', '.join(map(str, st['stall_steps']))}) stall at {STALL_RATIO:g}x or more the median "
                       f"{st['median_s'] * 1e3:.1f} ms while the others keep pace: the DataLoader's prefetch queue does "
                       f"not absorb bursty fetch times; the stalls are {st['share'] * 100:.0f}% of the step time "
                       "(seed 001 T7)", "dataloader.burst_stall_share", st["share"], "fraction", evidence, 0.7)
        return [Finding(("dataloader-shallow-prefetch",), c, (self.lever("prefetch_factor_8"),), share=st["share"])]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        method = ("the verifier's re-read of the log (its epochs' step times) and its own reader's profiled step "
                  "numbers")
        tol = Tolerance(abs=0.02)
        eps = list((r.log or {}).get("epochs") or [])
        if not eps:
            return Rederived(None, method, tol)
        numbers = ((r.rank or {}).get("reader") or {}).get("step_numbers") or []
        st = stall_stats(rows_from_epochs([list(e) for e in eps]), profiler_steps(numbers))
        return Rederived(st["share"] if st else None, method, tol)


CAUSE = ShallowPrefetch()
