"""Where a run's report goes, and its one atomic write.

``report.json`` and ``report.md`` are written together through
:func:`ai4s_graph.state.publish.publish_many` (temporary files beside them, ``fsync``, then the
renames: a full disk or a crash leaves the earlier pair as it was, never a 0-byte file). They
replace the report in the output directory only when both hold:

* the run analysed something (a manifest was adopted and at least one claim was made): a refused,
  mistyped or empty run (no such ``--perf-run``, a malformed ``manifest.json``) must not replace a
  good report with "Nothing was analysed";
* the report already there (if any) is the same job's, or the user passed ``--force``.

Otherwise the new report goes to ``<out>/.ai4s-graph/not-published/`` and the caller says so.

A run never leaves a mix unmarked (issue 27 report 5 point 8): the nodes write ``manifest.json``,
``foms.json`` and the CSVs into the output directory as they finish, long before the report, so a
run that stops mid-way would leave new files beside the old ``report.md``. :func:`mark_in_progress`
writes ``.ai4s-graph/run-in-progress.json`` before the first node runs; only the report's own
publication into the output directory (:func:`write_report`) removes it. While it is there the
folder's report is stale and ``ai4s-graph diff`` refuses the folder (:func:`in_progress`).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...state.publish import ensure_dir, folder_fd, publish, publish_many
from ..errors import InputError
from ..jsonguard import load_file

REPORT_JSON, REPORT_MD = "report.json", "report.md"
#: Where a report that must not replace the one in the output directory is written instead.
NOT_PUBLISHED = Path(".ai4s-graph") / "not-published"
_MD_JOB = re.compile(r"^# ai4s-graph report — job (\S+)")
#: The marker of a run into the output directory that has not published its report yet.
IN_PROGRESS = Path(".ai4s-graph") / "run-in-progress.json"


def mark_in_progress(out_dir: str | Path, jobid: str | None, thread: str | None = None) -> Path:
    """Write :data:`IN_PROGRESS` in ``out_dir`` (``{"jobid", "thread", "started_unix"}``) before a
    run writes anything there: until :func:`write_report` publishes this run's report into
    ``out_dir``, the report there is stale. Returns the marker's path. Raises
    :class:`~ai4s_graph.state.publish.UnsafePathError` or ``OSError``."""
    body = json.dumps({"jobid": jobid, "thread": thread, "started_unix": round(time.time(), 3)}) + "\n"
    return publish(Path(out_dir) / IN_PROGRESS, body, root=out_dir)


def clear_in_progress(out_dir: str | Path) -> None:
    """Remove :data:`IN_PROGRESS` from ``out_dir`` (no marker: nothing to do); the folders on the
    way are opened without following links (:func:`~ai4s_graph.state.publish.folder_fd`)."""
    if not (Path(out_dir) / IN_PROGRESS.parent).is_dir():
        return
    fd, name = folder_fd(Path(out_dir) / IN_PROGRESS, out_dir, create=False)
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def in_progress(out_dir: str | Path) -> dict[str, Any] | None:
    """The :data:`IN_PROGRESS` marker of ``out_dir`` (its JSON object; ``{}`` when unreadable), or
    None when no unfinished run wrote there."""
    p = Path(out_dir) / IN_PROGRESS
    if not (p.is_file() or p.is_symlink()):
        return None
    try:
        data = load_file(p)
    except (InputError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def has_report(out_dir: str | Path) -> bool:
    """Whether ``out_dir`` holds a report (``report.json`` or ``report.md``, links included)."""
    d = Path(out_dir)
    return any(Path(d / n).is_symlink() or (d / n).exists() for n in (REPORT_JSON, REPORT_MD))


def report_job(out_dir: str | Path) -> str | None:
    """The job id of the report in ``out_dir``: ``report.json``'s ``jobid``, else the job in
    ``report.md``'s first line; None when there is no report or it names no job."""
    d = Path(out_dir)
    js = d / REPORT_JSON
    if js.is_file() and not js.is_symlink():
        try:
            data = load_file(js)
        except InputError:
            data = None
        if isinstance(data, dict) and data.get("jobid") is not None:
            return str(data["jobid"])
    md = d / REPORT_MD
    if md.is_file() and not md.is_symlink():
        try:
            with md.open(encoding="utf-8", errors="replace") as fh:
                m = _MD_JOB.match(fh.readline(4096))
        except OSError:
            return None
        return m.group(1) if m else None
    return None


def report_problem(folder: str | Path, jobid: str) -> str | None:
    """Why ``folder`` does not hold job ``jobid``'s report, as a short phrase ("report.md is gone",
    "report.json is gone", "report.json is unreadable (...)", "report.json names no job", "job X's
    report.json there"), or None when both ``report.md`` and ``report.json`` are there as plain
    files and ``report.json`` is a JSON object whose ``jobid`` is ``jobid`` (compared as strings).
    A link counts as gone (the report is never read through one). Never raises."""
    d = Path(folder)
    md, js = d / REPORT_MD, d / REPORT_JSON
    if md.is_symlink() or not md.is_file():
        return "report.md is gone"
    if js.is_symlink() or not js.is_file():
        return "report.json is gone"
    try:
        data = load_file(js)
    except InputError as e:
        return f"report.json is unreadable ({' '.join(str(e).removeprefix(f'{js}: ').split())[:80]})"
    except (OSError, ValueError, RecursionError) as e:  # noqa: BLE001 - never raises: said, not thrown
        return f"report.json is unreadable ({type(e).__name__})"
    if not isinstance(data, dict) or data.get("jobid") is None:
        return "report.json names no job"
    if str(data["jobid"]) != str(jobid):
        return f"job {data['jobid']}'s report.json there"
    return None


def destination(out_dir: str | Path, jobid: str | None, *, analysed: bool, force: bool = False) -> tuple[Path, str | None]:
    """``(folder the report goes to, why it is not out_dir or None)``; see the module docstring."""
    out = Path(out_dir)
    if not has_report(out):
        return out, None
    if not analysed:
        return out / NOT_PUBLISHED, "nothing was analysed: earlier report kept"
    prior = report_job(out)
    if prior is not None and jobid is not None and prior != str(jobid) and not force:
        return out / NOT_PUBLISHED, f"job {prior}'s report there kept (--force replaces it)"
    return out, None


def write_report(out_dir: str | Path, dest: str | Path, report_json: str, report_md: str,
                 extra: Sequence[tuple[Path, bytes]] = ()) -> tuple[Path, Path]:
    """Write ``report.json``, ``report.md`` and the ``extra`` files (the staged plots,
    :func:`ai4s_graph.tools.report.plots.staged`) into ``dest`` (``out_dir`` or a folder under it)
    together and atomically, refusing links under ``out_dir``. Returns the report's two paths.
    Raises :class:`~ai4s_graph.state.publish.UnsafePathError` or ``OSError`` (then nothing is
    replaced). Published into ``out_dir`` itself, the run's :data:`IN_PROGRESS` marker goes: the
    folder is one run's again (a report kept aside leaves it: the folder still mixes two runs)."""
    d = ensure_dir(dest, out_dir)
    done = publish_many([*extra, (d / REPORT_JSON, report_json), (d / REPORT_MD, report_md)], root=out_dir)
    if Path(dest).resolve() == Path(out_dir).resolve():
        clear_in_progress(out_dir)
    return done[-2], done[-1]
