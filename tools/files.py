"""Where the package's data folders and its import root are. (Writing files: :mod:`ai4s_graph.state.publish`.)"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any


def package_dir(sub: str) -> Path:
    """The folder of the ``ai4s_graph.<sub>`` package (``"sbatch"``, ``"prompts"``) in a source
    checkout and in an installed wheel alike. Raises ``ModuleNotFoundError`` for an unknown one."""
    import importlib.resources as ir

    return Path(str(ir.files(f"{__name__.split('.')[0]}.{sub}")))


def import_root() -> Path:
    """The folder that holds the ``ai4s_graph`` package: what a child ``python -m ai4s_graph...``
    needs on its ``PYTHONPATH``."""
    import sys

    return Path(sys.modules[__name__.split(".")[0]].__file__).resolve().parent.parent


def not_a_regular_file(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file a reader can open, as a phrase for a one-line
    error (``"does not exist"``, ``"is a directory"``, ``"is a character device"``, ...); None for
    a regular file (a symbolic link is followed). A directory, ``/dev/null`` or a FIFO given where a
    trace or log belongs is a different mistake from a mistyped name, and says so."""
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    except ValueError:  # os.stat's "embedded null byte": no file has such a name
        return "holds a NUL byte (no file can be named so)"
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISDIR, "is a directory"), (stat.S_ISCHR, "is a character device"),
                       (stat.S_ISBLK, "is a block device"), (stat.S_ISFIFO, "is a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "is a socket")):
        if test(mode):
            return what
    return "is not a regular file"


def check_input_file(path: str | Path, kind: str = "trace file") -> Path:
    """``path`` as a :class:`Path` when it is a non-empty regular file; else
    :class:`~ai4s_graph.tools.errors.InputError` in one line naming the file and what it is
    (``trace_rank0.json: trace file not found (/x/trace_rank0.json)``, ``traces: not a trace file:
    /x/traces is a directory``, ``null: not a trace file: /dev/null is a character device``,
    ``... trace file is empty``, ``a\\x00b.json: not a trace file: the path holds a NUL byte ...``: a
    NUL byte written escaped)."""
    from .errors import InputError

    p = Path(path)
    if "\x00" in str(p):
        shown = ascii(str(p))[1:-1]
        raise InputError(f"{ascii(p.name)[1:-1]}: not a {kind}: the path {shown} holds a NUL byte (no file can be "
                         "named so)")
    what = not_a_regular_file(p)
    if what == "does not exist":
        raise InputError(f"{p.name}: {kind} not found ({p})")
    if what is not None:
        raise InputError(f"{p.name}: not a {kind}: {p} {what}")
    if p.stat().st_size == 0:
        raise InputError(f"{p.name}: {kind} is empty")
    return p


def fingerprint(path: str | Path, *, sha256: bool = False) -> dict[str, int | str]:
    """``{"size": bytes, "mtime_ns": int}`` of one file from ``stat`` (the file is not opened: a
    run reads each trace once, ``tests/test_layers.py``), with ``sha256`` (hex, read in 1 MiB
    pieces) when asked. Raises ``OSError`` when it cannot be read."""
    st = os.stat(path)
    out: dict[str, int | str] = {"size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns)}
    if sha256:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for b in iter(lambda: fh.read(1 << 20), b""):
                h.update(b)
        out["sha256"] = h.hexdigest()
    return out


def fingerprint_artifacts(run_dir: str | Path, rel_paths: list[str]) -> dict[str, dict[str, int | str]]:
    """:func:`fingerprint` (size and modification time) of each artifact (paths relative to
    ``run_dir``) that is a regular file, keyed by its relative path: what adoption records in
    ``manifest.json`` (``artifacts.fingerprints``) so that a file replaced at the same path later is
    noticed (:func:`changed_artifacts`, :func:`changed_since_adoption`). A replacement of the same
    size that keeps the old modification time (``cp -p``, ``touch -r``) is not seen."""
    out: dict[str, dict[str, int | str]] = {}
    for rel in rel_paths:
        p = Path(run_dir) / rel
        if not_a_regular_file(p) is None:
            try:
                out[rel] = fingerprint(p)
            except OSError:
                continue
    return out


_KEYS = ("size", "mtime_ns", "sha256")


def _fp_text(fp: dict) -> str:
    import datetime as _dt

    parts = [f"{fp.get('size')} bytes"]
    if isinstance(fp.get("mtime_ns"), int):
        t = _dt.datetime.fromtimestamp(fp["mtime_ns"] / 1e9, _dt.timezone.utc)
        parts.append(f"modified {t.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC")
    if fp.get("sha256"):
        parts.append(f"sha256 {str(fp['sha256'])[:12]}")
    return ", ".join(parts)


def _differs(old: dict, new: dict) -> bool:
    """Whether two fingerprints disagree on any key both hold (size, modification time, sha256)."""
    return any(old.get(k) is not None and new.get(k) is not None and old[k] != new[k] for k in _KEYS)


def changed_artifacts(recorded: Any, now: dict[str, dict[str, int | str]], when: str) -> list[str]:
    """One line per artifact whose fingerprint differs from what ``recorded`` (an earlier
    ``artifacts.fingerprints``: ``{relative path: {"size", "mtime_ns"[, "sha256"]}}``) says, or that
    ``recorded`` names and is gone; ``when`` says where the record comes from (``"the last adoption
    (<out>/manifest.json)"``). A record that is not such a mapping gives no line."""
    if not isinstance(recorded, dict):
        return []
    out = []
    for rel, old in sorted(recorded.items()):
        if not isinstance(old, dict) or old.get("size") is None:
            continue
        new = now.get(rel)
        if new is None:
            out.append(f"{rel}: recorded at {when} ({_fp_text(old)}) and now missing or not a regular file")
        elif _differs(old, new):
            out.append(f"{rel}: a different file than at {when} ({_fp_text(old)} then, {_fp_text(new)} now): "
                       "replaced at the same path; the analysis reads the file as it is now")
    return out


def changed_since_adoption(rel: str | None, recorded: Any, now: Any) -> str | None:
    """One line when artifact ``rel``'s fingerprint ``now`` (after its read) is not the one adoption
    recorded (``recorded``): the file was replaced while the command ran; None when they agree or
    either is unknown."""
    if not rel or not isinstance(recorded, dict) or not isinstance(now, dict) or not _differs(recorded, now):
        return None
    return (f"{rel}: replaced after adoption ({_fp_text(recorded)} at adoption, {_fp_text(now)} after its read): "
            "the figures may describe another file than the one adopted")
