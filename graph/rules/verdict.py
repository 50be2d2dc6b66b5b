"""One verdict from all the evidence (issue 13): across ranks, across sources, with a confidence
from the rule margins, the runner-up class and the contradictions found.

- Ranks: the rank on the critical path is classified. When a straggler is confirmed (it arrives
  last at the synchronising collectives), at least :data:`~.diagnosis.WAIT_SHARE_STRAGGLER`
  of the other ranks' exposed communication is waiting for it (arrival skew) and its own class is
  not communication-bound (it waits for no rank: exposed communication of its own is the
  collectives' own), that exposed communication is attributed to waiting and the straggler's own
  class is the job's class.
  Otherwise the class most ranks agree on (ties: the lowest rank) stands; balanced ranks with
  exposed communication stay communication-bound.
- Sources: direct measurements decide (GPU busy/idle from the trace, kernel statistics, arrival
  times); indirect tests (the precision pair of ``--compare``, telemetry utilization) support or
  contradict. A contradiction is reported with both numbers, the winner and why, and what to run
  to settle it. An indirect test sets the class only when no trace verdict exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import diagnosis as dg
from . import registry
from ...state import Bottleneck, BottleneckClass, Claim, Contradiction, NamedCause, Verdict, VerifiedClaim

C = BottleneckClass

# Which classes each precision-pair reading is consistent with (seed 000 lesson 13): "no speedup"
# only says the GPU's arithmetic is not what limits the step, which holds for a dispatch-, data-
# loader- or communication-bound job alike; a speedup says the kernels limit it.
DISC_CONSISTENT: dict[str, set[str]] = {
    C.dispatch.value: {C.dispatch.value, C.data_loader.value, C.communication.value},
    C.compute.value: {C.compute.value},
    C.memory.value: {C.memory.value, C.compute.value},
}
# Telemetry's compute reading (utilization, SM clock and power all high, seed 001 T2) is consistent
# with a GPU-bound class when True and with a starved GPU when False; it says nothing about comms.
TEL_CONSISTENT: dict[bool, set[str]] = {
    True: {C.compute.value, C.memory.value},
    False: {C.dispatch.value, C.data_loader.value},
}
AGREE_BONUS = 0.05      # confidence added per agreeing indirect test
CONTRA_PENALTY = 0.15   # confidence removed per contradicting indirect test



@dataclass
class RankView:
    """One rank as the verdict sees it: its confirmed class claim, the rules re-run on its trace,
    and its exposed communication and waiting time (µs) from the cross-rank report."""

    rank: int | str
    claim_id: str | None
    klass: str
    diag: dg.Diagnosis | None
    exposed_comm_us: float | None = None
    total_us: float | None = None
    wait_us: float | None = None
    pct_arrived_last: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """JSON-able summary for ``report.json`` / the report's rank table."""
        d = self.diag.inputs if self.diag else {}
        return {"rank": self.rank, "class": self.klass, "claim": self.claim_id,
                "computation_pct": d.get("computation_pct"), "idle_pct": d.get("idle_pct"),
                "exposed_comm_pct": d.get("exposed_comm_pct"),
                "wait_ms": None if self.wait_us is None else round(self.wait_us / 1e3, 3),
                "wait_share_of_exposed_comm": (round(min(1.0, self.wait_us / self.exposed_comm_us), 3)
                                               if self.wait_us is not None and self.exposed_comm_us else None),
                "pct_arrived_last": self.pct_arrived_last,
                "margin": None if not self.diag or self.diag.margin is None else round(self.diag.margin, 3)}


def _confirmed(verdicts: list[VerifiedClaim]) -> list[VerifiedClaim]:
    return [v for v in verdicts if v.verdict is Verdict.confirmed]


def _rank_of(v: VerifiedClaim) -> int | str | None:
    """The rank a per-rank claim is about: its evidence's ``rank`` argument (an int, or the rank's
    label such as ``"1"`` or ``"0-dup1"`` for a second file claiming rank 0), as an int when it is one."""
    for e in v.claim.evidence:
        r = (e.args or {}).get("rank")
        if isinstance(r, bool) or r is None:
            continue
        if isinstance(r, int):
            return r
        return int(r) if str(r).isdigit() else str(r)
    return None


def rank_result_of(claim: Claim, results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank result (one of ``results``: rank results with ``path``, ``rank``, ``label``) a
    per-rank claim is about: the one whose trace path an evidence item cites (the first item that
    cites one of them, not only the first item), else the one whose label an evidence item names
    (its ``label``, or a ``rank`` that is a label such as ``"0-dup1"``), else the one of the rank an
    evidence item's ``rank`` names when only one result has that rank (two files claiming one rank
    are told apart by their path or label only). None when nothing matches (a cross-rank claim)."""
    by_path = {str(r.get("path")): r for r in results if r.get("path") is not None}
    for e in claim.evidence:
        hit = by_path.get(str((e.args or {}).get("path")))
        if hit is not None:
            return hit
    labels = {str(r["label"]): r for r in results if r.get("label") is not None}
    for e in claim.evidence:
        a = e.args or {}
        named = [a.get("label"), a.get("rank") if isinstance(a.get("rank"), str) and not a["rank"].isdigit() else None]
        hit = next((labels[str(v)] for v in named if v is not None and str(v) in labels), None)
        if hit is not None:
            return hit
    for e in claim.evidence:
        v = (e.args or {}).get("rank")
        if isinstance(v, bool) or not (isinstance(v, int) or isinstance(v, str) and v.isdigit()):
            continue
        same = [r for r in results if isinstance(r.get("rank"), int) and r["rank"] == int(v)]
        if len(same) == 1:
            return same[0]
    return None


def _order(rank: int | str) -> tuple[int, int | str]:
    """Sort key for ranks that may be labels: numeric ranks first, in order, then labels."""
    return (0, rank) if isinstance(rank, int) else (1, str(rank))


def rank_views(verdicts: list[VerifiedClaim], findings: dict[str, Any]) -> list[RankView]:
    """Every rank with a CONFIRMED trace class claim, with the rules re-run on its trace result
    (``findings.trace.ranks``) and its waits from ``findings.trace.multi_rank.collectives``."""
    trace = (findings or {}).get("trace") or {}
    results: dict[Any, dict[str, Any]] = {}
    for r in trace.get("ranks") or []:
        results.setdefault(r.get("rank"), r)
        if r.get("label") is not None:
            results[str(r["label"])] = r
    coll = ((trace.get("multi_rank") or {}).get("collectives")) or {}
    per_rank = {p["rank"]: p for p in coll.get("per_rank") or []}
    waits = {s["rank"]: s for s in ((coll.get("stragglers") or {}).get("rows") or [])}
    out: list[RankView] = []
    for v in _confirmed(verdicts):
        if v.claim.metric != "diagnosis.trace_bottleneck_class":
            continue
        r = _rank_of(v)
        r = 0 if r is None else r
        res = results.get(r) if results.get(r) is not None else results.get(str(r))
        d = dg.classify_trace(res) if res else None
        p, w = per_rank.get(r, {}), waits.get(r, {})
        out.append(RankView(rank=r, claim_id=v.claim.id, klass=str(v.claim.value), diag=d,
                            exposed_comm_us=p.get("exposed_comm_us"), total_us=p.get("total_us"),
                            wait_us=w.get("total_wait_us"), pct_arrived_last=w.get("pct_arrived_last")))
    out.sort(key=lambda x: _order(x.rank))
    return out


def confirmed_straggler(verdicts: list[VerifiedClaim]) -> tuple[int, str] | None:
    """(rank, claim id) of a CONFIRMED straggler claim (metric ``collectives.straggler_rank``)."""
    for v in _confirmed(verdicts):
        if v.claim.metric == "collectives.straggler_rank" and isinstance(v.claim.value, (int, float)):
            return int(v.claim.value), v.claim.id
    return None


def waiting_share(views: list[RankView], straggler: int) -> float | None:
    """Share (0..1) of the non-straggler ranks' exposed communication that is waiting for the
    straggler: Σ arrival skew / Σ exposed communication over those ranks (capped at 1). None when
    the cross-rank figures are missing."""
    others = [v for v in views if v.rank != straggler and v.wait_us is not None and v.exposed_comm_us]
    if not others:
        return None
    return min(1.0, sum(v.wait_us for v in others) / sum(v.exposed_comm_us for v in others))


def _disc_margin(compare: dict[str, Any]) -> float | None:
    """Relative margin of the precision pair's reading: how far the speedup is past its threshold
    (a speedup) or inside its noise band (no speedup)."""
    try:
        sp, thr, band = float(compare["speedup"]), float(compare["threshold"]), float(compare["noise_band"])
    except (KeyError, TypeError, ValueError):
        return None
    cls = (compare.get("bottleneck_class") or "")
    if cls == C.dispatch.value and band > 0:
        return (band - abs(sp - 1.0)) / band
    return (sp - thr) / thr if thr else None


def _amdahl_bound(busy_pct: float | None, kernel_speedup: float = 2.0) -> float | None:
    """Largest step speedup possible when only GPU busy time shrinks ``kernel_speedup``×."""
    if busy_pct is None:
        return None
    b = max(0.0, min(100.0, busy_pct)) / 100.0
    return 1.0 / (1.0 - b + b / kernel_speedup)


def _disc_contradiction(view: RankView, d: VerifiedClaim, sp: VerifiedClaim | None,
                        compare: dict[str, Any]) -> Contradiction:
    inp = view.diag.inputs if view.diag else {}
    busy = inp.get("busy_pct") if inp.get("busy_pct") is not None else inp.get("computation_pct")
    bound = _amdahl_bound(busy)
    speed = compare.get("speedup", sp.claim.value if sp else None)
    hi, lo = compare.get("hi", "?"), compare.get("lo", "?")
    w_idle = inp.get("window_idle_pct")  # the window's own figures when the rules read the run's step instead
    w_busy = (100.0 - w_idle) if w_idle is not None else busy
    direct = (f"trace of rank {view.rank}: GPU busy {w_busy:.1f}%, idle "
              f"{(w_idle if w_idle is not None else inp.get('idle_pct', 0)):.1f}% of the profiled "
              f"window → {view.klass}") if busy is not None else f"trace of rank {view.rank} → {view.klass}"
    indirect = (f"precision pair {hi} → {lo} (jobs {compare.get('hi_jobid', '?')} → {compare.get('lo_jobid', '?')}): "
                f"step speedup {float(speed):.3f}× → {d.claim.value}") if speed is not None else \
        f"precision pair → {d.claim.value}"
    if d.claim.value in (C.compute.value, C.memory.value) and bound is not None:
        why = (f"the trace measures GPU busy/idle directly; with the GPU busy {busy:.1f}% of the step, kernels even 2× "
               f"faster could speed the step up at most {bound:.3f}× (Amdahl), so a {float(speed):.3f}× difference "
               "between the two runs comes from something other than arithmetic (run-to-run variance: lesson 9)")
    elif bound is not None:
        why = (f"the trace measures GPU busy/idle directly; with the GPU busy {busy:.1f}% of the step, 2× faster "
               f"kernels should speed it up to {bound:.3f}×; a {float(speed):.3f}× difference says the lower "
               "precision did not make these kernels faster (check the dtype the run really used: lesson 13) "
               "or that the two runs differ in more than precision")
    else:
        why = "the trace is a direct measurement; the precision pair infers the class from two runs' step times"
    settle = ("replicate both runs on the same nodes (lesson 9: ±5% before trusting a difference), profile the "
              f"other run of the pair too and compare its GPU busy share and kernel times with this one's, and check "
              f"that the logs' dtype lines say {hi} and {lo} (lesson 13)")
    ids = [d.claim.id] + ([sp.claim.id] if sp else [])
    return Contradiction(direct=direct, direct_class=C(view.klass), indirect=indirect,
                         indirect_class=str(d.claim.value), winner="trace (direct measurement)", why=why,
                         settle=settle, claims=ids)


def _tel_contradiction(view: RankView, t: VerifiedClaim) -> Contradiction:
    inp = view.diag.inputs if view.diag else {}
    args = (t.claim.evidence[0].args if t.claim.evidence else {}) or {}
    util = args.get("gpu_util")
    direct = (f"trace of rank {view.rank}: GPU computing "
              f"{inp.get('window_computation_pct', inp.get('computation_pct', 0)):.1f}%, idle "
              f"{inp.get('window_idle_pct', inp.get('idle_pct', 0)):.1f}% of the profiled window → {view.klass}")
    num = lambda x, u: "?" if not isinstance(x, (int, float)) else f"{x:.1f}{u}"  # noqa: E731
    indirect = (f"telemetry over the job: utilization {num(util, '%')}, SM clock {num(args.get('sm_clock'), ' MHz')}, "
                f"power {num(args.get('power'), ' W')} → "
                f"{'supports' if t.claim.value else 'does not support'} a compute-bound reading")
    why = ("the trace measures when kernels run; utilization is a sampled average over the whole job that counts "
           "any running kernel, so a trickle of tiny kernels reads high (seed 001 T2), and it covers phases the "
           "profiled steps do not")
    settle = ("compare the trace's busy share with utilization over the profiled window (see Representativeness); "
              "if they differ, profile a later window of the same run")
    return Contradiction(direct=direct, direct_class=C(view.klass), indirect=indirect,
                         indirect_class=("compute-bound" if t.claim.value else "not compute-bound"),
                         winner="trace (direct measurement)", why=why, settle=settle, claims=[t.claim.id])


def decide(verdicts: list[VerifiedClaim], findings: dict[str, Any] | None = None) -> Bottleneck:
    """The bottleneck from CONFIRMED claims only, reasoning over all ranks and all sources (see
    the module docstring). ``findings`` is the graph state's ``findings`` (trace ranks, the
    cross-rank collectives report, the precision pair); the verdict degrades gracefully when parts
    are missing. Never raises on well-formed verdicts."""
    findings = findings or {}
    confirmed = _confirmed(verdicts)
    by_metric: dict[str, list[VerifiedClaim]] = {}
    for v in confirmed:
        by_metric.setdefault(v.claim.metric, []).append(v)
    all_views = rank_views(verdicts, findings)
    views = [v for v in all_views if v.klass != C.unknown.value]
    disc = next(iter(by_metric.get("diagnosis.precision_discriminator_class", [])), None)
    speed = next(iter(by_metric.get("compare.precision_speedup", [])), None)
    tel = next(iter(by_metric.get("telemetry.supports_compute", [])), None)
    compare = findings.get("compare") or {}
    if views:
        return _from_trace(views, confirmed, verdicts, disc, speed, tel, compare)
    if all_views:  # a trace is present but no rule fired: an indirect test may not set the class alone
        v0 = all_views[0]
        d = v0.diag
        why = (d.rule if d else "no trace rule fired") + "."
        if disc is not None:
            why += (f" The precision pair says {disc.claim.value} ({disc.claim.statement.split(': ', 1)[-1]}), but an "
                    "indirect test does not set the class when the trace is present and its rules did not fire: "
                    "profile more steps or the other run of the pair.")
        return Bottleneck(klass=C.unknown, rationale=why, scope=C.unknown.value, critical_rank=v0.rank,
                          supporting_claims=[v0.claim_id] if v0.claim_id else [], confidence=0.0,
                          runner_up=d.runner_up if d else None, runner_up_margin=d.runner_up_margin if d else None,
                          borderline=True)
    if disc is not None and str(disc.claim.value) != C.unknown.value:
        m = _disc_margin(compare)
        conf = min(0.7, dg.confidence_from_margin(m)) if m is not None and m >= 0 else 0.5
        ids = [disc.claim.id] + ([speed.claim.id] if speed else [])
        return Bottleneck(klass=C(str(disc.claim.value)), scope=f"{disc.claim.value} (precision pair only)",
                          rationale=disc.claim.statement + " No trace verdict: an indirect test alone decides, so "
                                    "profile the run to confirm it.", supporting_claims=ids, confidence=conf,
                          margin=m, borderline=m is None or m < dg.BORDERLINE_MARGIN)
    if tel is not None and tel.claim.value is True:
        return Bottleneck(klass=C.compute, scope="compute-bound (telemetry only)",
                          rationale=tel.claim.statement + " (no trace verdict)", supporting_claims=[tel.claim.id],
                          confidence=0.5, borderline=True)
    return Bottleneck(klass=C.unknown, rationale="no confirmed trace or precision-discriminator claim decides the class",
                      confidence=0.0)


def _majority(views: list[RankView]) -> RankView:
    """The first rank (in rank order) of the class most ranks agree on (ties: the lowest rank's)."""
    counts: dict[str, int] = {}
    for v in views:
        counts[v.klass] = counts.get(v.klass, 0) + 1
    views_in_order = sorted(views, key=lambda v: _order(v.rank))
    first: dict[str, int] = {}
    for i, v in enumerate(views_in_order):
        first.setdefault(v.klass, i)
    top = max(counts, key=lambda k: (counts[k], -first[k]))
    return next(v for v in views_in_order if v.klass == top)


@dataclass
class _Draft:
    """The verdict being written: rationale, scope, support, confidence, margin, contradictions."""

    why: str
    scope: str
    support: list[str]
    conf: float
    margin: float | None
    contradictions: list[Contradiction] = field(default_factory=list)


def _on_straggler(draft: _Draft, crit: RankView, views: list[RankView], share: float, strag: tuple[int, str]) -> None:
    """The verdict on a straggler the others wait for: its rationale, scope and the margin of the
    wait share past :data:`~.diagnosis.WAIT_SHARE_STRAGGLER`."""
    d = crit.diag
    others = [v for v in views if v.rank != crit.rank]
    wait_ms = sum((v.wait_us or 0.0) for v in others) / 1e3
    draft.scope = f"{crit.klass} on rank {crit.rank}, which the other ranks wait for (straggler)"
    draft.why = (f"Rank {crit.rank} is the straggler: it arrives last at {crit.pct_arrived_last or 0:.0f}% of the "
                 f"synchronising collectives, and {share * 100:.0f}% of the other ranks' exposed communication is "
                 f"waiting for it ({wait_ms:.2f} ms of arrival skew over rank(s) "
                 f"{', '.join(str(v.rank) for v in others)}), so that communication is attributed to waiting. "
                 f"Rank {crit.rank} itself: {draft.why}")
    m = draft.margin
    draft.margin = min(m, (share - dg.WAIT_SHARE_STRAGGLER) / dg.WAIT_SHARE_STRAGGLER) if m is not None else None
    if draft.margin is not None:
        draft.conf = dg.confidence_from_margin(draft.margin, d.runner_up_margin if d else None)
    draft.support.append(strag[1])


def _across_ranks(draft: _Draft, klass: str, views: list[RankView], share: float | None,
                  strag: tuple[int, str] | None) -> None:
    """Several ranks without a straggler to wait for: which ranks agree, and why a rank that
    arrives last does not take the verdict."""
    agree = [v.rank for v in views if v.klass == klass]
    draft.scope = (f"{klass} on every rank" if len(agree) == len(views)
                   else f"{klass} on ranks {', '.join(map(str, agree))} of {len(views)}")
    late = next((v for v in views if v.rank == (strag[0] if strag else None)), None)
    if strag is not None and late is not None and (share or 0) >= dg.WAIT_SHARE_STRAGGLER:
        own = (late.diag.inputs if late.diag else {}).get("exposed_comm_pct") or 0.0
        draft.why += (f" Rank {strag[0]} arrives last most often and {share * 100:.0f}% of the other ranks' exposed "
                      f"communication is arrival skew, but rank {strag[0]} itself, which waits for no rank, spends "
                      f"{own:.1f}% of its window in exposed communication: the collectives themselves are exposed, "
                      "not waiting for a late rank.")
    elif strag is not None:
        draft.why += (f" Rank {strag[0]} arrives last most often, but only "
                      f"{(share or 0) * 100:.0f}% of the other ranks' exposed communication is waiting for it "
                      f"(< {dg.WAIT_SHARE_STRAGGLER * 100:.0f}%): the communication itself is exposed.")


def _indirect(draft: _Draft, crit: RankView, disc: VerifiedClaim | None, speed: VerifiedClaim | None,
              tel: VerifiedClaim | None, compare: dict[str, Any]) -> None:
    """The indirect tests against the trace's class: an agreeing one adds its claims and
    :data:`AGREE_BONUS`, a contradicting one a :class:`Contradiction` and :data:`CONTRA_PENALTY`."""
    klass = crit.klass
    if disc is not None and str(disc.claim.value) != C.unknown.value:
        if klass in DISC_CONSISTENT.get(str(disc.claim.value), set()):
            draft.support += [disc.claim.id] + ([speed.claim.id] if speed else [])
            draft.conf += AGREE_BONUS
            draft.why += f" The precision pair agrees ({disc.claim.statement.split(': ', 1)[-1].rstrip('.')})."
        else:
            draft.contradictions.append(_disc_contradiction(crit, disc, speed, compare))
            draft.conf -= CONTRA_PENALTY
    if tel is not None and isinstance(tel.claim.value, bool):
        if klass in TEL_CONSISTENT[tel.claim.value]:
            draft.support.append(tel.claim.id)
            draft.conf += AGREE_BONUS
        elif klass in TEL_CONSISTENT[not tel.claim.value]:
            draft.contradictions.append(_tel_contradiction(crit, tel))
            draft.conf -= CONTRA_PENALTY
    if draft.contradictions:
        draft.why += " " + " ".join(f"Contradiction: {c.indirect}, but {c.direct}; the trace wins."
                                    for c in draft.contradictions)


def _from_trace(views: list[RankView], confirmed: list[VerifiedClaim], verdicts: list[VerifiedClaim],
                disc: VerifiedClaim | None, speed: VerifiedClaim | None, tel: VerifiedClaim | None,
                compare: dict[str, Any]) -> Bottleneck:
    """The verdict when some rank's trace class is confirmed (see the module docstring)."""
    by_rank = {v.rank: v for v in views}
    strag = confirmed_straggler(verdicts)
    share = waiting_share(views, strag[0]) if strag and strag[0] in by_rank else None
    # a straggler whose own class is communication-bound is not late for a reason: it waits for no rank,
    # so its exposed communication is the collectives' own, exposed on every rank (causes/exposed_comm.py)
    on_straggler = (strag is not None and share is not None and share >= dg.WAIT_SHARE_STRAGGLER
                    and by_rank[strag[0]].klass != C.communication.value)
    crit = by_rank[strag[0]] if on_straggler else _majority(views)
    klass, d = crit.klass, crit.diag
    draft = _Draft(why=(d.rule if d else klass) + ".", scope=f"{klass} on rank {crit.rank}" if len(views) > 1 else klass,
                   support=[crit.claim_id] if crit.claim_id else [], conf=d.confidence if d else 0.6,
                   margin=d.margin if d else None)
    if on_straggler:
        _on_straggler(draft, crit, views, share, strag)
    elif len(views) > 1:
        _across_ranks(draft, klass, views, share, strag)
    # the confirmed measurements that support the class: the inputs of its rule (the figures' ``supports``)
    draft.support += [v.claim.id for v in confirmed if registry.supports(v.claim.metric, klass)
                      and (v.claim.id.startswith(f"tl.r{crit.rank}.") or not v.claim.id.startswith("tl.r"))]
    _indirect(draft, crit, disc, speed, tel, compare)
    margin = draft.margin
    borderline = bool(d and d.borderline) or (margin is not None and margin < dg.BORDERLINE_MARGIN)
    return Bottleneck(klass=C(klass), rationale=draft.why, supporting_claims=list(dict.fromkeys(draft.support)),
                      confidence=round(max(0.05, min(0.95, draft.conf)), 3), scope=draft.scope,
                      critical_rank=crit.rank, straggler=strag[0] if on_straggler else None, waiting_share=share,
                      margin=margin, runner_up=d.runner_up if d else None,
                      runner_up_margin=d.runner_up_margin if d else None, borderline=borderline,
                      contradictions=draft.contradictions)


def reconcile_with_window(b: Bottleneck, representativeness: dict[str, Any] | None) -> Bottleneck:
    """Settle a telemetry contradiction with the profiled window: when utilization over the
    profiled steps agrees with the trace's busy share (within :data:`~.diagnosis.REPR_UTIL_PP`),
    the job-wide average differed because it covers phases the profile does not (start-up,
    evaluation); the contradiction is marked resolved and its confidence penalty returned.
    Returns ``b`` (modified in place)."""
    rp = representativeness or {}
    if rp.get("util_pct_window") is None or rp.get("util_flag"):
        return b
    return _resolve_telemetry(b, f"over the profiled window utilization is {rp['util_pct_window']:.1f}% against "
                                 f"the trace's busy {rp['busy_pct']:.1f}%: they agree, so the job-wide average differs "
                                 "because it covers phases the profile does not (start-up, evaluation, the trace export)")


def _resolve_telemetry(b: Bottleneck, how: str) -> Bottleneck:
    """Mark each unresolved contradiction of a telemetry claim (``om.tel.*``) resolved by ``how``,
    returning its confidence penalty and saying so in the rationale. Returns ``b``."""
    for c in b.contradictions:
        if c.resolved is None and any(x.startswith("om.tel.") for x in c.claims):
            c.resolved = how
            b.confidence = round(min(0.95, b.confidence + CONTRA_PENALTY), 3)
            b.rationale += f" Resolved: {c.resolved}."
    return b


def cause_entries(findings: dict[str, Any]) -> list[dict[str, Any]]:
    """Every cause entry the analysts recorded (``findings.trace.triage`` then
    ``findings.telemetry.triage``; :meth:`~.causes.base.Finding.entries`)."""
    return list((findings.get("trace") or {}).get("triage") or []) + \
        list((findings.get("telemetry") or {}).get("triage") or [])


DOMINANT_CATEGORY_PCT = 50.0
"""A category that takes more than half of the GPU kernel time dominates it: the class-level cause
is that category's (seed 001 T19: the profiler's op breakdown says where the GPU time goes)."""
CLASS_CAUSES: dict[str, tuple[tuple[str, ...], str]] = {
    C.compute.value: (("GEMM", "CONV"), "compute-bound-gemm"),
    C.memory.value: (("elementwise", "reduce", "normalization", "Elementwise", "Reduce", "Normalization"),
                     "memory-bound-elementwise"),
}
"""Class -> (the op categories, by prefix, of :data:`DOMINANT_CATEGORY_PCT`, the cause id of
``bench/accuracy/cases.py:CAUSES``): the cause a class's own measurement shows."""


def class_cause(b: Bottleneck, verdicts: list[VerifiedClaim]) -> NamedCause | None:
    """The class-level cause: for a compute-bound job whose CONFIRMED top op category
    (``ops_by_category.<category>.percent``, the trace analyst's ``tl.r<N>.top_op_category`` of the
    critical rank, else any rank) is GEMM or convolution and takes at least
    :data:`DOMINANT_CATEGORY_PCT` of the kernel time, ``compute-bound-gemm``; for a memory-bound
    one dominated by elementwise, reduction or normalization kernels, ``memory-bound-elementwise``;
    None otherwise. Its share is the category's share of the kernel time (0..1)."""
    spec = CLASS_CAUSES.get(b.klass.value)
    if spec is None:
        return None
    prefixes, cid = spec
    tops = [v for v in _confirmed(verdicts) if v.claim.metric.startswith("ops_by_category.")
            and v.claim.metric.endswith(".percent") and v.claim.id.endswith(".top_op_category")]
    tops.sort(key=lambda v: _rank_of(v) != b.critical_rank)
    for v in tops:
        cat = v.claim.metric[len("ops_by_category."):-len(".percent")]
        pct = v.claim.value
        if isinstance(pct, (int, float)) and pct >= DOMINANT_CATEGORY_PCT and cat.startswith(prefixes):
            return NamedCause(id=cid, claim=v.claim.id, share=float(pct) / 100.0)
        return None
    return None


def name_causes(b: Bottleneck, findings: dict[str, Any], verdicts: list[VerifiedClaim]) -> Bottleneck:
    """Set ``b.causes`` (every cause a CONFIRMED finding names, by measured share of the step
    time, largest first; causes without a measured share after, in registry order) and ``b.cause``
    (the first one, None when no confirmed finding names a cause). A refuted or inconclusive
    finding names nothing, nor does one whose causes a confirmed finding supersedes
    (:attr:`~.causes.base.Cause.supersedes`). A verdict on a confirmed straggler (``b.straggler``) names
    ``straggler`` first. Returns ``b``."""
    confirmed = {v.claim.id for v in verdicts if v.verdict is Verdict.confirmed}
    named: dict[str, NamedCause] = {}
    order: list[str] = []
    entries = cause_entries(findings)
    superseded = {s for e in entries if e.get("id") in confirmed for s in e.get("supersedes") or ()}
    for e in entries:
        if e.get("id") not in confirmed or (e.get("explains") and e["explains"] != b.klass.value):
            continue
        if e.get("causes") and all(c in superseded for c in e["causes"]):
            continue  # a confirmed finding explains its readings (causes/base.py: Cause.supersedes)
        for cid in e.get("causes") or ():
            nc = named.get(cid)
            if nc is None:
                nc = named[cid] = NamedCause(id=cid, claim=e["id"], share=e.get("share"))
                order.append(cid)
            if e.get("lever") and e["lever"] not in nc.levers:
                nc.levers.append(e["lever"])
    ranked = sorted(order, key=lambda c: (named[c].share is None, -(named[c].share or 0.0), order.index(c)))
    b.causes = [named[c] for c in ranked]
    cc = class_cause(b, verdicts)
    if cc is not None and cc.id not in named:
        b.causes.append(cc)  # after every specific cause: the class's own measurement, the least specific
        ranked.append(cc.id)
    strag = confirmed_straggler(verdicts)
    if b.straggler is not None and strag is not None and "straggler" not in named:
        # the verdict is on a straggler the other ranks wait for: that rank is the cause (seed 001 T15)
        b.causes.insert(0, NamedCause(id="straggler", claim=strag[1], share=b.waiting_share,
                                      levers=["balance_straggler_rank"]))
        ranked.insert(0, "straggler")
    b.cause = ranked[0] if ranked else None
    reconcile_with_causes(b, entries, verdicts)
    return b


TELEMETRY_READING_CAUSES = ("power-capped", "small-kernel-trickle")
"""The causes that are readings of the board's telemetry themselves (seed 001 T2: the SM clock
lowered at the power limit, utilization a trickle of tiny kernels keeps high): a confirmed cause
that supersedes one (:attr:`~.causes.base.Cause.supersedes`, e.g. ``gpu-contention``: another
process's kernels hold the board's power and clock) explains what the job-wide telemetry reads."""


def reconcile_with_causes(b: Bottleneck, entries: list[dict[str, Any]], verdicts: list[VerifiedClaim]) -> Bottleneck:
    """Settle a telemetry contradiction with a named cause that explains the telemetry's reading
    (one superseding a :data:`TELEMETRY_READING_CAUSES`): the utilization, clock and power over
    the job are not the job's own, so they do not contradict the trace; the contradiction is
    marked resolved with the cause's claim and its confidence penalty returned. Returns ``b``
    (modified in place)."""
    named = {nc.claim for nc in b.causes}
    statements = {v.claim.id: v.claim.statement for v in verdicts if v.verdict is Verdict.confirmed}
    why = next((e for e in entries if e.get("id") in named and e.get("id") in statements
                and set(e.get("supersedes") or ()) & set(TELEMETRY_READING_CAUSES)), None)
    if why is None:
        return b
    return _resolve_telemetry(b, f"the telemetry is not the job's alone: {statements[why['id']]} (claim `{why['id']}`, "
                                 f"{', '.join(why['causes'])}); the board's utilization, clock and power over the job "
                                 "are the job's and the other work's together, so the job's own trace decides its class")
