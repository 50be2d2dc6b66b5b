"""``submit`` -> ``wait`` -> ``extract``: one run of the current iteration through the shared job
lifecycle (:mod:`ai4s_graph.tools.slurm.jobs`) on the loop's executor (SLURM or local).

- ``submit`` renders the job with the lever on top of the current best config, pins it to the
  baseline's nodes (``--nodelist``; lessons 9, 10, 18) unless one of them is known bad, excludes
  the known bad nodes, and records the job id in ``submissions.jsonl`` before anything waits;
- ``wait`` classifies the end: an infrastructure failure (exit 42, fabric, launcher, filesystem,
  missing library: ``tools/slurm/failure_signatures.yaml``) re-submits excluding the node by name
  and never penalizes the lever (lesson 1); a lever failure keeps its verbatim error;
- ``extract`` reads the FOM (``train.log`` + ``run_info.json``) and the peak memory from
  telemetry when the workload wrote none (lesson 23).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ....state import Outcome, StatusLine
from ....state.loop import Catalog, Decision, LeverChange, RunResult
from ....tools.errors import Ai4sError
from ....tools.levers import catalog as L
from ....tools.levers.guards import memory_from_telemetry
from ....tools.slurm import jobs
from ....tools.slurm.client import WaitTimeout
from .common import build_spec, catalog_of, executor_of, job_name, known_bad, loop_dir, req_of


def pin_for(state: dict[str, Any], cur: dict[str, Any], bad: list[str]) -> tuple[list[str], str]:
    """The nodes this run is pinned to (lessons 9, 10, 18: replicates and levers on the
    baseline's nodes) and why; [] for the first baseline run, when pinning is off, or when a
    pinned node is known bad (the run then lands elsewhere and the placement guard notes it)."""
    req = req_of(state)
    if not req.pin_placement:
        return [], "placement pinning off"
    base = (state.get("baseline") or {}).get("nodes_list") or []
    if not base and cur["kind"] == "baseline" and cur.get("runs"):
        base = cur["runs"][0].get("nodes_list") or []
    if not base:
        return [], "first baseline run: placed by the scheduler"
    if set(base) & set(bad):
        return [], f"baseline nodes {','.join(base)} include known bad {','.join(sorted(set(base) & set(bad)))}: not pinned"
    return list(base), f"pinned to the baseline's nodes {','.join(base)}"


def submit_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Render and submit the current run; the job id goes into the state (and the submissions
    ledger) before anything waits. Idempotent: a job already submitted under this iteration and
    attempt (found in the state, the ledger, or the executor under the job name) is not
    submitted again."""
    req = req_of(state)
    cur = dict(state["current"])
    if cur.get("job_id"):
        return {"route": "wait"}, StatusLine.make(Outcome.ok, f"job {cur['job_id']} already submitted")
    d = loop_dir(state)
    key = f"iter{cur['iteration']}-sub{cur['attempt']}"
    known = L.find_submission(d, key)
    bad = known_bad(d)
    if known:
        cur["job_id"] = known
        return {"current": cur, "route": "wait"}, StatusLine.make(
            Outcome.ok, f"job {known} was submitted before the loop stopped; not submitting again")
    ex = executor_of(req)
    name = job_name(req, cur["iteration"], cur["attempt"])
    found = ex.find_by_name(name)  # killed between submit and the ledger write: the executor knows the name
    if found:
        L.record_submission(d, key, found, lever=cur.get("lever"), exclude=bad, adopted=True)
        cur["job_id"] = found
        return {"current": cur, "route": "wait"}, StatusLine.make(
            Outcome.ok, f"job {found} ({name}) already exists in {ex.name}; adopted, not submitted again")
    cat = catalog_of(state)
    change = LeverChange.model_validate(cur["change"])
    pin, pin_why = pin_for(state, cur, bad)
    spec = build_spec(cat, change, job_name=name, exclude=bad, extra_env=req.extra_env, nodelist=pin)
    job_id, script = ex.submit(spec, d / "jobs")
    L.record_submission(d, key, job_id, lever=cur.get("lever"), exclude=bad, script=str(script), nodelist=pin,
                        executor=ex.name)
    cur["job_id"] = job_id
    cur["exclude"] = bad
    cur["pin"] = pin
    what = cur.get("lever") or "baseline"
    run_no = len(cur["runs"]) + 1
    return {"current": cur, "route": "wait"}, StatusLine.make(
        Outcome.ok, f"submitted job {job_id} ({ex.name}): {what} run {run_no}/{cur['runs_needed']}; {pin_why}"
                    f"{'; excluding ' + ','.join(bad) if bad else ''}")


def wait_body(state: dict[str, Any]) -> tuple[dict[str, Any], StatusLine]:
    """Wait for the current job to be terminal, then route: infrastructure failure -> exclude the
    named node(s) and re-submit (the lever is not penalized, lesson 1); COMPLETED -> extract;
    a lever failure -> decide, its log's telling line kept as the error. A wait timeout stops the
    loop (seed: surface TIMEOUT_WAITING, never guess)."""
    req = req_of(state)
    cur = dict(state["current"])
    job_id = cur["job_id"]
    ex = executor_of(req)
    perf_run = ex.run_dir(state["catalog"]["model"], job_id)
    try:
        end = jobs.finish(ex, job_id, perf_run, req.wait_timeout_s)
    except WaitTimeout as e:
        return ({"stop": f"TIMEOUT_WAITING: {e}", "route": "report"},
                StatusLine.make(Outcome.fail, f"TIMEOUT_WAITING: {e}"))
    rec = end.record
    jobs.write_manifest(jobs.build_manifest(end, state["catalog"]["model"], executor=ex.name,
                                            loop_id=req.loop_id, iteration=cur["iteration"],
                                            lever=cur.get("lever"), pinned_nodelist=cur.get("pin") or []), perf_run)
    run = RunResult(job_id=job_id, state=rec.base_state, exit_code=rec.exit_code, nodes_list=list(rec.nodelist),
                    elapsed_s=rec.elapsed_s, node_hours=end.node_hours, perf_run=str(perf_run))
    used = float(state.get("node_hours_used", 0.0)) + end.node_hours
    cur["job_id"] = None
    cur["attempt"] = int(cur["attempt"]) + 1
    d = loop_dir(state)
    if end.verdict == "infra":
        f = end.failure
        plan = jobs.plan_retry(end, d / L.KNOWN_BAD, list(cur.get("exclude") or []),
                               len(cur.get("infra_retries", [])), req.max_infra_retries)
        retry = {"job_id": job_id, "exit_code": rec.exit_code, "nodes_list": list(rec.nodelist),
                 "bad_nodes": plan.bad_nodes, "excluded_next": plan.exclude, "node_hours": end.node_hours,
                 "kind": f.kind, "signature": f.signature, "line": f.line[:300]}
        if end.probe_error:
            retry["error"] = end.probe_error
        cur["infra_retries"] = [*cur.get("infra_retries", []), retry]
        code = "exit 42" if rec.exit_status == 42 else f"exit {rec.exit_code}"
        if plan.resubmit:
            return ({"current": cur, "node_hours_used": used, "route": "submit"},
                    StatusLine.make(Outcome.partial, f"job {job_id} {code}: infrastructure, lever not penalized; "
                                                     f"{plan.why}; {f.describe()}"))
        cur["outcome"] = {"decision": Decision.infra_failed.value,
                          "why": (f"{code} on job {job_id}: {f.describe()}; {plan.why}; "
                                  f"{len(cur['infra_retries'])} infra retries; lever not penalized")}
        return ({"current": cur, "node_hours_used": used, "route": "decide"},
                StatusLine.make(Outcome.partial, cur["outcome"]["why"]))
    if end.verdict == "completed":
        cur["pending_run"] = run.model_dump(mode="json")
        return ({"current": cur, "node_hours_used": used, "route": "extract"},
                StatusLine.make(Outcome.ok, f"job {job_id} COMPLETED on {','.join(rec.nodelist)} in {rec.elapsed_s:.0f}s"))
    run.error = end.error()
    cur["failed_run"] = run.model_dump(mode="json")
    return ({"current": cur, "node_hours_used": used, "route": "decide"},
            StatusLine.make(Outcome.partial, f"job {job_id} {rec.base_state} exit {rec.exit_code}: "
                                             f"{end.failure.line if end.failure else ''}"))


def run_fom(cat: Catalog, change: LeverChange, perf_run: Path) -> dict[str, Any]:
    """The FOM record of one finished run: :func:`tools.trainlog.fom.parse_log` on ``train.log``
    (nominal batch from ``run_info.json`` or the change), the memory figures of ``run_info.json``
    (``hbm_reserved_bytes``/``hbm_reserved_pct`` on GPUs, ``peak_rss_bytes`` on CPU) and the peak
    device memory of the run's telemetry (``hbm_used_peak_bytes``, for workloads that write no
    figure: lesson 23). Raises :class:`InputError` for a missing or unparseable log."""
    from ....tools.trainlog.fom import parse_log

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
              "dataset", "device", "realized_batch_mean", "max_batches_per_epoch", "staged_samples"):
        if k in info:
            fom[k] = info[k]
    if isinstance(info.get("peak_memory"), dict):
        for k, v in info["peak_memory"].items():
            fom.setdefault(k, v)
    for k, v in memory_from_telemetry(perf_run).items():
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

