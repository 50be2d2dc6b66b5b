"""SLURM job ids: the one validator every id goes through (``--job``, ``manifest.json``, the
submission marker and intent record, ``sbatch --parsable``), and the forms one job is known by.

The forms (sbatch(1), squeue(1) and sacct(1), "JOB ID"; measured on the local cluster):

- a plain job ``123``;
- an array task ``123_4`` -- its *raw* id (``JobIDRaw``, ``$SLURM_JOB_ID`` inside the task) is a
  job id of its own, e.g. ``127``: on the local cluster tasks ``51_1``, ``51_2``, ``51_3`` had raw
  ids ``54``, ``55``, ``51`` (the last task takes the array's own id; others take whatever id was
  free, so a raw id is never ``base + index``);
- a set of array tasks ``123_[1-3,7]`` (``%N`` throttle allowed, as sacct prints a pending set);
- a heterogeneous-job component ``123+1``, raw id ``124`` (``52+0``/``52+1`` had raw ``52``/``53``).

An array task set and a het component never combine (SLURM has no arrays of het jobs).

Bounds: SLURM keeps job ids, array task ids and het offsets as ``uint32_t`` with ``NO_VAL =
0xfffffffe`` reserved (``slurm/slurm.h``), so every number here is below :data:`NO_VAL`; an
array task id is below ``MaxArraySize``, which "may not exceed 4000001" (slurm.conf(5),
MaxArraySize). Omnistat's ``rmsjob_info{jobid}`` carries ``$SLURM_JOB_ID`` (the raw id, in its
file-based mode: ``omnistat/rms_env.py``) or squeue's ``JobID`` (``123_4``, in its squeue mode:
``omnistat/collector_rms.py``), so a telemetry join has to accept every form
(:func:`id_forms`).
"""

from __future__ import annotations

import re
from typing import Iterable

from ..errors import InputError

__all__ = ["JOBID_SYNTAX", "MAX_ARRAY_TASK_ID", "NO_VAL", "check_jobid", "id_forms", "query_id", "base_id"]

#: ``NO_VAL`` of ``slurm/slurm.h``: the first value no SLURM id may take (job ids are uint32_t).
NO_VAL = 0xFFFFFFFE
#: The largest array task id: MaxArraySize "may not exceed 4000001" (slurm.conf(5)) and task ids
#: run from 0 to MaxArraySize - 1.
MAX_ARRAY_TASK_ID = 4_000_000

_NUM = r"\d{1,10}"
_ITEM = rf"{_NUM}(?:-{_NUM}(?::{_NUM})?)?"
#: SLURM's job id syntax: a number, an array task ``123_4`` or task set ``123_[1-3,7]`` (``%N``
#: throttle allowed), or a het-job component ``123+0``.
JOBID_SYNTAX = rf"{_NUM}(?:_{_NUM}|_\[{_ITEM}(?:,{_ITEM})*(?:%{_NUM})?\]|\+{_NUM})?"
_JOBID = re.compile(rf"{JOBID_SYNTAX}")
_EXPECTED = "expected 123, 123_4, 123_[1-3] or 123+0"


def check_jobid(jobid: str | int) -> str:
    """``jobid`` (stripped of surrounding blanks) when it has SLURM's job id syntax
    (:data:`JOBID_SYNTAX`) and every number in it fits SLURM's 32-bit ids (below :data:`NO_VAL`;
    an array task id at most :data:`MAX_ARRAY_TASK_ID`; a job id at least 1).

    Raises :class:`InputError` with ONE line otherwise: the value is shown through ``repr`` (so a
    newline or a control character prints as ``\\n``/``\\x1b``, never as a line of its own) and
    cut to 60 characters. Called before any command runs and on every id read from a file."""
    s = str(jobid).strip(" \t")
    if not _JOBID.fullmatch(s):
        raise InputError(f"not a SLURM job id: {s[:60]!r} ({_EXPECTED})")
    base = int(re.match(r"\d+", s).group(0))
    if not 1 <= base < NO_VAL:
        raise InputError(f"not a SLURM job id: {s[:60]!r} (job ids run from 1 to {NO_VAL - 1}, SLURM's 32-bit ids)")
    m = re.fullmatch(r"\d+_(\d+)", s)
    if m and int(m.group(1)) > MAX_ARRAY_TASK_ID:
        raise InputError(f"not a SLURM job id: {s[:60]!r} (array task ids stop at {MAX_ARRAY_TASK_ID}: "
                         "MaxArraySize <= 4000001)")
    m = re.fullmatch(r"\d+_\[(.*)\]", s)
    if m and any(int(n) > MAX_ARRAY_TASK_ID for n in re.findall(r"\d+", m.group(1).split("%")[0])):
        raise InputError(f"not a SLURM job id: {s[:60]!r} (array task ids stop at {MAX_ARRAY_TASK_ID})")
    m = re.fullmatch(r"\d+\+(\d+)", s)
    if m and int(m.group(1)) >= NO_VAL:
        raise InputError(f"not a SLURM job id: {s[:60]!r} (het offset above SLURM's 32-bit ids)")
    return s


def base_id(jobid: str) -> str:
    """The job's own number: ``123_4`` / ``123_[1-3]`` / ``123+0`` -> ``123`` (no validation)."""
    return re.match(r"\d*", jobid).group(0)


def query_id(jobid: str | int) -> str:
    """The id to give ``sacct -j`` / ``squeue -j`` for ``jobid``: a task set ``123_[1-3]`` is
    asked for as its array ``123`` (and picked out of the rows); every other form as itself."""
    s = check_jobid(jobid)
    return base_id(s) if "_[" in s else s


def id_forms(jobid: str, raw_ids: Iterable[str] = (), components: Iterable[str] = ()) -> list[str]:
    """Every id that names ``jobid`` or a part of it, sorted by length then text: the id itself,
    its array/het components (``123_4``, ``123+1``) and their raw ids (``JobIDRaw``: what
    ``$SLURM_JOB_ID`` and Omnistat's file-based ``rmsjob_info{jobid}`` carry). For a telemetry join
    on ``rmsjob_info``'s ``jobid`` label. The bare ``123`` of one task ``123_4`` is NOT a form of
    it: as a raw id it names another task (the array's last). Each form is validated
    (:func:`check_jobid`); step suffixes (``.batch``) are dropped."""
    out = {check_jobid(jobid)}
    for x in [*raw_ids, *components]:
        x = str(x).split(".")[0]
        if x:
            out.add(check_jobid(x))
    return sorted(out, key=lambda v: (len(v), v))
