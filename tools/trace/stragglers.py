"""Stragglers across ranks: TraceLens's straggler summary and HolisticTraceAnalysis's potential
stragglers over matched collectives (the analyst's path), and an independent re-derivation of the
straggler from the raw traces (the verifier's path).

Definitions and sources: see :mod:`.collectives`. The verifier's path, :func:`rederive_straggler`,
shares no code with the analyst's: it re-reads each rank's trace with the full-load reader
(:mod:`.kineto`), takes each rank's communication kernels in start order per stream, pairs the k-th
kernel of each stream across ranks, and counts which rank starts last at each collective (its
arrival is latest, so the others wait for it).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
from pydantic import BaseModel, Field

#: HTA's straggler metric looks at kernels whose name starts with ``ncclKernel`` (hta/analyzers/
#: straggler.py); newer NCCL (``ncclDevKernel_``) and RCCL names are accepted here as well.
_HTA_COMM_NAME_RE = re.compile(r"^(nccl(Dev)?Kernel|rccl)")



class StragglerRow(BaseModel):
    """TraceLens straggler_summary row for one rank (µs)."""

    rank: int
    total_wait_us: float
    mean_wait_us: float
    times_arrived_last: int
    times_arrived_first: int
    pct_arrived_last: float
    num_collectives: int
    total_comm_dur_us: float


class StragglerClaim(BaseModel):
    """Data for a claim that one rank is slower than the rest."""

    rank: int
    statement: str
    pct_arrived_last: float
    times_arrived_last: int
    num_collectives: int
    wait_imposed_us: float = Field(description="mean over collectives of the other ranks' mean wait for it")
    rule: str


class StragglerReport(BaseModel):
    """Straggler findings: TraceLens-style per-rank rows (arrival order and wait at each matched
    collective), the rank that arrives last most often, HTA's potential stragglers, and the claim."""

    rows: list[StragglerRow]
    straggler_rank: int | None = Field(description="rank that arrives last most often")
    hta_potential_stragglers: list[int] = Field(default_factory=list)
    hta_metric_kernel: str | None = None
    claim: StragglerClaim | None = None


def straggler_summary(coll: pd.DataFrame, long: pd.DataFrame) -> list[StragglerRow]:
    """TraceLens ``straggler_summary`` over the implicit-sync collectives matched on >1 rank."""
    import pandas as pd  # lazy: only multi-rank collectives need it (~40 MB)
    sync = coll[coll["implicit_sync"] & (coll["n_ranks"] > 1)]
    if sync.empty:
        return []
    ranks = sorted(long["rank"].unique().tolist())
    wait = pd.DataFrame(list(sync["wait"]), index=sync.index)[ranks]
    n = len(sync)
    last = wait.idxmin(axis=1)
    dur = long.groupby("rank")["dur"].sum()
    rows = []
    for r in ranks:
        rows.append(StragglerRow(
            rank=int(r), total_wait_us=float(wait[r].sum()), mean_wait_us=float(wait[r].mean()),
            times_arrived_last=int((last == r).sum()),
            times_arrived_first=int((sync["earliest_arrival_rank"] == r).sum()),
            pct_arrived_last=100.0 * float((last == r).sum()) / n, num_collectives=n,
            total_comm_dur_us=float(dur.get(r, 0.0))))
    rows.sort(key=lambda x: x.total_wait_us)
    return rows


def hta_potential_stragglers(results: list[dict[str, Any]], long: pd.DataFrame, num_candidates: int = 2,
                             min_normalized_duration: float = 0.01) -> tuple[list[int], str | None]:
    """HTA's ``get_potential_stragglers`` (hta/analyzers/straggler.py), re-derived.

    Over the profiled steps but the last: keep communication kernels on a stream > 0 lasting at
    least ``min_normalized_duration`` x mean iteration time; per (rank, stream, iteration, name)
    take the last one; pick the (stream, name) whose duration varies most across ranks (mean over
    iterations of the std); per iteration the ``num_candidates`` ranks with the latest normalized
    start are stragglers; ranks sorted by how often they were. Returns ``(ranks, kernel name)``."""
    steps: dict[int, list[tuple[float, float, float | None]]] = {}
    for r in results:
        st = r.get("steps") or []
        for s in st[:-1]:  # HTA drops the last profiler step
            steps.setdefault(s["step"], []).append((s["ts"], s["dur"], s["gpu_max_end"]))
    if not steps or long.empty:
        return [], None
    iterations = sorted(steps)
    t_min = min(t for v in steps.values() for t, _, _ in v)
    t_max = max(max(t + d, e if e is not None else t + d) for v in steps.values() for t, d, e in v)
    mean_iter = (t_max - t_min) / len(iterations)
    k = long[(long["stream"] > 0) & long["iteration"].isin(iterations) & (long["iteration"] > 0)
             & long["in_hta_window"] & (long["dur"] >= mean_iter * min_normalized_duration)
             & long["name"].str.match(_HTA_COMM_NAME_RE)]
    if k.empty:
        return [], None
    k = k.sort_values("ts", kind="stable").groupby(["rank", "stream", "iteration", "name"], as_index=False).last()
    k["start_n"] = (k["ts"] - t_min) / mean_iter
    k["dur_n"] = k["dur"] / mean_iter
    spread = k.groupby(["stream", "iteration", "name"])["dur_n"].std().groupby(["stream", "name"]).mean()
    if spread.dropna().empty:
        return [], None
    stream, name = spread.idxmax()
    cand = k[(k["stream"] == stream) & (k["name"] == name)]
    kk = max(1, num_candidates)
    counts: dict[int, int] = {}
    for _, grp in cand.groupby("iteration"):
        vals = sorted(grp["start_n"].tolist(), reverse=True)
        thr = vals[min(kk, len(vals)) - 1]
        for rk, v in zip(grp["rank"], grp["start_n"]):
            counts[int(rk)] = counts.get(int(rk), 0) + (1 if v >= thr else 0)
    ranked = sorted(counts, key=lambda r: -counts[r])
    return ranked[:kk], name


def straggler_claim(rows: list[StragglerRow], world: int,
                    last_resolved: dict[int, int] | None = None) -> StragglerClaim | None:
    """A claim when one rank arrives last at >= max(50 %, 1.5 x 100/n %) of the collectives.

    ``last_resolved``: ``{rank: times arrived last}`` counted at the collectives whose arrival order
    the clocks resolve (:mod:`.collectives`, "Clocks"); by default the rows' own counts."""
    if len(rows) < 2:
        return None
    last = last_resolved if last_resolved is not None else {x.rank: x.times_arrived_last for x in rows}
    top = max(rows, key=lambda x: (last.get(x.rank, 0), -x.total_wait_us))
    need = max(50.0, 150.0 / world)
    n_last = last.get(top.rank, 0)
    pct = 100.0 * n_last / top.num_collectives if top.num_collectives else 0.0
    if pct < need:
        return None
    others = [x.mean_wait_us for x in rows if x.rank != top.rank]
    imposed = float(np.mean(others)) - top.mean_wait_us
    return StragglerClaim(
        rank=top.rank,
        statement=(f"rank {top.rank} is a straggler: it arrives last at {n_last} of "
                   f"{top.num_collectives} collectives ({pct:.0f}%); the other ranks wait "
                   f"{imposed:.1f} us longer per collective on average"),
        pct_arrived_last=pct, times_arrived_last=n_last,
        num_collectives=top.num_collectives, wait_imposed_us=imposed,
        rule=f"pct_arrived_last >= max(50, 150/n_ranks) = {need:.1f}% (n_ranks={world})")
