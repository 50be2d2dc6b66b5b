"""``init`` (load the catalog once, create the loop's files) and ``pick`` (the baseline first,
then a lever from the candidates of the verified bottleneck class, until a budget is spent)."""

from __future__ import annotations

from typing import Any

from ....state import Outcome, StatusLine
from ....state.loop import LeverStatus
from ....tools.errors import InputError
from ....tools.levers import catalog as L
from .analysis import prediction_for, read_report, split_by_class
from .common import build_spec, catalog_of, loop_dir, req_of


def init_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Load and validate the catalog (once), create the loop directory's files, read the report
    hint. On resume (catalog already in the state) nothing is redone."""
    if state.get("catalog"):
        return {}, StatusLine.make(Outcome.ok, f"resumed loop {state['request']['loop_id']}")
    req = req_of(state)
    d = loop_dir(state)
    d.mkdir(parents=True, exist_ok=True)
    cat = L.load_catalog(req.catalog_path)
    if cat.model != req.model:
        raise InputError(f"catalog {req.catalog_path} is for model {cat.model!r}, not {req.model!r}")
    # render one baseline spec now: a bad value stops the loop before anything is submitted
    build_spec(cat, L.effective_change(cat, []), job_name="ai4s-validate", exclude=[], extra_env=req.extra_env)
    L.dump_catalog(cat, d / "catalog.original.yaml")
    L.dump_catalog(cat, d / L.CATALOG_UPDATED)
    (d / L.KNOWN_BAD).touch()
    upd = {"catalog": cat.model_dump(mode="json"), "applied": [], "tried": [], "iteration": 0,
           "levers_done": 0, "node_hours_used": 0.0, "current": None, "stop": None, "best": None,
           "baseline": None, "route": "pick"}
    if req.report:
        rep = read_report(req.report)
        upd["analysis"] = {"job_id": None, "bottleneck": rep["bottleneck"], "recommended": rep["recommended"],
                           "predictions": {k: list(v) for k, v in rep["predictions"].items()},
                           "dropped": rep["dropped"], "report": req.report,
                           "history": [{"job_id": None, "bottleneck": rep["bottleneck"], "report": req.report}]}
    hint = f"; bottleneck={req.bottleneck}" if req.bottleneck else ""
    hint += "; analysis of the baseline on" if req.analyze and not req.report else ""
    n_ok = len(L.eligible_levers(cat))
    return upd, StatusLine.make(Outcome.ok, f"catalog {cat.model}: {len(cat.levers)} levers, {n_ok} eligible; "
                                            f"FOM {cat.fom.primary} ({cat.fom.direction} is better); executor "
                                            f"{req.executor}{hint}")


def bottleneck_of(state: dict[str, Any]) -> tuple[str | None, list[str], dict[str, Any]]:
    """The class the pick follows, the recommended levers and the predictions: the latest
    analysis of the best run, else the ``--report`` hint of the request."""
    a = state.get("analysis") or {}
    req = req_of(state)
    if a:
        return a.get("bottleneck"), list(a.get("recommended") or []), dict(a.get("predictions") or {})
    return req.bottleneck, list(req.recommended), {}


def _new_current(it: int, kind: str, lever: str | None, change, runs_needed: int) -> dict[str, Any]:
    return {"iteration": it, "kind": kind, "lever": lever, "change": change.model_dump(mode="json"),
            "runs_needed": runs_needed, "runs": [], "attempt": 0, "job_id": None, "infra_retries": [],
            "failed_run": None, "guards": [], "outcome": None, "record": None}


def make_pick_body(picker: L.LeverPicker | None = None):
    """The ``pick`` node body with ``picker`` plugged in (None = :func:`tools.levers.rule_picker`)."""

    def pick_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
        req = req_of(state)
        cat = catalog_of(state)
        if state.get("stop"):
            return {"route": "report"}, StatusLine.make(Outcome.ok, f"stopping: {state['stop']}")
        if state.get("current"):  # a resumed loop mid-iteration: carry on with it
            return {"route": "submit"}, StatusLine.make(Outcome.ok, f"continuing iteration {state['current']['iteration']}")
        it = int(state.get("iteration", 0))
        if not state.get("best"):
            cur = _new_current(it, "baseline", None, L.effective_change(cat, []), req.baseline_runs)
            return {"current": cur, "route": "submit"}, StatusLine.make(
                Outcome.ok, f"iteration {it}: baseline, {req.baseline_runs} runs to measure the spread")
        done = int(state.get("levers_done", 0))
        used = float(state.get("node_hours_used", 0.0))
        klass, recommended, predictions = bottleneck_of(state)
        stop = None
        skipped: list[dict[str, str]] = []
        lever = None
        if done >= req.iterations:
            stop = f"iteration budget spent ({done}/{req.iterations} levers)"
        elif req.node_hours is not None and used >= req.node_hours:
            stop = f"node-hours budget spent ({used:.4f} >= {req.node_hours:g})"
        if stop is None:
            eligible = L.eligible_levers(cat, state.get("tried", []), state.get("applied", []))
            applied = state.get("applied", [])
            noop = [lv for lv in eligible if L.changes_nothing(cat, applied, lv.name)]
            eligible = [lv for lv in eligible if lv not in noop]
            left_out = dict((state.get("analysis") or {}).get("dropped") or {})  # the report's levers_dropped
            out_ = [lv for lv in eligible if lv.name in left_out]
            eligible = [lv for lv in eligible if lv not in out_]
            keep, skipped = split_by_class(eligible, klass)
            skipped += [{"lever": lv.name, "why": "changes nothing on the current configuration (the job it renders "
                                                  "is the best run's): it could only measure noise"} for lv in noop]
            skipped += [{"lever": lv.name, "why": f"the analysis left it out: {left_out[lv.name]}"} for lv in out_]
            skipped += [{"lever": lv.name, "why": why} for lv in cat.levers  # lesson 6: eligible_levers left it out
                        if lv.status in (LeverStatus.candidate, LeverStatus.experimental)
                        and lv.name not in set(state.get("tried", [])) | set(applied)
                        and (why := L.mechanism_blocked(cat, lv)) is not None]
            if eligible and not keep:
                stop = f"no eligible lever aims at the verified bottleneck {klass} ({len(skipped)} skipped)"
            else:
                lever = (picker or L.rule_picker)(keep, {"bottleneck": klass, "recommended": recommended,
                                                         "journal": L.read_journal(loop_dir(state)), "model": cat.model})
                if lever is not None and lever.name not in {c.name for c in keep}:
                    raise InputError(f"picker chose {lever.name!r}, which is not a candidate (blocked, baked in, tried "
                                     "or aimed at another class)")
                if lever is None:
                    stop = "no eligible lever left (blocked, baked in or tried)"
        if stop:
            return {"stop": stop, "route": "report"}, StatusLine.make(Outcome.ok, f"stop: {stop}")
        cur = _new_current(it, "lever", lever.name, L.effective_change(cat, state.get("applied", []), lever.name), 1)
        pred, src = prediction_for(lever.name, predictions)
        cur.update(bottleneck=klass, skipped=skipped, predicted_saving_pct=pred, predicted_source=src)
        why = []
        if klass and any(t.value == klass for t in lever.targets):
            why.append(f"targets {klass}")
        if lever.name in recommended:
            why.append("recommended by the report")
        if skipped:
            why.append(f"{len(skipped)} skipped for another class")
        if pred is not None:
            why.append(f"predicted saving {pred:.1f}%")
        return {"current": cur, "route": "submit"}, StatusLine.make(
            Outcome.ok, f"iteration {it}: lever {lever.name} ({lever.status.value}, variance {lever.variance.value}"
                        f"{'; ' + ', '.join(why) if why else ''})")

    return pick_body
