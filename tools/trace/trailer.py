"""Top-level keys a kineto trace writes AFTER its ``traceEvents`` list.

PyTorch's kineto writes ``schemaVersion`` and ``distributedInfo`` before the events and
``deviceProperties`` before them too in recent versions, but other writers (older PyTorch, the
TraceLens sample traces, merged or rewritten traces) put ``deviceProperties``, ``distributedInfo``,
``traceName`` or ``baseTimeNanoseconds`` after the list. A streaming reader that stops at the
events never sees those. This module recovers them from the last bytes of the document: the
stream is read through :class:`TailKeeper`, which keeps the final :data:`TAIL_BYTES` bytes, and
:func:`trailer_keys` parses what follows the end of the events list there.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import orjson

#: Bytes of the document's end kept for the trailer (deviceProperties of 8 GPUs is ~10 KB in
#: PyTorch 2.x traces; 1 MiB leaves room for long distributedInfo / process-group tables).
TAIL_BYTES = 1 << 20

_TOKEN = re.compile(rb'"(?:[^"\\\n]|\\.)*"|[\[\]{}]')
#: ``], "key":``: in compact one-line JSON, a place outside any string to start the depth scan from
_CANDIDATE = re.compile(rb'\]\s*,\s*(?="[^"\\]*"\s*:)')


class TailKeeper:
    """A read-only binary stream that passes reads through and keeps the last ``keep`` bytes."""

    def __init__(self, fh, keep: int = TAIL_BYTES) -> None:
        self._fh, self._keep = fh, keep
        self.tail = bytearray()
        self.total = 0  # bytes read in all

    def read(self, n: int = -1) -> bytes:
        b = self._fh.read(n)
        if b:
            self.total += len(b)
            self.tail += b
            if len(self.tail) > 2 * self._keep:
                del self.tail[: len(self.tail) - self._keep]
        return b

    def last(self) -> bytes:
        """The last ``keep`` bytes read (fewer when the stream was shorter)."""
        return bytes(self.tail[-self._keep:])


def trailer_keys(tail: bytes, whole: bool = False) -> dict[str, Any]:
    """The top-level keys after the ``traceEvents`` list, from the document's last bytes.

    ``tail`` must start between two events of the list (any line start inside it: JSON strings
    hold no raw newline) or be the ``whole`` document. The scan tracks bracket depth outside
    strings from the first line start: the depth the document's closing ``}`` reaches is the
    root's; the events list closes where the depth first comes back to one above it. Returns
    ``{}`` when there is no trailer or it cannot be parsed."""
    if whole:
        try:
            doc = orjson.loads(tail)
        except orjson.JSONDecodeError:
            return {}
        if not isinstance(doc, dict) or "traceEvents" not in doc:
            return {}
        keys = list(doc)  # document order
        return {k: doc[k] for k in keys[keys.index("traceEvents") + 1:]}
    start = tail.find(b"\n")
    if start < 0:  # one line (compact JSON): start at the first ``], "key":`` (outside any string)
        m = _CANDIDATE.search(tail)
        if m is None:
            return {}
        start = m.start()
    depth, lo, marks = 0, 0, []  # marks: (depth after the token, end offset) of closing brackets
    for m in _TOKEN.finditer(tail, start):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
        elif c in (b"]", b"}"):
            depth -= 1
            marks.append((depth, m.end(), c))
            lo = min(lo, depth)
    # lo: after the root's closing brace; the events list closed when depth first reached lo + 1.
    close = next((end for d, end, c in marks if d == lo + 1 and c == b"]"), None)
    if close is None:
        return {}
    rest = tail[close:].lstrip()
    if not rest.startswith(b","):
        return {}
    try:
        doc = orjson.loads(b"{" + rest[1:])
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}



def read_trailer(path: str | Path) -> dict[str, Any]:
    """:func:`trailer_keys` of a trace file (``.json`` or ``.json.gz``). A plain file is read from
    ``TAIL_BYTES`` before its end; a gzip file is decompressed to its end (memory: the tail only).
    Returns ``{}`` on an unreadable file (the streaming pass reports those)."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
            if not gz:
                size = p.stat().st_size
                fh.seek(max(0, size - TAIL_BYTES))
                return trailer_keys(fh.read(), whole=size <= TAIL_BYTES)
        keeper = TailKeeper(gzip.open(p, "rb"))
        while keeper.read(1 << 20):
            pass
        return trailer_keys(keeper.last(), whole=keeper.total <= TAIL_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile, ValueError):
        return {}
