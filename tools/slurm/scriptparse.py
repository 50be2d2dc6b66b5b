"""What a SLURM job script (or command line) says about the job's CPU layout and environment:
``--ntasks-per-node``, ``--cpus-per-task``, the DataLoader's ``num_workers``, ``OMP_NUM_THREADS``
and the ``VAR=value`` assignments. The causes (``graph/rules/causes/``) read these fields; the text
is read once per node by :func:`read_job_script`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def read_job_script(run_dir: str | Path | None, rel: str | None) -> str:
    """The text of the job script ``rel`` under ``run_dir`` (the manifest's
    ``artifacts.job_script``); "" when either is unset or the file is absent or unreadable (the
    causes that need it then stay silent)."""
    if not run_dir or not rel:
        return ""
    p = Path(run_dir) / rel
    try:
        return p.read_text(errors="replace") if p.is_file() else ""
    except OSError:
        return ""


def parse_job_script(text: str) -> dict[str, Any]:
    """``ntasks_per_node``, ``cpus_per_task``, ``num_workers``, ``omp_num_threads`` found in a
    SLURM job script or command line (``#SBATCH --ntasks-per-node=8``, ``--num-workers 8``,
    ``num_workers=8``, ``OMP_NUM_THREADS=7``; the last occurrence wins); absent keys are missing."""
    out: dict[str, Any] = {}
    for key, rx in (("ntasks_per_node", r"--ntasks-per-node[= ](\d+)"), ("cpus_per_task", r"--cpus-per-task[= ](\d+)"),
                    ("num_workers", r"(?:--num[-_]workers[= ]|num_workers\s*[=:]\s*)(\d+)"),
                    ("omp_num_threads", r"OMP_NUM_THREADS=(\d+)")):
        m = re.findall(rx, text)
        if m:
            out[key] = int(m[-1])
    return out


def env_from_script(text: str) -> dict[str, str]:
    """``VAR=value`` assignments of a job script (``export VAR=value`` or a bare assignment)."""
    return {m.group(1): m.group(2).strip("'\"")
            for m in re.finditer(r"^\s*(?:export\s+)?([A-Z][A-Z0-9_]*)=(\S+)", text, re.M)}
