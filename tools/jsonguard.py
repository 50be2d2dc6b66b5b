"""Bounds on JSON read from user files, checked on the raw bytes before a parser sees them.

A parser given hostile JSON can take memory and time far beyond the file's size: ``ijson``
builds the prefix of every nesting level (``traceEvents.item.item.item...``), so a 400 KB trace
of nested arrays took ~24 GB, and the standard library's ``json`` ends deep nesting with a
``RecursionError``; one 300 MB event name ran 12 minutes at 4.8 GB. Every reader of a user's JSON
(the engine's pass, the verifier's kineto reader, the whole-file readers in front of TraceLens and
HTA, ``manifest.json``, ``report.json`` in ``diff``) passes the bytes through a
:class:`JsonScanner` first, which refuses, with one line, a document that nests deeper than
:data:`MAX_DEPTH`, holds a string longer than :data:`MAX_STRING_BYTES`, or an element below the
top level (one trace event) longer than :data:`MAX_ELEMENT_BYTES`.

The scan is exact (brackets inside strings and escaped quotes do not count) and cheap: per chunk,
escape pairs are removed (only when the chunk holds a backslash), ``bytes.translate`` keeps only
the six structural bytes ``"[]{}\\``, adjacent quote pairs are dropped (``""``: an empty string, or
a string's end next to the next one's start, with nothing structural between them: dropping them
changes no bracket's in/out-of-string state), the few strings left (those holding brackets) are
cut by a regular expression, and the depth profile of the remaining brackets is a NumPy cumulative
sum. Measured on ``91003/traces/trace_rank0.json.gz`` (13.4 MB of JSON): ~13 ms per pass against
~140 ms for ``ijson`` to parse it.

The limits, from the inputs at hand (46 real kineto traces: the shared perf runs, TraceLens's and
HTA's test traces, the bundled examples and the accuracy cases; measured 2026-12-01):
deepest nesting 8 levels, longest string 5087 bytes (a templated CUDA kernel name), largest event
5934 bytes.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError

#: Deepest nesting accepted: 8x the deepest real trace (8 levels), far below the standard
#: library's recursion limit (1000), where ``json.loads`` raises ``RecursionError``.
MAX_DEPTH = 64
#: Longest string accepted (event names, arg values): 50x the longest seen (5087 bytes).
MAX_STRING_BYTES = 256 * 1024
#: Longest element below the top level (one trace event, one manifest field's value): ~2800x the
#: largest event seen (5934 bytes).
MAX_ELEMENT_BYTES = 16 * 1024 * 1024
#: Largest small document read whole (``manifest.json``, ``report.json``, ``loop.json``): a report
#: of 1000 claims is ~2 MB.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024

_STRUCTURAL = b'"[]{}\\'
_DELETE = bytes(sorted(set(range(256)) - set(_STRUCTURAL)))
_ESCAPE = re.compile(rb"\\.", re.S)
_STRING = re.compile(rb'"[^"]*"')
_STEP = np.zeros(256, dtype=np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1


class JsonLimitError(InputError):
    """JSON beyond :data:`MAX_DEPTH`, :data:`MAX_STRING_BYTES`, :data:`MAX_ELEMENT_BYTES` or
    :data:`MAX_DOCUMENT_BYTES`; the message names the file, the limit and the byte offset."""


class JsonScanner:
    """Feed the raw bytes of one JSON document in order (:meth:`feed`); raises
    :class:`JsonLimitError` as soon as a chunk would take the document past a limit. ``name``: the
    file name the message shows."""

    def __init__(self, name: str, *, max_depth: int = MAX_DEPTH, max_string: int = MAX_STRING_BYTES,
                 max_element: int = MAX_ELEMENT_BYTES) -> None:
        self.name, self.max_depth, self.max_string, self.max_element = name, max_depth, max_string, max_element
        self.depth = 0  # open containers at the end of what was fed
        self.offset = 0  # bytes fed
        self._in_string = False
        self._escape = False  # the chunk ended on a lone backslash: the next byte is escaped
        self._string_len = 0  # bytes of the string still open at the end of what was fed
        self._element = 0  # bytes fed since the depth last came back to the top level's elements

    def _refuse(self, what: str) -> None:
        raise JsonLimitError(f"{self.name}: {what} (at byte {self.offset}): refused before parsing")

    def _locate(self, chunk: bytes, state: tuple) -> None:
        """Refusal path only: walk ``chunk`` byte by byte from the state before it (``state``: depth,
        offset, in string, escape, string length, element length) and refuse at the exact byte that
        first crosses a limit, so the offset named does not depend on how the file was read in
        pieces. Raises :class:`JsonLimitError`."""
        depth, offset, in_str, esc, slen, elem = state
        for i, ch in enumerate(chunk):
            self.offset = offset + i + 1
            if depth >= 3:
                elem += 1
                if elem > self.max_element:
                    self._refuse(f"one JSON element longer than {self.max_element} bytes")
            if in_str:
                if esc:
                    esc = False
                elif ch == 0x5C:
                    esc = True
                    continue
                elif ch == 0x22:
                    in_str = False
                    continue
                slen += 1
                if slen > self.max_string:
                    self._refuse(f"a string longer than {self.max_string} bytes")
            elif ch == 0x22:
                in_str, slen = True, 0
            elif ch in (0x5B, 0x7B):
                depth += 1
                if depth > self.max_depth:
                    self._refuse(f"JSON nested deeper than {self.max_depth} levels")
            elif ch in (0x5D, 0x7D):
                depth -= 1
                if depth < 3:
                    elem = 0

    def feed(self, chunk: bytes) -> None:
        """Scan the next ``chunk``. Raises :class:`JsonLimitError` naming the exact byte offset where
        a limit is first crossed (:meth:`_locate`). (A string's length counts its bytes less its
        escape sequences' backslashes.)"""
        n = len(chunk)
        if not n:
            return
        if n <= self.max_string or self.max_string <= 0:
            state = (self.depth, self.offset, self._in_string, self._escape, self._string_len, self._element)
            try:
                self._feed(chunk)
            except JsonLimitError:
                self._locate(bytes(chunk), state)
                raise
            return
        self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        n = len(chunk)
        if n > self.max_string > 0:  # pieces no longer than a string may be: a longer one spans pieces
            view = memoryview(chunk)
            for i in range(0, n, self.max_string):
                self.feed(view[i:i + self.max_string])
            return
        c = bytes(chunk)
        if self._escape:
            c, self._escape = c[1:], False
        if b"\\" in c:
            c = _ESCAPE.sub(b"", c)
            if c.endswith(b"\\"):
                c, self._escape = c[:-1], True
        was_in_string = self._in_string
        r = c.translate(None, _DELETE)
        if was_in_string:
            r = b'"' + r
        r = r.replace(b'""', b"")
        if b'"' in r:
            r = _STRING.sub(b"", r)
        q = r.find(b'"')
        self._in_string = q >= 0
        if q >= 0:
            r = r[:q]
        # the string still open at the end: its length so far
        if self._in_string:
            if was_in_string and b'"' not in c:
                self._string_len += len(c)
            else:
                self._string_len = len(c) - c.rfind(b'"') - 1
            if self._string_len > self.max_string:
                self.offset += n
                self._refuse(f"a string longer than {self.max_string} bytes")
        elif was_in_string:
            self._string_len += c.find(b'"')
            if self._string_len > self.max_string:
                self.offset += n
                self._refuse(f"a string longer than {self.max_string} bytes")
        low = self.depth
        if r:
            prof = np.cumsum(_STEP[np.frombuffer(r, dtype=np.uint8)], dtype=np.int64)
            top = self.depth + int(prof.max())
            low = min(low, self.depth + int(prof.min()))
            self.offset += n
            if top > self.max_depth:
                self._refuse(f"JSON nested deeper than {self.max_depth} levels")
            self.depth += int(prof[-1])
        else:
            self.offset += n
        if low >= 3:  # still inside one element of a top-level value (one trace event)
            self._element += n
            if self._element > self.max_element:
                self._refuse(f"one JSON element longer than {self.max_element} bytes")
        else:
            self._element = 0


class GuardedReader:
    """A binary file wrapper whose :meth:`read` passes every chunk through a :class:`JsonScanner`
    before returning it, so a parser reading from it never sees bytes beyond a limit."""

    def __init__(self, fh, name: str) -> None:
        self._fh = fh
        self.scanner = JsonScanner(name)

    def read(self, n: int = -1) -> bytes:
        """Read up to ``n`` bytes, scanned. Raises :class:`JsonLimitError`."""
        b = self._fh.read(n)
        self.scanner.feed(b)
        return b


def check_bytes(data: bytes, name: str) -> None:
    """Scan a whole document held in memory (in 1 MiB slices). Raises :class:`JsonLimitError`."""
    s = JsonScanner(name)
    view = memoryview(data)
    for i in range(0, len(view), 1 << 20):
        s.feed(view[i:i + (1 << 20)])


def loads(data: bytes | str, name: str) -> Any:
    """``json.loads`` of a small user document after :func:`check_bytes` and a size check
    (:data:`MAX_DOCUMENT_BYTES`). Raises :class:`JsonLimitError`, or :class:`InputError` (one line)
    when it is not JSON."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise JsonLimitError(f"{name}: {len(raw)} bytes, more than the {MAX_DOCUMENT_BYTES} a document may hold: refused")
    check_bytes(raw, name)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
        where = f" at line {e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
        raise InputError(f"{name}: not valid JSON ({msg}{where})") from None


def load_file(path: str | os.PathLike[str]) -> Any:
    """:func:`loads` of a file, its size checked before it is read. Raises :class:`InputError`
    (missing, unreadable, not JSON) or :class:`JsonLimitError`."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise JsonLimitError(f"{p}: {size} bytes, more than the {MAX_DOCUMENT_BYTES} a document may hold: refused")
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror or type(e).__name__})") from None
    return loads(raw, str(p))
