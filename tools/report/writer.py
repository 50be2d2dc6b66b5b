"""The one way the report tools write a file (``diff.md``/``diff.json``, the TraceLens-layout CSVs,
``annotated_trace.json.gz``): through :mod:`ai4s_graph.state.publish` (a temporary file beside the
target, renamed over it when complete, links refused), so a reader never sees half a file and a
failed write leaves the earlier file in place."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import IO, Iterator

from ...state.publish import publish, publish_stream


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike[str], mode: str = "w", **kw) -> Iterator[IO]:
    """Open a temporary file beside ``path`` (``mode`` ``"w"`` text, ``"wb"`` bytes; ``kw`` go to
    :class:`io.TextIOWrapper`: ``encoding``, ``newline``) and publish it as ``path`` when the block
    ends without an exception (:func:`ai4s_graph.state.publish.publish_stream`); on an exception the
    temporary file is removed and ``path`` is untouched. The parent folder is created. Raises
    ``UnsafePathError`` (a link on the way) or ``OSError`` from the file system."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_atomic: mode must be 'w' or 'wb', not {mode!r}")
    with publish_stream(path) as raw:
        if mode == "wb":
            yield raw
            return
        text = io.TextIOWrapper(raw, **kw)
        try:
            yield text
            text.flush()
        finally:
            text.detach()


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`ai4s_graph.state.publish.publish`);
    returns the path."""
    return publish(path, text)
