"""One sbatch per submission: an intent record written BEFORE ``sbatch``, reconciled with SLURM on
every later look.

``sbatch`` is the one step that cannot be made atomic with our own bookkeeping: the job may be
accepted by slurmctld while this process is killed, times out, or cannot write down the id it
got. So, per submission attempt:

1. the intent record ``<state dir>/intent-attempt<N>.json`` is written (temp file, fsync,
   rename) with a job name unique to the submission, ``<name>-<token>``; if it cannot be written,
   nothing is submitted (the error names the file);
2. when a record without a job id is found (an earlier run wrote it and was interrupted around
   ``sbatch``), SLURM is asked for jobs of its name (``squeue --me -n`` is immediate, ``sacct -X
   --name`` keeps them after they leave slurmctld): one found is adopted, never submitted again;
   none found (SLURM answered) means sbatch never got through, and the same name is submitted;
3. ``sbatch`` runs; its job id is written into the record. A refusal that may clear by itself
   (slurmctld unreachable, a timeout) is looked up by name once more, since the job may still
   have been accepted.

The token is derived from what identifies the submission to the caller (``run --submit``: its
output directory and submit parameters, which are part of its checkpoint thread) and the attempt
number: the same command finds its own job, another command never does. Concurrent identical
commands are kept apart by the per-thread lock of ``graph/checkpoint.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from ..errors import InputError, ToolUnavailableError
from . import client as slurm
from .jobscript import JobSpec

__all__ = ["Intent", "Submitted", "intent_path", "intent_token", "unique_job_name", "submit_once"]

#: Longest job name the templates accept (``tools/slurm/jobscript.py`` ``_NAME``).
MAX_JOB_NAME = 64
TOKEN_HEX = 10
#: How far back (s) the sacct lookup starts before the intent was written: clocks of the
#: submitting host and slurmdbd may differ (a margin, not a rule).
CLOCK_MARGIN_S = 300.0


class Intent(BaseModel):
    """The intent record of one submission attempt: ``job_name`` (unique, carries ``token``),
    ``attempt`` (1-based), ``created_at`` (unix s), and ``jobid`` once sbatch has answered."""

    token: str
    job_name: str
    attempt: int
    created_at: float
    jobid: str | None = None
    script: str | None = None
    pid: int | None = None


class Submitted(BaseModel):
    """The outcome of :func:`submit_once`: the job id, the script submitted (None when adopted),
    ``how`` (``submitted`` | ``adopted``), ``note`` (one line: why it was adopted, other jobs of the
    same name), the intent record used."""

    jobid: str
    script: str | None = None
    how: str
    note: str = ""
    intent: Intent


def intent_token(key: Any, attempt: int) -> str:
    """:data:`TOKEN_HEX` hex digits of SHA-256 over ``key`` (sorted-key JSON) and ``attempt``."""
    blob = json.dumps({"key": key, "attempt": int(attempt)}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:TOKEN_HEX]


def unique_job_name(base: str, token: str) -> str:
    """``<base>-<token>``, ``base`` cut so the whole stays within :data:`MAX_JOB_NAME` characters."""
    keep = MAX_JOB_NAME - len(token) - 1
    return f"{base[:keep].rstrip('-.')}-{token}"


def intent_path(state_dir: Path, attempt: int) -> Path:
    """``<state_dir>/intent-attempt<attempt>.json``."""
    return Path(state_dir) / f"intent-attempt{int(attempt)}.json"


def _publish(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, fsync, rename); a link
    at ``path`` or its folder is refused (the rename would replace the link, never its target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent.is_symlink() or path.is_symlink():
        raise OSError(f"{path} or its folder is a symbolic link")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_intent(path: Path) -> Intent | None:
    """The intent record at ``path``, or None when there is none. Raises :class:`InputError`
    (naming the file) for a record that is not one, or whose job id is not a SLURM id."""
    if not path.is_file():
        return None
    try:
        rec = Intent.model_validate_json(path.read_text())
    except (ValidationError, OSError, ValueError) as e:
        raise InputError(f"intent record {path} is unreadable ({' '.join(str(e).split())[:120]}); "
                         "move it away only after checking squeue/sacct for its job") from None
    if rec.jobid is not None:
        rec.jobid = slurm.check_jobid(rec.jobid)
    return rec


def _found(name: str, since: float) -> list[str]:
    return slurm.find_jobs_by_name(name, since=since - CLOCK_MARGIN_S, policy=slurm.ONE_SHOT)


def submit_once(spec: JobSpec, *, state_dir: Path, key: Any, attempt: int,
                submit: Callable[[JobSpec], tuple[str, Path]]) -> Submitted:
    """Submit ``spec`` at most once for (``key``, ``attempt``), with the intent record in
    ``state_dir`` (see the module doc). ``submit(spec)`` renders and sbatches the spec (with its
    unique ``job_name`` already set) and returns ``(jobid, script)``.

    Returns :class:`Submitted`. Raises :class:`InputError` when the intent record cannot be
    written or read (nothing submitted), :class:`ToolUnavailableError` when SLURM cannot say
    whether the job exists, or sbatch refused it and no job of that name appeared."""
    path = intent_path(state_dir, attempt)
    intent = read_intent(path)
    if intent is not None and intent.jobid:
        return Submitted(jobid=intent.jobid, how="adopted", intent=intent, script=intent.script,
                         note=f"job {intent.jobid} already submitted for attempt {attempt} ({path.name})")
    if intent is not None:
        found = _found(intent.job_name, intent.created_at)
        if found:
            return _adopt(path, intent, found, "an earlier run wrote its intent and was interrupted around sbatch")
    else:
        token = intent_token(key, attempt)
        intent = Intent(token=token, job_name=unique_job_name(spec.job_name, token), attempt=attempt,
                        created_at=time.time(), pid=os.getpid())
    try:
        _publish(path, intent.model_dump_json() + "\n")
    except OSError as e:
        raise InputError(f"cannot write the intent record {path} ({e.strerror or e}); nothing submitted") from None
    named = spec.model_copy(update={"job_name": intent.job_name})
    try:
        jobid, script = submit(named)
    except slurm.TransientSlurmError as e:
        found = _found(intent.job_name, intent.created_at)
        if found:
            return _adopt(path, intent, found, f"sbatch failed ({e.line}) but SLURM accepted the job")
        raise ToolUnavailableError(f"sbatch failed ({e.line}) and SLURM has no job named {intent.job_name}: "
                                   "nothing was submitted") from None
    intent = intent.model_copy(update={"jobid": jobid, "script": str(script)})
    try:
        _publish(path, intent.model_dump_json() + "\n")
    except OSError:
        pass  # the caller checkpoints the id; a later look finds the job by its name anyway
    return Submitted(jobid=jobid, script=str(script), how="submitted", intent=intent)


def _adopt(path: Path, intent: Intent, found: list[str], why: str) -> Submitted:
    jobid = found[0]
    intent = intent.model_copy(update={"jobid": jobid})
    try:
        _publish(path, intent.model_dump_json() + "\n")
    except OSError:
        pass
    more = f"; {len(found) - 1} more job(s) of that name: {','.join(found[1:])}" if len(found) > 1 else ""
    return Submitted(jobid=jobid, how="adopted", intent=intent,
                     note=f"found job {jobid} named {intent.job_name} ({why}); adopted, nothing submitted{more}")
