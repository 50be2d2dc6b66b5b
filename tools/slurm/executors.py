"""What runs a job: SLURM (``sbatch`` + ``sacct``) or a local subprocess on this machine.

Both take the same :class:`~ai4s_graph.tools.slurm.jobscript.JobSpec`, put the run in the same
directory (:func:`~ai4s_graph.tools.slurm.jobs.perf_run_dir`) and answer ``wait`` with a
:class:`~ai4s_graph.tools.slurm.client.SacctRecord`, so the job lifecycle
(:mod:`~ai4s_graph.tools.slurm.jobs`) and both graphs are the same on a cluster and on one
workstation GPU.

The local executor starts the job as a detached ``bash`` process (its own session), so a loop
killed while the job runs finds it on resume: the job's id, pid, start and exit status are files
in ``<run_dir>/.local_job/`` and a ledger ``<perf_runs_root>/.local_jobs.jsonl`` maps job names
to ids. Its one node is this host (``socket.gethostname()``, short form); a pin to another node,
or this host in the exclusion list, is refused (nothing else could run it).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import subprocess
import time
from pathlib import Path
from typing import Protocol

from ..errors import InputError
from ..files import import_root
from . import client as slurm
from .client import ClusterConfig, SacctRecord, WaitTimeout
from .jobs import perf_run_dir, perf_runs_root
from .jobscript import JobSpec, validate_spec, write_script
from .query import poll

LOCAL_FIRST_JOBID = 700001  # local job ids count up from here (numeric, like SLURM's)
LOCAL_TEMPLATES = ("cpu-toy", "generic")  # templates whose workload is a plain command line
_PROCS: dict[str, subprocess.Popen] = {}  # local jobs started by this process (reaped in wait)


class Executor(Protocol):
    """Submit / wait / find a job; see :class:`SlurmExecutor` and :class:`LocalExecutor`."""

    name: str
    cluster: ClusterConfig

    def submit(self, spec: JobSpec, script_dir: Path) -> tuple[str, Path]: ...

    def wait(self, jobid: str, timeout_s: float, poll_s: float = 1.0) -> SacctRecord: ...

    def find_by_name(self, name: str) -> str | None: ...

    def run_dir(self, model: str, jobid: str) -> Path: ...

    def output_path(self, run_dir: Path, jobid: str) -> Path: ...


class SlurmExecutor:
    """sbatch / sacct on the cluster of ``cluster`` (today's path)."""

    name = "slurm"

    def __init__(self, cluster: ClusterConfig):
        self.cluster = cluster

    def submit(self, spec: JobSpec, script_dir: Path) -> tuple[str, Path]:
        """Render ``spec`` into ``script_dir`` and ``sbatch`` it; returns (job id, script path)."""
        script = write_script(spec, self.cluster, script_dir)
        return slurm.sbatch(script), script

    def wait(self, jobid: str, timeout_s: float, poll_s: float = 1.0) -> SacctRecord:
        """:func:`client.wait_for_terminal` (raises :class:`WaitTimeout`)."""
        return slurm.wait_for_terminal(jobid, timeout_s, poll_s=poll_s)

    def find_by_name(self, name: str) -> str | None:
        """The id of this user's job called ``name`` that SLURM knows (``squeue`` first: it is
        immediate; then ``sacct`` over the last 7 days; :func:`client.find_jobs_by_name`), the
        lowest when several are, or None. Raises :class:`ToolUnavailableError` when SLURM does not
        answer: "not found" is never a guess (the caller would submit again)."""
        ids = slurm.find_jobs_by_name(name)
        return ids[0] if ids else None

    def run_dir(self, model: str, jobid: str) -> Path:
        return perf_run_dir(self.cluster.shared_dir, model, jobid)

    def output_path(self, run_dir: Path, jobid: str) -> Path:
        """``slurm-<id>.out`` beside the run dir (the templates' ``--output``)."""
        return Path(run_dir).parent / f"slurm-{jobid}.out"


def _floats(p: Path, n: int) -> list[float] | None:
    """The first ``n`` numbers of a small status file, or None (missing, partial or garbled)."""
    try:
        parts = p.read_text().split()
        vals = [float(x) for x in parts[:n]]
    except (OSError, ValueError):
        return None
    return vals if len(vals) == n else None


def local_host() -> str:
    """This machine's short host name (the local executor's only node)."""
    return socket.gethostname().split(".")[0]


class LocalExecutor:
    """Runs each job as a subprocess on this machine (``--executor local``).

    ``cluster.shared_dir`` is where runs go (``<shared>/models/<model>/perf-runs/<id>/``);
    ``cluster.python`` runs the workload. Only the ``cpu-toy`` and ``generic`` templates (a plain
    command line) are supported; HydraGNN/ORBIT-2 templates need their cluster."""

    name = "local"

    def __init__(self, cluster: ClusterConfig):
        self.cluster = cluster
        self.host = local_host()

    # ---- paths
    def run_dir(self, model: str, jobid: str) -> Path:
        return perf_run_dir(self.cluster.shared_dir, model, jobid)

    def output_path(self, run_dir: Path, jobid: str) -> Path:
        """``local-<id>.out`` beside the run dir (stdout + stderr of the job script)."""
        return Path(run_dir).parent / f"local-{jobid}.out"

    def _ledger(self, model: str) -> Path:
        return perf_runs_root(self.cluster.shared_dir, model) / ".local_jobs.jsonl"

    def _ledgers(self) -> list[Path]:
        return sorted(Path(self.cluster.shared_dir).glob(str(perf_runs_root(".", "*") / ".local_jobs.jsonl")))

    # ---- submit
    def _next_id(self, root: Path) -> str:
        root.mkdir(parents=True, exist_ok=True)
        counter = Path(self.cluster.shared_dir) / ".local_jobid"
        with open(counter, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            txt = f.read().strip()
            n = int(txt) + 1 if txt.isdigit() else LOCAL_FIRST_JOBID
            while any(Path(self.cluster.shared_dir).glob(f"models/*/perf-runs/{n}")):
                n += 1
            f.seek(0)
            f.truncate()
            f.write(str(n))
            f.flush()
            os.fsync(f.fileno())
        return str(n)

    def _command(self, spec: JobSpec, run_dir: Path, jobid: str) -> str:
        py = shlex.quote(self.cluster.python)
        args = " ".join(shlex.quote(a) for a in spec.script_args)
        if spec.template == "cpu-toy":
            # the project's workload, or a wrapper of it (AI4S_WORKLOAD_MODULE, e.g. workloads.lever_hooks)
            return (f"{py} -u -m \"${{AI4S_WORKLOAD_MODULE:-ai4s_graph.workloads.train}}\" --out-dir \"$RUN_DIR\" "
                    f"--jobid {jobid} --write-manifest {args} > \"$RUN_DIR/train.log\"")
        return f"export RANK_TRACE_DIR=\"$RUN_DIR/traces\"\n{py} -u {args} > \"$RUN_DIR/train.log\" 2>&1"

    def render(self, spec: JobSpec, run_dir: Path, jobid: str) -> str:
        """The local job script (bash): the levers' environment, the seed's run-time settings
        (checkpoints off, lesson 30; profiler armed through ``AI4S_PROFILE``), the workload, and
        its exit status and end time written to ``.local_job/``."""
        pythonpath = self.cluster.pythonpath or str(import_root())
        env = {"AI4S_SHARED_DIR": self.cluster.shared_dir, "AI4S_MODEL": spec.model,
               "AI4S_PERF_RUN_DIR": str(run_dir), "AI4S_DISABLE_CKPT": "1", "AI4S_EXECUTOR": "local",
               "PYTHONPATH": pythonpath + "${PYTHONPATH:+:$PYTHONPATH}"}
        if spec.profile:
            env["AI4S_PROFILE"] = "1"
        if self.cluster.victoria_metrics_url:
            env["AI4S_TSDB_URL"] = self.cluster.victoria_metrics_url
        lines = ["#!/bin/bash", f"# ai4s-graph local job {jobid} ({spec.job_name}, template {spec.template}) on {self.host}",
                 "set -uo pipefail", f"RUN_DIR={shlex.quote(str(run_dir))}"]
        for k, v in env.items():
            lines.append(f"export {k}=\"{v}\"" if k == "PYTHONPATH" else f"export {k}={shlex.quote(v)}")
        lines.append("# levers")
        for k, v in spec.env.items():
            lines.append(f"export {k}={shlex.quote(v)}")
        lines += ["mkdir -p \"$RUN_DIR/traces\" \"$RUN_DIR/telemetry\" \"$RUN_DIR/.local_job\"",
                  f"echo \"ai4s: job {jobid} nodes_list={self.host} run_dir=$RUN_DIR\"",
                  "date +%s.%N > \"$RUN_DIR/.local_job/start.tmp\" && mv \"$RUN_DIR/.local_job/start.tmp\" \"$RUN_DIR/.local_job/start\"",
                  self._command(spec, run_dir, jobid),
                  "rc=$?",
                  "echo \"$rc $(date +%s.%N)\" > \"$RUN_DIR/.local_job/end.tmp\" && mv \"$RUN_DIR/.local_job/end.tmp\" \"$RUN_DIR/.local_job/end\"",
                  "exit $rc", ""]
        return "\n".join(lines)

    def submit(self, spec: JobSpec, script_dir: Path) -> tuple[str, Path]:
        """Start ``spec`` now as a detached process; returns (job id, script path). Raises
        :class:`InputError` for an unsupported template, a pin to another node, or this host in
        the exclusion list."""
        validate_spec(spec, self.cluster)
        if spec.template not in LOCAL_TEMPLATES:
            raise InputError(f"template {spec.template!r} needs its cluster; the local executor runs "
                             f"{', '.join(LOCAL_TEMPLATES)} only (use --executor slurm)")
        if spec.nodes != 1:
            raise InputError(f"the local executor runs one node, not {spec.nodes}")
        pin = spec.sbatch_options.get("nodelist")
        if pin and pin != self.host:
            raise InputError(f"job pinned to {pin}, but the local executor runs on {self.host} only")
        if self.host in spec.exclude:
            raise InputError(f"this host {self.host} is excluded (known bad); the local executor has no other node")
        root = perf_runs_root(self.cluster.shared_dir, spec.model)
        jobid = self._next_id(root)
        run_dir = self.run_dir(spec.model, jobid)
        (run_dir / ".local_job").mkdir(parents=True, exist_ok=True)
        script_dir = Path(script_dir)
        script_dir.mkdir(parents=True, exist_ok=True)
        script = script_dir / f"{spec.job_name}.{spec.template}.local.sh"
        script.write_text(self.render(spec, run_dir, jobid))
        script.chmod(0o755)
        meta = {"jobid": jobid, "name": spec.job_name, "model": spec.model, "node": self.host,
                "script": str(script), "submitted": time.time()}
        (run_dir / ".local_job" / "job.json").write_text(json.dumps(meta) + "\n")
        out = open(self.output_path(run_dir, jobid), "wb")
        try:
            proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=str(run_dir), start_new_session=True)
        finally:
            out.close()
        (run_dir / ".local_job" / "pid").write_text(f"{proc.pid}\n")
        with self._ledger(spec.model).open("a") as f:
            f.write(json.dumps({**meta, "pid": proc.pid}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        _PROCS[jobid] = proc
        return jobid, script

    # ---- state
    def _find_run_dir(self, jobid: str) -> Path | None:
        hits = sorted(Path(self.cluster.shared_dir).glob(str(perf_run_dir(".", "*", jobid))))
        return hits[0] if hits else None

    def _alive(self, jobid: str, pid: int) -> bool:
        proc = _PROCS.get(jobid)
        if proc is not None:
            return proc.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie of another parent counts as ended
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except OSError:
            return False

    def record(self, jobid: str) -> SacctRecord | None:
        """The job's current row (RUNNING, COMPLETED, FAILED; FAILED exit 0:9 when the process is
        gone without an exit status), or None for an unknown id."""
        d = self._find_run_dir(jobid)
        if d is None or not (d / ".local_job").is_dir():
            return None
        j = d / ".local_job"
        start = _floats(j / "start", 1)
        start = start[0] if start else None
        ends = _floats(j / "end", 2)
        if ends:
            rc, end = int(ends[0]), ends[1]
            state = "COMPLETED" if rc == 0 else "FAILED"
            return SacctRecord(jobid=jobid, state=state, exit_code=f"{rc}:0", nodelist=[self.host], start=start,
                               end=end, elapsed_s=(end - start) if start else 0.0)
        pid_s = j.joinpath("pid").read_text().strip() if j.joinpath("pid").is_file() else ""
        if pid_s.isdigit() and self._alive(jobid, int(pid_s)):
            return SacctRecord(jobid=jobid, state="RUNNING", exit_code="0:0", nodelist=[self.host], start=start,
                               elapsed_s=(time.time() - start) if start else 0.0)
        if not pid_s:
            return SacctRecord(jobid=jobid, state="PENDING", exit_code="0:0", nodelist=[])
        now = time.time()
        return SacctRecord(jobid=jobid, state="FAILED", exit_code="0:9", nodelist=[self.host], start=start, end=now,
                           elapsed_s=(now - start) if start else 0.0)

    def wait(self, jobid: str, timeout_s: float, poll_s: float = 1.0) -> SacctRecord:
        """Poll :meth:`record` until terminal (:func:`.query.poll`); raises :class:`WaitTimeout`
        after ``timeout_s``. A job still PENDING 30 s after the first look was submitted (ledger)
        but never started: the submitting process died first, so it counts as FAILED 0:9."""
        first_look = time.monotonic()
        box: dict[str, SacctRecord | None] = {"last": None}

        def step() -> SacctRecord | None:
            rec = self.record(jobid)
            if rec is None:
                return None
            box["last"] = rec
            if rec.is_terminal:
                proc = _PROCS.pop(jobid, None)
                if proc is not None:
                    proc.wait(timeout=5)
                return rec
            if rec.state == "PENDING" and time.monotonic() - first_look > 30:
                return SacctRecord(jobid=jobid, state="FAILED", exit_code="0:9", nodelist=[self.host])
            return None

        rec = poll(step, timeout_s, max(0.05, poll_s))
        if rec is None:
            last = box["last"]
            raise WaitTimeout(jobid, timeout_s, last, f"local job {jobid}: {last.state if last else 'unknown'}\n")
        return rec

    def find_by_name(self, name: str) -> str | None:
        """The id of a started local job called ``name`` (from the ledgers), or None."""
        for p in self._ledgers():
            for line in p.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if rec.get("name") == name and rec.get("jobid"):
                    return slurm.check_jobid(rec["jobid"])  # an id read from a file is checked like one typed
        return None


def make_executor(kind: str, cluster: ClusterConfig) -> Executor:
    """``slurm`` -> :class:`SlurmExecutor`, ``local`` -> :class:`LocalExecutor`; anything else
    raises :class:`InputError`."""
    if kind == "slurm":
        return SlurmExecutor(cluster)
    if kind == "local":
        return LocalExecutor(cluster)
    raise InputError(f"unknown executor {kind!r} (slurm or local)")
