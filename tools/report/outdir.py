"""Checks on ``run``'s output directory and inputs before anything runs or is written.

Each check raises :class:`~ai4s_graph.tools.errors.InputError` (one line; the CLI prints it with
``STATUS=fail`` and exits 2) or :class:`~ai4s_graph.state.publish.UnsafePathError`:

* :func:`check_run_dir`: ``--perf-run`` names an existing directory (a mistyped path or a file
  is refused: the graph would otherwise end in a "Nothing was analysed" report), and its
  ``manifest.json``, when there is one, is a JSON object within the bounds of
  :mod:`ai4s_graph.tools.jsonguard` that validates as a :class:`~ai4s_graph.state.Manifest`;
* :func:`check_out_dir`: ``--out`` is not inside the run's ``traces/`` or ``telemetry/`` (the next
  run would read ``report.json`` as a rank trace); no file or folder the run writes there is a
  link or a special file (:data:`RUN_FILES`, :data:`RUN_FOLDERS` and everything under those
  folders); the report already there is this job's (another job's report is kept unless
  ``--force``); a ``manifest.json`` there is within the JSON bounds;
* :func:`inputs_fingerprint`: the identity (name, size, modification time in ns) of a run's inputs,
  so that the checkpoint thread of a run changes when its inputs change ("already complete" must
  not re-print the old STATUS over new traces).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ...state import Manifest
from ...state.publish import UnsafePathError, check_mode, check_writable
from ..errors import InputError
from ..jsonguard import JsonLimitError, load_file
from ..slurm.jobs import discover_artifacts
from . import write as report_write

#: Files ``run`` writes at the top of its output directory.
RUN_FILES = ("report.json", "report.md", "manifest.json", "foms.json", "gpu_time_breakdown.png", "telemetry.png",
             "scontrol_show_job.txt", "known_bad_nodes.txt")
#: Folders ``run`` writes into (their whole content is checked for links).
RUN_FOLDERS = (".ai4s-graph", "perf_report_csvs", "jobs")
#: Input folders of a perf-run directory an output directory must not be inside.
INPUT_FOLDERS = ("traces", "telemetry")


def check_run_dir(perf_run: str | os.PathLike[str]) -> Manifest | None:
    """Refuse a ``--perf-run`` that is not an existing directory or whose ``manifest.json`` is
    malformed; returns the manifest (None when the directory has none). Raises
    :class:`InputError`."""
    d = Path(perf_run)
    if not d.exists():
        raise InputError(f"--perf-run {d}: no such directory: refused, nothing written")
    if not d.is_dir():
        raise InputError(f"--perf-run {d} is a file, not a run directory: refused, nothing written")
    mp = d / "manifest.json"
    if not mp.exists():
        return None
    data = load_file(mp)
    if not isinstance(data, dict):
        raise InputError(f"malformed {mp}: expected a JSON object: refused, nothing written")
    try:
        return Manifest.model_validate(data)
    except ValueError as e:
        errs = getattr(e, "errors", None)
        first = errs()[0] if callable(errs) else {"loc": (), "msg": str(e)}
        where = ".".join(str(x) for x in first.get("loc", ()))
        msg = str(first["msg"]).removeprefix("Value error, ")  # pydantic's prefix of a validator's own message
        raise InputError(f"malformed {mp}: {where + ': ' if where else ''}{msg}: refused, nothing written") from None


def _inside(p: Path, d: Path) -> bool:
    return p == d or d in p.parents


def _walk_for_links(folder: Path) -> None:
    """Refuse (:class:`UnsafePathError`) a link, a special file or a hard-linked file (the journals
    there are appended to) anywhere under ``folder`` (itself included); nothing below a link is
    followed."""
    try:
        check_mode(folder.lstat(), folder, folder=True)
    except FileNotFoundError:
        return
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs:
            check_mode((Path(root) / name).lstat(), Path(root) / name, folder=True)
        for name in files:
            p = Path(root) / name
            st = p.lstat()
            check_mode(st, p)
            if st.st_nlink > 1:  # journals and ledgers are appended to
                raise UnsafePathError(f"{p} is a hard link to another file: refused to write into it")


def check_out_dir(out: str | os.PathLike[str], *, inputs: tuple[str | os.PathLike[str] | None, ...] = (),
                  owner: str | None = None, force: bool = False) -> None:
    """Refuse an output directory the run must not write into (see the module docstring).
    ``inputs``: the run directories read (``--perf-run``, ``--compare``); ``owner``: the job the
    report will be about (None: not known yet, as with ``--submit``); ``force``: replace another
    job's report. Raises :class:`InputError` or :class:`UnsafePathError`."""
    o = Path(os.path.abspath(out))
    for run in inputs:
        if not run:
            continue
        r = Path(os.path.abspath(run))
        for sub in INPUT_FOLDERS:
            if _inside(o, r / sub):
                raise InputError(f"--out {o} is inside the run's {sub}/ ({r / sub}): the next run would read the "
                                 "report as an input: refused, nothing written")
    if not o.exists():
        return
    if not o.is_dir():
        raise InputError(f"--out {o} is a file, not a directory: refused, nothing written")
    own = {Path(os.path.abspath(r)) for r in inputs if r}
    for name in RUN_FILES:
        if name == "manifest.json" and o in own:
            continue  # the run directory's own manifest.json: read, never rewritten (launcher)
        check_writable(o / name, o)
    for name in RUN_FOLDERS:
        _walk_for_links(o / name)
    mp = o / "manifest.json"
    if mp.is_file() and o not in own:  # an input's manifest is checked by check_run_dir
        try:
            load_file(mp)
        except JsonLimitError as e:
            raise InputError(f"{e}; nothing written") from None
        except InputError:
            pass  # not JSON: this run writes its own manifest.json there
    prior = report_write.report_job(o)
    if prior is not None and owner is not None and prior != str(owner) and not force:
        raise InputError(f"--out {o} holds job {prior}'s report, not job {owner}'s: refused, nothing written "
                         "(--force replaces it)")


def inputs_fingerprint(*runs: str | os.PathLike[str] | None, files: tuple[str | os.PathLike[str] | None, ...] = ()) -> str:
    """12 hex digits identifying the inputs of a run: for each run directory its ``manifest.json``,
    ``train.log``, rank traces, telemetry exports and node-health probe, and each of ``files``,
    by relative name, size and modification time (ns). Missing paths count as missing."""
    items = []
    for run in runs:
        if not run:
            continue
        d = Path(run)
        if not d.is_dir():
            items.append((str(d), None))
            continue
        a = discover_artifacts(d)
        names = ["manifest.json", *(a.train_log and [a.train_log] or []), *a.traces, *a.telemetry,
                 *(a.node_health_probe and [a.node_health_probe] or [])]
        for n in names:
            try:
                st = (d / n).stat()
                items.append((f"{d}/{n}", (st.st_size, st.st_mtime_ns)))
            except OSError:
                items.append((f"{d}/{n}", None))
    for f in files:
        if f:
            try:
                st = Path(f).stat()
                items.append((str(f), (st.st_size, st.st_mtime_ns)))
            except OSError:
                items.append((str(f), None))
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:12]
