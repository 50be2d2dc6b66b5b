"""``guard`` (is the new run comparable with the current best?) and ``decide`` (accept / revert
under the measured noise band, replicate a high-variance lever, keep a crashed lever's error,
spare a lever whose run failed on infrastructure)."""

from __future__ import annotations

import statistics
from typing import Any

from ....state import Outcome, StatusLine
from ....state.loop import Decision, GuardResult, IterationRecord, LeverChange, RunResult
from ....tools.levers import catalog as L
from ....tools.levers.guards import integrity_guard
from .common import catalog_of, req_of


def guard_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Integrity guards (lessons 23, 31; placement: lessons 9, 10, 18) of the newest lever run
    against the current best run. Baseline runs are compared with the first baseline run
    (recorded, never rejected). A check no run had data for is "not checked", never a pass."""
    cur = dict(state["current"])
    cat = catalog_of(state)
    run = RunResult.model_validate(cur["runs"][-1])
    if cur["kind"] == "baseline":
        if len(cur["runs"]) < 2:
            return {"route": "decide"}, StatusLine.make(Outcome.ok, "first baseline run: nothing to compare with")
        g = integrity_guard(run, RunResult.model_validate(cur["runs"][0]), cat.fom,
                            check_placement=req_of(state).pin_placement)
        cur["guards"] = [*cur.get("guards", []), g.model_dump(mode="json")]
        st = Outcome.ok if g.passed else Outcome.partial
        return {"current": cur, "route": "decide"}, StatusLine.make(
            st, "baseline runs comparable" if g.passed else "baseline runs differ: " + "; ".join(g.reasons))
    ref = RunResult.model_validate(state["best"]["run"])
    lever = cat.lever(cur["lever"])
    g = integrity_guard(run, ref, cat.fom, changes_batch=lever.changes_batch,
                        check_placement=req_of(state).pin_placement, memory=lever.memory)
    cur["guards"] = [*cur.get("guards", []), g.model_dump(mode="json")]
    if g.passed:
        return {"current": cur, "route": "decide"}, StatusLine.make(
            Outcome.ok, f"job {run.job_id} comparable with best job {ref.job_id}: guards {g.summary()}")
    return {"current": cur, "route": "decide"}, StatusLine.make(
        Outcome.ok, f"guard rejects job {run.job_id}: " + "; ".join(g.reasons))


def _nodes_same(a: list[str], b: list[str]) -> bool:
    return sorted(a) == sorted(b)


def decide_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Accept / revert (and the baseline's noise band). Produces the iteration's journal record
    in ``current.record``; the catalog copy and the best config change here, the files are
    written by ``record``."""
    req = req_of(state)
    cat = catalog_of(state)
    cur = dict(state["current"])
    runs = [RunResult.model_validate(r) for r in cur["runs"]]
    failed = RunResult.model_validate(cur["failed_run"]) if cur.get("failed_run") else None
    all_runs = runs + ([failed] if failed else [])
    job_ids = [r["job_id"] for r in cur.get("infra_retries", [])] + [r.job_id for r in all_runs]
    name = cat.fom.primary
    base_nodes = (state.get("baseline") or {}).get("nodes_list") or []
    rec_kw: dict[str, Any] = dict(
        loop_id=req.loop_id, iteration=cur["iteration"], kind=cur["kind"], lever=cur.get("lever"),
        change=LeverChange.model_validate(cur["change"]), job_ids=job_ids,
        infra_retries=cur.get("infra_retries", []), nodes_list=[r.nodes_list for r in all_runs],
        fom_name=name, fom_values=[r.primary for r in runs if r.primary is not None],
        node_hours=sum(r.node_hours for r in all_runs) + sum(x.get("node_hours", 0.0) for x in cur.get("infra_retries", [])),
        runs=all_runs, bottleneck=cur.get("bottleneck"), predicted_saving_pct=cur.get("predicted_saving_pct"),
        predicted_source=cur.get("predicted_source"), skipped=cur.get("skipped") or [], executor=req.executor,
    )
    if base_nodes and all_runs:
        rec_kw["same_nodes_as_baseline"] = all(_nodes_same(r.nodes_list, base_nodes) for r in all_runs)
    upd: dict[str, Any] = {}
    best = state.get("best")

    # ---------------- baseline
    if cur["kind"] == "baseline":
        if cur.get("outcome") or failed:
            why = (cur.get("outcome") or {}).get("why") or f"baseline job {failed.job_id} failed: {(failed.error or '').splitlines()[0]}"
            record = IterationRecord(**rec_kw, decision=Decision.failed if failed else Decision.infra_failed, why=why)
            cur["record"] = record.model_dump(mode="json")
            return ({"current": cur, "stop": f"baseline could not be measured: {why}", "route": "record"},
                    StatusLine.make(Outcome.fail, f"baseline failed: {why}"))
        if len(runs) < cur["runs_needed"]:
            return ({"current": cur, "route": "submit"},
                    StatusLine.make(Outcome.ok, f"baseline run {len(runs)}/{cur['runs_needed']}: {name}={runs[-1].primary:.4g}"))
        values = [r.primary for r in runs]
        noise = L.noise_band_pct(values, cat.fom)
        mean = statistics.fmean(values)
        ref = runs[-1]
        node_sets = {tuple(sorted(r.nodes_list)) for r in runs}
        why = (f"baseline {name} {', '.join(f'{v:.4g}' for v in values)} (mean {mean:.4g}); run-to-run spread "
               f"{L.spread_pct(values):.2f}% -> noise band {noise:.2f}% (floor {cat.fom.min_noise_pct:g}%)"
               f"; nodes {' | '.join(','.join(s) for s in sorted(node_sets))}")
        record = IterationRecord(**rec_kw, fom_value=mean, best_after=mean, noise_pct=noise,
                                 decision=Decision.baseline, why=why)
        cur["record"] = record.model_dump(mode="json")
        upd.update({
            "baseline": {"values": values, "mean": mean, "noise_pct": noise, "job_ids": [r.job_id for r in runs],
                         "nodes_list": ref.nodes_list},
            "best": {"value": mean, "levers": [], "run": ref.model_dump(mode="json"), "job_ids": [r.job_id for r in runs],
                     "iteration": cur["iteration"]},
        })
        return {**upd, "current": cur, "route": "record"}, StatusLine.make(Outcome.ok, why)

    # ---------------- lever
    lever = cat.lever(cur["lever"])
    noise = float(state["baseline"]["noise_pct"])
    best_val = float(best["value"])
    rec_kw.update(best_before=best_val, noise_pct=noise)
    guards = [GuardResult.model_validate(g) for g in cur.get("guards", [])]
    if guards:
        rec_kw["guard"] = guards[-1] if all(g.passed for g in guards) else next(g for g in guards if not g.passed)
    decision: Decision
    if cur.get("outcome"):
        decision, why = Decision(cur["outcome"]["decision"]), cur["outcome"]["why"]
    elif failed:
        decision = Decision.failed
        why = f"lever job {failed.job_id} crashed: {(failed.error or '').splitlines()[0]}"
    elif guards and not guards[-1].passed:
        decision = Decision.rejected_guard
        why = "integrity guard: " + "; ".join(guards[-1].reasons) + " (lessons 23, 31: not comparable, FOM delta ignored)"
        rec_kw["fom_value"] = runs[-1].primary
        rec_kw["delta_pct"] = L.improvement_pct(runs[-1].primary, best_val, cat.fom.direction)
    else:
        values = [r.primary for r in runs]
        variance = L.effective_variance(lever.variance, noise, cat.fom)
        action, why, delta = L.decide(values, best_val, noise, cat.fom, variance)
        if variance != lever.variance:
            why = (f"baseline noise band {noise:.2f}% wider than ±{cat.fom.replicate_tolerance_pct:g}%: every lever "
                   f"replicates (lesson 9); {why}")
        rec_kw.update(fom_value=statistics.fmean(values), delta_pct=delta)
        if len(values) >= 2:
            rec_kw["replicate_spread_pct"] = L.spread_pct(values)
        if action == "replicate":
            cur["runs_needed"] = 2
            return ({"current": cur, "route": "submit"}, StatusLine.make(Outcome.ok, why))
        decision = {"accept": Decision.accepted, "revert": Decision.reverted,
                    "replicate-disagrees": Decision.replicate_disagrees}[action]
    if decision == Decision.accepted:
        val = float(rec_kw["fom_value"])
        upd["best"] = {"value": val, "levers": [*state.get("applied", []), lever.name],
                       "run": runs[-1].model_dump(mode="json"), "job_ids": [r.job_id for r in runs],
                       "iteration": cur["iteration"]}
        upd["applied"] = [*state.get("applied", []), lever.name]
        rec_kw["best_after"] = val
    else:
        rec_kw["best_after"] = best_val
    if rec_kw.get("same_nodes_as_baseline") is False:
        why += "; nodes differ from the baseline's (placement noted, no node-class conclusion: lessons 10, 18)"
    if rec_kw.get("predicted_saving_pct") is not None and rec_kw.get("delta_pct") is not None:
        why += f"; predicted saving {rec_kw['predicted_saving_pct']:.1f}%, realized {rec_kw['delta_pct']:+.1f}%"
    record = IterationRecord(**rec_kw, decision=decision, why=why)
    cur["record"] = record.model_dump(mode="json")
    upd["catalog"] = L.record_outcome(cat, record).model_dump(mode="json")
    st = Outcome.ok if decision not in (Decision.failed, Decision.infra_failed) else Outcome.partial
    return {**upd, "current": cur, "route": "record"}, StatusLine.make(st, f"{lever.name}: {decision.value}: {why}")
