"""Where a trace stops being JSON, named in one line (the event, its field, a bare ``NaN``): the
error path of the readers (:mod:`.stream`, :mod:`.kineto_reader`) after their parse failed. Kept
apart from :mod:`.guard` (which reads through :mod:`.stream`) so that the readers import it without
a cycle."""

from __future__ import annotations

import os
import gzip
import zlib
from typing import Any

from ..errors import Ai4sError

#: A bare word where a JSON value belongs (``NaN``, ``Infinity``, ``-Infinity``, ``nan``,
#: ``undefined``...): what Python's ``json.dump`` writes for a non-finite float (its default
#: ``allow_nan=True``) and RFC 8259 forbids; never JSON's own ``null``, ``true`` or ``false`` (an
#: earlier event's ``"args": null`` is no reason for a later one's failure).
_BARE_WORD = r'\s*:\s*(?!(?:null|true|false)(?![A-Za-z0-9_]))(-?[A-Za-z_][A-Za-z0-9_]*)'
#: The parser events that start an element of a list (an object, a list or a scalar of any type).
_ITEM_STARTS = frozenset({"start_map", "start_array", "string", "number", "boolean", "null"})


class _Tail:
    """A binary reader that keeps its last two pieces read (the text around a parse error)."""

    def __init__(self, fh: Any) -> None:
        self.fh, self.prev, self.last = fh, b"", b""

    def read(self, n: int = -1) -> bytes:
        b = self.fh.read(n)
        if b:
            self.prev, self.last = self.last, b
        return b

    def text(self) -> str:
        return (self.prev + self.last).decode("utf-8", errors="replace")


def locate_invalid_json(path: str | os.PathLike[str], error: str = "") -> str | None:
    """Where a trace stops being JSON, in one line: the index of the event in ``traceEvents`` (every
    element counts, objects or not, as the readers count them: :func:`.guard.first_malformed_event`), its
    category and name as far as they were read, the field whose value did not parse and, when it is
    a bare word such as ``NaN`` or ``Infinity``, that word (RFC 8259 has no such number; Python's
    ``json.dump`` writes one for a non-finite float). None when the error lies outside
    ``traceEvents`` or the file parses (the caller keeps its own message). Called only after a
    reader's parse failed (a second read of the file, through the same JSON bounds); ``error``: the
    parser's message, quoted when no bare word explains it; a parse that ran off the end of the data
    (yajl's "premature EOF", pure-Python ijson's "Incomplete JSON content") is called truncated, and
    one that failed after the root value closed (yajl's "trailing garbage": data appended, a second
    gzip member) is said to lie after the document, one in a top-level key after the list is said
    to lie there (not in the last event), and a damaged gzip stream (a bad CRC or length) is said
    to be one (it is not JSON's fault)."""
    import re

    try:
        import ijson.backends.yajl2_c as ijson  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - the pure-Python backend
        import ijson  # type: ignore[no-redef]
    from pathlib import Path

    from ..jsonguard import GuardedReader
    from .rawfile import decoded, raw_of

    p = Path(path)
    idx, key, ev, closed, listed, top = -1, None, {}, False, False, None
    try:
        with raw_of(p, None) as raw:
            tail = _Tail(decoded(raw))
            for prefix, event, value in ijson.parse(GuardedReader(tail, p.name), use_float=True):
                if prefix == "traceEvents.item":
                    if event in _ITEM_STARTS:  # every element counts, an object or not
                        idx, key, ev = idx + 1, None, {}
                    elif event == "map_key":
                        key = value
                elif prefix in ("traceEvents.item.name", "traceEvents.item.cat", "traceEvents.item.ts") and \
                        event in ("string", "number"):
                    ev[prefix.rsplit(".", 1)[1]] = value
                elif prefix == "" and event in ("end_map", "end_array"):
                    closed = True  # the root value is whole: what fails now lies after the document
                elif prefix == "" and event == "map_key":
                    top = value
                elif prefix == "traceEvents" and event == "end_array":
                    listed = True  # the events are whole: what fails now is a top-level key's value
    except Ai4sError:
        return None
    except (gzip.BadGzipFile, zlib.error) as e:  # the compressed stream, not its JSON
        return (f"{p.name}: the gzip data is damaged ({' '.join(str(e).split())[:80] or type(e).__name__}): the "
                ".json.gz was altered or cut after it was written (its checksum, length or blocks do not match); "
                "the rank is not analysed")
    except (EOFError, OSError):
        return None  # a gzip stream cut short, a read error: the caller's own message
    except Exception as e:  # the parser's error: ijson.JSONError
        if closed:
            return (f"{p.name}: more text after the end of the JSON document (another document or other data "
                    "appended; a concatenated .json.gz holds two gzip members, which gunzip reads as one text); "
                    "the rank is not analysed")
        if listed:
            text = " ".join((error or str(e) or type(e).__name__).split())
            if re.search(r"premature EOF|Incomplete JSON|unexpected end", text, re.IGNORECASE):
                return (f"{p.name}: truncated: the JSON ends after the traceEvents list, before the document's "
                        "end: the file was cut short; the rank is not analysed")
            return (f"{p.name}: the JSON after the traceEvents list does not parse"
                    + (f" (at the top-level key {str(top)[:60]!r})" if top not in (None, "traceEvents") else "")
                    + f": not valid JSON ({' '.join((error or str(e) or type(e).__name__).split())[:100]}); "
                    "the rank is not analysed")
        if idx < 0 or key is None:
            return None
        label = ", ".join(f"{k} {ev[k]!r}" if k != "name" else f"name {str(ev[k])[:40]!r}"
                          for k in ("cat", "name", "ts") if k in ev)
        text = " ".join((error or str(e) or type(e).__name__).split())
        if re.search(r"premature EOF|Incomplete JSON|unexpected end", text, re.IGNORECASE):  # yajl / pure-Python ijson
            return (f"{p.name}: truncated: the JSON ends inside traceEvents[{idx}] (at field {key!r}; the event: "
                    f"{label or 'no cat, name or ts read'}): the file was cut short; the rank is not analysed")
        # the first one: the text before the failure is JSON, where a bare word only lies inside a string
        found = re.findall(re.escape(f'"{key}"') + _BARE_WORD, tail.text())
        what = (f"is {found[0]}, not a JSON number: not valid JSON (RFC 8259 has no NaN or Infinity; Python's "
                "json.dump writes them for non-finite floats, kineto never does)") if found else \
            f"does not parse: not valid JSON ({' '.join((error or str(e) or type(e).__name__).split())[:100]})"
        return (f"{p.name}: traceEvents[{idx}] field {key!r} {what}; the event: {label or 'no cat, name or ts read'}; "
                "the rank is not analysed")
    return None
