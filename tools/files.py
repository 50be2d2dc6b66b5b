"""Where the package's data folders and its import root are. (Writing files: :mod:`ai4s_graph.state.publish`.)"""

from __future__ import annotations

from pathlib import Path


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
