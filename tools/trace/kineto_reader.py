"""The verifier's trace reader: streams a kineto trace (``.json`` / ``.json.gz``) into per-event
objects for GPU work and columns for the CPU side (:class:`KinetoLoader`), with its own linking,
stream clipping and host call-stack attribution. :mod:`.kineto` computes the figures from what it
loads; the linking and clipping rules are those of :mod:`.kineto`'s docstring.
"""

from __future__ import annotations

import gzip
import re
import sys
import zlib
from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError, NoGpuEventsError
from ..files import check_input_file
from .guard import named_malformed_events
from .categories import (_COMM_RE, LAUNCH_KERNEL_NAMES, OTHER_DEVICE_CATEGORIES,  # noqa: F401 (re-exported)
                         canonical_category, no_gpu_events_message)
from .kineto_pairs import INSTANT_PH as _INSTANT_PH, PAIR_PH as _PAIR_PH, Pairs
from .kineto_pairs import finite as _finite, hashable as _hashable
from .hygiene import (GRAPH_LAUNCH_RE, STEP_NAME_RE, GraphKernelsNotRecordedError, as_id, far_outside_bounds,
                      far_outside_note, graph_not_recorded_message, input_notes, tail_bound, tail_kept_note,
                      tail_note)

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})

# ROCm 7.1 rocclr copy kernels count as memcpy (TraceLens util._ROCM_LEGACY_MEMCPY_NAMES).
_ROCM_LEGACY_MEMCPY_RE = re.compile(
    r"^(MEMORY_COPY_(HOST_TO_DEVICE|DEVICE_TO_HOST|DEVICE_TO_DEVICE)"
    r"|__amd_rocclr_copyBuffer(Rect)?(Aligned)?)(\.kd)?$"
)
_DATALOADER_RE = re.compile(r"DataLoader", re.IGNORECASE)
_STEP_RE = STEP_NAME_RE  # the one rule of what a step is (.hygiene)

COMPUTE, COMM, MEMCPY = 0, 1, 2
_COMM_ARG_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name")
_CPU_SIDE_CATS = frozenset({"cpu_op", "user_annotation", "python_function", "gpu_user_annotation"})
#: The event keys and ``args`` keys :meth:`KinetoLoader.feed` reads, duration pairs included
#: (:mod:`.kineto_pairs`; ``tests/test_lane_fields.py`` checks them against both modules' source):
#: a read that feeds only the loader decodes only these (:func:`.fastscan.decoders`).
FIELDS = (("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "id2", "args"),
          ("correlation", "External id", "stream", "device") + _COMM_ARG_KEYS)


def classify_gpu_event(cat: str, name: str) -> int:
    """TraceLens's bucket for one GPU event: ``COMPUTE`` (0), ``COMM`` (1) or ``MEMCPY`` (2)."""
    if cat == "gpu_memcpy":
        return MEMCPY
    if cat == "kernel" and _ROCM_LEGACY_MEMCPY_RE.match(name or ""):
        return MEMCPY
    if name and _COMM_RE.search(name):
        return COMM
    return COMPUTE


def is_communication_kernel(name: str) -> bool:
    """True for NCCL/RCCL collectives and custom all-reduce kernels (TraceLens's rule)."""
    return bool(name and _COMM_RE.search(name))


@dataclass(slots=True)
class GpuEvent:
    """One GPU activity, reduced to what the figures need (times in µs)."""

    ts: float
    end: float  # ts + dur, set by KinetoLoader.finish (then clipped at the next start on the stream)
    dur: float
    cat: str
    name: str
    kind: int  # COMPUTE / COMM / MEMCPY
    pid: object
    stream: object
    device: object
    linked: bool = False
    launcher: int = -1  # index into KinetoTrace.cpu_ops of the nearest cpu_op, or -1
    launch_ts: float | None = None  # start of the CPU call that launched it
    comm_args: dict | None = None  # collective metadata of a communication kernel (record_param_comms args)
    dur_raw: float = 0.0  # duration as recorded (dur is clipped at the next start on its stream)


@dataclass(slots=True)
class KinetoTrace:
    """The parts of one kineto trace the analyses use. Times are µs on the trace's clock.

    ``cpu_ops``: (ts, end, name, thread); ``runtime``: (ts, end, name, link id, thread), thread = a
    small code per (pid, tid);
    ``steps``: (ts, dur, step number) of ``ProfilerStep#N`` annotations;
    ``dataloader``: (ts, dur, name) of CPU events whose name mentions DataLoader."""

    path: Path
    rank: int | None
    gpu: list[GpuEvent]
    cpu_ops: Sequence[tuple] = field(default_factory=list)
    runtime: Sequence[tuple] = field(default_factory=list)
    steps: list[tuple] = field(default_factory=list)
    dataloader: list[tuple] = field(default_factory=list)
    has_flows: bool = False
    linked_only: bool = True
    overlaps: list[tuple] = field(default_factory=list)  # (name, next name, stream, excess µs)
    graph_launches: dict = field(default_factory=dict)  # {API name: calls}
    unrecorded_graph: list = field(default_factory=list)  # (launch ts, API name) of graph launches without kernels
    notes: list = field(default_factory=list)  # what the reader did about the input (KinetoLoader.notes)
    zero_inside: int = 0  # zero-length GPU events inside another event on their stream (they clip nothing)
    memo: dict = field(default_factory=dict)  # figures computed once per loaded trace (the timeline)


def _rank_of(data: dict) -> int | None:
    info = data.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    return None


def _stream_events(p: Path):
    """``(rank, event iterator)``: ``distributedInfo.rank`` from the file's head and the
    ``traceEvents`` one at a time (ijson), so memory holds only the kept intervals, never the event
    list. The iterator raises :class:`InputError` (one line) on a truncated or malformed file."""
    from .stream import read_header  # header keys only (before traceEvents)

    check_input_file(p)  # missing, a directory, /dev/null, a FIFO or empty: said in one line
    head = read_header(p, ("distributedInfo",))
    rank = _rank_of(head)

    def gen():
        import ijson

        n = 0
        try:
            with open(p, "rb") as raw:
                magic = raw.read(2)
                raw.seek(0)
                fh = gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw
                from ..jsonguard import GuardedReader  # numpy: not in the parallel pass's workers

                for ev in ijson.items(GuardedReader(fh, p.name), "traceEvents.item", use_float=True):
                    n += 1
                    yield ev
        except (ijson.JSONError, EOFError, gzip.BadGzipFile, zlib.error, OSError, ValueError) as e:
            msg = " ".join(str(e).split())[:120] or type(e).__name__
            from .jsonpos import locate_invalid_json  # the error path only: names the event and field
            where = locate_invalid_json(p, msg) if isinstance(e, (ijson.JSONError, gzip.BadGzipFile, zlib.error)) \
                else None  # a damaged gzip stream: said as one, as the engine says it
            raise InputError(where or f"{p.name}: truncated or not valid JSON ({msg})") from e
        if n == 0:
            raise InputError(f"{p.name}: JSON has no traceEvents list (not a PyTorch profiler trace)")

    return rank, gen()


_INF = float("inf")
NO_ID = -(1 << 63)  #: "no link id" in the int columns


class _Links(Sequence):
    """A link-id column (``array('q')`` with :data:`NO_ID` for none) read as Python values: the id,
    or None for none."""

    __slots__ = ("_col",)

    def __init__(self, col: array) -> None:
        self._col = col

    def __len__(self) -> int:
        return len(self._col)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        v = self._col[i]
        return v if v != NO_ID else None

    def raw(self) -> array:
        """The column itself (:data:`NO_ID` for none)."""
        return self._col


class _Rows(Sequence):
    """A read-only list of row tuples kept as columns (``array`` or list), so 10^5-10^6 CPU events
    cost tens of bytes each instead of a tuple of objects each. Column ``name_col`` holds ids
    into ``names``; indexing returns the row tuple with the name itself."""

    __slots__ = ("_cols", "_names", "_name_col")

    def __init__(self, cols: tuple, names: list[str], name_col: int) -> None:
        self._cols, self._names, self._name_col = cols, names, name_col

    def __len__(self) -> int:
        return len(self._cols[0])

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row = [c[i] for c in self._cols]
        row[self._name_col] = self._names[row[self._name_col]]
        return tuple(row)

    def name(self, i: int) -> str:
        """The name of row ``i`` alone."""
        return self._names[self._cols[self._name_col][i]]

    def columns(self) -> tuple:
        """The columns themselves (the name column as ids into :attr:`names`), for whole-column work."""
        return self._cols

    @property
    def names(self) -> list[str]:
        """The names the name column's ids index."""
        return self._names


class KinetoLoader:
    """Builds a :class:`KinetoTrace` from trace events fed one at a time (:meth:`feed`), then
    :meth:`finish`. :func:`load_events` drives it over a file; the analysis pass may drive it
    beside the engine over one read of the file (each keeps its own events and rules).

    Kept per event (µs floats, names interned once): GPU events as :class:`GpuEvent`; every
    ``cpu_op`` as columns (start, end, name id, thread, event order: 32 B); every runtime/driver call
    carrying a correlation (start, end, name id, thread, order, correlation, External id);
    ``ac2g`` flow start ids; ProfilerStep and DataLoader intervals."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.n = 0
        self.gpu: list[GpuEvent] = []
        self.names: list[str] = []
        self._name_ix: dict[str, int] = {}
        self._role: dict[int, tuple] = {}  # cpu name id -> (ProfilerStep number or None, is DataLoader)
        self._kind: dict[tuple, int] = {}
        # event order (int32: 2^31 events would be a ~200 GB file) breaks start-time ties
        self.o_ts, self.o_end, self.o_name, self.o_thr, self.o_ord = (array("d"), array("d"), array("i"),
                                                                      array("i"), array("i"))
        self.r_ts, self.r_end, self.r_name, self.r_thr, self.r_ord = (array("d"), array("d"), array("i"),
                                                                      array("i"), array("i"))
        self.r_corr, self.r_ext = array("q"), array("q")  # the launches' link ids (as_id); NO_ID for none
        self.g_corr, self.g_ext = array("q"), array("q")  # the GPU events' link ids, same convention
        self.steps: list[tuple] = []
        self.dataloader: list[tuple] = []
        self.flow_ids = array("q")  # ac2g start-half ids (as_id)
        self.launch_key: str | None = None  # "correlation" or "External id" (TraceLens _set_linking_key)
        self.threads: dict[tuple, int] = {}  # (pid, tid) -> small thread code
        self.error: str | None = None  # why feeding stopped
        self.bad_durations = 0  # GPU events dropped for a negative or non-finite dur
        self.values: list = []  # distinct pid / stream / device / category values, by code
        self._codes: dict = {}
        self.g_ts, self.g_dur = array("d"), array("d")
        self.g_name, self.g_pid, self.g_stream, self.g_device = array("i"), array("i"), array("i"), array("i")
        self.g_kind, self.g_cat = array("b"), array("i")
        self.g_comm: dict[int, dict] = {}  # GPU index -> collective metadata of a communication kernel
        self._cats: dict = {}  # category as written -> (kineto's name, flags: 1 renamed, 2 other device)
        self.renamed: dict[tuple, int] = {}  # (category as written, kineto's name) -> events
        self.other_device: dict[str, int] = {}  # categories.OTHER_DEVICE_CATEGORIES -> events
        self.pairs = Pairs(GPU_CATS)  # Trace Event Format duration pairs (kineto_pairs)
        self.instants = 0  # instant events on GPU rows (left out)
        self.bad_numbers = 0  # GPU events without a numeric, finite ts or dur (dropped)
        self.ill_typed = 0  # events that are not objects, or of an unhashable category (left out)

    def _nid(self, name: str) -> int:
        i = self._name_ix.get(name)
        if i is None:
            i = self._name_ix[name] = len(self.names)
            self.names.append(sys.intern(name))
        return i

    @staticmethod
    def _ids(args: dict, corr: array, ext: array) -> None:
        """Append an event's correlation and External id (:func:`.hygiene.as_id`; NO_ID for none)."""
        for v, col in ((args.get("correlation"), corr), (args.get("External id"), ext)):
            x = as_id(v)
            col.append(NO_ID if x is None else x)

    def _code(self, v) -> int:
        """A small int for a repeated value (pid, stream, device, category); ``self.values[code]``."""
        try:
            key = (type(v), v)
            c = self._codes.get(key)
        except TypeError:  # an unhashable value: kept as it is, under its own code
            key, c = None, None
        if c is None:
            c = len(self.values)
            self.values.append(v)
            if key is not None:
                self._codes[key] = c
        return c

    def _gpu_events(self) -> list[GpuEvent]:
        """The fed GPU events as :class:`GpuEvent` objects (the columns are released)."""
        names, vals = self.names, self.values
        cats = [sys.intern(v) if isinstance(v, str) else v for v in vals]
        gpu = [GpuEvent(ts=t, end=t, dur=d, cat=cats[c], name=names[n], kind=k, pid=vals[p], stream=vals[st],
                        device=vals[dv])
               for t, d, n, k, c, p, st, dv in zip(self.g_ts, self.g_dur, self.g_name, self.g_kind, self.g_cat,
                                                   self.g_pid, self.g_stream, self.g_device)]
        for i, a in self.g_comm.items():
            gpu[i].comm_args = a
        self.g_ts = self.g_dur = array("d")
        self.g_name = self.g_pid = self.g_stream = self.g_device = self.g_cat = array("i")
        self.g_kind = array("b")
        return gpu

    def _role_of(self, nid: int) -> tuple:
        r = self._role.get(nid)
        if r is None:
            name = self.names[nid]
            m = _STEP_RE.match(name)
            r = self._role[nid] = (int(m.group(1)) if m else None, bool(_DATALOADER_RE.search(name)))
        return r

    def feed(self, ev) -> None:
        """Take one trace event (a dict of the ``traceEvents`` list); anything else is skipped. An
        event this reader cannot take stops it (the error is raised by :meth:`finish`), never the
        pass that feeds it."""
        if self.error is None:
            try:
                self._feed(ev)
            except Exception as e:  # noqa: BLE001 - reported by finish(), the feeding pass goes on
                self.error = f"{self.path.name}: event {self.n}: {type(e).__name__}: {' '.join(str(e).split())[:120]}"

    def _feed(self, ev) -> None:
        self.n += 1
        if type(ev) is not dict:
            self.ill_typed += 1
            return
        raw = ev.get("cat")
        try:
            cat, flag = self._cats[raw]
        except KeyError:
            cat = canonical_category(raw)
            flag = (1 if isinstance(raw, str) and cat != raw else 0) | (2 if cat in OTHER_DEVICE_CATEGORIES else 0)
            self._cats[raw] = (cat, flag)
        except TypeError:  # an unhashable category is no category
            cat, flag = None, 0
            self.ill_typed += 1
        if flag:
            if flag & 1:
                self.renamed[(raw, cat)] = self.renamed.get((raw, cat), 0) + 1
            if flag & 2:
                self.other_device[cat] = self.other_device.get(cat, 0) + 1
        ph = ev.get("ph")
        order = self.n
        if type(ph) is str and ph in _PAIR_PH:
            ev = self.pairs.take(ev, ph, cat, self.n)
            if ev is None:
                return
            cat, ph, order = ev["cat"], "X", self.pairs.begin_order
        elif type(ph) is str and ph in _INSTANT_PH:
            if cat in GPU_CATS:
                self.instants += 1
            return
        if cat == "ac2g":
            if ph == "s":  # the start half sits on the launching CPU thread
                fid = as_id(ev.get("id"))
                if fid is not None:
                    self.flow_ids.append(fid)
            return
        gpu_cat = cat in GPU_CATS
        # complete events: ph X, or no ph at all (GPU activity is taken whatever its ph); python_function
        # events mark no step or DataLoader
        if (not gpu_cat and ph not in ("X", None)) or cat == "python_function":
            return
        ts, dur = ev.get("ts"), ev.get("dur")  # a finite float as it is (the common case), else _finite's rule
        ts = ts if type(ts) is float and -_INF < ts < _INF else _finite(ts)
        dur = dur if type(dur) is float and -_INF < dur < _INF else _finite(dur)
        name = ev.get("name")
        if type(name) is not str:
            name = "" if name is None else str(name)
        args = ev.get("args")
        if type(args) is not dict:
            args = {}
        if gpu_cat:
            if ts is None or dur is None:  # no ts / dur, or not a finite number: dropped, counted
                self.bad_numbers += 1
                return
            if dur < 0.0:  # a negative duration: dropped, counted
                self.bad_durations += 1
                return
            kk = (cat, name)
            kind = self._kind.get(kk)
            if kind is None:
                kind = self._kind[kk] = classify_gpu_event(cat, name)
            # kept as columns while the file is read (GpuEvent objects are built in finish(), after
            # the pass: 8+8+4+1+3x4 B per event instead of a ~200 B object with its floats)
            code = self._code
            i = len(self.g_ts)
            self.g_ts.append(ts)
            self.g_dur.append(dur)
            self.g_name.append(self._nid(name))
            self.g_kind.append(kind)
            self.g_cat.append(code(cat))
            self.g_pid.append(code(ev.get("pid")))
            self.g_stream.append(code(args.get("stream")))
            self.g_device.append(code(args.get("device")))
            self._ids(args, self.g_corr, self.g_ext)
            if kind == COMM:
                self.g_comm[i] = {k: args[k] for k in _COMM_ARG_KEYS if k in args}
            return
        if ts is None:
            return
        if dur is None:
            dur = 0.0
        if cat in RUNTIME_CATS or (cat not in _CPU_SIDE_CATS and "correlation" in args):
            if self.launch_key is None and "launch" in name.lower():
                self.launch_key = "correlation" if "correlation" in args else "External id"
            thr = self._thread(ev)
            self.r_ts.append(ts)
            self.r_end.append(ts + dur)
            self.r_name.append(self._nid(name))
            self.r_thr.append(thr)
            self.r_ord.append(order)
            self._ids(args, self.r_corr, self.r_ext)
        elif cat == "cpu_op":
            thr = self._thread(ev)
            nid = self._nid(name)
            self.o_ts.append(ts)
            self.o_end.append(ts + dur)
            self.o_name.append(nid)
            self.o_thr.append(thr)
            self.o_ord.append(order)
            step, dl = self._role_of(nid)
            if step is not None:
                self.steps.append((ts, dur, step))
            elif dl:
                self.dataloader.append((ts, dur, self.names[nid]))
        elif cat == "user_annotation" or cat is None:
            step, dl = self._role_of(self._nid(name))
            if step is not None:
                self.steps.append((ts, dur, step))
            elif dl:
                self.dataloader.append((ts, dur, name))

    def _thread(self, ev: dict) -> int:
        """The small code of an event's (pid, tid); an unhashable pid or tid is named by its text."""
        key = (ev.get("pid"), ev.get("tid"))
        try:
            thr = self.threads.get(key)
        except TypeError:
            key = (repr(key[0]), repr(key[1]))
            thr = self.threads.get(key)
        if thr is None:
            thr = self.threads[key] = len(self.threads)
        return thr

    def notes(self) -> list[str]:
        """What this reader did about the input (categories normalised, pairs joined or unmatched,
        instants and events without numbers left out), one line each (:func:`.hygiene.input_notes`)."""
        return input_notes(renamed=[(r, c, k) for (r, c), k in self.renamed.items()], instants=self.instants,
                           bad_durations=self.bad_durations, bad_numbers=self.bad_numbers, ill_typed=self.ill_typed,
                           **self.pairs.counts())

    def finish(self, rank: int | None = None, *, include_unlinked: bool = False) -> KinetoTrace:
        """Link, clip and attribute what was fed; see :func:`load_events` (same errors)."""
        p = self.path
        if self.error is not None:
            raise InputError(f"the verifier's reader stopped: {self.error}")
        if self.n == 0:
            raise InputError(f"{p.name}: JSON has no traceEvents list (not a PyTorch profiler trace)")
        names = self.names
        if not len(self.g_ts):
            graphs: dict[str, int] = defaultdict(int)
            for nid in self.r_name:
                if GRAPH_LAUNCH_RE.match(names[nid]):
                    graphs[names[nid]] += 1
            if graphs:
                raise GraphKernelsNotRecordedError(graph_not_recorded_message(p.name, dict(graphs)))
            lost = self.bad_numbers + self.bad_durations + self.instants + self.pairs.gpu_lost()
            raise NoGpuEventsError(no_gpu_events_message(p.name, self.other_device, lost)
                                   + "".join(f"; {x}" for x in self.notes()))

        # host call stacks first (CPU columns only): its temporaries are gone before the GPU objects exist
        runtime_cpu_op = _runtime_parents(self)

        # --- CPU -> GPU linking on the columns: every GPU event carrying a launch's link id ----
        key = self.launch_key or "correlation"
        col = 0 if key == "correlation" else 1
        links = _Links(self.r_corr if col == 0 else self.r_ext)
        g_corr = _Links(self.g_corr)
        g_links = g_corr if col == 0 else _Links(self.g_ext)
        by_link: dict = {}  # link id -> GPU index, or a list of them (a graph launch replays many)
        for i, link in enumerate(g_links):
            if link is not None:
                prev = by_link.get(link)
                if prev is None:
                    by_link[link] = i
                elif type(prev) is list:
                    prev.append(i)
                else:
                    by_link[link] = [prev, i]
        n_gpu = len(self.g_ts)
        gpu_parent = array("q", [-1]) * n_gpu  # gpu index -> runtime index
        linked = bytearray(n_gpu)
        graph_calls: dict[str, int] = defaultdict(int)
        graph_ids = {nid for nid, nm in enumerate(names) if GRAPH_LAUNCH_RE.match(nm)}
        unrecorded: list[tuple[float, str]] = []  # graph launches none of whose kernels was recorded
        for ri, link in enumerate(links):
            nid = self.r_name[ri]
            graph = nid in graph_ids
            if graph:
                graph_calls[names[nid]] += 1
            hit = by_link.get(link) if link is not None else None
            if hit is None:
                if graph:
                    unrecorded.append((self.r_ts[ri], names[nid]))
                continue
            for gi in (hit if type(hit) is list else (hit,)):
                linked[gi] = 1
                gpu_parent[gi] = ri
        del by_link
        unlinked = [(i, g_corr[i]) for i in range(n_gpu) if not linked[i] and g_corr[i] is not None]
        if unlinked:  # a flow start half with the kernel's correlation id, no runtime call in the trace
            flow_ids = set(self.flow_ids)
            for i, c in unlinked:
                if c in flow_ids:
                    linked[i] = 1
        has_flows = bool(self.flow_ids)

        # --- the GPU events as objects: linked, launch time and launcher (the innermost cpu_op
        # around the launch, runtime_cpu_op above) set; then clipped on their streams ----------
        gpu = self.gpu = self._gpu_events()
        r_ts = self.r_ts
        for gi, ri in enumerate(gpu_parent):
            g = gpu[gi]
            if linked[gi]:
                g.linked = True
            if ri >= 0:
                g.launch_ts = r_ts[ri]
                g.launcher = runtime_cpu_op[ri]
        far_note = None
        if len(gpu) > 1:  # GPU events far outside the profiled steps: left out, said (hygiene.far_outside_bounds)
            lr = [i for i, c in enumerate(self.r_corr) if c != NO_ID]  # launches: runtime calls with an id
            work = sum(g.dur for g in gpu)
            b = far_outside_bounds([(t, d) for t, d, _n in self.steps], min((r_ts[i] for i in lr), default=None),
                                   max((self.r_end[i] for i in lr), default=None), work)
            if b is not None:
                far = [g for g in gpu if g.ts + g.dur < b[0] or g.ts > b[1]]
                if far and len(far) < len(gpu):
                    g0 = far[0]
                    off = (g0.ts - b[3]) / 1e6 if g0.ts > b[1] else (g0.ts + g0.dur - b[2]) / 1e6
                    far_note = far_outside_note(len(far), g0.name, off, b[1] - b[3])
                    drop = set(map(id, far))
                    gpu = self.gpu = [g for g in gpu if id(g) not in drop]
        overlaps, zero_inside = _clip_streams(gpu)
        tail_note_ = None
        if len(gpu) > 1:  # GPU events ending far after the host activity (clipped ends): left out, said
            lr = [i for i, c in enumerate(self.r_corr) if c != NO_ID]  # (hygiene.tail_bound); launches:
            starts = ([min(self.o_ts)] if len(self.o_ts) else []) + ([min(r_ts[i] for i in lr)] if lr else [])
            ends = ([max(self.o_end)] if len(self.o_end) else []) + ([max(self.r_end[i] for i in lr)] if lr else [])
            bound = tail_bound(min(starts), max(ends)) if starts else None
            if bound is not None:
                late = [g for g in gpu if g.ts + g.dur > bound]
                drop = set(map(id, late))
                kept = [g for g in gpu if id(g) not in drop]
                hi = max(ends) if late else 0.0
                said = (len(late), late[0].name, (late[0].ts + late[0].dur - hi) / 1e6, (bound - hi) / 1e6) \
                    if late else None
                if late and not (kept and (any(g.linked for g in kept) or not any(g.linked for g in gpu))):
                    tail_note_ = tail_kept_note(*said)  # every event, or every linked one: kept, said
                elif late:
                    tail_note_ = tail_note(*said)
                    for g in kept:  # the clip anew without them (a clip at a dropped event's start undone)
                        g.dur = g.dur_raw
                    gpu = self.gpu = kept
                    overlaps, zero_inside = _clip_streams(gpu)
        # A trace where nothing links (no runtime events) counts every GPU event.
        linked_only = any(linked)
        notes = self.notes() + ([far_note] if far_note else []) + ([tail_note_] if tail_note_ else [])
        if not linked_only and (len(self.r_ts) or len(self.flow_ids)):
            notes.append("no GPU event carries the correlation id of a CPU launch or flow: every GPU event is counted")

        cpu_ops = _Rows((self.o_ts, self.o_end, self.o_name, self.o_thr), names, 2)
        runtime = _Rows((self.r_ts, self.r_end, self.r_name, links, self.r_thr), names, 2)
        return KinetoTrace(
            path=p, rank=rank, gpu=gpu, cpu_ops=cpu_ops, runtime=runtime, steps=sorted(self.steps),
            dataloader=self.dataloader, has_flows=has_flows,
            linked_only=linked_only and not include_unlinked, overlaps=overlaps, graph_launches=dict(graph_calls),
            unrecorded_graph=unrecorded, notes=notes, zero_inside=zero_inside,
        )


def load_events(path: str | Path, *, include_unlinked: bool = False) -> KinetoTrace:
    """Load the GPU, runtime, cpu_op, ProfilerStep and DataLoader intervals of one trace.

    The events are streamed (never held as a list) into a :class:`KinetoLoader`; GPU events are
    marked ``linked`` by the linking rule of the module docstring; each kernel's ``launcher`` is the
    innermost ``cpu_op`` enclosing its launch call on the same thread (TraceLens's host call-stack
    rule, incl. the <1 µs "bleed" rule).

    Raises :class:`InputError` for unreadable input and :class:`NoGpuEventsError` when the
    trace holds no kernel/memcpy/memset event (a CPU-only run)."""
    p = Path(path)
    with named_malformed_events(p):  # a malformed event: one line naming it (tools/trace/guard.py)
        rank, events = _stream_events(p)
        loader = KinetoLoader(p)
        feed = loader.feed
        for ev in events:
            feed(ev)
        return loader.finish(rank, include_unlinked=include_unlinked)


def _clip_streams(gpu: list[GpuEvent]) -> tuple[list[tuple], int]:
    """Clip, in place, each GPU event whose end runs past the start of the next event on its
    (device, stream); a zero-length event is a point in time that neither clips nor is clipped.
    Returns ``(name, next name, stream, excess µs)`` per clipped event, and how many zero-length
    events lay inside another event on their stream (the ones such a rule must not let clip it)."""
    per_stream: dict = defaultdict(list)
    for g in gpu:
        g.dur_raw = g.dur
        g.end = g.ts + g.dur
        if g.stream is not None and _hashable(g.stream):
            dev = g.device if g.device is not None else g.pid
            per_stream[(dev if _hashable(dev) else repr(dev), g.stream)].append(g)
    out = []
    zero_inside = 0
    for (_dev, stream), evs in per_stream.items():
        evs.sort(key=lambda x: x.ts)
        prev = None  # the latest event of positive length so far on this stream
        for g in evs:
            if g.dur == 0.0:
                if prev is not None and prev.ts <= g.ts < prev.ts + prev.dur_raw:
                    zero_inside += 1
                continue
            if prev is not None and prev.ts + prev.dur_raw > g.ts:
                out.append((prev.name, g.name, stream, prev.ts + prev.dur_raw - g.ts))
                prev.end = g.ts
                prev.dur = g.ts - prev.ts
            prev = g
    return out, zero_inside


def _runtime_parents(ld: KinetoLoader) -> array:
    """For each runtime event, the index of the innermost enclosing cpu_op (skipping pass-through
    ``execute`` ops), -1 when none, following TraceLens's per-thread stack build
    (``BaseTraceToTree.build_host_call_stack_tree``): events in (start, file order); an event that
    starts inside the open one but ends past it by < 1 µs closes it first (the "bleed" rule), by
    more is left out of the tree. Nodes 0..n_ops-1 are cpu_ops, n_ops.. runtime events."""
    import numpy as np

    n_ops, n_rt = len(ld.o_ts), len(ld.r_ts)
    ts = np.concatenate([np.frombuffer(ld.o_ts, dtype=np.float64), np.frombuffer(ld.r_ts, dtype=np.float64)]) \
        if n_ops + n_rt else np.zeros(0)
    ordr = np.concatenate([np.frombuffer(ld.o_ord, dtype=np.int32), np.frombuffer(ld.r_ord, dtype=np.int32)]) \
        if n_ops + n_rt else np.zeros(0, dtype=np.int32)
    order = memoryview(np.ascontiguousarray(np.lexsort((ordr, ts)), dtype=np.int64))  # ints on access, no list
    del ts, ordr
    o_ts, o_end, o_thr, o_name = ld.o_ts, ld.o_end, ld.o_thr, ld.o_name
    r_ts, r_end, r_thr = ld.r_ts, ld.r_end, ld.r_thr
    execute = ld._name_ix.get("execute", -1)
    parent = array("q", [-1]) * (n_ops + n_rt)
    result = array("q", [-1]) * n_rt
    stacks: dict[int, list] = defaultdict(list)
    for k in order:
        if k < n_ops:
            ts_k, end, thr = o_ts[k], o_end[k], o_thr[k]
        else:
            j = k - n_ops
            ts_k, end, thr = r_ts[j], r_end[j], r_thr[j]
        stack = stacks[thr]
        while stack and ts_k >= stack[-1][0]:
            stack.pop()
        if stack and end > stack[-1][0]:
            if stack[-1][0] - ts_k < 1.0 and len(stack) >= 2:
                stack.pop()
            else:
                continue  # a large bleed: TraceLens leaves the event out of the tree
        par = stack[-1][1] if stack else -1
        parent[k] = par
        stack.append((end, k))
        if k >= n_ops:
            cur = par
            while cur != -1:
                if cur < n_ops:
                    if o_name[cur] == execute:
                        cur = parent[cur]
                        continue
                    result[k - n_ops] = cur
                    break
                cur = parent[cur]
    return result
