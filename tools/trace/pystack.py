"""Python stack events (``with_stack=True``: ``python_function`` events, nested by time on their
thread) reduced to the user's frames.

The profiler names a frame ``<file>(<line>): <function>`` with the file's path relative to the
``sys.path`` entry it was found under (measured here with torch 2.13: a script's own modules keep
their path below the script's folder, ``other/helper.py(2): work``; torch's are ``torch/nn/...``, the
standard library's ``json/encoder.py(183): encode``; built-ins ``<built-in method ...>``; frozen
modules ``<frozen os>(674): ...``). The line is the function's first line (its ``def``) for a frame
entered while profiling, the current line for frames already running when profiling began.

A *user frame* is any frame but: names starting with ``<`` (built-ins, frozen modules), files under
a framework package of :data:`LIBRARY_ROOTS` (torch and its siblings: the profiler's own frames are
``torch/profiler/...``), files under ``site-packages``/``dist-packages`` (installed libraries whose
path was not shortened), and files whose first path part is a standard-library module
(``sys.stdlib_module_names``, Python >= 3.10).
"""

from __future__ import annotations

import re
import sys

#: Framework packages whose frames are never the user's (torch's own, its compiler stack and the
#: libraries it calls into for kernels).
LIBRARY_ROOTS = frozenset({"torch", "functorch", "torchgen", "triton", "torchvision", "torchaudio", "torchdata",
                           "numpy", "apex", "transformer_engine", "typing_extensions", "importlib_metadata"})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
_FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")

NO_STACKS_NOTE = ("no Python stacks in this trace: profile with with_stack=True to name the user's file:line "
                  "behind each attribution")


def is_user_frame(name: str) -> bool:
    """True when the ``python_function`` event ``name`` is a frame of the user's code (see the
    module docstring for what is skipped)."""
    if not name or name[0] == "<":
        return False
    m = _FRAME_RE.match(name)
    if m is None:
        return False
    path = m.group("file").replace("\\", "/")
    if "site-packages/" in path or "dist-packages/" in path or path.startswith("<"):
        return False
    first = path.lstrip("./").split("/", 1)[0]
    root = first[:-3] if first.endswith(".py") else first
    return root not in LIBRARY_ROOTS and root not in _STDLIB


def site_of(name: str) -> str:
    """``file:line (function)`` of a frame name ``file(line): function``; the name itself when it has
    another shape."""
    m = _FRAME_RE.match(name)
    if m is None:
        return name
    return f"{m.group('file')}:{m.group('line')} ({m.group('func')})"
