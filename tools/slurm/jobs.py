"""One job lifecycle, shared by ``ai4s-graph run --submit`` and ``ai4s-graph optimize``:
submit -> wait -> classify the end (exit 42 and the other infrastructure signatures) -> exclude
the bad node by name -> re-submit; and the ONE function that builds a run's directory,
``<shared_dir>/models/<model>/perf-runs/<jobid>/``.

What runs the job is an :class:`~ai4s_graph.tools.slurm.executors.Executor` (SLURM's sbatch/sacct,
or a local subprocess); this module only needs its ``wait`` answer (a
:class:`~ai4s_graph.tools.slurm.client.SacctRecord`) and its output file.

Seed 000 sources: cluster constraints and optimizer-loop lesson 1 (exit 42 -> ``known_bad_nodes.txt``
+ ``--exclude=<node>``, never a node class, the lever not penalized), lessons 19 and 26 (fabric,
launcher, filesystem and library failures are infrastructure), lessons 10 and 18 (the nodes list
first), "When something goes wrong" (a wait timeout is surfaced, never guessed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ...state import Artifacts, Manifest
from ..trace.trace_files import run_traces
from . import failures, health
from .client import SacctRecord

LOG_TAIL_LINES = 15
KNOWN_BAD_FILE = "known_bad_nodes.txt"


# --------------------------------------------------------------------------------------------
# the one perf-run path


def perf_runs_root(shared_dir: str | Path, model: str) -> Path:
    """``<shared_dir>/models/<model>/perf-runs``: where every run of ``model`` lives (seed 000,
    "Artifacts: $AI4S_SHARED_DIR/models/<model>/perf-runs/<jobid>/")."""
    return Path(shared_dir) / "models" / model / "perf-runs"


def perf_run_dir(shared_dir: str | Path, model: str, jobid: str | int) -> Path:
    """``<shared_dir>/models/<model>/perf-runs/<jobid>/``: one run's directory (the only place
    this path is built; ``model`` may be ``*`` for a glob)."""
    return perf_runs_root(shared_dir, model) / str(jobid)


# --------------------------------------------------------------------------------------------
# the end of a job


class JobRunner(Protocol):
    """What :func:`finish` needs from an executor."""

    name: str

    def wait(self, jobid: str, timeout_s: float, poll_s: float = 1.0) -> SacctRecord: ...

    def output_path(self, run_dir: Path, jobid: str) -> Path: ...


@dataclass
class JobEnd:
    """How one submitted job ended.

    ``verdict``: ``completed`` (state COMPLETED, exit 0), ``infra`` (a bad node, the fabric, the
    launcher, a filesystem or a missing library: re-run excluding ``failure.nodes``, the lever not
    penalized) or ``failed`` (the workload / lever failed). ``record`` is the executor's terminal
    row; ``node_hours`` = nodes x elapsed / 3600; ``tail`` the last lines of the job's output."""

    jobid: str
    run_dir: Path
    record: SacctRecord
    verdict: str
    failure: failures.Failure | None = None
    tail: str = ""
    node_hours: float = 0.0
    probe_error: str | None = None

    @property
    def nodes_list(self) -> list[str]:
        return list(self.record.nodelist)

    @property
    def bad_nodes(self) -> list[str]:
        return list(self.failure.nodes) if self.failure and self.failure.is_infra else []

    def error(self) -> str:
        """``<STATE> exit <code>: <telling line>\\n<tail>`` (the verbatim error of a failed lever)."""
        line = self.failure.line if self.failure else failures.error_line(self.tail)
        return f"{self.record.base_state} exit {self.record.exit_code}: {line}\n{self.tail}"


def log_tail(run_dir: Path, output: Path | None, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` non-blank lines of the job's output file (else ``train.log``)."""
    for p in (output, run_dir / "train.log"):
        if p is not None and p.is_file():
            lines = [ln for ln in p.read_text(errors="replace").splitlines() if ln.strip()]
            return "\n".join(lines[-n:])
    return "(no output file)"


def _log_text(run_dir: Path, output: Path | None) -> str:
    parts = []
    for p in (output, run_dir / "train.log"):
        if p is not None and p.is_file():
            parts.append(p.read_text(errors="replace"))
    return "\n".join(parts)


def classify_end(rec: SacctRecord, run_dir: Path, output: Path | None) -> JobEnd:
    """Classify a terminal record (no waiting): completed, infra (with the nodes to exclude) or
    failed. Exit 42 reads the bad nodes from ``node_health_probe.txt``; the other infrastructure
    signatures come from :mod:`.failures` (data: ``failure_signatures.yaml``)."""
    nh = len(rec.nodelist or [None]) * float(rec.elapsed_s or 0.0) / 3600.0
    tail = log_tail(run_dir, output)
    if rec.base_state == "COMPLETED" and rec.exit_status == 0:
        return JobEnd(rec.jobid, run_dir, rec, "completed", tail=tail, node_hours=nh)
    probe_bad: list[str] = []
    probe_err = None
    if rec.exit_status == health.BAD_NODE_EXIT_CODE:
        probe = run_dir / health.PROBE_FILE
        try:
            probe_bad = health.parse_probe_file(probe).bad_nodes
        except Exception as e:  # InputError: missing/garbled probe file -> no node named
            probe_err = str(e)
    f = failures.classify(state=rec.base_state, exit_status=rec.exit_status, log_text=_log_text(run_dir, output),
                          nodes_list=list(rec.nodelist), probe_bad_nodes=probe_bad)
    return JobEnd(rec.jobid, run_dir, rec, "infra" if f.is_infra else "failed", failure=f, tail=tail,
                  node_hours=nh, probe_error=probe_err)


def finish(runner: JobRunner, jobid: str, run_dir: Path, timeout_s: float, poll_s: float = 1.0) -> JobEnd:
    """Wait (bounded) for ``jobid`` to be terminal, then :func:`classify_end`. Raises
    :class:`~ai4s_graph.tools.slurm.client.WaitTimeout` (the caller surfaces TIMEOUT_WAITING)."""
    rec = runner.wait(jobid, timeout_s, poll_s)
    return classify_end(rec, Path(run_dir), runner.output_path(Path(run_dir), jobid))


@dataclass
class Retry:
    """The answer of :func:`plan_retry`: ``resubmit`` or not, the exclusion for the next
    submission (the known bad nodes by name), the nodes this failure added, and why."""

    resubmit: bool
    exclude: list[str]
    bad_nodes: list[str] = field(default_factory=list)
    why: str = ""


def plan_retry(end: JobEnd, known_bad_path: Path, exclude: list[str], retries_done: int,
               max_retries: int) -> Retry:
    """The rule after an infrastructure failure (seed lesson 1): append the named node(s) to
    ``known_bad_path`` and re-submit excluding every known bad node, while ``retries_done <
    max_retries``. No node named: an exit-42 job stops (its probe named nobody: nothing to
    exclude), any other infrastructure failure is re-run once without a new exclusion. Never
    excludes a node class. ``end.verdict`` must be ``infra``."""
    f = end.failure
    assert f is not None and f.is_infra, "plan_retry is for infrastructure failures"
    bad = list(f.nodes)
    known = health.append_known_bad(known_bad_path, bad, jobid=end.jobid) if bad else \
        health.read_known_bad(known_bad_path)
    excl = sorted(set(exclude) | set(known))
    what = f"{f.kind} failure ({f.signature or 'no signature'})"
    if retries_done >= max_retries:
        return Retry(False, excl, bad, f"{what}; {retries_done} infra retries already (max {max_retries})")
    if not bad:
        if f.signature == "mount_probe_exit_42":
            return Retry(False, excl, bad, f"exit 42 but the probe names no bad node ({end.probe_error or 'no row failed'})")
        if any(r for r in [retries_done] if r > 0):
            return Retry(False, excl, bad, f"{what} names no node; already re-run once")
        return Retry(True, excl, bad, f"{what} names no node; re-running once without a new exclusion")
    return Retry(True, excl, bad, f"{what} on {','.join(bad)}; re-submitting excluding {','.join(excl)}")


# --------------------------------------------------------------------------------------------
# manifest


def discover_artifacts(run_dir: Path) -> Artifacts:
    """The artifact paths present in a perf-run directory (relative to it): ``train.log``,
    ``traces/*.json[.gz]`` sorted (trace-like names only, :func:`~ai4s_graph.tools.trace.trace_files.run_traces`),
    ``telemetry/*.jsonl``, ``node_health_probe.txt``."""
    run_dir = Path(run_dir)
    traces = run_traces(run_dir)
    telemetry = sorted(str(p.relative_to(run_dir)) for p in run_dir.glob("telemetry/*.jsonl"))
    return Artifacts(
        train_log="train.log" if (run_dir / "train.log").exists() else None,
        traces=traces,
        telemetry=telemetry,
        node_health_probe=health.PROBE_FILE if (run_dir / health.PROBE_FILE).exists() else None,
    )


RUN_INFO_KEYS = ("precision", "global_batch_size", "num_workers", "hbm_reserved_bytes", "peak_rss_bytes", "steps",
                 "torch", "device", "device_name", "world_size", "dataset", "data_latency_ms", "threads",
                 "realized_batch_mean", "partial_step_fraction", "max_batches_per_epoch", "epoch_losses",
                 "log_format", "profiled")


def read_json(p: Path) -> dict[str, Any]:
    """A JSON object file, or {} when missing/unreadable/not an object."""
    try:
        d = json.loads(Path(p).read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def build_manifest(end: JobEnd, model: str, *, executor: str, **extra: Any) -> Manifest:
    """``manifest.json`` of a finished job: the executor's nodes list first (lesson 18), its state,
    start/end and exit code, then what the workload wrote (``run_info.json``), then ``extra``
    (attempt, excluded nodes, previous job ids...); ``jobid_forms`` lists every id of the job
    (array tasks, het components, raw ids: :attr:`SacctRecord.id_forms`) when SLURM gave them."""
    rec = end.record
    base = read_json(end.run_dir / "manifest.json")
    info = read_json(end.run_dir / "run_info.json")
    data: dict[str, Any] = {k: v for k, v in base.items() if k != "artifacts"}
    for k in RUN_INFO_KEYS:
        if info.get(k) is not None:
            data[k] = info[k]
    if info.get("model"):
        data["workload_model"] = info["model"]
    data.update(jobid=end.jobid, state=rec.base_state, nodes_list=list(rec.nodelist), model=model,
                start_unix=rec.start, end_unix=rec.end, exit_code=rec.exit_code, num_nodes=len(rec.nodelist),
                executor=executor, **extra)
    if rec.raw_ids or rec.components:  # every id rmsjob_info{jobid} may carry for this job (tools/slurm/ids.py)
        data["jobid_forms"] = rec.id_forms
    if info.get("start_unix") is not None:
        data["train_start_unix"], data["train_end_unix"] = info.get("start_unix"), info.get("end_unix")
    if end.failure is not None:
        data["failure"] = {"class": end.failure.klass, "kind": end.failure.kind,
                           "signature": end.failure.signature, "line": end.failure.line[:400],
                           "nodes": end.failure.nodes}
    m = Manifest.model_validate(data)
    if end.run_dir.is_dir():
        m.artifacts = discover_artifacts(end.run_dir)
    return m


def write_manifest(manifest: Manifest, *dirs: Path) -> list[str]:
    """Write ``manifest.json`` into each directory that can take it; returns the paths written."""
    written = []
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
            manifest.write(d / "manifest.json")
            written.append(str(d / "manifest.json"))
        except OSError:
            pass
    return written
