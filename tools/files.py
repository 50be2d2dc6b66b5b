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
