"""Exposed communication (seed 001 T1/T23: "time in ``nccl:*`` not overlapped with compute ⇒
comms-bound"): the collectives themselves are not hidden behind compute, on every rank -- not one
rank waiting for a late one.

What tells the two apart: a rank waiting for a straggler spends its exposed communication waiting,
while the straggler itself, which waits for no rank, does not. So the figure is the exposed
communication of the rank with the LEAST of it (the cross-rank report's per-rank GPU timeline,
TraceLens ``gpu_timeline``): every rank spends at least that share of its window in collectives
not overlapped with its compute. When it reaches the communication-bound threshold
(:data:`~..diagnosis.EXPOSED_COMM_PCT`) the communication is exposed everywhere and balancing the
ranks would leave it (``graph/rules/verdict.py`` then does not put the verdict on a straggler).
On the bundled 2x H200 runs: 93001 (a wide fp32 model on 4 rows per rank) 21.2% on rank 0 (50.8%
on rank 1, which waits 16.6 ms for it), while the straggler run 93004 has 0.03% on its straggler and
the overlapped run 93003 0.05%.

Its share is that rank's exposed communication over its window. A class-level cause (it is what
the communication-bound class measures): named only for a communication-bound job, and not where
the more specific :mod:`.slow_link` explains the time. Re-derived from each rank's GPU timeline by
the full-load reader (its own interval arithmetic). Lever ``batch_64_per_rank`` (more compute per
all-reduced byte)."""

from __future__ import annotations

from typing import Any

from . import slow_link
from .base import Cause, Constant, Finding, LeverSpec, ev
from .. import diagnosis as dg
from ..figures import Figure, Inputs, Reader, Rederived, returned_dicts
from ....state import Claim, Tolerance
from ....state.claimkit import PCT_TOL

CLAIM_ID = "triage.t23.exposed_comm"


def from_evidence(returned: list[Any]) -> float | None:
    """The least exposed rank's exposed communication (%) from what the evidence returned."""
    d = returned_dicts(returned)
    rows = [v for v in (d.get("exposed_comm_pct") or {}).values() if isinstance(v, (int, float))]
    return round(min(rows), 2) if len(rows) >= 2 else None


class ExposedComm(Cause):
    """Collectives not overlapped with compute on every rank (seed 001 T23)."""

    seed = "seed 001 T1/T23"
    causes = {"exposed-communication": "the collectives are not hidden behind compute on any rank"}
    reads = ("collectives",)
    explains = "communication-bound"
    figures = (Figure("exposed_comm.least_exposed_rank_pct", "%",
                      "exposed communication of the rank with the least of it, % of its window", "cause", PCT_TOL,
                      from_evidence=from_evidence),)
    constants = {"EXPOSED_COMM_PCT": Constant(dg.EXPOSED_COMM_PCT, "seed 001 T23 (graph/rules/diagnosis.py)")}
    levers = (LeverSpec("batch_64_per_rank", "more compute per all-reduced byte: a larger per-rank batch (or gradient "
                        "accumulation under DDP no_sync), so the gradient all-reduce hides behind the backward; then "
                        "DDP bucket_cap_mb / gradient_as_bucket_view=True (seed 001 T23)"),)
    verifier_needs = ("ranks",)

    def detect(self, x: Inputs) -> list[Finding]:
        per_rank = (x.collectives or {}).get("per_rank") or []
        low = slow_link.least_exposed(per_rank)
        if low is None or low["exposed_comm_pct"] < dg.EXPOSED_COMM_PCT:
            return []
        if slow_link.CAUSE.detect(x):  # the slow link explains the exposed time: the more specific cause
            return []
        pcts = {str(p["rank"]): round(float(p["exposed_comm_pct"]), 2) for p in per_rank}
        waits = {str(s["rank"]): round(float(s.get("total_wait_us") or 0.0) / 1e3, 3)
                 for s in ((x.collectives or {}).get("stragglers") or {}).get("rows") or []}
        c = self.claim(CLAIM_ID,
                       f"every rank spends at least {low['exposed_comm_pct']:.1f}% of its window in communication not "
                       f"overlapped with compute (rank {low['rank']}, the least; "
                       + ", ".join(f"rank {r} {v:.1f}%" for r, v in pcts.items())
                       + f"): the collectives themselves are exposed, not waiting for a late rank (seed 001 T23)",
                       "exposed_comm.least_exposed_rank_pct", round(float(low["exposed_comm_pct"]), 2), "%",
                       [ev("collectives.build_report", "per_rank exposed_comm_pct and waits (ms)",
                           {"exposed_comm_pct": pcts, "wait_ms": waits}, ranks=list(pcts))], 0.8)
        share = float(low["exposed_comm_us"]) / float(low["total_us"])
        return [Finding(("exposed-communication",), c, (self.lever("batch_64_per_rank"),), share=round(share, 4))]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        pcts = [((t.get("timeline") or {}).get("exposed_comm_time") or {}).get("percent") for t in r.ranks.values()]
        pcts = [float(p) for p in pcts if isinstance(p, (int, float))]
        if len(pcts) < 2:
            return Rederived(None, "no independent path for this triage claim", Tolerance())
        return Rederived(round(min(pcts), 2), "the least exposed communication over every rank's GPU timeline by the "
                         "full-load reader (its own interval arithmetic)", PCT_TOL)


CAUSE = ExposedComm()
