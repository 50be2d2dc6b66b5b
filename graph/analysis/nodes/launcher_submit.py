"""Submit mode of the launcher (``ai4s-graph run --submit``): render the job script, ``sbatch`` it,
then -- in a separate node, after LangGraph has checkpointed the job id -- wait for sacct's
terminal state, handle the mount-health probe's exit 42 with ONE re-submission that excludes the
named node(s), and write ``manifest.json`` with the nodes list from SLURM.

Why two steps: the job id must be in the checkpoint before any waiting, so a run killed while
the job runs is resumed by waiting on the same job, never by submitting it again. Before sbatch
runs, an intent record ``<out_dir>/.ai4s-graph/intent-attempt<N>.json`` gives the job a name
unique to this submission (``ai4s-<model>-<token>``); a run killed during sbatch, or before the
checkpoint write, is resumed by finding that name in squeue/sacct
(:mod:`ai4s_graph.tools.slurm.submission`). No intent record, no sbatch.

The lifecycle itself (the wait, the classification of the end -- exit 42 and the other
infrastructure signatures --, the exclusion by name, the perf-run path, the manifest) is
:mod:`ai4s_graph.tools.slurm.jobs`, shared with the optimizer loop.

Seed 000 sources: "When something goes wrong" (timeout -> ``scontrol show job`` and
``state=TIMEOUT_WAITING``, stop and surface), optimizer-loop lesson 1 and lessons 16/18 (exit 42 ->
``known_bad_nodes.txt`` + ``--exclude=<node>``, never a node class), lesson 10/18 (nodes list first).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..configuration import ResolvedRun, RunRequest
from ..schema import AnalysisState, SubmittedJob
from ...runtime import node
from ....state import Manifest, Outcome, StatusLine
from ....state.publish import publish
from ....tools.slurm import health, jobs, jobscript, client as slurm
from ....tools.slurm.executors import SlurmExecutor
from ....tools.slurm.query import RetryLog, scontrol_state
from ....tools.slurm.submission import submit_once
from ....tools.errors import InputError

MAX_ATTEMPTS = 2  # the first submission + one re-submission after an infrastructure failure (seed lesson 1)


def _submitted_marker(out_dir: str | Path) -> Path:
    return Path(out_dir) / ".ai4s-graph" / "submitted.json"


def job_spec(params: dict[str, Any], exclude: list[str]) -> jobscript.JobSpec:
    """``request.submit_params`` -> :class:`JobSpec` (unknown keys ignored; ``env`` values become
    strings). Raises :class:`InputError` for a bad value."""
    keys = ("template", "job_name", "model", "nodes", "gpus_per_node", "ntasks_per_node", "cpus_per_task", "time_limit",
            "script_args", "sbatch_options", "profile")
    data = {k: params[k] for k in keys if params.get(k) is not None}
    data["env"] = {str(k): str(v) for k, v in (params.get("env") or {}).items()}
    data.setdefault("model", "cpu-toy")
    data.setdefault("job_name", f"ai4s-{data['model']}")
    data["exclude"] = list(exclude)
    try:
        return jobscript.JobSpec.model_validate(data)
    except Exception as e:  # pydantic ValidationError: one line naming the field
        errs = getattr(e, "errors", None)
        if callable(errs):
            err = errs()[0]
            raise InputError(f"submit parameter {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        raise InputError(f"submit parameters: {e}") from None


def cluster_for(req: RunRequest) -> slurm.ClusterConfig:
    """The cluster config: ``submit_params.cluster_config``, else ``request.cluster_config``, else
    the defaults of :func:`slurm.load_cluster_config`."""
    path = (req.submit_params or {}).get("cluster_config") or req.cluster_config
    return slurm.load_cluster_config(path)


def run_dir_for(cluster: slurm.ClusterConfig, model: str, jobid: str) -> Path:
    """``<shared_dir>/models/<model>/perf-runs/<jobid>/`` (:func:`jobs.perf_run_dir`)."""
    return jobs.perf_run_dir(cluster.shared_dir, model, jobid)


def submit_step(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Render and submit the job (called by the ``launcher`` node when ``request.submit``).

    Returns ``({"job": SubmittedJob(jobid, attempt, exclude, script, submitted_at, model, run_dir)},
    STATUS)`` and never waits. When ``state["job"]`` already holds a job id for the current attempt
    (a resumed run), or the submitted-marker file names one, nothing is submitted again. Raises
    :class:`InputError` (bad parameter or shell metacharacter) or :class:`ToolUnavailableError`
    (no sbatch, sbatch refused) -- the node wrapper turns them into ``STATUS=fail``."""
    req = state["request"]
    params = dict(req.submit_params or {})
    job = state.get("job") or SubmittedJob()
    out_dir = Path(req.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    if job.jobid and not job.resubmit:
        return ({"job": job}, StatusLine.make(Outcome.ok, f"job {job.jobid} already submitted (attempt "
                                                          f"{job.attempt or 1}); adopting it, nothing re-submitted"))
    attempt = job.attempt + 1
    exclude = sorted(set(job.exclude))
    marker = _submitted_marker(out_dir)  # written by earlier versions after sbatch answered
    if marker.is_file():
        prev = SubmittedJob.model_validate_json(marker.read_text())
        if prev.attempt == attempt and prev.jobid:
            prev = prev.model_copy(update={"resubmit": False, "jobid": slurm.check_jobid(prev.jobid)})
            return ({"job": prev}, StatusLine.make(Outcome.ok, f"job {prev.jobid} was submitted before a restart "
                                                               f"(attempt {attempt}); adopting it"))
    if attempt > MAX_ATTEMPTS:
        raise InputError(f"already re-submitted once; not submitting attempt {attempt}")

    cluster = cluster_for(req)
    spec = job_spec(params, exclude)
    ex = SlurmExecutor(cluster)
    script_dir = out_dir / "jobs" / f"attempt{attempt}"
    key = {"out_dir": str(out_dir), "submit_params": params}
    sub = submit_once(spec, state_dir=out_dir / ".ai4s-graph", key=key, attempt=attempt,
                      submit=lambda named: ex.submit(named, script_dir))
    script = sub.script or str(next(iter(sorted(script_dir.glob("*.sbatch"))), "")) or None
    new_job = SubmittedJob(jobid=sub.jobid, attempt=attempt, exclude=exclude, script=script,
                           submitted_at=sub.intent.created_at, model=spec.model,
                           run_dir=str(run_dir_for(cluster, spec.model, sub.jobid)),
                           previous=list(job.previous) + ([job.jobid] if job.jobid else []))
    ex_txt = f" --exclude={','.join(exclude)}" if exclude else ""
    if sub.how == "adopted":
        return ({"job": new_job}, StatusLine.make(Outcome.ok, f"{sub.note} (attempt {attempt})"))
    return ({"job": new_job},
            StatusLine.make(Outcome.ok, f"submitted job {sub.jobid} as {sub.intent.job_name} (attempt {attempt}, "
                                        f"{spec.template}, {spec.nodes} node(s){ex_txt})"))


def _poll_s(timeout_s: float) -> float:
    return max(0.2, min(2.0, timeout_s / 20.0))


def _write_manifest(manifest: Manifest, run_dir: Path, out_dir: Path) -> list[str]:
    return jobs.write_manifest(manifest, run_dir, out_dir)


@node("wait_for_job")
def wait_for_job(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Wait (bounded by ``request.wait_timeout_s``) for the submitted job's terminal sacct state.

    - timeout: ``scontrol show job`` saved as ``scontrol_show_job.txt``, ``state=TIMEOUT_WAITING``
      written into manifest.json, ``{"stop": "TIMEOUT_WAITING"}``, STATUS=fail;
    - exit code 42 (mount-health probe): bad node(s) from ``node_health_probe.txt`` appended to
      ``<out_dir>/known_bad_nodes.txt`` and ONE re-submission asked for with ``--exclude`` of
      exactly those nodes (``job.resubmit``); a second bad-node failure stops with STATUS=fail;
    - otherwise manifest.json (nodes list from sacct first, state, start/end, exit code, artifacts,
      plus run_info.json) in the perf-run dir and the output dir; ``run`` (:class:`ResolvedRun`)
      points at it. STATUS=ok for COMPLETED, fail for any other final state."""
    req = state["request"]
    job = state.get("job") or SubmittedJob()
    if not job.jobid:
        raise InputError("wait_for_job: no submitted job in the state")
    jobid = str(job.jobid)
    out_dir = Path(req.out_dir)
    run_dir = Path(job.run_dir or run_dir_for(cluster_for(req), job.model or "cpu-toy", jobid))
    model = job.model or "unknown"

    retries = RetryLog()
    try:
        rec = slurm.wait_for_terminal(jobid, req.wait_timeout_s, poll_s=_poll_s(req.wait_timeout_s), log=retries)
    except slurm.WaitTimeout as e:
        publish(out_dir / "scontrol_show_job.txt", e.scontrol or "(scontrol show job: no record)\n", root=out_dir)
        last = e.last
        # no sacct row yet (slurmdbd lags under load): slurmctld's own answer, from scontrol
        slurm_state = last.state if last else (scontrol_state(e.scontrol) or "no sacct row")
        m = Manifest(jobid=jobid, state="TIMEOUT_WAITING", model=model, nodes_list=last.nodelist if last else [],
                     start_unix=last.start if last else None, exit_code=last.exit_code if last else None,
                     slurm_state=slurm_state, wait_timeout_s=req.wait_timeout_s,
                     scontrol_show_job="scontrol_show_job.txt")
        _write_manifest(m, run_dir, out_dir)
        return ({"stop": "TIMEOUT_WAITING", "manifest": m,
                 "job": job.model_copy(update={"resubmit": False, "done": False}),
                 "missing": [f"wait_for_job: {e}"]},
                StatusLine.make(Outcome.fail, f"TIMEOUT_WAITING: job {jobid} not terminal after "
                                              f"{req.wait_timeout_s:g}s (sacct: {slurm_state}){_said(retries)}; stopped"))
    retried = _said(retries)
    slurm_notes = {"slurm_retries": dict(retries.retries)} if retries.total else {}

    end = jobs.classify_end(rec, run_dir, SlurmExecutor(cluster_for(req)).output_path(run_dir, jobid))
    attempt = job.attempt or 1
    if end.verdict == "infra":
        f = end.failure
        known_path = out_dir / jobs.KNOWN_BAD_FILE
        plan = jobs.plan_retry(end, known_path, list(job.exclude), attempt - 1, MAX_ATTEMPTS - 1)
        if plan.resubmit:
            what = ("failed the mount-health probe" if f.signature == "mount_probe_exit_42"
                    else f"failed on infrastructure ({f.kind})")
            return ({"job": job.model_copy(update={"resubmit": True, "exclude": plan.exclude,
                                                   "failed_probe_nodes": plan.bad_nodes,
                                                   "known_bad_nodes": health.read_known_bad(known_path)})},
                    StatusLine.make(Outcome.partial, f"job {jobid} {what} on {','.join(plan.bad_nodes) or 'no named node'} "
                                                     f"(exit {rec.exit_status}); re-submitting with "
                                                     f"--exclude={','.join(plan.exclude) or '(none)'}{retried}"))
        if f.signature == "mount_probe_exit_42" and not plan.bad_nodes:
            reason = f"job {jobid} exited 42 but {run_dir / health.PROBE_FILE} names no bad node; not re-submitting"
        elif f.signature == "mount_probe_exit_42":
            reason = (f"job {jobid} (attempt {attempt}) failed the node health probe again on "
                      f"{','.join(plan.bad_nodes)}; stopped")
        else:
            reason = f"job {jobid} (attempt {attempt}): {f.describe()}; {plan.why}; stopped"
        m = jobs.build_manifest(end, model, executor="slurm", attempt=attempt, excluded_nodes=list(job.exclude),
                                previous_jobids=list(job.previous), **slurm_notes)
        _write_manifest(m, run_dir, out_dir)
        return ({"stop": "BAD_NODE", "manifest": m, "job": job.model_copy(update={"resubmit": False})},
                StatusLine.make(Outcome.fail, reason + retried))

    # a terminal state: the manifest from SLURM first, then what the workload wrote (jobs.build_manifest)
    manifest = jobs.build_manifest(end, model, executor="slurm", attempt=attempt, excluded_nodes=list(job.exclude),
                                   previous_jobids=list(job.previous), **slurm_notes)
    _write_manifest(manifest, run_dir, out_dir)
    nodes = ",".join(rec.nodelist) or "no nodes"
    ok = rec.base_state == "COMPLETED"
    update: dict[str, Any] = {"manifest": manifest,
                              "job": job.model_copy(update={"resubmit": False, "done": True, "state": rec.base_state}),
                              "run": ResolvedRun(perf_run=str(run_dir), jobid=jobid)}
    if not ok:
        update["missing"] = [f"wait_for_job: job {jobid} ended {rec.state} (exit {rec.exit_code})"
                             f"{': ' + end.failure.describe() if end.failure else ''}"]
    return (update, StatusLine.make(Outcome.ok if ok else Outcome.fail,
                                    f"job {jobid} {rec.base_state} (exit {rec.exit_code}) on {nodes}{retried}"))


def _said(retries: RetryLog) -> str:
    """``"; retried sacct 2 times (...)"`` when the wait met transient SLURM failures, else ``""``."""
    return f"; {retries.summary()}" if retries.total else ""


def route_after_wait(state: AnalysisState) -> str:
    """After ``wait_for_job``: ``"launcher"`` to re-submit once (bad node), ``"stop"`` when the graph
    must stop (TIMEOUT_WAITING, repeated bad node, SLURM unreachable), else ``"analyze"``."""
    job = state.get("job") or SubmittedJob()
    if state.get("stop"):
        return "stop"
    if job.resubmit:
        return "launcher"
    if not job.done:
        return "stop"
    return "analyze"
