"""The one way the report tools write a file (``diff.md``/``diff.json``, the TraceLens-layout CSVs,
``annotated_trace.json.gz``): into a temporary file beside the target, renamed over it when
complete (:func:`ai4s_graph.tools.files.publish`), so a reader never sees half a file and a failed
write leaves the earlier file in place. Pointing this module at another publish function changes
every report write at once."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from ..files import publish


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike[str], mode: str = "w", **kw) -> Iterator[IO]:
    """Open a temporary file beside ``path`` (``mode`` ``"w"`` text, ``"wb"`` bytes; ``kw`` go to
    :func:`open`: ``encoding``, ``newline``) and publish it as ``path`` when the block ends without
    an exception; on an exception the temporary file is removed and ``path`` is untouched. The
    parent folder is created. Raises ``OSError`` from the file system."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_atomic: mode must be 'w' or 'wb', not {mode!r}")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, mode, **kw) as fh:
            yield fh
        publish(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`open_atomic`); returns the path."""
    with open_atomic(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return Path(path)
