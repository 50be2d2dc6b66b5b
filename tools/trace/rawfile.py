"""One open per trace read: the raw bytes of a trace file (opened once, rewound for each reader:
the content hash, the header, the events) and the decoded document, with byte consumers (taps) fed
by the same read."""

from __future__ import annotations

import contextlib
import gzip
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

Taps = tuple[Callable[[bytes], None], ...]
"""Byte consumers fed every chunk of a trace's decoded document by the read that parses it."""
HEADER_KEYS = ("distributedInfo", "deviceProperties", "schemaVersion", "baseTimeNanoseconds")
"""Top-level keys the analysis pass keeps in its header (with those after the events, from the
trailer): rank identity, device properties, schema and the time origin of ``ts``."""

@contextlib.contextmanager
def raw_of(path: Path, raw: BinaryIO | None) -> Iterator[BinaryIO]:
    """The trace's raw bytes: ``raw`` (a binary file of ``path`` the caller opened, rewound here
    and left open: one open serves the hash, the header and the events) or ``path`` opened now."""
    if raw is not None:
        raw.seek(0)
        yield raw
        return
    with open(path, "rb") as fh:
        yield fh


def decoded(raw: BinaryIO) -> Any:
    """The document's bytes from the raw file: gunzipped when the content starts with the gzip
    magic (by content, not by the file name)."""
    magic = raw.read(2)
    raw.seek(0)
    return gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw


class ByteTap:
    """A read-only binary stream that passes reads through and hands every chunk it returns to
    ``taps`` (callables of ``bytes``), e.g. a raw-text counter fed by the one read of a trace."""

    def __init__(self, fh: Any, taps: tuple[Callable[[bytes], None], ...]) -> None:
        self._fh, self._taps = fh, taps

    def read(self, n: int = -1) -> bytes:
        b = self._fh.read(n)
        if b:
            for t in self._taps:
                t(b)
        return b
