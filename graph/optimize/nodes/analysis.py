"""Close the loop with the analysis: the verified bottleneck class decides which levers are
candidates (seed 000 lessons 13, 16: a lever aimed at another class is a dead end), and each
lever's predicted saving (the report's impact estimate, when it has one) is recorded beside the
realized change. After an accepted lever the analysis re-runs on the new best, so the next pick
follows the bottleneck as it moves.

The analysis is ``ai4s-graph run --job <id> --perf-run <run dir> --out <loop>/analysis/<id>
--llm none`` in a subprocess (its own process and checkpoint; the loop reads only its
``report.json``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ....state import Outcome, StatusLine
from ....state.claims import BottleneckClass
from ....state.loop import Lever
from ....state.publish import publish
from .common import loop_dir, req_of

ANALYSIS_TIMEOUT_S = 900
_PREDICTION_KEYS = ("predicted_saving_pct", "saving_pct", "impact_pct", "estimated_saving_pct", "expected_saving_pct")


def read_report(path: str | Path) -> dict[str, Any]:
    """From an analysis ``report.json``: ``{"bottleneck": class or None (unknown -> None),
    "recommended": [lever names], "predictions": {lever name: (pct, source)}, "dropped": {lever name:
    why the analysis left it out (``levers_dropped``: blocked by the catalog, or its precondition
    absent from the trace)}, "path": str}``. A missing or unreadable report gives ``bottleneck`` None."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return {"bottleneck": None, "recommended": [], "predictions": {}, "dropped": {}, "path": str(p)}
    klass = ((data.get("bottleneck") or {}).get("klass")) if isinstance(data, dict) else None
    if klass not in {b.value for b in BottleneckClass} or klass == BottleneckClass.unknown.value:
        klass = None
    recs, preds = [], {}
    for x in (data.get("levers") or []) if isinstance(data, dict) else []:
        if not isinstance(x, dict) or not x.get("name"):
            continue
        recs.append(str(x["name"]))
        for src in (x, x.get("impact") if isinstance(x.get("impact"), dict) else {}):
            for k in _PREDICTION_KEYS:
                v = src.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    preds[str(x["name"])] = (float(v), f"{p.name}: levers[{x['name']}].{k}")
                    break
            if str(x["name"]) in preds:
                break
    dropped = {str(x["name"]): str(x.get("why") or "") for x in
               ((data.get("levers_dropped") or []) if isinstance(data, dict) else [])
               if isinstance(x, dict) and x.get("name")}
    return {"bottleneck": klass, "recommended": recs, "predictions": preds, "dropped": dropped, "path": str(p)}


def prediction_for(lever: str, predictions: dict[str, Any]) -> tuple[float | None, str | None]:
    """The report's predicted saving for ``lever`` (exact name, or a report name the catalog
    name starts with, e.g. ``num_workers`` for ``num_workers_4``), else (None, None)."""
    if lever in predictions:
        return predictions[lever][0], predictions[lever][1]
    for name, (pct, src) in predictions.items():
        if lever.startswith(name):
            return pct, src
    return None, None


def split_by_class(levers: list[Lever], klass: str | None) -> tuple[list[Lever], list[dict[str, str]]]:
    """(candidates, skipped-with-why): with a verified ``klass``, a lever whose ``targets`` name
    other classes only is skipped (lessons 13, 16); a lever with no targets stays (it claims no
    class). Without a class every lever stays."""
    if not klass:
        return list(levers), []
    keep, skipped = [], []
    for lv in levers:
        tg = [t.value for t in lv.targets]
        if tg and klass not in tg:
            skipped.append({"lever": lv.name, "why": f"aimed at {', '.join(tg)}; the verified bottleneck is {klass}"})
        else:
            keep.append(lv)
    return keep, skipped


def run_analysis(perf_run: str | Path, jobid: str, out: Path, timeout_s: float = ANALYSIS_TIMEOUT_S) -> tuple[Path, str]:
    """Run ``ai4s-graph run`` (deterministic agents) on one run directory; returns
    (``report.json`` path, the last STATUS line). Never raises for a failed analysis: the
    report path may then be missing."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ai4s_graph.cli", "run", "--job", str(jobid), "--perf-run", str(perf_run),
            "--out", str(out), "--llm", "none", "--fresh"]
    env = dict(os.environ)
    env.setdefault("AI4S_STATE_DIR", str(out / ".state"))
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
        text = cp.stdout + cp.stderr
    except subprocess.TimeoutExpired:
        text = f"STATUS=fail; reason=analysis did not finish in {timeout_s:g}s"
    publish(out / "analysis.log", text)
    last = next((ln for ln in reversed(text.splitlines()) if ln.startswith("STATUS=")), "STATUS=fail; reason=no STATUS line")
    return out / "report.json", last


def analyse_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Analyse the current best run (after the baseline, and after each accepted lever) and keep
    its verified class in ``state["analysis"]``; the next pick follows it. Runs only when the
    request asks for it (``--analyze``) and the best run changed since the last analysis."""
    req = req_of(state)
    best = state.get("best") or {}
    run = best.get("run") or {}
    prev = state.get("analysis") or {}
    if not req.analyze or not run.get("perf_run") or prev.get("job_id") == run.get("job_id"):
        return {"route": "pick"}, StatusLine.make(Outcome.ok, "no new best run to analyse")
    out = loop_dir(state) / "analysis" / str(run["job_id"])
    path, last = run_analysis(run["perf_run"], str(run["job_id"]), out)
    rep = read_report(path)
    history = [*prev.get("history", []), {"job_id": run["job_id"], "bottleneck": rep["bottleneck"], "status": last,
                                          "report": str(path) if path.is_file() else None}]
    upd = {"analysis": {"job_id": run["job_id"], "bottleneck": rep["bottleneck"], "recommended": rep["recommended"],
                        "predictions": {k: list(v) for k, v in rep["predictions"].items()}, "dropped": rep["dropped"],
                        "report": str(path) if path.is_file() else None, "history": history},
           "route": "pick"}
    moved = ""
    if prev.get("bottleneck") and prev.get("bottleneck") != rep["bottleneck"]:
        moved = f"; moved from {prev['bottleneck']}"
    st = Outcome.ok if path.is_file() else Outcome.partial
    return upd, StatusLine.make(st, f"best job {run['job_id']}: bottleneck {rep['bottleneck'] or 'unknown'}{moved} "
                                    f"({last.split(';')[0]})")
