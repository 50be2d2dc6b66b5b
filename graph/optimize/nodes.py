"""The perf-optimizer loop's nodes (seed 000: the perf-optimizer-loop recipe and lessons 1, 5, 9,
10, 17, 18, 23, 31).

One iteration: ``pick`` (baseline first, measured ``baseline_runs`` >= 2 times; then a lever) ->
``submit`` (render the job with the lever on top of the current best config; sbatch; the job id
goes into the state and into ``submissions.jsonl`` BEFORE anything waits) -> ``wait`` (sacct until
terminal; exit 42 = bad node: exclude it and go back to ``submit``, the lever untouched) ->
``extract`` (the FOM from ``train.log`` + ``run_info.json``) -> ``guard`` (integrity: memory,
batches per epoch, realized batch vs the current best run) -> ``decide`` (noise rule; a
high-variance lever goes back to ``submit`` for its replicate) -> ``record`` (journal line,
catalog copy, best config) -> ``pick`` ... until the iteration or node-hours budget is spent,
then ``report`` (``loop_report.md`` + the FOM-per-iteration PNG).

Each node body returns ``(update, StatusLine)`` and is wrapped by
:func:`ai4s_graph.graph.runtime.node`; the graph (``graph/optimize.py``) checkpoints after each
node, so a killed loop resumes at the node it was in: a submitted job is waited for, never
submitted again.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from ...state import Outcome, StatusLine
from ...state.loop import (
    Catalog,
    Decision,
    GuardResult,
    IterationRecord,
    LeverChange,
    LoopRequest,
    RunResult,
)
from ...tools.levers import catalog as L
from ...tools.errors import Ai4sError, InputError

# the JobSpec fields a lever may set through ``sbatch_options`` (the template owns these lines)
_SPEC_FIELDS = {"nodes": "nodes", "gpus-per-node": "gpus_per_node", "ntasks-per-node": "ntasks_per_node",
                "cpus-per-task": "cpus_per_task", "time": "time_limit"}
LOG_TAIL_LINES = 15


def req_of(state: dict[str, Any]) -> LoopRequest:
    """The loop request of a state (``state["request"]``)."""
    return LoopRequest.model_validate(state["request"])


def catalog_of(state: dict[str, Any]) -> Catalog:
    """The working catalog copy of a state."""
    return Catalog.model_validate(state["catalog"])


def loop_dir(state: dict[str, Any]) -> Path:
    """``loop-<uuid>/`` of a state."""
    return Path(state["request"]["loop_dir"])


def _cluster(req: LoopRequest):
    from ...tools.slurm.client import load_cluster_config

    return load_cluster_config(req.cluster_config)


# --------------------------------------------------------------------------------------------
# job spec


def build_spec(catalog: Catalog, change: LeverChange, *, job_name: str, exclude: list[str],
               extra_env: dict[str, Any] | None = None):
    """The :class:`~ai4s_graph.tools.slurm.jobscript.JobSpec` of one run: the catalog's baseline shape
    with ``change`` applied (``sbatch_options`` ``nodes``/``cpus-per-task``/... set the spec's own
    fields), ``exclude`` = the loop's known bad nodes. Raises :class:`InputError` for an unsafe
    value or an unknown template."""
    from ...tools.slurm.jobscript import JobSpec
    from pydantic import ValidationError

    b = catalog.baseline
    fields: dict[str, Any] = {
        "template": b.template, "job_name": job_name, "model": catalog.model, "nodes": b.nodes,
        "gpus_per_node": b.gpus_per_node, "ntasks_per_node": b.ntasks_per_node,
        "cpus_per_task": b.cpus_per_task, "time_limit": b.time_limit, "profile": b.profile,
    }
    opts: dict[str, str] = {}
    for k, v in L.sbatch_options_strings(change).items():
        if k in _SPEC_FIELDS:
            fields[_SPEC_FIELDS[k]] = v
        else:
            opts[k] = v
    try:
        return JobSpec(**fields, env=L.env_strings(change, extra_env), script_args=L.script_args_list(change),
                       sbatch_options=opts, exclude=list(exclude))
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(f"job spec: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    except ValueError as e:
        raise InputError(str(e)) from None


def _job_name(req: LoopRequest, it: int, attempt: int) -> str:
    return f"ai4s-{req.loop_id[:8]}-i{it}-s{attempt}"


# --------------------------------------------------------------------------------------------
# nodes


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
    hint = f"; bottleneck={req.bottleneck}" if req.bottleneck else ""
    n_ok = len(L.eligible_levers(cat))
    return upd, StatusLine.make(Outcome.ok, f"catalog {cat.model}: {len(cat.levers)} levers, {n_ok} eligible; "
                                            f"FOM {cat.fom.primary} ({cat.fom.direction} is better){hint}")


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
            change = L.effective_change(cat, [])
            cur = {"iteration": it, "kind": "baseline", "lever": None, "change": change.model_dump(mode="json"),
                   "runs_needed": req.baseline_runs, "runs": [], "attempt": 0, "job_id": None,
                   "infra_retries": [], "failed_run": None, "guards": [], "outcome": None, "record": None}
            return {"current": cur, "route": "submit"}, StatusLine.make(
                Outcome.ok, f"iteration {it}: baseline, {req.baseline_runs} runs to measure the spread")
        done = int(state.get("levers_done", 0))
        used = float(state.get("node_hours_used", 0.0))
        stop = None
        if done >= req.iterations:
            stop = f"iteration budget spent ({done}/{req.iterations} levers)"
        elif req.node_hours is not None and used >= req.node_hours:
            stop = f"node-hours budget spent ({used:.4f} >= {req.node_hours:g})"
        if stop is None:
            lever = L.pick_lever(cat, state.get("tried", []), state.get("applied", []),
                                 bottleneck=req.bottleneck, recommended=req.recommended,
                                 journal=L.read_journal(loop_dir(state)), picker=picker)
            if lever is None:
                stop = "no eligible lever left (blocked, baked in or tried)"
        if stop:
            return {"stop": stop, "route": "report"}, StatusLine.make(Outcome.ok, f"stop: {stop}")
        change = L.effective_change(cat, state.get("applied", []), lever.name)
        cur = {"iteration": it, "kind": "lever", "lever": lever.name, "change": change.model_dump(mode="json"),
               "runs_needed": 1, "runs": [], "attempt": 0, "job_id": None, "infra_retries": [],
               "failed_run": None, "guards": [], "outcome": None, "record": None}
        why = []
        if req.bottleneck and any(t.value == req.bottleneck for t in lever.targets):
            why.append(f"targets {req.bottleneck}")
        if lever.name in req.recommended:
            why.append("recommended by the report")
        return {"current": cur, "route": "submit"}, StatusLine.make(
            Outcome.ok, f"iteration {it}: lever {lever.name} ({lever.status.value}, variance {lever.variance.value}"
                        f"{'; ' + ', '.join(why) if why else ''})")

    return pick_body


def submit_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Render and submit the current run; the job id goes into the state (and the submissions
    ledger) before anything waits. Idempotent: a job already submitted under this iteration and
    attempt (found in the state or the ledger) is not submitted again."""
    from ...tools.slurm import client as slurm

    req = req_of(state)
    cur = dict(state["current"])
    if cur.get("job_id"):
        return {"route": "wait"}, StatusLine.make(Outcome.ok, f"job {cur['job_id']} already submitted")
    d = loop_dir(state)
    key = f"iter{cur['iteration']}-sub{cur['attempt']}"
    known = L.find_submission(d, key)
    bad = _known_bad(d)
    if known:
        cur["job_id"] = known
        return {"current": cur, "route": "wait"}, StatusLine.make(
            Outcome.ok, f"job {known} was submitted before the loop stopped; not submitting again")
    name = _job_name(req, cur["iteration"], cur["attempt"])
    found = job_by_name(name)  # killed between sbatch and the ledger write: SLURM still knows the name
    if found:
        L.record_submission(d, key, found, lever=cur.get("lever"), exclude=bad, adopted=True)
        cur["job_id"] = found
        return {"current": cur, "route": "wait"}, StatusLine.make(
            Outcome.ok, f"job {found} ({name}) already exists in SLURM; adopted, not submitted again")
    cat = catalog_of(state)
    change = LeverChange.model_validate(cur["change"])
    spec = build_spec(cat, change, job_name=name, exclude=bad, extra_env=req.extra_env)
    from ...tools.slurm.jobscript import write_script

    cluster = _cluster(req)
    script = write_script(spec, cluster, d / "jobs")
    job_id = slurm.sbatch(script)
    L.record_submission(d, key, job_id, lever=cur.get("lever"), exclude=bad, script=str(script))
    cur["job_id"] = job_id
    cur["exclude"] = bad
    what = cur.get("lever") or "baseline"
    run_no = len(cur["runs"]) + 1
    return {"current": cur, "route": "wait"}, StatusLine.make(
        Outcome.ok, f"submitted job {job_id}: {what} run {run_no}/{cur['runs_needed']}"
                    f"{' excluding ' + ','.join(bad) if bad else ''}")


def job_by_name(name: str) -> str | None:
    """The id of a job called ``name`` that SLURM knows (``squeue`` first: it is immediate;
    then ``sacct`` over the last 7 days), or None. Job names of the loop are unique per loop,
    iteration and submission (``ai4s-<loop>-i<n>-s<k>``), so a hit is this loop's own job."""
    import shutil
    import subprocess

    for argv in (["squeue", "-h", "-n", name, "-o", "%i"],
                 ["sacct", "-X", "-n", "-P", "-S", "now-7days", f"--name={name}", "-o", "JobID"]):
        if shutil.which(argv[0]) is None:
            continue
        try:
            cp = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            continue
        ids = [x.strip() for x in cp.stdout.split() if x.strip().isdigit()]
        if cp.returncode == 0 and ids:
            return ids[0]
    return None


def _known_bad(d: Path) -> list[str]:
    from ...tools.slurm.health import read_known_bad

    return read_known_bad(d / L.KNOWN_BAD)


def _perf_run(cluster, model: str, job_id: str) -> Path:
    return Path(cluster.shared_dir) / "models" / model / "perf-runs" / job_id


def log_tail(perf_run: Path, job_id: str, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` lines of the job's output (``slurm-<id>.out`` beside its run dir, else
    ``train.log``), for a crashed lever's error."""
    for p in (perf_run.parent / f"slurm-{job_id}.out", perf_run / "train.log"):
        if p.is_file():
            lines = [ln for ln in p.read_text(errors="replace").splitlines() if ln.strip()]
            return "\n".join(lines[-n:])
    return f"(no output file for job {job_id})"


_LAUNCHER_PREFIXES = ("srun:", "slurmstepd:", "ai4s:", "sbatch:")


def _error_line(tail: str) -> str:
    """The most telling line of a log tail: the last line naming an error written by the
    workload itself (srun/slurmstepd/wrapper lines only when nothing else names one), else the
    last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    words = ("Error", "error", "Exception", "Traceback", "fault", "Killed", "NaN")
    own = [ln for ln in lines if not ln.startswith(_LAUNCHER_PREFIXES)]
    for pool in (own, lines):
        for ln in reversed(pool):
            if any(w in ln for w in words):
                return ln
    return lines[-1] if lines else ""


def wait_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Wait for the current job to be terminal (sacct), then route: exit 42 -> exclude the named
    node(s) and re-submit (the lever is not penalized, lesson 1); COMPLETED -> extract; anything
    else -> the lever crashed, its log tail is kept as the error. A wait timeout stops the loop
    (seed: surface TIMEOUT_WAITING, never guess)."""
    from ...tools.slurm import client as slurm
    from ...tools.slurm.health import BAD_NODE_EXIT_CODE, append_known_bad, parse_probe_file

    req = req_of(state)
    cur = dict(state["current"])
    job_id = cur["job_id"]
    cluster = _cluster(req)
    try:
        rec = slurm.wait_for_terminal(job_id, req.wait_timeout_s)
    except slurm.WaitTimeout as e:
        return ({"stop": f"TIMEOUT_WAITING: {e}", "route": "report"},
                StatusLine.make(Outcome.fail, f"TIMEOUT_WAITING: {e}"))
    perf_run = _perf_run(cluster, state["catalog"]["model"], job_id)
    nh = len(rec.nodelist or [None]) * float(rec.elapsed_s or 0.0) / 3600.0
    run = RunResult(job_id=job_id, state=rec.base_state, exit_code=rec.exit_code, nodes_list=list(rec.nodelist),
                    elapsed_s=rec.elapsed_s, node_hours=nh, perf_run=str(perf_run))
    used = float(state.get("node_hours_used", 0.0)) + nh
    cur["job_id"] = None
    cur["attempt"] = int(cur["attempt"]) + 1
    d = loop_dir(state)
    if rec.exit_status == BAD_NODE_EXIT_CODE:
        try:
            bad = parse_probe_file(perf_run / "node_health_probe.txt").bad_nodes
            probe_err = None
        except InputError as e:
            bad, probe_err = [], str(e)
        known = append_known_bad(d / L.KNOWN_BAD, bad, jobid=job_id) if bad else _known_bad(d)
        retry = {"job_id": job_id, "exit_code": rec.exit_code, "nodes_list": list(rec.nodelist),
                 "bad_nodes": bad, "excluded_next": known, "node_hours": nh}
        if probe_err:
            retry["error"] = probe_err
        cur["infra_retries"] = [*cur.get("infra_retries", []), retry]
        if bad and len(cur["infra_retries"]) <= req.max_infra_retries:
            return ({"current": cur, "node_hours_used": used, "route": "submit"},
                    StatusLine.make(Outcome.partial, f"job {job_id} exit 42: node health probe failed on "
                                                     f"{','.join(bad)}; re-submitting excluding {','.join(known)} "
                                                     "(lever not penalized)"))
        cur["outcome"] = {"decision": Decision.infra_failed.value,
                          "why": (f"exit 42 on job {job_id}: " + (f"bad nodes {','.join(bad)}" if bad else
                                  f"no bad node named ({probe_err})") +
                                  f"; {len(cur['infra_retries'])} infra retries; lever not penalized")}
        return ({"current": cur, "node_hours_used": used, "route": "decide"},
                StatusLine.make(Outcome.partial, cur["outcome"]["why"]))
    if rec.base_state == "COMPLETED" and rec.exit_status == 0:
        cur["pending_run"] = run.model_dump(mode="json")
        return ({"current": cur, "node_hours_used": used, "route": "extract"},
                StatusLine.make(Outcome.ok, f"job {job_id} COMPLETED on {','.join(rec.nodelist)} in {rec.elapsed_s:.0f}s"))
    tail = log_tail(perf_run, job_id)
    run.error = f"{rec.base_state} exit {rec.exit_code}: {_error_line(tail)}\n{tail}"
    cur["failed_run"] = run.model_dump(mode="json")
    return ({"current": cur, "node_hours_used": used, "route": "decide"},
            StatusLine.make(Outcome.partial, f"job {job_id} {rec.base_state} exit {rec.exit_code}: {_error_line(tail)}"))


def run_fom(cat: Catalog, change: LeverChange, perf_run: Path) -> dict[str, Any]:
    """The FOM record of one finished run: :func:`tools.fom.parse_log` on ``train.log`` (nominal
    batch from ``run_info.json`` or the change) plus the memory figures of ``run_info.json``
    (``hbm_reserved_bytes``/``hbm_reserved_pct`` on GPUs, ``peak_rss_bytes`` on CPU). Raises
    :class:`InputError` for a missing or unparseable log."""
    from ...tools.trainlog.fom import parse_log

    info: dict[str, Any] = {}
    ip = perf_run / "run_info.json"
    if ip.is_file():
        try:
            info = json.loads(ip.read_text())
        except json.JSONDecodeError:
            info = {}
    gbs = info.get("global_batch_size") or L.nominal_batch(cat, change)
    kind = "throughput" if cat.fom.primary == "throughput_samples_per_s" else "latency"
    res = parse_log(perf_run / "train.log", global_batch_size=int(gbs) if gbs else None, fom_kind=kind)
    fom = res.model_dump(mode="json")
    for k in ("hbm_reserved_bytes", "hbm_reserved_pct", "hbm_total_bytes", "peak_rss_bytes", "num_workers",
              "dataset", "device", "realized_batch_mean", "max_batches_per_epoch"):
        if k in info:
            fom[k] = info[k]
    if isinstance(info.get("peak_memory"), dict):
        for k, v in info["peak_memory"].items():
            fom.setdefault(k, v)
    return fom


def extract_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Extract the FOM of the run that just finished; a log that cannot be parsed counts as a
    crashed run (its error recorded)."""
    cur = dict(state["current"])
    cat = catalog_of(state)
    run = RunResult.model_validate(cur.pop("pending_run"))
    try:
        fom = run_fom(cat, LeverChange.model_validate(cur["change"]), Path(run.perf_run or "."))
    except Ai4sError as e:
        run.error = f"FOM extraction failed: {e}"
        cur["failed_run"] = run.model_dump(mode="json")
        return {"current": cur, "route": "decide"}, StatusLine.make(Outcome.partial, run.error)
    run.fom = fom
    val = fom.get(cat.fom.primary)
    if not isinstance(val, (int, float)) or not math.isfinite(val):
        run.error = f"no {cat.fom.primary} in job {run.job_id}'s log (never reached steady state)"
        cur["failed_run"] = run.model_dump(mode="json")
        return {"current": cur, "route": "decide"}, StatusLine.make(Outcome.partial, run.error)
    run.primary = float(val)
    cur["runs"] = [*cur["runs"], run.model_dump(mode="json")]
    return {"current": cur, "route": "guard"}, StatusLine.make(
        Outcome.ok, f"job {run.job_id}: {cat.fom.primary}={val:.4g}, realized batch {fom.get('realized_batch')}, "
                    f"batches/epoch {fom.get('batches_per_epoch')}")


def guard_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Integrity guards (lessons 23, 31) of the newest lever run against the current best run.
    Baseline runs are compared with the first baseline run (recorded, never rejected)."""
    cur = dict(state["current"])
    cat = catalog_of(state)
    run = RunResult.model_validate(cur["runs"][-1])
    if cur["kind"] == "baseline":
        if len(cur["runs"]) < 2:
            return {"route": "decide"}, StatusLine.make(Outcome.ok, "first baseline run: nothing to compare with")
        g = L.integrity_guard(run, RunResult.model_validate(cur["runs"][0]), cat.fom)
        cur["guards"] = [*cur.get("guards", []), g.model_dump(mode="json")]
        st = Outcome.ok if g.passed else Outcome.partial
        return {"current": cur, "route": "decide"}, StatusLine.make(
            st, "baseline runs comparable" if g.passed else "baseline runs differ: " + "; ".join(g.reasons))
    ref = RunResult.model_validate(state["best"]["run"])
    lever = cat.lever(cur["lever"])
    g = L.integrity_guard(run, ref, cat.fom, changes_batch=lever.changes_batch)
    cur["guards"] = [*cur.get("guards", []), g.model_dump(mode="json")]
    if g.passed:
        return {"current": cur, "route": "decide"}, StatusLine.make(
            Outcome.ok, f"job {run.job_id} comparable with best job {ref.job_id} ({len(g.checks)} checks)")
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
        runs=all_runs,
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
        action, why, delta = L.decide(values, best_val, noise, cat.fom, lever.variance)
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
    record = IterationRecord(**rec_kw, decision=decision, why=why)
    cur["record"] = record.model_dump(mode="json")
    upd["catalog"] = L.record_outcome(cat, record).model_dump(mode="json")
    st = Outcome.ok if decision not in (Decision.failed, Decision.infra_failed) else Outcome.partial
    return {**upd, "current": cur, "route": "record"}, StatusLine.make(st, f"{lever.name}: {decision.value}: {why}")


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
    upd: dict[str, Any] = {"current": None, "iteration": int(record.iteration) + 1, "route": "pick"}
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


# --------------------------------------------------------------------------------------------
# loop_report.md


def _fmt(v: Any, nd: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)


def write_loop_report(state: dict[str, Any]) -> tuple[Path, Path | None]:
    """Write ``loop_report.md`` and ``fom_per_iteration.png`` in the loop directory from the
    journal (the files, not the state, so a report re-written after a resume sees every
    iteration). Returns (report path, PNG path or None when no iteration has a FOM)."""
    from ...tools.report.plots import plot_fom_iterations

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
        f"- Baseline: {', '.join(_fmt(v) for v in base.get('values', []))} (jobs {', '.join(base.get('job_ids', []))}); "
        f"noise band {_fmt(base.get('noise_pct'), 3)}% (measured spread, floor {cat.fom.min_noise_pct:g}%)",
        f"- Baseline nodes_list: {','.join(base.get('nodes_list') or []) or '-'} (read this before any node conclusion; lessons 10, 18)",
        f"- Best: {_fmt(best.get('value'))} with levers [{', '.join(best.get('levers', []))}] (jobs {', '.join(best.get('job_ids', []))})",
        f"- Stopped: {state.get('stop') or ('error: ' + state['missing'][-1] if state.get('missing') else 'running')}; node-hours used {float(state.get('node_hours_used', 0.0)):.4f}",
        f"- Known bad nodes: {', '.join(_known_bad(d)) or 'none'} (excluded by name only, never a node class; lesson 1)",
        "",
    ]
    if png is not None:
        lines += [f"![{cat.fom.primary} per iteration]({png.name})", ""]
    lines += ["| iter | lever | jobs | nodes_list | FOM values | delta % | noise % | guard | decision |",
              "|---:|---|---|---|---|---:|---:|---|---|"]
    for r in recs:
        g = r.get("guard")
        gtxt = "-" if not g else ("pass" if g.get("passed") else "FAIL")
        nodes = " / ".join(",".join(n) for n in r.get("nodes_list") or []) or "-"
        lines.append(
            f"| {r['iteration']} | {r.get('lever') or 'baseline'} | {', '.join(r.get('job_ids', []))} | {nodes} | "
            f"{', '.join(_fmt(v) for v in r.get('fom_values', [])) or '-'} | {_fmt(r.get('delta_pct'), 3)} | "
            f"{_fmt(r.get('noise_pct'), 3)} | {gtxt} | {r.get('decision')} |")
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
    lines += ["", "## Files", "",
              "`journal.jsonl` (one record per iteration), `iter-<n>-<lever>.json`, `known_bad_nodes.txt`, "
              "`best_config.json`, `catalog.updated.yaml` (statuses and evidence after this loop), "
              "`submissions.jsonl` (every sbatch), `jobs/` (the rendered job scripts).", ""]
    p = d / L.LOOP_REPORT
    p.write_text("\n".join(lines))
    return p, png
