"""Submit mode of the launcher (``ai4s-graph run --submit``): render the job script, ``sbatch`` it,
then -- in a separate node, after LangGraph has checkpointed the job id -- wait for sacct's
terminal state, handle the mount-health probe's exit 42 with ONE re-submission that excludes the
named node(s), and write ``manifest.json`` with the nodes list from SLURM.

Why two steps: the job id must be in the checkpoint before any waiting, so a run killed while
the job runs is resumed by waiting on the same job, never by submitting it again. A second guard,
``<out_dir>/.ai4s-graph/submitted.json`` written the instant sbatch answers, covers a kill between
sbatch's answer and the checkpoint write.

Seed 000 sources: "When something goes wrong" (timeout -> ``scontrol show job`` and
``state=TIMEOUT_WAITING``, stop and surface), optimizer-loop lesson 1 and lessons 16/18 (exit 42 ->
``known_bad_nodes.txt`` + ``--exclude=<node>``, never a node class), lesson 10/18 (nodes list first).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..configuration import ResolvedRun, RunRequest
from ..schema import AnalysisState, SubmittedJob
from ...runtime import node
from ....state import Manifest, Outcome, StatusLine
from ....tools.slurm import health, jobscript, client as slurm
from ....tools.errors import InputError

MAX_ATTEMPTS = 2  # the first submission + one re-submission after a bad-node probe (seed lesson 1)
_RUN_INFO_KEYS = ("precision", "global_batch_size", "num_workers", "hbm_reserved_bytes", "peak_rss_bytes", "steps",
                  "torch", "device", "device_name", "world_size", "dataset", "data_latency_ms", "threads",
                  "realized_batch_mean", "partial_step_fraction", "max_batches_per_epoch", "epoch_losses",
                  "log_format", "profiled")


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
    """``<shared_dir>/models/<model>/perf-runs/<jobid>/``."""
    return Path(cluster.shared_dir) / "models" / model / "perf-runs" / str(jobid)


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
    marker = _submitted_marker(out_dir)
    if marker.is_file():
        prev = SubmittedJob.model_validate_json(marker.read_text())
        if prev.attempt == attempt and prev.jobid:
            prev = prev.model_copy(update={"resubmit": False})
            return ({"job": prev}, StatusLine.make(Outcome.ok, f"job {prev.jobid} was submitted before a restart "
                                                               f"(attempt {attempt}); adopting it"))
    if attempt > MAX_ATTEMPTS:
        raise InputError(f"already re-submitted once; not submitting attempt {attempt}")

    cluster = cluster_for(req)
    spec = job_spec(params, exclude)
    script = jobscript.write_script(spec, cluster, out_dir / "jobs" / f"attempt{attempt}")
    jobid = slurm.sbatch(script)
    new_job = SubmittedJob(jobid=jobid, attempt=attempt, exclude=exclude, script=str(script),
                           submitted_at=time.time(), model=spec.model,
                           run_dir=str(run_dir_for(cluster, spec.model, jobid)),
                           previous=list(job.previous) + ([job.jobid] if job.jobid else []))
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(new_job.model_dump_json() + "\n")
    ex = f" --exclude={','.join(exclude)}" if exclude else ""
    return ({"job": new_job},
            StatusLine.make(Outcome.ok, f"submitted job {jobid} (attempt {attempt}, {spec.template}, "
                                        f"{spec.nodes} node(s){ex})"))


def _poll_s(timeout_s: float) -> float:
    return max(0.2, min(2.0, timeout_s / 20.0))


def _read_json(p: Path) -> dict[str, Any]:
    try:
        d = json.loads(p.read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_manifest(manifest: Manifest, run_dir: Path, out_dir: Path) -> list[str]:
    written = []
    for d in (run_dir, out_dir):
        try:
            d.mkdir(parents=True, exist_ok=True)
            manifest.write(d / "manifest.json")
            written.append(str(d / "manifest.json"))
        except OSError:
            pass
    return written


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

    try:
        rec = slurm.wait_for_terminal(jobid, req.wait_timeout_s, poll_s=_poll_s(req.wait_timeout_s))
    except slurm.WaitTimeout as e:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "scontrol_show_job.txt").write_text(e.scontrol or "(scontrol show job: no record)\n")
        last = e.last
        slurm_state = last.state if last else "no sacct row"
        m = Manifest(jobid=jobid, state="TIMEOUT_WAITING", model=model, nodes_list=last.nodelist if last else [],
                     start_unix=last.start if last else None, exit_code=last.exit_code if last else None,
                     slurm_state=slurm_state, wait_timeout_s=req.wait_timeout_s,
                     scontrol_show_job="scontrol_show_job.txt")
        _write_manifest(m, run_dir, out_dir)
        return ({"stop": "TIMEOUT_WAITING", "manifest": m,
                 "job": job.model_copy(update={"resubmit": False, "done": False}),
                 "missing": [f"wait_for_job: {e}"]},
                StatusLine.make(Outcome.fail, f"TIMEOUT_WAITING: job {jobid} not terminal after "
                                              f"{req.wait_timeout_s:g}s (sacct: {slurm_state}); stopped"))

    if rec.exit_status == health.BAD_NODE_EXIT_CODE:
        probe_path = run_dir / health.PROBE_FILE
        bad: list[str] = []
        if probe_path.is_file():
            bad = health.parse_probe_file(probe_path).bad_nodes
        attempt = job.attempt or 1
        if not bad:
            reason = f"job {jobid} exited 42 but {probe_path} names no bad node; not re-submitting"
        elif attempt >= MAX_ATTEMPTS:
            reason = f"job {jobid} (attempt {attempt}) failed the node health probe again on {','.join(bad)}; stopped"
        else:
            known = health.append_known_bad(out_dir / "known_bad_nodes.txt", bad, jobid=jobid)
            exclude = sorted(set(job.exclude) | set(bad))
            return ({"job": job.model_copy(update={"resubmit": True, "exclude": exclude, "failed_probe_nodes": bad,
                                                   "known_bad_nodes": known})},
                    StatusLine.make(Outcome.partial, f"job {jobid} failed the mount-health probe on {','.join(bad)} "
                                                     f"(exit 42); re-submitting with --exclude={','.join(exclude)}"))
        m = Manifest(jobid=jobid, state=rec.base_state, model=model, nodes_list=rec.nodelist, start_unix=rec.start,
                     end_unix=rec.end, exit_code=rec.exit_code)
        m.artifacts.node_health_probe = health.PROBE_FILE if probe_path.is_file() else None
        _write_manifest(m, run_dir, out_dir)
        return ({"stop": "BAD_NODE", "manifest": m, "job": job.model_copy(update={"resubmit": False})},
                StatusLine.make(Outcome.fail, reason))

    # a terminal state: build the manifest from SLURM first, then what the workload wrote
    from .launcher import discover_artifacts

    base = _read_json(run_dir / "manifest.json")
    info = _read_json(run_dir / "run_info.json")
    data: dict[str, Any] = {k: v for k, v in base.items() if k not in ("artifacts",)}
    for k in _RUN_INFO_KEYS:
        if info.get(k) is not None:
            data[k] = info[k]
    if info.get("model"):
        data["workload_model"] = info["model"]
    data.update(jobid=jobid, state=rec.base_state, nodes_list=rec.nodelist, model=model,
                start_unix=rec.start, end_unix=rec.end, exit_code=rec.exit_code, num_nodes=len(rec.nodelist),
                attempt=job.attempt or 1, excluded_nodes=list(job.exclude), previous_jobids=list(job.previous))
    if info.get("start_unix") is not None:
        data["train_start_unix"], data["train_end_unix"] = info.get("start_unix"), info.get("end_unix")
    manifest = Manifest.model_validate(data)  # run_info.json and the workload's manifest.json: files read
    manifest.artifacts = discover_artifacts(run_dir) if run_dir.is_dir() else manifest.artifacts
    _write_manifest(manifest, run_dir, out_dir)
    nodes = ",".join(rec.nodelist) or "no nodes"
    ok = rec.base_state == "COMPLETED"
    update: dict[str, Any] = {"manifest": manifest,
                              "job": job.model_copy(update={"resubmit": False, "done": True, "state": rec.base_state}),
                              "run": ResolvedRun(perf_run=str(run_dir), jobid=jobid)}
    if not ok:
        update["missing"] = [f"wait_for_job: job {jobid} ended {rec.state} (exit {rec.exit_code})"]
    return (update, StatusLine.make(Outcome.ok if ok else Outcome.fail,
                                    f"job {jobid} {rec.base_state} (exit {rec.exit_code}) on {nodes}"))


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
