"""Atomic file publishing shared by the tools that write into a run directory."""

from __future__ import annotations

import os
from pathlib import Path


def default_file_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file: ``0o666`` less the umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def publish(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Give ``tmp`` (a ``tempfile.mkstemp`` file, mode 0600) the ordinary file mode and rename it
    over ``out`` atomically. Returns ``out``. Raises ``OSError`` from chmod/rename."""
    os.chmod(tmp, default_file_mode())
    os.replace(tmp, out)
    return Path(out)
