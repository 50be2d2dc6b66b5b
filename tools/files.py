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
