"""``record`` (journal line, catalog copy, best config), ``report`` and ``loop_report.md`` with
the FOM-per-iteration plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ....state import Outcome, StatusLine
from ....state.loop import Catalog, Decision, GuardResult, IterationRecord
from ....state.publish import publish
from ....tools.errors import Ai4sError
from ....tools.levers import catalog as L
from .common import catalog_of, fmt, known_bad, loop_dir, req_of


def record_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Write the iteration's journal line (once: a resumed loop never duplicates it), its
    ``iter-<n>-<lever>.json``, the updated catalog copy and ``best_config.json``; then move on."""
    cur = state["current"]
    record = IterationRecord.model_validate(cur["record"])
    d = loop_dir(state)
    wrote = L.append_journal(d, record)
    tag = "baseline" if record.kind == "baseline" else (record.lever or "lever")
    L.write_json(d / f"iter-{record.iteration}-{tag}.json", record.model_dump(mode="json"))
    cat = catalog_of(state)
    L.dump_catalog(cat, d / L.CATALOG_UPDATED)
    write_best_config(state, cat)
    analyse = req_of(state).analyze and record.decision in (Decision.baseline, Decision.accepted)
    upd: dict[str, Any] = {"current": None, "iteration": int(record.iteration) + 1,
                           "route": "analyse" if analyse else "pick"}
    if record.kind == "lever":
        upd["levers_done"] = int(state.get("levers_done", 0)) + 1
        upd["tried"] = [*state.get("tried", []), record.lever]
    return upd, StatusLine.make(Outcome.ok, f"iteration {record.iteration} {tag}: {record.decision.value}"
                                            f"{'' if wrote else ' (already in the journal)'}")


def write_best_config(state: dict[str, Any], cat: Catalog | None = None) -> Path | None:
    """``best_config.json``: the accepted levers, the effective change, the best FOM and its jobs."""
    best = state.get("best")
    if not best:
        return None
    cat = cat or catalog_of(state)
    req = req_of(state)
    orig = L.load_catalog(loop_dir(state) / "catalog.original.yaml") if (loop_dir(state) / "catalog.original.yaml").is_file() else cat
    change = L.effective_change(orig, best.get("levers", []))
    run = best.get("run") or {}
    data = {"loop_id": req.loop_id, "model": cat.model, "fom": cat.fom.primary, "direction": cat.fom.direction,
            "value": best["value"], "levers": best.get("levers", []), "job_ids": best.get("job_ids", []),
            "iteration": best.get("iteration"), "nodes_list": run.get("nodes_list", []),
            "baseline": state.get("baseline"), "change": change.model_dump(mode="json")}
    return L.write_json(loop_dir(state) / L.BEST_CONFIG, data)


def report_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """``loop_report.md`` with the FOM-per-iteration plot (PNG), the decisions and their numbers,
    the nodes lists (compared before any node conclusion, lessons 10 and 18) and the best config."""
    d = loop_dir(state)
    write_best_config(state)
    path, png = write_loop_report(state)
    recs = L.read_journal(d)
    acc = [r["lever"] for r in recs if r.get("decision") == "accepted"]
    stop = state.get("stop")
    if not stop and state.get("missing"):
        stop = f"stopped on an error: {state['missing'][-1]}"
    stop = stop or "done"
    st = Outcome.fail if str(stop).startswith(("TIMEOUT_WAITING", "baseline could not", "stopped on", "submit failed")) else Outcome.ok
    if png is None and st == Outcome.ok:
        st = Outcome.partial
    best = state.get("best") or {}
    return {"route": "end"}, StatusLine.make(
        st, f"{len(recs)} iterations; accepted {','.join(acc) or 'none'}; best {best.get('value', float('nan')):.4g}; "
            f"{stop}{'' if png else '; no plot'}")


def write_loop_report(state: dict[str, Any]) -> tuple[Path, Path | None]:
    """Write ``loop_report.md`` and ``fom_per_iteration.png`` in the loop directory from the
    journal (the files, not the state, so a report re-written after a resume sees every
    iteration). Returns (report path, PNG path or None when no iteration has a FOM)."""
    from ....tools.report.plots import plot_fom_iterations

    d = loop_dir(state)
    req = req_of(state)
    cat = catalog_of(state)
    recs = L.read_journal(d)
    png: Path | None = d / "fom_per_iteration.png"
    plot_decision = {"rejected-guard": "rejected", "replicate-disagrees": "rejected", "infra-failed": "failed"}
    pts = [{"iteration": r["iteration"], "lever": r.get("lever") or "baseline", "fom": r.get("fom_value"),
            "decision": plot_decision.get(r.get("decision"), r.get("decision"))} for r in recs]
    try:
        plot_fom_iterations(pts, cat.fom.primary, png, higher_is_better=cat.fom.direction == "higher")
    except Ai4sError:
        png = None
    best = state.get("best") or {}
    base = state.get("baseline") or {}
    lines = [
        f"# Perf-optimizer loop {req.loop_id}: {cat.model}",
        "",
        f"- Primary FOM: `{cat.fom.primary}` ({cat.fom.direction} is better; seed lessons 5, 31)",
        f"- Baseline: {', '.join(fmt(v) for v in base.get('values', []))} (jobs {', '.join(base.get('job_ids', []))}); "
        f"noise band {fmt(base.get('noise_pct'), 3)}% (measured spread, floor {cat.fom.min_noise_pct:g}%)",
        f"- Baseline nodes_list: {','.join(base.get('nodes_list') or []) or '-'} (read this before any node conclusion; lessons 10, 18)",
        f"- Best: {fmt(best.get('value'))} with levers [{', '.join(best.get('levers', []))}] (jobs {', '.join(best.get('job_ids', []))})",
        f"- Stopped: {state.get('stop') or ('error: ' + state['missing'][-1] if state.get('missing') else 'running')}; node-hours used {float(state.get('node_hours_used', 0.0)):.4f}",
        f"- Executor: {req.executor}; placement: {'replicates and levers pinned to the baseline nodes (--nodelist), a different placement is rejected by the guard' if req.pin_placement else 'not pinned'} (lessons 9, 10, 18)",
        f"- Known bad nodes: {', '.join(known_bad(d)) or 'none'} (excluded by name only, never a node class; lesson 1)",
        "",
    ]
    if png is not None:
        lines += [f"![{cat.fom.primary} per iteration]({png.name})", ""]
    lines += ["| iter | lever | jobs | nodes_list | FOM values | delta % | noise % | guard | decision | predicted % | class followed |",
              "|---:|---|---|---|---|---:|---:|---|---|---:|---|"]
    for r in recs:
        g = r.get("guard")
        gtxt = "-" if not g else GuardResult.model_validate(g).summary()
        nodes = " / ".join(",".join(n) for n in r.get("nodes_list") or []) or "-"
        lines.append(
            f"| {r['iteration']} | {r.get('lever') or 'baseline'} | {', '.join(r.get('job_ids', []))} | {nodes} | "
            f"{', '.join(fmt(v) for v in r.get('fom_values', [])) or '-'} | {fmt(r.get('delta_pct'), 3)} | "
            f"{fmt(r.get('noise_pct'), 3)} | {gtxt} | {r.get('decision')} | {fmt(r.get('predicted_saving_pct'), 3)} | "
            f"{r.get('bottleneck') or '-'} |")
    lines += ["", "## Why", ""]
    for r in recs:
        lines.append(f"- **iteration {r['iteration']} ({r.get('lever') or 'baseline'}) -> {r.get('decision')}**: {r.get('why')}")
        for x in r.get("infra_retries") or []:
            lines.append(f"  - infra: job {x.get('job_id')} exit {x.get('exit_code')} on {','.join(x.get('nodes_list') or [])}; "
                         f"bad nodes {','.join(x.get('bad_nodes') or []) or '?'}; re-submitted excluding "
                         f"{','.join(x.get('excluded_next') or [])} (lever not penalized)")
        g = r.get("guard")
        if g and not g.get("passed"):
            for c in g.get("checks", []):
                if not c.get("passed"):
                    lines.append(f"  - guard `{c.get('name')}`: {c.get('why')}")
        for s in r.get("skipped") or []:
            lines.append(f"  - skipped `{s.get('lever')}`: {s.get('why')} (lessons 13, 16)")
    hist = (state.get("analysis") or {}).get("history") or []
    if hist:
        lines += ["", "## Bottleneck of the best run (analysis re-run after each accepted lever)", ""]
        for h in hist:
            lines.append(f"- job {h.get('job_id') or '(--report)'}: {h.get('bottleneck') or 'unknown'}"
                         f"{' -- ' + h['report'] if h.get('report') else ''}")
    lines += ["", "## Files", "",
              "`journal.jsonl` (one record per iteration), `iter-<n>-<lever>.json`, `known_bad_nodes.txt`, "
              "`best_config.json`, `catalog.updated.yaml` (statuses and evidence after this loop), "
              "`submissions.jsonl` (every sbatch), `jobs/` (the rendered job scripts).", ""]
    p = publish(d / L.LOOP_REPORT, "\n".join(lines))
    return p, png
