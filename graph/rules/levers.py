"""The lever choice: which levers the report recommends, in which order. Pure: the generic levers
of the class come from the tools (the model's lever catalog, then ``tools/levers/rules.py``, read by
:func:`ai4s_graph.tools.levers.recommend.recommend_levers`), the causes' levers from their
confirmed findings (:mod:`.registry`), the savings from each lever's model
(:mod:`ai4s_graph.tools.levers.impact`, or the cause's own).

Order: the straggler lever first when the verdict is on a straggler the other ranks wait for (the
first lever follows the cause, the slow rank, not the symptom, their exposed communication); then
the levers of the causes the verdict names (``Bottleneck.causes``, largest measured share first:
the lever that removes the cause before any lever of its class, e.g. turning anomaly detection off
before torch.compile for a dispatch-bound job); then every other lever by its estimated saving per
step (levers without an estimate last, in the order given: the catalog's, the generic rules' cost
order, then the causes').

Filter (issue 24 point 4), before the order: a lever the workload's catalog blocks, or one that
implies a mechanism a blocked lever implies (CUDA graphs through ``torch.compile`` where the
catalog blocks ``torch.compile``: seed 000 lesson 6), is dropped; so is a lever whose declared
precondition (an evidence family the trace's one pass counts: SDPA's math backend, FSDP) is absent
from every rank's event-name counts. Each drop is returned with its reason
(:func:`filter_levers`), for the report to say which lever was left out and why. The declarations
are data (:class:`~ai4s_graph.tools.levers.policy.LeverPolicy`, built by the tools from the
catalogs), never lever-name matching here."""

from __future__ import annotations

from typing import Any

from .diagnosis import profiled_step_ms, step_correction
from .registry import CAUSES
from ...state import Bottleneck, LeverRecommendation, Verdict, VerifiedClaim
from ...tools.levers import impact
from ...tools.levers.policy import LeverPolicy

STRAGGLER_LEVER = "balance_straggler_rank"


def straggler_lever(b: Bottleneck) -> LeverRecommendation | None:
    """``balance_straggler_rank`` when the verdict is on a straggler (``b.straggler``), else None."""
    if b.straggler is None:
        return None
    return LeverRecommendation(
        name=STRAGGLER_LEVER,
        why=(f"rank {b.straggler} is the straggler the other ranks wait for: give it less work (check its data "
             "shard and per-rank batch) or fix its node (probe its GPU and mounts with `ai4s-graph probe`, "
             "lesson 19) before tuning communication; then its own class's levers below"),
        claims=b.supporting_claims[:3])


def cause_levers(have: list[LeverRecommendation], findings: dict[str, Any],
                 verdicts: list[VerifiedClaim]) -> list[LeverRecommendation]:
    """The lever of every cause finding a verifier confirmed (``findings.trace.triage`` then
    ``findings.telemetry.triage``: ``[{"id", "lever", "why"}]``) that ``have`` does not list yet."""
    confirmed = {v.claim.id for v in verdicts if v.verdict is Verdict.confirmed}
    names = {lv.name for lv in have}
    extra = []
    entries = list((findings.get("trace") or {}).get("triage") or []) + \
        list((findings.get("telemetry") or {}).get("triage") or [])
    for t in entries:
        if t["id"] in confirmed and t.get("lever") and t["lever"] not in names:
            names.add(t["lever"])
            extra.append(LeverRecommendation(name=t["lever"], why=t["why"], claims=[t["id"]]))
    return extra


def users_step(trace: dict[str, Any] | None) -> dict[str, Any] | None:
    """The rank's tables as the step the user runs: when the profiler stretched the profiled step
    (:func:`~.diagnosis.step_correction`: the median profiled step over the run's steady step outside
    the profiler, above ``REPR_STEP_RATIO``), ``step_time_ms`` is the run's step (``run_step.ms``, ms)
    and ``profiled_step_ms`` the stretched one (the median the class rules read), so a lever's saving is a share of the step the user
    runs (its GPU work per step is the same: the profiler adds host time, its kernels run as fast).
    Else ``trace`` unchanged (None stays None)."""
    if not trace or step_correction(trace) is None:
        return trace
    return {**trace, "step_time_ms": float(trace["run_step"]["ms"]), "profiled_step_ms": profiled_step_ms(trace)}


def event_counts(findings: dict[str, Any]) -> dict[str, int] | None:
    """Event name -> count summed over every rank the trace analyst read (``findings.trace.ranks[*]
    .event_names``, the one pass's counts), or None when no rank result carries counts (no trace
    read: a precondition is then not checked)."""
    ranks = [r for r in ((findings.get("trace") or {}).get("ranks") or []) if isinstance(r, dict)]
    if not any(isinstance(r.get("event_names"), dict) for r in ranks):
        return None
    out: dict[str, int] = {}
    for r in ranks:
        for name, n in (r.get("event_names") or {}).items():
            out[name] = out.get(name, 0) + int(n or 0)
    return out


def filter_levers(levers: list[LeverRecommendation], findings: dict[str, Any],
                  policy: LeverPolicy | None) -> tuple[list[LeverRecommendation], list[LeverRecommendation]]:
    """(kept, dropped): ``levers`` without those the policy rules out (module docstring: blocked by
    the catalog, implying a blocked mechanism, or a precondition absent from the trace's counts);
    each dropped lever keeps its name and ``why`` becomes the reason it was left out. The straggler
    lever is never dropped. No policy: nothing is dropped."""
    if policy is None:
        return list(levers), []
    counts = event_counts(findings)
    kept, dropped = [], []
    for lv in levers:
        why = None if lv.name == STRAGGLER_LEVER else (
            policy.why_blocked(lv.name) or policy.missing_precondition(lv.name, counts))
        if why is None:
            kept.append(lv)
        else:
            dropped.append(LeverRecommendation(name=lv.name, why=why, claims=lv.claims))
    return kept, dropped


def drop_from_causes(b: Bottleneck, dropped: list[LeverRecommendation]) -> Bottleneck:
    """``b`` with every named cause's levers (``b.causes[].levers``) less the ``dropped`` ones
    (:func:`filter_levers`' second list), so the report's causes table offers no lever its "Left
    out" list rules out (issue 27 report 5 point 1: the launch cause offered ``cuda_graphs`` that the
    GNN catalog blocks). A cause left with no lever keeps its row (its lever column then says so).
    Modified in place; returns ``b``."""
    gone = {lv.name for lv in dropped}
    for nc in b.causes:
        nc.levers = [x for x in nc.levers if x not in gone]
    return b


def choose(levers: list[LeverRecommendation], findings: dict[str, Any],
           verdicts: list[VerifiedClaim], b: Bottleneck | None = None, *,
           policy: LeverPolicy | None = None,
           dropped: list[LeverRecommendation] | None = None) -> list[LeverRecommendation]:
    """The report's levers (see the module docstring): ``levers`` (the class's levers from the
    tools, led by :func:`straggler_lever` when the verdict has one) plus the confirmed causes'
    levers, less those ``policy`` rules out (:func:`filter_levers`; appended to ``dropped`` when
    given), each ``why`` extended with its estimated saving on the first rank's trace (over the step the
    user runs, :func:`users_step`) and roofline;
    the named causes' levers (``b.causes``, :func:`~.verdict.name_causes`) lead after the straggler's;
    ``b.causes[].levers`` lose the dropped levers too (:func:`drop_from_causes`)."""
    levers, out_ = filter_levers(list(levers) + cause_levers(levers, findings, verdicts), findings, policy)
    if dropped is not None:
        dropped.extend(out_)
    if b is not None:
        drop_from_causes(b, out_)
    tf = findings.get("trace") or {}
    rank0 = users_step((tf.get("ranks") or [None])[0])
    models = {k: v for c in CAUSES for k, v in c.saving_models().items()}
    out = impact.annotate(levers, rank0, tf.get("roofline"), models=models)
    first = [lv for nc in (b.causes if b is not None else []) for lv in nc.levers]
    rank = {name: i for i, name in enumerate(dict.fromkeys(first))}
    # stable: the straggler's lever, then the named causes' levers in cause order, then the rest by saving
    out.sort(key=lambda lv: (lv.name != STRAGGLER_LEVER, rank.get(lv.name, len(rank))))
    return out
