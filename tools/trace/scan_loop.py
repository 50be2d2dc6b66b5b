"""The engine's per-event loop: what :func:`.stream.scan_trace` keeps of each event, in columns
(:class:`ScanColumns`), fed a batch of events at a time.

One loop serves both ways of reading a trace: the one pass of :func:`.stream.scan_trace` feeds it
every batch in file order; the parallel pass (:mod:`.scan_parallel`) feeds one :class:`ScanColumns`
per chunk of the document in a worker process, and the parent joins the chunks' columns in file
order with :meth:`ScanColumns.absorb` (names, threads, streams and devices are interned per chunk
and re-coded on the join; event order numbers are offset by the events before the chunk). The
join gives the same columns, names and counts in the same order as one loop over every event:
every table here is interned in order of first appearance, and a chunk's first appearances come
after those of the chunks before it. A chunk that meets a Trace Event Format duration pair (``ph``
B/E, b/e, S/F: the pairs join across the whole document) raises :class:`NeedsOnePass` and the
parent reads the trace with the one pass.

What is kept, and the memory bound, are described in :mod:`.stream`. This module imports no numpy
(the workers' start-up: :mod:`.codes`).
"""

from __future__ import annotations

import re
from array import array
from typing import Any

from msgspec import UNSET

from .categories import canonical_category
from .codes import COLLECTIVE_ARG_KEYS, COMM_RE, GPU_CATS, INSTANT_PHASES, KIND_KERNEL, NO_STREAM, PAIR_PHASES
from .fastscan import ARG_ATTRS, ARGS_TYPES, EVENT_TYPES, NO_ARGS, engine_events, event_dict
from .hygiene import STEP_NAME_RE, as_id, num

_STEP_RE = STEP_NAME_RE  # the one rule of what a step is (.hygiene)
_DATALOADER_RE = re.compile(r"DataLoader", re.IGNORECASE)
#: CPU-side categories that are never launches, even when they carry a correlation id.
_CPU_SIDE_CATS = frozenset({"cpu_op", "user_annotation", "python_function", "gpu_user_annotation"})
#: (args key, :class:`.fastscan.EngineArgs` attribute) of the collective metadata, in COLLECTIVE_ARG_KEYS order.
_COLLECTIVE_ATTRS = tuple((k, ARG_ATTRS[k]) for k in COLLECTIVE_ARG_KEYS)
_I32 = 1 << 31
#: Array columns and their typecodes: GPU events (``ts`` ... ``corr``), launches (``l_*``), cpu_ops
#: (``o_*``), ac2g flow start ids. Event order numbers are int32 (2^31 events would be a ~200 GB file).
COLUMNS = {"ts": "d", "dur": "d", "name_id": "i", "stream": "i", "device": "i", "kind": "b", "corr": "q",
           "l_corr": "q", "l_ts": "d", "l_end": "d", "l_name": "i", "l_thr": "i", "l_ord": "i",
           "o_ts": "d", "o_end": "d", "o_name": "i", "o_thr": "i", "o_ord": "i", "flows": "q"}
#: The counts of events left out, by why (see :func:`.stream._scan_notes`).
COUNTERS = ("n", "bad_dur", "bad_num", "instants", "ill", "bad_args")


class NeedsOnePass(Exception):
    """A chunk read without the document's duration-pair state met a pair phase: the trace must be
    read with the one pass (:func:`.stream.scan_trace`)."""


def _num(v: Any, bound: int = 1 << 63) -> int | None:
    """An id or index as a non-negative int below ``bound`` (:func:`.hygiene.as_id`), else None."""
    if type(v) is int and 0 <= v < bound:  # the common case, without as_id's type checks
        return v
    return as_id(v, bound)


def name_mark(nm: str) -> int | None:
    """A CPU event name's role: its ProfilerStep number, -1 for a DataLoader event, else None."""
    if nm.startswith("ProfilerStep"):
        m = _STEP_RE.match(nm)
        return int(m.group(1)) if m else None
    return -1 if _DATALOADER_RE.search(nm) else None


class ScanColumns:
    """The columns, interned tables and counts the engine keeps of the events fed so far
    (:meth:`feed`). ``pairs``: the document's :class:`.stream_fix.DurationPairs` (the one pass), or
    None (a chunk of the parallel pass: a pair phase raises :class:`NeedsOnePass`)."""

    def __init__(self, pairs: Any = None) -> None:
        for k, code in COLUMNS.items():
            setattr(self, k, array(code))
        for k in COUNTERS:
            setattr(self, k, 0)
        self.pairs = pairs
        self.names: list[str] = []
        self.name_index: dict[str, int] = {}
        self.cpu_names: list[str] = []
        self.cpu_index: dict[str, int] = {}
        self.marks: list[int | None] = []  # per cpu name: ProfilerStep number, -1 DataLoader, None
        self.threads: dict[tuple, int] = {}
        self.steps: list[tuple[int, float, float]] = []
        self.gpu_steps: list[tuple[float, float]] = []  # (ts, dur) of the gpu_user_annotation ProfilerStep copies
        self.dataloader: list[tuple[float, float]] = []
        self.comm_args: dict[int, dict[str, Any]] = {}
        self.dev_codes: dict = {}  # non-numeric device / pid values -> codes -2, -3, ...
        self.stream_codes: dict = {}  # args.stream value as written -> code 0, 1, ... (any width or type)
        self.cat_counts: dict[Any, int] = {}
        self.cat_of: dict[Any, tuple] = {}  # category as written -> (canonical_category, GPU kind)
        self._comm_name: dict[int, bool] = {}
        self.trailer: dict[str, Any] = {}
        """The keys written after the list (set by the parallel pass; the one pass keeps its own)."""

    # ------------------------------------------------------------------ the loop

    def feed(self, batch: list | tuple) -> None:
        """Read one batch of events (dicts, :class:`.fastscan.EngineEvent` objects or anything a
        trace holds: what is not an object is counted ill-typed). Raises :class:`NeedsOnePass`."""
        ts, dur, name_id, stream, device, kind, corr = (self.ts, self.dur, self.name_id, self.stream, self.device,
                                                        self.kind, self.corr)
        l_corr, l_ts, l_end, l_name, l_thr, l_ord = (self.l_corr, self.l_ts, self.l_end, self.l_name, self.l_thr,
                                                     self.l_ord)
        o_ts_a, o_end_a, o_name_a, o_thr_a, o_ord_a = (self.o_ts.append, self.o_end.append, self.o_name.append,
                                                       self.o_thr.append, self.o_ord.append)
        flows, names, name_index, cpu_names, cpu_index = self.flows, self.names, self.name_index, self.cpu_names, \
            self.cpu_index
        marks, threads, steps, gpu_steps, dataloader = self.marks, self.threads, self.steps, self.gpu_steps, \
            self.dataloader
        comm_args, comm_name_cache, dev_codes, stream_codes = self.comm_args, self._comm_name, self.dev_codes, \
            self.stream_codes
        cat_counts, cat_of, pairs = self.cat_counts, self.cat_of, self.pairs
        n, bad_dur, bad_num, instants, ill, bad_args = (self.n, self.bad_dur, self.bad_num, self.instants, self.ill,
                                                        self.bad_args)
        try:
            for ev in engine_events(batch):  # EngineEvent objects (.fastscan): the fields below as slots
                n += 1
                if type(ev) not in EVENT_TYPES:
                    ill += 1
                    continue
                cat_w = ev.cat  # the category as written
                try:
                    cat, k = cat_of[cat_w]
                except KeyError:
                    c_ = canonical_category(cat_w)
                    cat, k = cat_of[cat_w] = (c_, GPU_CATS.get(c_))  # type: ignore[arg-type]
                except TypeError:  # an unhashable category is no category
                    cat_w = cat = k = None
                    ill += 1
                cat_counts[cat_w] = cat_counts.get(cat_w, 0) + 1
                ph = ev.ph
                order = n
                if ph != "X" and type(ph) is str:
                    if ph in PAIR_PHASES:  # Trace Event Format duration pairs (stream_fix.DurationPairs)
                        if pairs is None:
                            raise NeedsOnePass(ph)
                        joined = pairs.take(event_dict(ev), ph, n, cat)
                        if joined is None:
                            continue
                        ev = engine_events([joined])[0]
                        cat, order, ph = ev.cat, pairs.order, "X"
                        k = GPU_CATS.get(cat)
                    elif ph in INSTANT_PHASES:
                        instants += k is not None
                        continue
                if k is not None:
                    t = ev.ts
                    d = ev.dur
                    if type(t) is not float:
                        t = num(t)
                    if type(d) is not float:
                        d = num(d)
                    if t is None or d is None:  # no ts or dur, or not a finite number
                        bad_num += 1
                        continue
                    if d < 0.0:  # a negative duration (an export fault)
                        bad_dur += 1
                        continue
                    nm = ev.name
                    if type(nm) is not str:
                        nm = "" if nm is None else str(nm)
                    i = name_index.get(nm)
                    if i is None:
                        i = name_index[nm] = len(names)
                        names.append(nm)
                    args = ev.args
                    if type(args) not in ARGS_TYPES:
                        bad_args += args is not None
                        args = NO_ARGS
                    idx = len(ts)
                    ts.append(t)
                    dur.append(d)
                    name_id.append(i)
                    kind.append(k)
                    sv = args.stream
                    if sv is None or sv is UNSET:
                        stream.append(NO_STREAM)
                    else:
                        try:
                            s = stream_codes.get(sv)
                            if s is None:
                                s = stream_codes[sv] = len(stream_codes)
                        except TypeError:  # unhashable: no stream
                            s = NO_STREAM
                        stream.append(s)
                    dv = args.device
                    if dv is None or dv is UNSET:
                        dv = ev.pid
                    d_ = _num(dv, _I32)
                    if d_ is None:  # a GPU named only by a string pid ("GPU 0"): its own code, below -1
                        try:
                            d_ = dev_codes.setdefault(dv, -2 - len(dev_codes)) if dv is not None else -1
                        except TypeError:  # unhashable
                            d_ = -1
                    device.append(d_)
                    c = _num(args.correlation)  # UNSET: None
                    corr.append(c if c is not None else -1)
                    if k == KIND_KERNEL:
                        is_comm = comm_name_cache.get(i)
                        if is_comm is None:
                            is_comm = comm_name_cache[i] = bool(COMM_RE.search(nm))
                        if is_comm:
                            comm_args[idx] = {key: v for key, a in _COLLECTIVE_ATTRS
                                              if (v := getattr(args, a)) is not UNSET}
                    continue
                if cat == "python_function":  # with_stack traces: the most numerous events, never needed here
                    continue
                if cat == "ac2g":
                    fid = _num(ev.id)
                    if fid is not None and ph == "s":  # the start half sits on the launching CPU thread
                        flows.append(fid)
                    continue
                if ph != "X" and ph is not None:
                    continue
                t = ev.ts
                if type(t) is not float:
                    t = num(t)
                    if t is None:
                        continue
                d = ev.dur
                e = t + (d if type(d) is float else (num(d) or 0.0))
                nm = ev.name
                if type(nm) is not str:
                    nm = "" if nm is None else str(nm)
                args = ev.args
                c = _num(args.correlation) if type(args) in ARGS_TYPES and cat not in _CPU_SIDE_CATS else None
                is_op = cat == "cpu_op"
                if c is not None or is_op:
                    j = cpu_index.get(nm)
                    if j is None:
                        j = cpu_index[nm] = len(cpu_names)
                        cpu_names.append(nm)
                        marks.append(name_mark(nm))
                    key = (ev.pid, ev.tid)
                    try:
                        th = threads.get(key)
                    except TypeError:  # an unhashable pid / tid: named by its text
                        key = (repr(key[0]), repr(key[1]))
                        th = threads.get(key)
                    if th is None:
                        th = threads[key] = len(threads)
                    if is_op:
                        o_ts_a(t)
                        o_end_a(e)
                        o_name_a(j)
                        o_thr_a(th)
                        o_ord_a(order)
                        mark = marks[j]
                    else:
                        l_corr.append(c)
                        l_ts.append(t)
                        l_end.append(e)
                        l_name.append(j)
                        l_thr.append(th)
                        l_ord.append(order)
                        continue
                elif cat is None or cat == "user_annotation":
                    mark = name_mark(nm) if nm else None
                elif cat == "gpu_user_annotation" and nm.startswith("ProfilerStep"):
                    gpu_steps.append((t, e - t))  # the GPU-side copy: only HTA's step window reads it
                    continue
                else:
                    continue  # ProfilerStep and DataLoader on the CPU side only (not GPU copies)
                if mark is None:
                    continue
                if mark >= 0:
                    steps.append((mark, t, e - t))
                else:
                    dataloader.append((t, e - t))
        finally:
            self.n, self.bad_dur, self.bad_num, self.instants, self.ill, self.bad_args = (n, bad_dur, bad_num,
                                                                                          instants, ill, bad_args)

    # ------------------------------------------------------------------ the parallel pass's join

    def export(self) -> dict[str, Any]:
        """What a worker sends back (picklable: arrays, lists, dicts)."""
        out = {k: getattr(self, k) for k in (*COLUMNS, *COUNTERS)}
        out.update(names=self.names, cpu_names=self.cpu_names, marks=self.marks, threads=list(self.threads),
                   steps=self.steps, gpu_steps=self.gpu_steps, dataloader=self.dataloader, comm_args=self.comm_args,
                   dev_codes=list(self.dev_codes), stream_codes=list(self.stream_codes),
                   cat_counts=list(self.cat_counts.items()), cat_of=list(self.cat_of.items()))
        return out

    def absorb(self, part: dict[str, Any]) -> None:
        """Append a chunk's :meth:`export` (the next chunk of the document in file order): its
        interned codes re-coded to this table's, its order numbers and GPU indices offset."""
        name_map = array("i", (self._intern(self.name_index, self.names, nm) for nm in part["names"]))
        cpu_map = array("i")
        for nm, mark in zip(part["cpu_names"], part["marks"]):
            j = self.cpu_index.get(nm)
            if j is None:
                j = self.cpu_index[nm] = len(self.cpu_names)
                self.cpu_names.append(nm)
                self.marks.append(mark)
            cpu_map.append(j)
        thr_map = array("i", (self.threads.setdefault(k, len(self.threads)) for k in part["threads"]))
        stream_map = array("i", (self.stream_codes.setdefault(v, len(self.stream_codes)) for v in part["stream_codes"]))
        dev_map = array("i", (self.dev_codes.setdefault(v, -2 - len(self.dev_codes)) for v in part["dev_codes"]))
        import numpy as np  # the parent only (the workers import no numpy)

        def recoded(col: str, table: array, keep_negative: bool = False) -> bytes:
            a = np.frombuffer(part[col], dtype=np.int32)
            m = np.frombuffer(table, dtype=np.int32) if len(table) else np.zeros(1, dtype=np.int32)
            if not keep_negative:
                return m[a].tobytes()
            return np.where(a < 0, a, m[np.maximum(a, 0)]).astype(np.int32).tobytes()

        def offset(col: str, by: int) -> bytes:
            return (np.frombuffer(part[col], dtype=np.int32) + np.int32(by)).astype(np.int32).tobytes()

        n0, g0 = self.n, len(self.ts)
        for k in ("ts", "dur", "kind", "corr", "l_corr", "l_ts", "l_end", "o_ts", "o_end", "flows"):
            getattr(self, k).extend(part[k])
        self.name_id.frombytes(recoded("name_id", name_map))
        self.stream.frombytes(recoded("stream", stream_map, keep_negative=True))
        dev = np.frombuffer(part["device"], dtype=np.int32)
        if len(dev_map):  # codes -2, -3, ... of the chunk -> this table's
            dm = np.frombuffer(dev_map, dtype=np.int32)
            dev = np.where(dev >= -1, dev, dm[np.maximum(-2 - dev, 0)]).astype(np.int32)
        self.device.frombytes(dev.tobytes())
        self.l_name.frombytes(recoded("l_name", cpu_map))
        self.o_name.frombytes(recoded("o_name", cpu_map))
        self.l_thr.frombytes(recoded("l_thr", thr_map))
        self.o_thr.frombytes(recoded("o_thr", thr_map))
        self.l_ord.frombytes(offset("l_ord", n0))
        self.o_ord.frombytes(offset("o_ord", n0))
        self.steps.extend(part["steps"])
        self.gpu_steps.extend(part["gpu_steps"])
        self.dataloader.extend(part["dataloader"])
        self.comm_args.update((i + g0, v) for i, v in part["comm_args"].items())
        for c, v in part["cat_of"]:
            self.cat_of.setdefault(c, v)
        for c, v in part["cat_counts"]:
            self.cat_counts[c] = self.cat_counts.get(c, 0) + v
        for k in COUNTERS:
            setattr(self, k, getattr(self, k) + part[k])

    @staticmethod
    def _intern(index: dict[str, int], table: list[str], nm: str) -> int:
        i = index.get(nm)
        if i is None:
            i = index[nm] = len(table)
            table.append(nm)
        return i


#: The parallel pass's consumer of kind ``engine`` (:data:`.scan_parallel.KINDS`).
PIECE_CONSUMER = (lambda: ScanColumns(None), "feed", "struct")
