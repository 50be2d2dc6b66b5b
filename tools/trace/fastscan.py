"""The fast parse of a kineto trace's ``traceEvents``: msgspec over bounded pieces of the
decompressed text, split at event boundaries, with ijson as the fallback.

The one pass (:func:`.stream.iter_events`) spends most of its time turning JSON into Python
objects. ``ijson``'s C backend (yajl2) builds them one parser event at a time; ``msgspec`` decodes a
whole buffer in C. Measured on the replicated 176 MB trace (``bench/make_long_trace.py``, 713 k
events; CPU seconds on the project's 2-core machine, shared): gunzip 0.16 s, ijson over every event
1.8 s, this parse 1.2 s (whole events) and ~0.9 s (the engine's fields only, below). Neither parser
may hold the whole file: the text is decoded in pieces of about :data:`PIECE_BYTES`.

**Splitting.** Kineto writes one event per ``{ ... }`` with ``},\\n  {`` between two events of the
list. A piece runs from the start of an event to a ``}`` followed by ``,`` and ``{`` (any
whitespace between; found with ``re`` in C) at least :data:`PIECE_BYTES` further on, and is
decoded as ``[`` + piece + ``]``. That decode succeeds only when the cut lies between two events of
the list: a cut inside a nested object or a string leaves a bracket or a string open (JSON's
grammar is deterministic, so a prefix of the list that closes with ``]`` ends at depth one). A piece
that does not decode is retried up to :data:`RETRIES` boundaries further; then the rest of the
document goes to ijson, from that piece's first event on (the text ``{"traceEvents":[`` + rest,
which is what ijson would have read there). Events come out in file order either way.

**Where the list starts and ends.** The head (up to ``"traceEvents": [``) is accepted when
``"traceEvents"`` occurs once in it and ``head + "]}"`` decodes to an object: the key is then the
root's. The last piece is decoded as ``{"traceEvents":[`` + rest of the document; when the rest
names ``traceEvents`` again (a second list, which ijson would read too) it goes to ijson. Anything
else (a root that is not an object, no list in the first :data:`HEAD_MAX_BYTES`) is ijson's from
the first byte.

**The same values as ijson** (``use_float=True``): both give ``int`` for integer literals, ``float``
for the others (correctly rounded), the same strings and the last of duplicate keys. Where they
differ, msgspec's decode is refused before any of its events is given out: integers outside the
signed 64-bit range (ijson raises *integer overflow*; msgspec would decode them: a piece with a run
of 19 digits goes to ijson), numbers beyond the float range and malformed text (msgspec raises, so
ijson reads it and raises its own error). A decode of some fields only (``struct``, a :data:`Fields`
pair) skips the other keys without checking their numbers' range or their strings' UTF-8, so each
piece's text is checked for those too (:func:`agrees`: a float literal that overflows, bytes that are
not UTF-8, in any key): every field set accepts or refuses a trace as ijson does, with its error.
ijson's events before its error are given out before it is raised (:func:`_ijson_events`), as the
ijson parse gives them one at a time. ``tests/test_fastscan.py`` checks each of these and that
every trace the suite and the benchmark hold gives the same engine output on both parsers.

**Threads.** The file is read and decompressed (zlib releases the GIL) in a reader thread, at
most :data:`QUEUE_BLOCKS` blocks of :data:`BLOCK_BYTES` ahead, while the main thread decodes.

**Garbage collection** is paused while msgspec decodes a piece (:class:`_GcPause`): the piece's
thousands of event dicts are made in one call, and with the collector on the young-generation
collections inside that call promote them to the oldest generation, which then sets off full
collections (18 instead of 5 over the 176 MB trace in ``run``'s one read, ~0.7 s of 4.5 s). Paused,
they are young when the consumers drop them. JSON values hold no reference cycles.

**Memory.** A block queue (3 x 1 MiB of text), the text being cut (~1.3 MiB), the piece being
decoded (:data:`PIECE_BYTES`) and its events (~4x its text as Python objects), the document's last :data:`~.trailer.TAIL_BYTES`
for the trailer keys: ~10 MiB whatever the trace's size.

``AI4S_TRACE_PARSER=ijson`` selects the old parser (the whole file through ijson).
"""

from __future__ import annotations

import gc
import os
import queue
import re
import threading
from collections import deque
from typing import Any, Callable, Iterator, TypedDict

import msgspec

from .codes import METADATA_ARG_KEYS, OP_ARG_KEYS
from .json_agree import _ints_agree, agrees  # the checks of a piece (fastscan.agrees for the callers)
from .trailer import TAIL_BYTES, TailKeeper, trailer_keys

try:  # the same backend as the engine's ijson path (.stream)
    import ijson.backends.yajl2_c as ijson  # type: ignore[import-not-found]
except Exception:  # pragma: no cover - depends on the wheel
    import ijson  # type: ignore[no-redef]

#: Decompressed text decoded at a time. The piece's events (~4x its text as Python objects) are
#: made by the decode and read back by the engine's loop right after: they should stay in the
#: core's cache. Measured on the replicated 176 MB trace (CPU s of ``scan_trace``, this 2-core
#: machine, 2 MiB L2 per core, 2026-12-02, two interleaved rounds): 64 KiB 1.345 / 1.335, 256 KiB
#: 1.375 / 1.357, 1 MiB 1.363 / 1.379, 4 MiB 1.574 / 1.593 (+15 %: 16 MiB of objects no longer
#: fit). 256 KiB (~1 MiB of objects) fits a 2 MiB L2 with room, and leaves a margin on hosts whose
#: caches are smaller or slower than this one's (the 16-core device ran the 1 MiB pieces' decode
#: 3x slower than this machine, bytes.translate over the same text at the same speed).
PIECE_BYTES = 1 << 18
#: Bytes of text one read of the (decompressed) file returns, and how many the reader thread keeps
#: ahead (measured on the replicated 176 MB trace, engine only: 4 MiB blocks 100 MB peak RSS, 1 MiB
#: 80 MB, the same time).
BLOCK_BYTES = 1 << 20
QUEUE_BLOCKS = 2
#: Boundaries tried after a piece that does not decode before the rest goes to ijson.
RETRIES = 4
#: The ``traceEvents`` key must come within this many bytes (kineto's header is a few KB).
HEAD_MAX_BYTES = 16 << 20
#: Environment variable that picks the parser: ``fast`` (default) or ``ijson``.
PARSER_ENV = "AI4S_TRACE_PARSER"

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_DECODE = msgspec.json.Decoder().decode

#: The event fields and ``args`` keys the engine's scan reads (:func:`.stream.scan_trace` and its
#: helpers; ``tests/test_fastscan.py`` checks the list against their source). A scan without other
#: consumers decodes only these (msgspec skips the rest in C: ~40 % less time, see the module
#: docstring); every other reader gets whole events.
ENGINE_EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "id2", "args")
ENGINE_ARG_KEYS = ("correlation", "stream", "device",
                   # collective metadata of communication kernels (.stream.COLLECTIVE_ARG_KEYS)
                   "Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name",
                   "Process Group Description", "Process Group Ranks", "In split size", "Out split size")
_EngineArgs = TypedDict("_EngineArgs", {k: Any for k in ENGINE_ARG_KEYS}, total=False)  # type: ignore[misc]
_EngineEvent = TypedDict("_EngineEvent", {**{k: Any for k in ENGINE_EVENT_KEYS[:-1]},  # type: ignore[misc]
                                          "args": _EngineArgs}, total=False)
_EngineDoc = TypedDict("_EngineDoc", {"traceEvents": list[_EngineEvent]}, total=False)  # type: ignore[misc]
#: ``args`` key -> attribute of :class:`EngineArgs` (``Collective name`` -> ``collective_name``).
ARG_ATTRS = {k: k.lower().replace(" ", "_") for k in ENGINE_ARG_KEYS}


EngineArgs = msgspec.defstruct(
    "EngineArgs", [(a, Any, msgspec.UNSET) for a in ARG_ATTRS.values()], module=__name__, gc=False,
    rename={a: k for k, a in ARG_ATTRS.items()}, namespace={"__doc__": (
        "The ``args`` keys the engine's scan reads (:data:`ENGINE_ARG_KEYS`, as the attributes "
        ":data:`ARG_ATTRS`); a key the event does not hold is ``msgspec.UNSET`` (a JSON null is None).")})
EngineEvent = msgspec.defstruct(
    "EngineEvent", [(k, Any, None) for k in ENGINE_EVENT_KEYS[:-1]] + [("args", EngineArgs | None, None)],
    module=__name__, gc=False, namespace={"__doc__": (
        "One event as the engine's scan reads it (:data:`ENGINE_EVENT_KEYS`): a field the event does "
        "not hold, or holds as JSON null, is None (what ``dict.get`` gives); ``args`` is "
        ":class:`EngineArgs`, None, or (made from an ijson event only, :func:`engine_events`) the value "
        "as written when it is not an object (decoded text whose args are not an object goes to ijson, "
        "as for the ``engine`` fields). One object per event with its fields in slots and no key "
        "strings: msgspec makes it ~40 % faster than the dict of the same fields (0.074 against 0.12 s "
        "CPU for 59 MiB of the replicated trace, 2026-12-02), and a slot reads ~3x faster than "
        "``dict.get``. Not tracked by the cyclic collector (``gc=False``: JSON values hold no cycles).")})


#: The ``args`` keys TraceLens's sheets read besides the engine's (:class:`~.tracelens_sheets.
#: OpArgsCollector`: the ops' argument signature, the metadata events' names), and their attributes.
SHEETS_ARG_KEYS = OP_ARG_KEYS + METADATA_ARG_KEYS
SHEETS_ARG_ATTRS = {k: k.lower().replace(" ", "_") for k in SHEETS_ARG_KEYS}
SheetsArgs = msgspec.defstruct(
    "SheetsArgs", [(a, Any, msgspec.UNSET) for a in SHEETS_ARG_ATTRS.values()], bases=(EngineArgs,),
    module=__name__, gc=False, rename={**{a: k for k, a in ARG_ATTRS.items()}, **{a: k for k, a in SHEETS_ARG_ATTRS.items()}},
    namespace={"__doc__": (
        ":class:`EngineArgs` and the keys :data:`SHEETS_ARG_KEYS` (attributes :data:`SHEETS_ARG_ATTRS`; UNSET "
        "when the event does not hold one).")})
SheetsEvent = msgspec.defstruct(
    "SheetsEvent", [("args", SheetsArgs | None, None)], bases=(EngineEvent,), module=__name__, gc=False,
    namespace={"__doc__": (
        "An :class:`EngineEvent` whose ``args`` is :class:`SheetsArgs`: what the engine's pass decodes when "
        "TraceLens's sheets' collector is its only other consumer (``sheets`` fields): the engine reads it "
        "as an EngineEvent, the collector its extra keys. Measured on the replicated 176 MB trace (project "
        "machine, 2 vCPUs, shared, 2026-12-04): engine columns + collector 4.3-5.5 s CPU with whole event "
        "dicts, 2.1 s for the engine's structs alone.")})
#: The event objects the engine's loop reads (:class:`EngineEvent` and its subclass) and their args.
EVENT_TYPES = frozenset({EngineEvent, SheetsEvent})
ARGS_TYPES = frozenset({EngineArgs, SheetsArgs})

_StructDoc = TypedDict("_StructDoc", {"traceEvents": list[EngineEvent]}, total=False)  # type: ignore[misc]
_SheetsDoc = TypedDict("_SheetsDoc", {"traceEvents": list[SheetsEvent]}, total=False)  # type: ignore[misc]
#: Per field set: (decode a piece ``[...]``, decode the last piece ``{"traceEvents": [...], ...}``).
_DECODERS: dict[Any, tuple[Callable[[bytes], Any], Callable[[bytes], Any]]] = {
    "all": (_DECODE, _DECODE),
    "engine": (msgspec.json.Decoder(list[_EngineEvent]).decode, msgspec.json.Decoder(_EngineDoc).decode),
    "struct": (msgspec.json.Decoder(list[EngineEvent]).decode, msgspec.json.Decoder(_StructDoc).decode),
    "sheets": (msgspec.json.Decoder(list[SheetsEvent]).decode, msgspec.json.Decoder(_SheetsDoc).decode),
}
#: The args of an event without any (every key UNSET).
NO_ARGS = EngineArgs()

#: A consumer's field set: ``(event keys, args keys)`` it reads (``args`` among the event keys when
#: it reads any); the fast parse then makes event dicts of those keys only (:func:`decoders`).
Fields = tuple[tuple[str, ...], tuple[str, ...]]


def union_fields(*sets: Fields) -> Fields:
    """The :data:`Fields` pair reading every key of ``sets`` (in first-seen order), for one read
    that feeds several consumers."""
    ev: dict[str, None] = {}
    ar: dict[str, None] = {}
    for e, a in sets:
        ev.update(dict.fromkeys(e))
        ar.update(dict.fromkeys(a))
    return tuple(ev), tuple(ar)


def decoders(fields: str | Fields) -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
    """(decode a piece, decode the last piece) for ``fields``: a name of :data:`_DECODERS`, or a
    :data:`Fields` pair, whose decoders (made once per pair) give each event as the dict of the
    keys it holds among the event keys, and its ``args`` (when an object) as the dict of the args
    keys it holds (msgspec skips the rest in C). Measured on the replicated 176 MB trace (project
    machine, 2 vCPUs, shared, 2026-12-04): the step accountant fed whole events 3.4-4.0 s CPU, fed
    its fields' dicts 2.5-2.7 s. A piece with an ``args`` that is neither an object nor null does
    not decode (the rest goes to ijson, as for ``engine``). Raises KeyError for an unknown name,
    ValueError for a pair that is not two tuples of strings."""
    if isinstance(fields, str):
        return _DECODERS[fields]
    if not (isinstance(fields, tuple) and len(fields) == 2 and all(
            isinstance(keys, tuple) and all(type(k) is str for k in keys) for keys in fields)):
        raise ValueError(f"fields must be (event keys, args keys) tuples of strings, got {fields!r}")
    got = _DECODERS.get(fields)
    if got is None:
        ev_keys, arg_keys = fields
        a_t = TypedDict("_Args", {k: Any for k in arg_keys}, total=False)  # type: ignore[misc]
        ev = {k: Any for k in ev_keys if k != "args"}
        if "args" in ev_keys:
            ev["args"] = a_t | None  # type: ignore[assignment]  # a JSON null as it is
        e_t = TypedDict("_Event", ev, total=False)  # type: ignore[misc]
        d_t = TypedDict("_Doc", {"traceEvents": list[e_t]}, total=False)  # type: ignore[misc, valid-type]
        got = _DECODERS[fields] = (msgspec.json.Decoder(list[e_t]).decode, msgspec.json.Decoder(d_t).decode)
    return got


def engine_events(batch: list | tuple) -> list:
    """A batch of :func:`event_lists` as :class:`EngineEvent` objects: the decoder's own (``struct``
    fields) as they are; whole event dicts (``all`` fields, the ijson parse) converted, each field
    as ``dict.get`` reads it; a value that is not an object (an ill-typed event) left as it is."""
    if batch and type(batch[0]) in EVENT_TYPES:  # one decode makes every event of a piece
        return batch  # type: ignore[return-value]
    try:
        return msgspec.convert(batch, list[EngineEvent])
    except msgspec.ValidationError:  # an event that is not an object, args that are not one
        return [_engine_event(x) for x in batch]


def _engine_event(x: Any) -> Any:
    if type(x) is not dict:
        return x
    a = x.get("args")
    if type(a) is dict:
        a = EngineArgs(**{attr: a[k] for k, attr in ARG_ATTRS.items() if k in a})
    g = x.get
    return EngineEvent(g("ph"), g("cat"), g("name"), g("pid"), g("tid"), g("ts"), g("dur"), g("id"), g("id2"), a)


def event_dict(ev: EngineEvent) -> dict[str, Any]:
    """``ev`` as the event dict of its fields (``args`` as the dict of the keys it holds): what
    :class:`.stream_fix.DurationPairs` joins; :func:`engine_events` of a list of them gives ``ev`` back."""
    out = {k: getattr(ev, k) for k in ENGINE_EVENT_KEYS}
    if isinstance(ev.args, EngineArgs):
        out["args"] = {k: v for k, attr in ARG_ATTRS.items() if (v := getattr(ev.args, attr)) is not msgspec.UNSET}
    return out
_OPEN = b'{"traceEvents":['
#: A key holding a ``\u`` escape (from the escape to the string's end, then ``:``): the only way to
#: spell ``traceEvents`` other than plainly (no other JSON escape gives a letter).
_ESCAPED_KEY = re.compile(rb'\\u[0-9a-fA-F]{4}(?:[^"\\]|\\.)*"\s*:')

#: What the latest fast parse in this process did (for the tests and the benchmark): ``pieces``
#: decoded by msgspec, ``fallback``: None, or why the rest went to ijson.
last_parse: dict[str, Any] = {"pieces": 0, "fallback": None}


def parser_name() -> str:
    """``fast`` or ``ijson``, from :data:`PARSER_ENV` (anything but ``ijson`` is ``fast``)."""
    return "ijson" if os.environ.get(PARSER_ENV, "").strip().lower() == "ijson" else "fast"


#: Seconds :meth:`_Blocks.close` waits for the reader thread (it checks its stop flag after each
#: block and every 0.1 s): only a read that hangs (a dead mount) comes near it.
CLOSE_WAIT_S = 30.0


class _Blocks:
    """The document's text in blocks of :data:`BLOCK_BYTES`, read by a daemon thread; keeps the last
    :data:`~.trailer.TAIL_BYTES` (``tail()``) and the bytes read (``total``). An exception of the
    read (truncated gzip, OSError, a JSON bound) is raised by :meth:`next` where it happened."""

    def __init__(self, fh, threaded: bool = True) -> None:
        self._fh = fh
        self.total = 0
        self._tail: deque[bytes] = deque()
        self._tail_n = 0
        self._done = False
        self._stop = threading.Event()
        self._q: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        if threaded:
            self._q = queue.Queue(maxsize=QUEUE_BLOCKS)
            self._thread = threading.Thread(target=self._run, name="trace-reader", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                b = self._fh.read(BLOCK_BYTES)
                self._put(b)
                if not b:
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the decoding thread, raised there
            self._put(e)

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)  # type: ignore[union-attr]
                return
            except queue.Full:
                continue

    def next(self) -> bytes:
        """The next block; ``b""`` at the end of the document."""
        if self._done:
            return b""
        b = self._q.get() if self._q is not None else self._fh.read(BLOCK_BYTES)
        if isinstance(b, BaseException):
            self._done = True
            raise b
        if not b:
            self._done = True
            return b""
        self.total += len(b)
        self._tail.append(b)
        self._tail_n += len(b)
        while self._tail_n - len(self._tail[0]) >= TAIL_BYTES:
            self._tail_n -= len(self._tail.popleft())
        return b

    def tail(self) -> bytes:
        return b"".join(self._tail)[-TAIL_BYTES:]

    def close(self) -> None:
        """Stop the reader thread and wait for it: a pass that hands the open file back to another
        read must not share it with a thread still reading it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT_S)


class _GcPause:
    """Pause the cyclic garbage collector around one decode call (threads may decode at once: the
    first in turns it off when it was on, the last out restores it)."""

    _lock = threading.Lock()
    _active = 0
    _was_enabled = False

    def __enter__(self) -> "_GcPause":
        with _GcPause._lock:
            if _GcPause._active == 0:
                _GcPause._was_enabled = gc.isenabled()
                gc.disable()
            _GcPause._active += 1
        return self

    def __exit__(self, *exc) -> None:
        with _GcPause._lock:
            _GcPause._active -= 1
            if _GcPause._active == 0 and _GcPause._was_enabled:
                gc.enable()


class _Rest:
    """A file-like ``read(n)`` over ``first`` and then the remaining blocks: what ijson reads when
    the fast parse hands over."""

    def __init__(self, first: bytes, blocks: _Blocks) -> None:
        self._buf, self._pos, self._blocks = first, 0, blocks

    def read(self, n: int = -1) -> bytes:
        while self._pos >= len(self._buf):
            b = self._blocks.next()
            if not b:
                return b""
            self._buf, self._pos = b, 0
        if n is None or n < 0:
            n = len(self._buf) - self._pos
        out = self._buf[self._pos:self._pos + n]
        self._pos += len(out)
        return out


def _head(blocks: _Blocks) -> tuple[bytes, int | None]:
    """Read blocks until ``"traceEvents": [`` of the root is found; returns the text read and the
    offset just after that ``[`` (None: hand the whole document to ijson)."""
    buf = b""
    while True:
        b = blocks.next()
        buf += b
        m = _KEY.search(buf)
        if m is not None:  # accepted when no other (or escaped) key could be traceEvents and the head is the root's
            if (buf.count(b'"traceEvents"', 0, m.start()) == 0 and _ESCAPED_KEY.search(buf, 0, m.start()) is None
                    and _decodes_as_object(buf[:m.end()] + b"]}")):
                return buf, m.end()
            return buf, None
        if not b or len(buf) > HEAD_MAX_BYTES:
            return buf, None


def _decodes_as_object(text: bytes) -> bool:
    try:
        return isinstance(_DECODE(text), dict)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False


def _piece(text: bytes, decode: Callable[[bytes], Any], check: Callable[[bytes], bool] | None = None) -> list | None:
    """``text`` decoded as a list of events, or None when msgspec refuses it or ijson would not
    give the same values or verdict (``check``: :func:`agrees`, or :func:`_ints_agree` after a decode
    of whole events, which itself refuses the numbers beyond the float range and the bytes that are
    not UTF-8)."""
    try:
        with _GcPause():
            out = decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return out if (check or agrees)(text) else None


def _ijson_events(stream) -> Iterator[list]:
    """The list's events as ijson reads them from ``stream`` (a document whose root holds the list
    under ``traceEvents``), in batches of up to 4096; drains the stream after the list. When ijson
    raises, the events it read before are given out first (the batch so far), then its error: a
    consumer sees every event before the error, as on the ijson parse (one event at a time)."""
    batch: list = []
    try:
        for ev in ijson.items(stream, "traceEvents.item", use_float=True):
            batch.append(ev)
            if len(batch) >= 4096:
                yield batch
                batch = []
    except Exception:
        if batch:
            yield batch
        raise
    if batch:
        yield batch
    while stream.read(1 << 16):
        pass


def events(fh, raw, size: int, progress: Callable[[int, int], None] | None = None,
           trailer: dict[str, Any] | None = None, fields: str | Fields = "all") -> Iterator[Any]:
    """The events of :func:`event_lists`, one at a time (same arguments, same errors)."""
    for batch in event_lists(fh, raw, size, progress, trailer, fields):
        yield from batch


def event_lists(fh, raw, size: int, progress: Callable[[int, int], None] | None = None,
                trailer: dict[str, Any] | None = None, fields: str | Fields = "all") -> Iterator[list | tuple]:
    """The parse entry of :func:`.stream.iter_event_batches`: the events of the document read from
    ``fh`` in file order, as lists (one per decoded piece; a 1-tuple per event on the ijson parse,
    so an error there comes after every event before it), by the parser :func:`parser_name` picks.
    ``raw``: the file on disk, whose ``tell()`` the progress reports; ``size``: its bytes.
    ``progress(bytes_read, size)``: every ~1 MiB of the file; ``trailer``: receives the keys written
    after the list. ``fields``: ``all`` (whole events), ``engine`` (the fast parse keeps only
    :data:`ENGINE_EVENT_KEYS` / :data:`ENGINE_ARG_KEYS`), ``struct`` (those as
    :class:`EngineEvent` objects), ``sheets`` (:class:`SheetsEvent` objects) or a :data:`Fields`
    pair (:func:`decoders`); the ijson parse and the fallback give whole event dicts whatever
    ``fields`` says (:func:`engine_events` converts them). Raises what ijson and ``fh.read`` raise."""
    if parser_name() == "ijson":
        if trailer is not None:
            keeper = fh = TailKeeper(fh)
            for ev in _ijson_path(fh, raw, size, progress):
                yield (ev,)
            trailer.update(trailer_keys(keeper.last(), whole=keeper.total <= TAIL_BYTES))
            return
        for ev in _ijson_path(fh, raw, size, progress):
            yield (ev,)
        return
    tick = None if progress is None else _every(TICK_PIECES, lambda: progress(raw.tell(), size))
    yield from event_batches(fh, trailer=trailer, on_batch=tick, stats=last_parse, fields=fields)
    if progress is not None:
        progress(size, size)


#: pieces between two progress reports: ~1 MiB of the document. ``raw.tell()`` on a gzip file waits on
#: the lock the reader thread holds while it decompresses, so once a piece (256 KiB) was 4x the waits.
TICK_PIECES = max(1, (1 << 20) // PIECE_BYTES)


def _every(n: int, call: Callable[[], None]) -> Callable[[], None]:
    """A callable that runs ``call()`` on its ``n``-th, ``2n``-th, ... call (``n`` >= 1), else nothing."""
    count = 0

    def tick() -> None:
        nonlocal count
        count += 1
        if count >= n:
            count = 0
            call()
    return tick


def _ijson_path(fh, raw, size: int, progress: Callable[[int, int], None] | None) -> Iterator[dict[str, Any]]:
    """The old parse: ijson over the whole document (the reference the fast parse is tested against)."""
    if progress is None:
        yield from ijson.items(fh, "traceEvents.item", use_float=True)
        # drain what follows the events (the trailer keys) so a TailKeeper sees the document's end
        while fh.read(1 << 16):
            pass
        return
    step, nxt = 1 << 20, 0
    for n, ev in enumerate(ijson.items(fh, "traceEvents.item", use_float=True)):
        if not n & 1023:
            pos = raw.tell()
            if pos >= nxt:
                progress(pos, size)
                nxt = pos + step
        yield ev
    while fh.read(1 << 16):
        pass
    progress(size, size)


def event_batches(fh, *, threaded: bool = True, trailer: dict[str, Any] | None = None,
                  on_batch: Callable[[], None] | None = None, stats: dict[str, Any] | None = None,
                  fields: str | Fields = "all") -> Iterator[list]:
    """The ``traceEvents`` of the (decompressed) document read from ``fh`` as lists of event dicts,
    in file order (see the module docstring). ``trailer``: receives the top-level keys written after
    the list (:func:`.trailer.trailer_keys` over the document's last bytes) once the list is done.
    ``on_batch()``: called after each batch (the caller's progress report). ``stats``: set to
    ``{"pieces": decoded by msgspec, "fallback": None or why the rest went to ijson}``. ``fields``:
    ``all``, or ``engine`` for events of :data:`ENGINE_EVENT_KEYS` / :data:`ENGINE_ARG_KEYS` only,
    ``struct`` for those as :class:`EngineEvent`, ``sheets`` as :class:`SheetsEvent`, or a
    :data:`Fields` pair (:func:`decoders`); a piece that does not fit that shape (``args`` not an
    object, say) goes to ijson whole: whole event dicts from there on.
    Raises what ijson raises on a malformed or truncated document, and what ``fh.read`` raises."""
    blocks = _Blocks(fh, threaded)
    st = stats if stats is not None else {}
    st.update(pieces=0, fallback=None)
    last: list[bytes] = []  # the last piece's text, when msgspec decoded it
    try:
        check = _ints_agree if fields == "all" else agrees  # msgspec checks the rest of a whole decode
        yield from _batches(blocks, on_batch, st, *decoders(fields), last=last, check=check)
        if trailer is not None:
            trailer.update(_trailer(blocks, last))
    finally:
        blocks.close()


def _trailer(blocks: _Blocks, last: list[bytes]) -> dict[str, Any]:
    """The keys after the list (:func:`.trailer.trailer_keys`) from the text of the last piece when
    msgspec decoded it and it lies within the document's last :data:`~.trailer.TAIL_BYTES` (it starts
    at an event and holds the list's end and all that follows, so the scan finds the same end as in
    the kept tail, over at most a piece instead of 1 MiB: 0.19 of 2.1 s CPU of ``trace timeline`` on
    the replicated 176 MB trace went to the 1 MiB scan, 2026-12-02), else from the kept tail."""
    whole = blocks.total <= TAIL_BYTES
    if last and not whole and len(last[0]) <= TAIL_BYTES:
        return trailer_keys(last[0])
    return trailer_keys(blocks.tail(), whole=whole)


def read_on(blocks: _Blocks, buf: bytes, s: int) -> tuple[bytes, int] | None:
    """``(text, start)``: the text from ``s`` on with the next block appended, starting at 0; None at
    the end of the document (the cut of :func:`_batches` and of :mod:`.scan_parallel`)."""
    b = blocks.next()
    return (buf[s:] + b, 0) if b else None


def second_list(rest: bytes) -> bool:
    """Whether the text after the list's last event names ``traceEvents`` again, plainly or with a
    ``\\u`` escape (a second list, which ijson reads too: the fast parse hands it over)."""
    return b'"traceEvents"' in rest or _ESCAPED_KEY.search(rest) is not None


def _batches(blocks: _Blocks, on_batch: Callable[[], None] | None, st: dict[str, Any],
             decode_list: Callable[[bytes], Any], decode_doc: Callable[[bytes], Any], *,
             last: list[bytes], check: Callable[[bytes], bool] = agrees) -> Iterator[list]:
    tick = on_batch or (lambda: None)
    buf, s = _head(blocks)
    if s is None:  # not the shape we split: ijson reads the whole document
        st["fallback"] = "no traceEvents list at the root's head"
        yield from _ijson_events(_Rest(buf, blocks))
        return
    eof = False
    while True:
        # enough text for a piece (or the end of the document)
        while not eof and len(buf) - s < PIECE_BYTES + (1 << 16):
            b = blocks.next()
            if b:
                buf = buf[s:] + b
                s = 0
            else:
                eof = True
        m = None if eof and len(buf) - s < PIECE_BYTES else _BOUNDARY.search(buf, s + PIECE_BYTES)
        if m is None:
            if not eof:  # no boundary in what is here yet: read on
                more = read_on(blocks, buf, s)
                if more is not None:
                    buf, s = more
                    continue
                eof = True
            rest = buf[s:]
            if not second_list(rest):
                try:
                    with _GcPause():
                        doc = decode_doc(_OPEN + rest)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    doc = None
                if isinstance(doc, dict) and check(rest):
                    last.append(rest)
                    st["pieces"] += 1
                    if doc["traceEvents"]:
                        yield doc["traceEvents"]
                        tick()
                    return
            st["fallback"] = "the end of the list did not decode"
            yield from _ijson_events(_Rest(_OPEN + rest, blocks))
            return
        evs = None
        for _ in range(RETRIES + 1):
            evs = _piece(b"[" + buf[s:m.start() + 1] + b"]", decode_list, check)
            if evs is not None:
                break
            m = _BOUNDARY.search(buf, m.end())
            if m is None:
                break
        if evs is None:  # ijson from this piece's first event on
            st["fallback"] = f"piece {st['pieces'] + 1} did not decode"
            yield from _ijson_events(_Rest(_OPEN + buf[s:], blocks))
            return
        s = m.end() - 1  # the next event's "{"
        st["pieces"] += 1
        yield evs
        tick()
