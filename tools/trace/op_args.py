"""The op arguments TraceLens's sheets need, collected during the engine's read
(:class:`OpArgsCollector`, fed by :func:`~.stream.scan_trace` ``sheets=``); the sheets themselves are
built by :mod:`.tracelens_sheets`."""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from msgspec import UNSET

from .codes import OP_ARG_KEYS
from .fastscan import SHEETS_ARG_ATTRS, SheetsEvent
from .hygiene import num
from .scan_loop import ScanColumns

if TYPE_CHECKING:
    import numpy as np

    from .scan import TraceScan

ARG_KEYS = OP_ARG_KEYS  # the ops' argument signature (.codes)
_OP_ATTRS = tuple(SHEETS_ARG_ATTRS[k] for k in ARG_KEYS)  # their attributes of a SheetsArgs
_NO_SIG = (None,) * len(ARG_KEYS)  # the signature of an op without args


def _arg(args: Any, key: str) -> Any:
    """``key`` of a :class:`~.fastscan.SheetsArgs` (or None) as ``(args or {}).get(key)`` reads the dict."""
    if args is None:
        return None
    v = getattr(args, SHEETS_ARG_ATTRS[key])
    return None if v is UNSET else v


def _key(*parts: Any) -> Any:
    """``parts`` (a pid, or a (pid, tid) pair) as a dict key: as they are, or each as its text when one
    is unhashable (a list or an object: :meth:`OpArgsCollector.names` looks them up the same way)."""
    try:
        hash(parts)
    except TypeError:
        parts = tuple(str(x) for x in parts)
    return parts[0] if len(parts) == 1 else parts


def _cat(cat: Any) -> Any:
    """A category as the engine's loop reads it: an unhashable one (a list, an object) is none."""
    if type(cat) is str or cat is None:
        return cat
    try:
        hash(cat)
    except TypeError:
        return None
    return cat


def _tup(v: Any) -> Any:
    """TraceLens's ``list_to_tuple``: nested lists as nested tuples."""
    return tuple(_tup(x) for x in v) if isinstance(v, list) else v


class OpArgsCollector:
    """A consumer of the engine's read (:func:`~.stream.scan_trace` ``sheets=``: :meth:`feed_batch`;
    :meth:`feed` takes one event dict, :meth:`feed_struct` one :class:`~.fastscan.SheetsEvent`): per
    ``cpu_op`` its event ordinal, start, thread and interned argument signature; per launch call
    (an event with a correlation id outside the CPU-side categories) its ordinal and thread; the
    process and thread names of the metadata events. Events of the wrong shape are read as the
    engine's loop (:class:`.scan_loop.ScanColumns`) reads them, never raised on: an element of
    ``traceEvents`` that is not an object is counted (its ordinal) and skipped, ``args`` that is not an
    object is no args, a ``cpu_op`` without a numeric ``ts`` (:func:`.hygiene.num`) no op, an unhashable
    category none, an unhashable pid / tid named by its text. Memory: ~20 bytes per ``cpu_op``, ~8 per
    launch, plus the distinct signatures."""

    _CPU_SIDE = frozenset({"cpu_op", "user_annotation", "python_function", "gpu_user_annotation"})

    def __init__(self) -> None:
        self.n = 0
        self.op_ord, self.op_ts, self.op_sig, self.op_thr = array("q"), array("d"), array("i"), array("i")
        self.l_ord, self.l_thr = array("q"), array("i")
        self.sigs: list[tuple] = []
        self._sig_ids: dict[tuple, int] = {}
        self.threads: list[tuple] = []
        self._thr_ids: dict[tuple, int] = {}
        self.process_names: dict[Any, str] = {}
        self.process_labels: dict[Any, str] = {}
        self.thread_names: dict[tuple, str] = {}

    def _thread(self, ev: dict) -> int:
        return self._thread_of(ev.get("pid"), ev.get("tid"))

    def _thread_of(self, pid: Any, tid: Any) -> int:
        key = _key(pid, tid)
        t = self._thr_ids.get(key)
        if t is None:
            t = self._thr_ids[key] = len(self.threads)
            self.threads.append(key)
        return t

    def feed(self, ev: Any) -> None:
        """Take one element of ``traceEvents`` as parsed (an event dict; anything else is counted and
        skipped, as the engine's loop does)."""
        self.n += 1
        if type(ev) is not dict:
            return
        cat, ph = ev.get("cat"), ev.get("ph")
        if type(cat) is not str and cat is not None:
            cat = _cat(cat)
        if ph == "M":
            args = ev.get("args")
            if type(args) is not dict:
                args = {}
            nm = ev.get("name")
            if nm == "process_name":
                self.process_names[_key(ev.get("pid"))] = str(args.get("name"))
            elif nm == "process_labels":
                self.process_labels[_key(ev.get("pid"))] = str(args.get("labels"))
            elif nm == "thread_name":
                self.thread_names[_key(ev.get("pid"), ev.get("tid"))] = str(args.get("name"))
            return
        if ph not in ("X", None) or ev.get("ts") is None:
            return
        args = ev.get("args")
        if type(args) is not dict:
            args = None
        if cat == "cpu_op":
            t = num(ev["ts"])
            if t is None:  # the engine keeps no op without a numeric ts
                return
            a = args or {}
            sig = tuple(str(_tup(a[k])) if k in a else None for k in ARG_KEYS)
            sid = self._sig_ids.get(sig)
            if sid is None:
                sid = self._sig_ids[sig] = len(self.sigs)
                self.sigs.append(sig)
            self.op_ord.append(self.n)
            self.op_ts.append(t)
            self.op_sig.append(sid)
            self.op_thr.append(self._thread(ev))
        elif args and cat not in self._CPU_SIDE and args.get("correlation") is not None:
            self.l_ord.append(self.n)
            self.l_thr.append(self._thread(ev))

    def feed_batch(self, batch: list | tuple) -> None:
        """Take one batch of the engine's read (:func:`~.stream.scan_trace` ``sheets=``):
        :class:`~.fastscan.SheetsEvent` objects (the ``sheets`` decode: :meth:`feed_struct` each) or
        anything else a read gives (event dicts: :meth:`feed` each)."""
        if batch and type(batch[0]) is SheetsEvent:  # one decode makes every event of a piece
            f = self.feed_struct
        else:
            f = self.feed
        for ev in batch:
            f(ev)

    def feed_struct(self, ev: Any) -> None:
        """Take one :class:`~.fastscan.SheetsEvent`: what :meth:`feed` keeps of the event dict of the
        same fields (a key the event does not hold reads as :meth:`feed`'s missing key; a JSON null
        as None)."""
        self.n += 1
        cat, ph, args = ev.cat, ev.ph, ev.args
        if type(cat) is not str and cat is not None:
            cat = _cat(cat)
        if ph == "M":
            nm = ev.name
            if nm == "process_name":
                self.process_names[_key(ev.pid)] = str(_arg(args, "name"))
            elif nm == "process_labels":
                self.process_labels[_key(ev.pid)] = str(_arg(args, "labels"))
            elif nm == "thread_name":
                self.thread_names[_key(ev.pid, ev.tid)] = str(_arg(args, "name"))
            return
        if ph not in ("X", None) or ev.ts is None:
            return
        if cat == "cpu_op":
            t = ev.ts if type(ev.ts) is float else num(ev.ts)
            if t is None:  # the engine keeps no op without a numeric ts
                return
            if args is None:
                sig = _NO_SIG
            else:
                sig = tuple(None if (v := getattr(args, attr)) is UNSET else str(_tup(v)) for attr in _OP_ATTRS)
            sid = self._sig_ids.get(sig)
            if sid is None:
                sid = self._sig_ids[sig] = len(self.sigs)
                self.sigs.append(sig)
            self.op_ord.append(self.n)
            self.op_ts.append(t)
            self.op_sig.append(sid)
            self.op_thr.append(self._thread_of(ev.pid, ev.tid))
        elif args is not None and cat not in self._CPU_SIDE and (c := args.correlation) is not UNSET and c is not None:
            self.l_ord.append(self.n)
            self.l_thr.append(self._thread_of(ev.pid, ev.tid))

    def reset(self) -> None:
        """Forget everything fed (a parallel pass that handed back: the one pass feeds it anew)."""
        self.__init__()  # type: ignore[misc]

    def export(self) -> dict[str, Any]:
        """What was fed, as picklable parts, for :meth:`absorb` (the parallel pass's workers)."""
        return {"n": self.n, "op_ord": self.op_ord.tobytes(), "op_ts": self.op_ts.tobytes(),
                "op_sig": self.op_sig.tobytes(), "op_thr": self.op_thr.tobytes(), "l_ord": self.l_ord.tobytes(),
                "l_thr": self.l_thr.tobytes(), "sigs": self.sigs, "threads": self.threads,
                "process_names": self.process_names, "process_labels": self.process_labels,
                "thread_names": self.thread_names}

    def absorb(self, part: dict[str, Any]) -> None:
        """Join what a collector fed the next piece of the same read kept (:meth:`export`), after
        what this one was fed: the same as one collector fed both in order (ordinals offset by the
        events before the piece; signatures and threads re-coded to the order of first appearance;
        the metadata names as later events set them)."""
        from .join_codes import codes_of, offset, recoded

        smap = codes_of(part["sigs"], self._sig_ids, self.sigs)
        tmap = codes_of(part["threads"], self._thr_ids, self.threads)
        n0 = self.n
        for col, m in (("op_sig", smap), ("op_thr", tmap), ("l_thr", tmap)):
            getattr(self, col).frombytes(recoded(part[col], m))
        for col in ("op_ord", "l_ord"):
            getattr(self, col).frombytes(offset(part[col], n0, "int64"))
        self.op_ts.frombytes(part["op_ts"])
        self.n += part["n"]
        self.process_names.update(part["process_names"])
        self.process_labels.update(part["process_labels"])
        self.thread_names.update(part["thread_names"])

    def join(self, scan: TraceScan) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Per scan op: (signature id, thread id); per scan launch: thread id (-1 unknown). None when
        the scan's ops are not the ones this collector saw (another read, a changed stream rule)."""
        import numpy as np  # here: the parallel pass's workers feed a collector without numpy
        ords = np.frombuffer(self.op_ord, dtype=np.int64) if len(self.op_ord) else np.zeros(0, np.int64)
        want = np.asarray(scan.op_order, dtype=np.int64) if scan.op_order is not None else np.zeros(0, np.int64)
        pos = np.searchsorted(ords, want)
        ok = (pos < ords.size) & (ords[np.minimum(pos, max(ords.size - 1, 0))] == want) if ords.size else \
            np.zeros(want.size, bool)
        if not ok.all():
            return None
        ts = np.frombuffer(self.op_ts, dtype=np.float64)[pos] if pos.size else np.zeros(0)
        if not np.array_equal(ts, np.asarray(scan.op_ts, dtype=np.float64)):
            return None
        sig = np.frombuffer(self.op_sig, dtype=np.int32)[pos] if pos.size else np.zeros(0, np.int32)
        thr = np.frombuffer(self.op_thr, dtype=np.int32)[pos] if pos.size else np.zeros(0, np.int32)
        lords = np.frombuffer(self.l_ord, dtype=np.int64) if len(self.l_ord) else np.zeros(0, np.int64)
        lwant = np.asarray(scan.launch_order, dtype=np.int64) if scan.launch_order is not None else np.zeros(0, np.int64)
        lpos = np.searchsorted(lords, lwant)
        lok = (lpos < lords.size) & (lords[np.minimum(lpos, max(lords.size - 1, 0))] == lwant) if lords.size else \
            np.zeros(lwant.size, bool)
        lthr = np.full(lwant.size, -1, dtype=np.int64)
        if lords.size:
            lthr[lok] = np.frombuffer(self.l_thr, dtype=np.int32)[lpos[lok]]
        return sig, thr, lthr

    def names(self, thread: int) -> tuple[str, str, str]:
        """(process_name, process_label, thread_name) of a thread id, ``Unknown`` where the trace has
        no metadata (TraceLens's default)."""
        if thread < 0:
            return "Unknown", "Unknown", "Unknown"
        pid, tid = self.threads[thread]
        return (self.process_names.get(pid, "Unknown"), self.process_labels.get(pid, "Unknown"),
                self.thread_names.get((pid, tid), "Unknown"))


class EngineSheets:
    """The engine's loop and TraceLens's sheets' collector fed the same pieces (kind ``sheets``):
    the collector first, as :func:`.stream.scan_trace` feeds them."""

    def __init__(self, cols: ScanColumns | None = None, sheets: OpArgsCollector | None = None) -> None:
        self.cols = ScanColumns(None) if cols is None else cols
        self.sheets = OpArgsCollector() if sheets is None else sheets

    def feed(self, batch: list) -> None:
        """Feed one decoded piece (:class:`.fastscan.SheetsEvent` objects) to both."""
        self.sheets.feed_batch(batch)
        self.cols.feed(batch)

    def export(self) -> tuple:
        """Both consumers' parts."""
        return self.cols.export(), self.sheets.export()

    def absorb(self, part: tuple) -> None:
        """Join the next piece's parts into both."""
        self.cols.absorb(part[0])
        self.sheets.absorb(part[1])

    @property
    def trailer(self) -> dict:
        return self.cols.trailer

    @trailer.setter
    def trailer(self, value: dict) -> None:
        self.cols.trailer = value


#: The parallel pass's consumer of kind ``sheets`` (:data:`.scan_parallel.KINDS`).
PIECE_CONSUMER = (EngineSheets, "feed", "sheets")
