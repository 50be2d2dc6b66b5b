"""The launcher: adopts a finished job's perf-run directory (``--perf-run``), or submits the
profiled job with sbatch and waits for sacct to report a terminal state (``--submit``), then
writes ``manifest.json`` (job id, state, nodes list first, artifact paths).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..configuration import ResolvedRun, RunRequest
from ..schema import AnalysisState
from ...runtime import node
from ....state import Manifest, Outcome, StatusLine
from ....tools.errors import InputError
from ....tools.files import changed_artifacts, fingerprint_artifacts
from ....tools.report.write import has_report
from ....tools.slurm.jobs import discover_artifacts, perf_run_dir


def shared_dir() -> Path | None:
    """``$AI4S_SHARED_DIR`` (the cluster's shared project directory), or None when unset."""
    v = os.environ.get("AI4S_SHARED_DIR")
    return Path(v) if v else None


def default_perf_run(jobid: str, model: str | None = None) -> Path:
    """``$AI4S_SHARED_DIR/models/<model>/perf-runs/<jobid>/``; with no model, the one model
    folder that holds that job id. Raises :class:`InputError` when it cannot be found."""
    base = shared_dir()
    if base is None:
        raise InputError(f"no --perf-run given and AI4S_SHARED_DIR is unset: cannot find job {jobid}")
    if model:
        return perf_run_dir(base, model, jobid)
    hits = sorted(base.glob(str(perf_run_dir(".", "*", jobid))))
    if not hits:
        raise InputError(f"unknown job id {jobid}: no {base}/models/*/perf-runs/{jobid}/ directory")
    if len(hits) > 1:
        raise InputError(f"job id {jobid} is in several models ({', '.join(h.parts[-3] for h in hits)}): pass --perf-run")
    return hits[0]


def _report_folder(d: Path) -> bool:
    """Whether ``d`` is a report folder this tool wrote (a report in it, no rank traces of its own),
    not a run directory."""
    return has_report(d) and not discover_artifacts(d).traces


def _manifest_jobid(path: Path) -> str | None:
    """The job id in ``path`` (a manifest.json), or None when it is missing or unreadable (the
    launcher reports a malformed manifest itself)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    jid = data.get("jobid") if isinstance(data, dict) else None
    return str(jid) if jid is not None else None  # not stripped: "123\n" is refused like a typed one


def preflight(req: RunRequest) -> None:
    """Refuse an invocation before anything runs or is written (so an earlier report survives).

    Raises :class:`InputError` (one line) when ``--job`` -- or, without ``--job``, the jobid of the
    perf-run directory's ``manifest.json`` -- is not a SLURM job id (``123``, ``123_4``,
    ``123_[1-3]``, ``123+0``; the same validator for both, so ``../../x``, ``$(...)``, a newline or
    5000 digits from a file are refused like typed ones); when that ``manifest.json`` names another job;
    when a perf-run directory has no manifest and no ``--job`` says whose it is (it belongs to no
    job); or when ``--out`` is another job's run directory (its ``manifest.json`` names another
    job). Submit mode checks only the id: its directory does not exist yet."""
    from ....tools.slurm import client as slurm

    if req.jobid is not None:  # an empty id is not SLURM syntax either
        slurm.check_jobid(req.jobid)
    if req.submit:
        return
    run_dir = Path(req.perf_run) if req.perf_run else None
    owner = req.jobid
    if run_dir is not None and run_dir.is_dir():
        found = _manifest_jobid(run_dir / "manifest.json")
        if found is not None and not req.jobid:
            _check_file_jobid(found, run_dir / "manifest.json")
        if found is not None and req.jobid and found != str(req.jobid):
            raise InputError(f"--job {req.jobid} does not match manifest.json jobid {found} in {run_dir}: refused, "
                             "nothing written")
        if not (run_dir / "manifest.json").exists() and not req.jobid:
            raise InputError(f"{run_dir} has no manifest.json and no --job says whose run it is: refused, nothing written")
        owner = owner or found
    out = Path(req.out_dir)
    if run_dir is None or out.resolve() != run_dir.resolve():
        other = _manifest_jobid(out / "manifest.json")
        # another job's report folder (a report, no traces of its own: its manifest.json is the copy an
        # earlier run's adoption wrote) is check_out_dir's to refuse or, with --force, to replace
        if other is not None and owner and other != str(owner) and not _report_folder(out):
            raise InputError(f"--out {out} is job {other}'s run directory, not job {owner}'s: refused, nothing written")


def _check_file_jobid(jobid: str, path: Path) -> str:
    """``jobid`` read from ``path`` when it is a SLURM job id, else :class:`InputError` naming the
    file (the value shown escaped, so it stays one line)."""
    from ....tools.slurm import client as slurm

    try:
        return slurm.check_jobid(jobid)
    except InputError as e:
        raise InputError(f"{path}: jobid: {e}; refused, nothing written") from None


def adopt(req: RunRequest) -> tuple[Manifest, list[str]]:
    """Adopt an existing run: read (or build) its manifest and list its artifacts.

    Returns the manifest and a list of missing-input lines. Raises :class:`InputError` for an
    unknown job id (no directory) or a manifest whose job id differs from ``--job``."""
    run_dir = Path(req.perf_run) if req.perf_run else default_perf_run(req.jobid or "")
    if not run_dir.is_dir():
        raise InputError(f"unknown job id {req.jobid}: perf-run directory {run_dir} does not exist")
    missing: list[str] = []
    mpath = run_dir / "manifest.json"
    if mpath.exists():
        try:
            manifest = Manifest.read(mpath)
        except ValueError as e:  # not JSON, or a field of the wrong type (pydantic ValidationError)
            first = str(e).splitlines()
            detail = " ".join(first[1:3]) if len(first) > 1 and "validation error" in first[0] else first[0]
            detail = detail.replace("Value error, ", "")  # pydantic's prefix of a validator's own message
            raise InputError(f"malformed {mpath}: {' '.join(detail.split())[:160]}") from None
        if req.jobid and manifest.jobid != str(req.jobid):
            raise InputError(f"--job {req.jobid} does not match manifest.json jobid {manifest.jobid!r} in {run_dir}")
        manifest.jobid = _check_file_jobid(manifest.jobid, mpath)
    else:
        if not req.jobid:
            raise InputError(f"{run_dir} has no manifest.json and no --job was given")
        manifest = _manifest_from_slurm(req.jobid) or Manifest(jobid=req.jobid)
        missing.append(f"launcher: {run_dir} had no manifest.json; built one from "
                       + ("sacct" if manifest.state != "UNKNOWN" else "the files alone (state UNKNOWN)"))
    recorded = manifest.artifacts.fingerprints if mpath.exists() else {}
    listed = list(manifest.artifacts.traces) if mpath.exists() else []
    found = discover_artifacts(run_dir)
    missing += [f"launcher: {line}" for line in _listed_not_found(run_dir, listed, found.traces)]
    rels = [p for p in [found.train_log, *found.traces, *found.telemetry, found.node_health_probe] if p]
    found.fingerprints = fingerprint_artifacts(run_dir, rels)  # recorded at adoption: a later swap is noticed
    manifest.artifacts = found
    missing += [f"launcher: {line}" for line in changed_artifacts(recorded, found.fingerprints, f"{mpath}'s record")]
    missing += [f"launcher: {line}" for line in _changed_since_last_adoption(req, run_dir, manifest.jobid, found)]
    if not found.traces:
        missing.append(f"launcher: no rank traces under {run_dir}/traces/")
    if not found.telemetry:
        missing.append(f"launcher: no telemetry export under {run_dir}/telemetry/")
    if not found.train_log:
        missing.append(f"launcher: no train.log in {run_dir}")
    return manifest, missing


def _listed_not_found(run_dir: Path, listed: list[str], found: list[str]) -> list[str]:
    """One line per rank trace the run's own ``manifest.json`` lists that adoption did not find
    (deleted, or a directory in its place, after the job wrote the manifest): that rank is missing
    from every figure, so the run is partial, never ok (the adversarial trial: 93004 without its
    rank-1 trace was called compute-bound with STATUS=ok)."""
    have = {str(Path(f)) for f in found}
    out = []
    for rel in listed:
        if str(Path(rel)) in have:
            continue
        p = run_dir / rel
        what = "is a directory" if p.is_dir() else ("is not a trace file" if p.exists() else "does not exist")
        out.append(f"{rel}: listed in manifest.json but {what}: that rank is not analysed")
    return out


def _changed_since_last_adoption(req: RunRequest, run_dir: Path, jobid: str, found: Any) -> list[str]:
    """Artifacts of this job that differ from the fingerprints the previous adoption wrote into
    ``<out>/manifest.json`` (same job id; not the run's own manifest, which is never rewritten):
    a trace or log replaced at the same path between two runs of the command."""
    out = Path(req.out_dir)
    prev = out / "manifest.json"
    if not prev.is_file() or out.resolve() == run_dir.resolve():
        return []
    try:
        data = json.loads(prev.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or str(data.get("jobid")) != str(jobid):
        return []
    rec = (data.get("artifacts") or {}).get("fingerprints") if isinstance(data.get("artifacts"), dict) else None
    return changed_artifacts(rec, found.fingerprints, f"the last adoption ({prev})")


def _manifest_from_slurm(jobid: str) -> Manifest | None:
    """A manifest from ``sacct`` when SLURM knows the job, else None."""
    from ....tools.slurm import client as slurm

    try:
        rec = slurm.sacct(jobid)
    except Exception:
        return None
    if rec is None:
        return None
    return Manifest(jobid=jobid, state=rec.state, nodes_list=rec.nodelist, start_unix=rec.start, end_unix=rec.end,
                    exit_code=rec.exit_code)


@node("launcher")
def launcher(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Adopt the job's perf-run directory and write ``manifest.json`` into the output directory.

    Returns ``manifest``, ``missing`` and ``run`` (the perf-run directory it resolved); the request
    itself is never rewritten. (Submit mode, ``--submit``, is
    :func:`ai4s_graph.graph.analysis.nodes.launcher_submit.submit_step`.)"""
    req = state["request"]
    if req.submit:
        from . import launcher_submit

        return launcher_submit.submit_step(state)
    manifest, missing = adopt(req)
    out = Path(req.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = Path(req.perf_run or default_perf_run(req.jobid or ""))
    inputs = manifest.artifacts.traces or manifest.artifacts.telemetry or manifest.artifacts.train_log
    if not ((out / "manifest.json").exists() and out.resolve() == run_dir.resolve()) and (
            inputs or not has_report(out)):  # never rewrite the run's own manifest.json, nor a
        manifest.write(out / "manifest.json")  # report's with that of a run with no input at all
    nodes = ",".join(manifest.nodes_list) or "unknown nodes"
    status = Outcome.ok if not missing else Outcome.partial
    reason = f"adopted job {manifest.jobid} ({manifest.state}) on {nodes}"
    if missing:
        reason += f"; {len(missing)} input(s) missing"
    return (
        {"manifest": manifest, "missing": missing, "run": ResolvedRun(perf_run=str(run_dir), jobid=req.jobid)},
        StatusLine.make(status, reason),
    )
