"""Where the package's data folders and its import root are. (Writing files: :mod:`ai4s_graph.state.publish`.)"""

from __future__ import annotations

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
    ``... trace file is empty``)."""
    from .errors import InputError

    p = Path(path)
    what = not_a_regular_file(p)
    if what == "does not exist":
        raise InputError(f"{p.name}: {kind} not found ({p})")
    if what is not None:
        raise InputError(f"{p.name}: not a {kind}: {p} {what}")
    if p.stat().st_size == 0:
        raise InputError(f"{p.name}: {kind} is empty")
    return p


def fingerprint(path: str | Path) -> dict[str, int | str]:
    """``{"size": bytes, "sha256": hex}`` of one file, read in 1 MiB pieces (constant memory;
    ~1 GB/s). Raises ``OSError`` when it cannot be read."""
    import hashlib

    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as fh:
        while True:
            b = fh.read(1 << 20)
            if not b:
                break
            n += len(b)
            h.update(b)
    return {"size": n, "sha256": h.hexdigest()}


def fingerprint_artifacts(run_dir: str | Path, rel_paths: list[str]) -> dict[str, dict[str, int | str]]:
    """:func:`fingerprint` of each artifact (paths relative to ``run_dir``) that is a regular file,
    keyed by its relative path: what adoption records in ``manifest.json`` (``artifacts.fingerprints``)
    so that a file replaced at the same path later is noticed (:func:`changed_artifacts`)."""
    out: dict[str, dict[str, int | str]] = {}
    for rel in rel_paths:
        p = Path(run_dir) / rel
        if not_a_regular_file(p) is None:
            try:
                out[rel] = fingerprint(p)
            except OSError:
                continue
    return out


def _fp_text(fp: dict) -> str:
    return f"{fp.get('size')} bytes, sha256 {str(fp.get('sha256'))[:12]}"


def changed_artifacts(recorded: Any, now: dict[str, dict[str, int | str]], when: str) -> list[str]:
    """One line per artifact whose size or sha256 differs from what ``recorded`` (an earlier
    ``artifacts.fingerprints``: ``{relative path: {"size", "sha256"}}``) says, or that ``recorded``
    names and is gone; ``when`` says where the record comes from (``"the last adoption
    (<out>/manifest.json)"``). A record that is not such a mapping gives no line."""
    if not isinstance(recorded, dict):
        return []
    out = []
    for rel, old in sorted(recorded.items()):
        if not isinstance(old, dict) or not old.get("sha256"):
            continue
        new = now.get(rel)
        if new is None:
            out.append(f"{rel}: recorded at {when} ({_fp_text(old)}) and now missing or not a regular file")
        elif (new.get("size"), new.get("sha256")) != (old.get("size"), old.get("sha256")):
            out.append(f"{rel}: a different file than at {when} ({_fp_text(old)} then, {_fp_text(new)} now): "
                       "replaced at the same path; the analysis reads the file as it is now")
    return out


def changed_since_adoption(rel: str | None, recorded: Any, sha256_read: Any) -> str | None:
    """One line when the sha256 of the bytes a reader read (``sha256_read``) is not the one
    adoption recorded for artifact ``rel`` (``recorded``: ``{"size", "sha256"}``): the file was
    replaced while the command ran; None when they agree or either is unknown."""
    if not rel or not isinstance(recorded, dict) or not recorded.get("sha256") or not isinstance(sha256_read, str):
        return None
    if sha256_read == recorded["sha256"]:
        return None
    return (f"{rel}: replaced after adoption (sha256 {str(recorded['sha256'])[:12]} at adoption, {sha256_read[:12]} "
            "when read): the figures describe the file as read, not the one adopted")
