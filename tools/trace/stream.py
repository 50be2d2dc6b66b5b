"""Bounded-memory reading of PyTorch profiler (kineto) traces of hundreds of MB to GBs: the engine's
one pass over the file.

The trace is read once with ``ijson`` (yajl2 C backend) as a stream of events; the event list is
never materialized. Of each event only what the analyses need is kept, in compact arrays:

* every GPU event (``cat`` in ``kernel``, ``gpu_memcpy``, ``gpu_memset``): start, duration as
  recorded and duration clipped at the next event's start on the same stream (float64 µs), interned
  name id, kind, device, stream, correlation id (45 bytes per GPU event);
* every CPU-side event carrying a ``correlation`` (``cuda_runtime`` / ``cuda_driver`` launches,
  graph launches): correlation, start, end, interned name, thread, event index (36 bytes);
* every ``cpu_op``: start, end, interned name, thread, event index (28 bytes), for TraceLens's
  launcher rule;
* the ids of ``ac2g`` flow start halves (8 bytes each), ``ProfilerStep#N`` and DataLoader intervals, and,
  for communication kernels only, their collective metadata;
* one copy of each distinct name.

**The loop and the parallel pass.** The per-event loop is :class:`.scan_loop.ScanColumns`. A trace
read with no other consumer (``trace timeline`` without ``--csv``; ``trace steps``, ``trace comm`` and
``run`` feed other consumers every event, in one process, and ``run``'s other readers run in
:mod:`.lanes`), of at least
:data:`.scan_parallel.MIN_JSON_BYTES` of JSON on a host with two CPUs or more, is read by
:mod:`.scan_parallel`: the text cut into chunks here, each chunk decoded and looped over in a
worker process, the chunks' columns joined in file order; the same scan, column for column, or a
hand-back to the one pass (duration pairs, a chunk that does not decode, a worker that fails).

**Memory bound.** Peak RSS = interpreter + imports + the arrays above (doubled while a growable
buffer is reallocated) + ijson's 64 KiB read buffer. It grows with the number of GPU events, launches
and cpu_ops (tens of bytes each), never with the JSON text (hundreds of bytes per event).

**Linking** (a GPU event is *linked* to a CPU launch): its correlation id is that of a CPU-side
event carrying ``args.correlation`` (any runtime or driver API call: kernel launches, memcpys, graph
launches of the runtime and driver APIs on CUDA and HIP), or the id of an ``ac2g`` flow *start*
half (written on the launching CPU thread). A launch whose flow carries only its finishing half (some
HIP driver-API launches) still links through its correlation id, and every kernel replayed by one
graph launch (they share its correlation id) links to it. A finishing half alone is no launch: real
traces hold such halves for kernels launched before the profiled window began (TraceLens leaves
those kernels out too).

**Clipping and other input fixes** (:mod:`.stream_fix`). Work on one stream runs in issue order (CUDA
C++ Programming Guide, "Streams": commands in a stream execute in order; HIP likewise). An event
whose recorded end runs past the start of the next event on the same (device, stream) is clipped at
that start, and the scan keeps a warning naming the pair (a known rocprof/MI355 export fault writes
such ``dur`` values); a zero-length event never clips another. A stream is ``args.stream`` as
written (64-bit HIP stream handles, strings, negatives: each value its own stream). Categories are
read by kineto's current names (``Kernel``, legacy ``Runtime`` / ``Memcpy`` / ``Memset``:
:func:`.categories.canonical_category`), Trace Event Format duration pairs (``ph`` B/E, b/e) are
joined into complete events, and what was done goes to :attr:`.scan.TraceScan.notes`.

The gpu_timeline rows follow TraceLens's (over the linked GPU events, as TraceLens's default
``include_unlinked_kernels=False``) ``GPUEventAnalyser.compute_metrics`` definitions
(AMD-AGI/TraceLens, TraceLens/TreePerf/gpu_event_analyser.py): computation = union of non-communication
kernels and memsets; communication = union of kernels whose name contains ``nccl``/``rccl``
(or ``cross_device_reduce``); exposed communication = communication not covered by computation;
exposed memcpy = memcpy not covered by computation or communication; busy = union of all GPU
events; total = last end - first start; idle = total - busy. All times are µs.
"""

from __future__ import annotations

import os
import re
import zlib
from array import array
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from ..errors import InputError, NoGpuEventsError
from ..files import check_input_file
from ..jsonguard import GuardedReader
from .hygiene import (STEP_NAME_RE, GraphKernelsNotRecordedError, as_id, far_outside_bounds, far_outside_note,
                      graph_not_recorded_message, input_notes, tail_bound, tail_kept_note, tail_note)
from .categories import OTHER_DEVICE_CATEGORIES, canonical_category, no_gpu_events_message
from . import fastscan
from .scan_loop import ScanColumns
from .rawfile import HEADER_KEYS, ByteTap, Taps, decoded as _decoded, raw_of as _raw_of
from .scan import (CLS_COMM, CLS_COMP, CLS_MEMCPY, COLLECTIVE_ARG_KEYS, COMM_RE, GPU_CATS,  # noqa: F401 (re-exported)
                   GPU_TIMELINE_ROWS, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, NO_STREAM, ROCM_LEGACY_MEMCPY_RE,
                   LaunchWindow, TraceScan)
from .stream_fix import (INSTANT_PHASES, PAIR_PHASES, DurationPairs, clip_stream_overlaps,  # noqa: F401
                         num, overlap_warnings)
from .trailer import read_trailer
from ijson.common import ObjectBuilder

import ijson as _ijson_pkg

try:  # the C backend is 5-10x faster than the pure-Python one; fall back silently.
    import ijson.backends.yajl2_c as ijson  # type: ignore[import-not-found]
except Exception:  # pragma: no cover - depends on the wheel
    import ijson  # type: ignore[no-redef]

_JSON_ERRORS = (_ijson_pkg.JSONError, _ijson_pkg.IncompleteJSONError, OSError, EOFError, ValueError)

#: Bumped whenever a result computed from a scan changes meaning (the trace cache keys on it).
STREAM_VERSION = "5"




def _check_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    check_input_file(p)  # missing, a directory, /dev/null, a FIFO or empty: said in one line
    return p


def read_header(path: str | os.PathLike, keys: tuple[str, ...] = ("distributedInfo", "deviceProperties",
                                                                  "schemaVersion"),
                *, trailer: bool = False, raw: BinaryIO | None = None) -> dict[str, Any]:
    """Top-level ``keys`` that precede ``traceEvents`` (kineto writes ``distributedInfo`` first).

    Reads only the head of the file; keys that come after the events are left out, unless
    ``trailer``: then those missing are looked up after the events too (:func:`.trailer.read_trailer`:
    a gzip file is decompressed to its end); ``raw``: the file already open. Raises InputError on non-JSON."""
    out = _read_head(path, keys, raw)
    if trailer and any(k not in out for k in keys):
        tail = read_trailer(path)
        out.update({k: tail[k] for k in keys if k not in out and k in tail})
    return out


def _read_head(path: str | os.PathLike, keys: tuple[str, ...], raw: BinaryIO | None = None) -> dict[str, Any]:
    p = _check_path(path)
    out: dict[str, Any] = {}
    builder: ObjectBuilder | None = None
    key: str | None = None
    try:
        with _raw_of(p, raw) as r:
            for prefix, event, value in ijson.parse(GuardedReader(_decoded(r), p.name), use_float=True):
                if builder is not None:
                    if prefix == "" and event in ("map_key", "end_map"):
                        out[key] = builder.value  # type: ignore[index]
                        builder = None
                    else:
                        builder.event(event, value)
                        continue
                if prefix == "" and event == "map_key":
                    if value == "traceEvents":
                        break
                    key = value
                    if key in keys:
                        builder = ObjectBuilder()
    except _JSON_ERRORS as err:
        raise InputError(f"{p.name}: trace is not valid JSON ({str(err).splitlines()[0][:120]})") from err
    return out


def iter_events(path: str | os.PathLike,
                progress: Callable[[int, int], None] | None = None,
                trailer: dict[str, Any] | None = None, fields: str | fastscan.Fields = "all", *, taps: Taps = (),
                raw: BinaryIO | None = None) -> Iterator[dict[str, Any]]:
    """Yield the ``traceEvents`` of a kineto trace one at a time (``.json`` or ``.json.gz``).

    ``progress(bytes_read, file_size)`` is called every ~1 MiB of the file on disk when given.
    ``trailer``: a dict that receives the top-level keys written after the events (read from the
    stream's last bytes, :mod:`.trailer`) once the events are exhausted. ``fields``: ``all``, or
    ``engine``: events may hold only the keys the engine's scan reads (:data:`.fastscan.ENGINE_EVENT_KEYS`),
    or a :data:`.fastscan.Fields` pair: only those keys (:func:`.fastscan.decoders`).
    ``taps``, ``raw``: as :func:`scan_trace`. The decoded bytes pass the JSON bounds
    (:class:`~ai4s_graph.tools.jsonguard.GuardedReader`) before either parser sees them.
    Memory: the piece of text being decoded and its events (:mod:`.fastscan`), the kept tail with ``trailer``.
    Raises InputError (one line) on a missing, empty, truncated or malformed file."""
    for batch in iter_event_batches(path, progress, trailer, fields, taps=taps, raw=raw):
        yield from batch


def iter_event_batches(path: str | os.PathLike,
                       progress: Callable[[int, int], None] | None = None,
                       trailer: dict[str, Any] | None = None, fields: str | fastscan.Fields = "all", *, taps: Taps = (),
                       raw: BinaryIO | None = None) -> Iterator[list | tuple]:
    """The events of :func:`iter_events` (same arguments and errors; ``fields`` may also be
    ``struct``: :func:`.fastscan.event_lists`) as the parser hands them out, one list per decoded
    piece, so that a whole piece can be converted at once (:func:`.fastscan.engine_events`)."""
    p = _check_path(path)
    size = p.stat().st_size
    try:
        with _raw_of(p, raw) as raw:
            fh = GuardedReader(_decoded(raw), p.name)  # depth, string and event bounds before a parser sees a byte
            fh = ByteTap(fh, taps) if taps else fh
            # the parse (.fastscan: msgspec over pieces split at event boundaries, ijson where one does not decode)
            yield from fastscan.event_lists(fh, raw, size, progress, trailer, fields)
    except (*_JSON_ERRORS, zlib.error) as err:
        msg = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        from .jsonpos import locate_invalid_json  # the error path only: a second read names the event and field
        where = locate_invalid_json(p, msg) if not isinstance(err, (zlib.error, EOFError)) else None
        raise InputError(where or f"{p.name}: trace is truncated or not valid JSON ({msg})") from err


def feed_events(path: str | os.PathLike, consumers: tuple[Callable[[dict[str, Any]], None], ...], *,
                taps: Taps = (), raw: BinaryIO | None = None, fields: str | fastscan.Fields = "all") -> int:
    """Feed every event of one trace to each consumer, in file order (one read; memory: one event at
    a time), and its bytes to ``taps`` (``raw``: the file already open). ``fields``: the keys the
    consumers read, all of them (``all``) or a :data:`.fastscan.Fields` pair (the fast parse then
    gives event dicts of those keys only; ijson, whole events). Returns the number of events.
    Raises InputError like :func:`iter_events`."""
    n = 0
    for ev in iter_events(path, fields=fields, taps=taps, raw=raw):
        n += 1
        for f in consumers:
            f(ev)
    return n


def feed_batches(path: str | os.PathLike, consumers: tuple[Callable[[list], None], ...], *,
                 taps: Taps = (), raw: BinaryIO | None = None, fields: str | fastscan.Fields = "all") -> int:
    """:func:`feed_events` with each consumer fed the events a list at a time, as the parser hands
    them out (:func:`iter_event_batches`: one list per decoded piece), every consumer a list before
    the next list; the same events in the same order, one call per list instead of per event.
    Returns the number of events. Raises InputError like :func:`iter_events`."""
    n = 0
    for batch in iter_event_batches(path, fields=fields, taps=taps, raw=raw):
        n += len(batch)
        for f in consumers:
            f(batch)
    return n


def trim_heap() -> None:
    """Give freed heap pages back to the OS (glibc ``malloc_trim(0)``; a no-op elsewhere). After a
    large analysis frees its arrays, glibc keeps the pages (its mmap threshold grows after each
    large free, so later large buffers come from the heap); measured on the 176 MB bench trace:
    75 -> 50 MiB RSS after the engine's pass. The arrays go when their last reference does; only the
    young generations are collected (a full collection costs ~0.1 s with the graph's heap and freed
    nothing more there: the same peak RSS, measured on the replicated 176 MB trace)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect(1)
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    except OSError:
        pass


def _parallel_columns(p: Path, progress: Callable[[int, int], None] | None, also: tuple, taps: Taps,
                      raw: BinaryIO | None, sheets: Any = None, workers: int | None = None) -> ScanColumns | None:
    """The columns of the parallel pass (:func:`.scan_parallel.scan_columns`; with ``sheets``, a
    collector the workers' collectors are joined into) when it applies: no other consumer or byte
    tap (they read every event in one process), the fast parser, and ``workers`` (default
    :func:`.scan_parallel.workers_for`) at least 2; None otherwise, or when the parallel pass handed
    back (the one pass then reads the trace; ``sheets`` is emptied for it)."""
    if also or taps or fastscan.parser_name() != "fast":
        return None
    from . import scan_parallel

    w = scan_parallel.workers_for(p) if workers is None else workers
    if w < 2:
        return None
    cols = scan_parallel.scan_columns(p, w, progress=progress, raw=raw, sheets=sheets)
    if cols is None and sheets is not None:
        sheets.reset()
    return cols


def scan_trace(path: str | os.PathLike, progress: Callable[[int, int], None] | None = None,
               also: tuple[Callable[[dict[str, Any]], None], ...] = (), *,
               taps: Taps = (), raw: BinaryIO | None = None, sheets: Any = None,
               workers: int | None = None) -> TraceScan:
    """One streaming pass over a trace; see the module docstring for what is kept and the bound.

    ``progress(bytes_read, file_size)``: optional callback (the CLI's progress bar). ``also``:
    other consumers fed every event of the same read, before the engine looks at it (the
    verifier's reader, the causes' name counts, the roofline's collector: each keeps its own data and
    applies its own rules; only the bytes are read and parsed once); ``taps``: byte consumers of the
    same read (:class:`ByteTap`); ``raw``: the file already open (rewound for header and events);
    ``sheets``: TraceLens's sheets' collector (:class:`.op_args.OpArgsCollector`), fed every batch
    of the read before the engine's loop takes it (``feed_batch``): without ``also`` the fast parse
    then decodes the engine's fields and the sheets' (:class:`.fastscan.SheetsEvent`), else it gets
    the event dicts ``also`` gets. ``workers``: the parallel pass's processes (default
    :func:`.scan_parallel.workers_for`; below 2, the one pass). Raises InputError (missing / empty / truncated / malformed), GraphKernelsNotRecordedError (graph
    launches but no GPU event: the replayed kernels were not recorded) and NoGpuEventsError (no
    kernel, memcpy or memset event and no graph launch; the message names device activity of other
    kinds the trace holds, :func:`.categories.no_gpu_events_message`)."""
    p = _check_path(path)
    header = read_header(p, HEADER_KEYS, raw=raw)
    cols = _parallel_columns(p, progress, also, taps, raw, sheets, workers)
    if cols is None:  # the one pass
        cols = ScanColumns(DurationPairs())
        trailer: dict[str, Any] = {}
        fields = "all" if also else ("struct" if sheets is None else "sheets")
        for batch in iter_event_batches(p, progress, trailer, fields, taps=taps, raw=raw):  # parse entry (.fastscan)
            if also:
                for ev in batch:
                    for f in also:
                        f(ev)
            if sheets is not None:
                sheets.feed_batch(batch)
            cols.feed(batch)
    else:
        trailer = cols.trailer
    pairs = cols.pairs if cols.pairs is not None else DurationPairs()
    n, ts, cat_of, cat_counts = cols.n, cols.ts, cols.cat_of, cols.cat_counts
    bad_dur, bad_num, instants, ill, bad_args = cols.bad_dur, cols.bad_num, cols.instants, cols.ill, cols.bad_args
    steps, dur = cols.steps, cols.dur
    if n == 0:
        raise InputError(f"{p.name}: JSON has no traceEvents list (not a PyTorch profiler trace)")
    header.update({k: v for k, v in trailer.items() if k not in header})  # keys written after the events
    steps.sort(key=lambda s: s[1])
    c = cols
    scan = TraceScan(
        path=str(p), n_events=n,
        ts=np.frombuffer(ts, dtype=np.float64), dur=np.frombuffer(dur, dtype=np.float64).copy(),
        dur_raw=np.frombuffer(dur, dtype=np.float64),
        name_id=np.frombuffer(c.name_id, dtype=np.int32), kind=np.frombuffer(c.kind, dtype=np.int8),
        device=np.frombuffer(c.device, dtype=np.int32),
        stream=np.frombuffer(c.stream, dtype=np.int32), corr=np.frombuffer(c.corr, dtype=np.int64),
        names=c.names, launch_corr=np.frombuffer(c.l_corr, dtype=np.int64),
        launch_ts=np.frombuffer(c.l_ts, dtype=np.float64), launch_end=np.frombuffer(c.l_end, dtype=np.float64),
        launch_name=np.frombuffer(c.l_name, dtype=np.int32), launch_thread=np.frombuffer(c.l_thr, dtype=np.int32),
        launch_order=np.frombuffer(c.l_ord, dtype=np.int32),
        op_ts=np.frombuffer(c.o_ts, dtype=np.float64), op_end=np.frombuffer(c.o_end, dtype=np.float64),
        op_name=np.frombuffer(c.o_name, dtype=np.int32), op_thread=np.frombuffer(c.o_thr, dtype=np.int32),
        op_order=np.frombuffer(c.o_ord, dtype=np.int32), flow_ids=np.frombuffer(c.flows, dtype=np.int64),
        cpu_names=c.cpu_names, steps=steps, gpu_steps=sorted(c.gpu_steps), dataloader=c.dataloader,
        comm_args=c.comm_args, header=header, cat_counts=cat_counts, bad_durations=bad_dur,
        stream_ids=list(c.stream_codes), device_names={code: v for v, code in c.dev_codes.items()},
        notes=_scan_notes(cat_of, cat_counts, pairs, instants, bad_num, bad_dur, ill, bad_args),
    )
    if len(ts) == 0:
        gl = scan.graph_launches()
        if gl:
            raise GraphKernelsNotRecordedError(graph_not_recorded_message(p.name, gl))
        other: dict[str, int] = {}
        for r, (c, _k) in cat_of.items():
            if c in OTHER_DEVICE_CATEGORIES:
                other[c] = other.get(c, 0) + cat_counts.get(r, 0)
        dropped = bad_num + bad_dur + instants + pairs.gpu_lost(GPU_CATS)
        raise NoGpuEventsError(no_gpu_events_message(p.name, other, dropped) + "".join(f"; {x}" for x in scan.notes))
    drop_far_outside(scan)
    clip_stream_overlaps(scan)
    if drop_far_tail(scan):  # judged on the clipped ends: an overrun the next event on its stream bounds is
        scan.dur = scan.dur_raw.copy()  # clipped, not dropped; without the dropped events, the clip anew
        clip_stream_overlaps(scan)
    return scan


#: The scan's fields indexed by GPU event (what :func:`drop_far_outside` filters together).
_GPU_FIELDS = ("ts", "dur", "dur_raw", "name_id", "kind", "device", "stream", "corr")


def drop_far_outside(scan: TraceScan) -> int:
    """Drop, in place, the GPU events wholly outside :func:`.hygiene.far_outside_bounds` of the
    scan (its ProfilerSteps, else its launches, widened by all its GPU work) and say so in
    ``scan.notes`` (:func:`.hygiene.far_outside_note`); never all of them. Returns how many."""
    if scan.n_gpu_events < 2:
        return 0
    lts, lend = scan.launch_ts, scan.launch_end
    b = far_outside_bounds([(t, d) for _n, t, d in scan.steps],
                           float(lts.min()) if lts is not None and lts.size else None,
                           float(lend.max()) if lend is not None and lend.size else None,
                           float(scan.dur_raw.sum()))
    if b is None:
        return 0
    end = scan.ts + scan.dur_raw
    far = (end < b[0]) | (scan.ts > b[1])
    n = int(far.sum())
    if n == 0 or n == far.size:
        return 0
    i = int(np.flatnonzero(far)[0])
    off = (scan.ts[i] - b[3]) / 1e6 if scan.ts[i] > b[1] else (end[i] - b[2]) / 1e6  # from the reference span
    scan.notes.append(far_outside_note(n, scan.names[scan.name_id[i]], off, b[1] - b[3]))
    _keep_gpu(scan, ~far)
    return n


def drop_far_tail(scan: TraceScan) -> int:
    """Drop, in place, the GPU events ending after :func:`.hygiene.tail_bound` of the scan's
    CPU-side events (cpu_ops and launches) and say so in ``scan.notes``
    (:func:`.hygiene.tail_note`); never all of them, nor all the linked ones. Judged on the clipped
    ends (:func:`clip_stream_overlaps` runs first: an event the next one on its stream clips is not
    dropped); the caller clips the remaining events anew (a clip at a dropped event's start is
    undone, as the verifier's reader does). CPU-side events: cpu_ops and the launches (runtime calls
    with a correlation id), in both readers. Returns how many."""
    if scan.n_gpu_events < 2:
        return 0
    starts = [a for a in (scan.op_ts, scan.launch_ts) if a is not None and a.size]
    ends = [a for a in (scan.op_end, scan.launch_end) if a is not None and a.size]
    if not starts:
        return 0
    hi = max(float(a.max()) for a in ends)
    bound = tail_bound(min(float(a.min()) for a in starts), hi)
    end = scan.ts + scan.dur  # clipped (:func:`clip_stream_overlaps` runs first)
    far = end > bound
    n = int(far.sum())
    if n == 0:
        return 0
    i = int(np.flatnonzero(far)[0])
    said = (n, scan.names[scan.name_id[i]], (end[i] - hi) / 1e6, (bound - hi) / 1e6)
    ids = scan.link_ids()
    linked = np.isin(scan.corr, ids) if ids.size else None
    if n == far.size or (linked is not None and linked.any() and not (linked & ~far).any()):
        scan.notes.append(tail_kept_note(*said))  # never all of them, nor every linked one: kept, said
        return 0
    scan.notes.append(tail_note(*said))
    _keep_gpu(scan, ~far)
    return n


def _keep_gpu(scan: TraceScan, keep: np.ndarray) -> None:
    """Keep, in place, the GPU events where ``keep`` (bool per GPU event) holds."""
    new_index = np.cumsum(keep) - 1
    for f in _GPU_FIELDS:
        a = getattr(scan, f)
        if a is not None:
            setattr(scan, f, a[keep].copy() if f == "dur" else a[keep])
    scan.comm_args = {int(new_index[k]): v for k, v in scan.comm_args.items() if keep[k]}
    scan.overlaps = [(int(new_index[i]), int(new_index[j]), x) for i, j, x in scan.overlaps  # clipped pairs
                     if keep[i] and keep[j]]


def _scan_notes(cat_of: dict, cat_counts: dict, pairs: DurationPairs, instants: int, bad_num: int,
                bad_dur: int, ill: int = 0, bad_args: int = 0) -> list[str]:
    """The pass's notes (:func:`.hygiene.input_notes`): categories normalised, duration pairs joined
    or unmatched, instants and GPU events without numbers or with a negative dur left out, events of
    a shape kineto never writes left out, GPU events read without their args."""
    renamed = [(r, c, cat_counts.get(r, 0)) for r, (c, _k) in cat_of.items()
               if isinstance(r, str) and c is not None and c != r]
    return input_notes(renamed=renamed, instants=instants, bad_numbers=bad_num, bad_durations=bad_dur,
                       ill_typed=ill, args_not_object=bad_args, **pairs.counts(GPU_CATS))


# --------------------------------------------------------------------------- classification


def tracelens_classes(scan: TraceScan) -> np.ndarray:
    """Per GPU event class code (CLS_COMP / CLS_COMM / CLS_MEMCPY) as TraceLens's gpu_timeline
    assigns it: gpu_memcpy and ROCm legacy copy kernels -> memcpy; kernels/memsets whose name
    contains nccl/rccl -> communication; everything else (memsets included) -> computation."""
    per_name = np.zeros(len(scan.names), dtype=np.int8)
    legacy = np.zeros(len(scan.names), dtype=bool)
    for i, nm in enumerate(scan.names):
        if COMM_RE.search(nm):
            per_name[i] = CLS_COMM
        if ROCM_LEGACY_MEMCPY_RE.match(nm):
            legacy[i] = True
    cls = per_name[scan.name_id]
    cls = np.where(scan.kind == KIND_MEMCPY, CLS_MEMCPY, cls)
    cls = np.where((scan.kind == KIND_KERNEL) & legacy[scan.name_id], CLS_MEMCPY, cls)
    return cls.astype(np.int8)


# --------------------------------------------------------------------------- interval algebra


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of intervals ``[start_i, end_i)`` (same unit as the inputs).

    Touching intervals merge (TraceLens merges when ``start <= last_end``); O(n log n)."""
    bs, be = merged_intervals(start, end)
    return float(np.sum(be - bs)) if bs.size else 0.0


def union_lengths(start: np.ndarray, end: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per group, :func:`union_length` of its intervals, bit for bit: ``start``/``end`` (µs, n) hold
    the groups one after another, each sorted by start (ties in any order), group ``j`` from row
    ``bounds[j]`` to ``bounds[j + 1]`` (``bounds``: int, ascending, ``bounds[0] == 0``, its last
    element n). Returns a float64 array of ``len(bounds) - 1``.

    The blocks of every group at once: a segmented running maximum of the ends (Hillis-Steele, one
    pass per doubling of the longest group), a block starting where a start passes it. A group's
    block lengths are summed as ``np.sum`` sums them: in order from 0.0 below 8 blocks (np.bincount),
    with ``np.sum`` itself from 8 on (numpy's pairwise summation unrolls by 8)."""
    n, k = start.size, len(bounds) - 1
    if k <= 0:
        return np.zeros(0)
    seg = np.repeat(np.arange(k), np.diff(bounds))
    run = np.asarray(end, dtype=np.float64).copy()
    step = 1
    while step < n:
        same = seg[step:] == seg[:-step]
        run[step:] = np.where(same, np.maximum(run[step:], run[:-step]), run[step:])
        step *= 2
    new = np.ones(n, dtype=bool)
    new[1:] = (seg[1:] != seg[:-1]) | (start[1:] > run[:-1])
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:], [n]]) - 1
    length = run[last] - start[first]  # a block's end: the running maximum at its last interval
    bseg = seg[first]
    nblocks = np.bincount(bseg, minlength=k)
    out = np.bincount(bseg, weights=length, minlength=k)
    if (nblocks >= 8).any():
        edges = np.concatenate([[0], np.cumsum(nblocks)])
        for j in np.flatnonzero(nblocks >= 8).tolist():
            out[j] = float(np.sum(length[edges[j]:edges[j + 1]]))
    return out


def merged_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``[start_i, end_i)`` as sorted disjoint blocks ``(starts, ends)``."""
    if start.size == 0:
        return start[:0], end[:0]
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = np.maximum.accumulate(end[order])
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    return s[new], np.maximum.reduceat(e, first)


def window_mask(scan: TraceScan, window: LaunchWindow = "linked") -> np.ndarray:
    """Which GPU events to analyse (bool mask over the scan's GPU events).

    ``linked`` (default): events whose correlation id matches a CPU-side launch or an ac2g flow
    half in the trace (see the module docstring), which is what TraceLens's gpu_timeline keeps (``include_unlinked_kernels=False``); a trace with no
    launch correlation at all (GPU-only), or none that a GPU event carries, keeps every event. ``all``: every GPU event.
    ``profiler_steps``: events launched by a CPU-side event starting at or before the end of the
    last ProfilerStep (HTA with ``include_last_profiler_step=True``). ``drop_last_step``: launched
    before the start of the last ProfilerStep (HTA's default, which drops the possibly incomplete
    last step). As in HTA, the last ProfilerStep is the latest of the CPU annotations and their
    ``gpu_user_annotation`` copies (which start later: the GPU reaches the step after the host). Without ProfilerStep annotations the two HTA windows fall back to ``linked``.
    Raises InputError on an unknown window name."""
    if window not in ("linked", "all", "profiler_steps", "drop_last_step"):
        raise InputError(f"unknown launch window {window!r}: use linked, all, profiler_steps or drop_last_step")
    if window == "all" or scan.link_ids().size == 0:
        return np.ones(scan.n_gpu_events, dtype=bool)
    linked = np.isin(scan.corr, scan.link_ids())
    if not linked.any():  # launches, but no GPU event links to one: every GPU event counts (as the reader)
        return np.ones(scan.n_gpu_events, dtype=bool)
    if window == "linked" or not scan.steps:
        return linked
    # HTA's step bounds (hta/common/trace.py _filter_irrelevant_gpu_kernels): the latest start and end
    # over every ProfilerStep event its CPUOperatorFilter keeps: every event without both a stream and
    # a correlation id, so the gpu_user_annotation copies too, which start later than the CPU ones.
    starts = [s[1] for s in scan.steps] + [g[0] for g in scan.gpu_steps]
    ends = [s[1] + s[2] for s in scan.steps] + [g[0] + g[1] for g in scan.gpu_steps]
    if window == "profiler_steps":
        ok = scan.launch_ts <= max(ends)
    else:
        ok = scan.launch_ts < max(starts)
    return np.isin(scan.corr, scan.launch_corr[ok])


def gpu_timeline(scan: TraceScan, mask: np.ndarray | None = None) -> dict[str, float]:
    """The eight gpu_timeline rows of TraceLens, in µs (see module docstring for definitions).

    ``mask`` selects GPU events (default: all). Raises NoGpuEventsError if it selects none."""
    sel = np.ones(scan.n_gpu_events, dtype=bool) if mask is None else mask
    if not sel.any():
        raise NoGpuEventsError(f"no GPU events in the selected window: {scan.path}")
    t0 = scan.ts[sel].min()  # relative times keep float64 precision on epoch-µs timestamps
    s = scan.ts[sel] - t0
    e = s + scan.dur[sel]
    cls = tracelens_classes(scan)[sel]
    comp, comm, mem = cls == CLS_COMP, cls == CLS_COMM, cls == CLS_MEMCPY
    comp_t = union_length(s[comp], e[comp])
    comm_t = union_length(s[comm], e[comm])
    mem_t = union_length(s[mem], e[mem])
    cc = comp | comm
    comp_comm_t = union_length(s[cc], e[cc])
    busy = union_length(s, e)
    total = float(e.max() - s.min())
    exposed_comm = comp_comm_t - comp_t
    exposed_mem = busy - comp_comm_t
    return {
        "computation_time": comp_t,
        "exposed_comm_time": exposed_comm,
        "exposed_memcpy_time": exposed_mem,
        "busy_time": busy,
        "idle_time": total - busy,
        "total_time": total,
        "total_comm_time": comm_t,
        "total_memcpy_time": mem_t,
    }


def timeline_rows(timeline_us: dict[str, float]) -> list[dict[str, float | str]]:
    """gpu_timeline rows in TraceLens's CSV shape: ``type``, ``time ms``, ``percent`` (of total)."""
    total = timeline_us["total_time"] or 1.0
    return [{"type": k, "time ms": timeline_us[k] / 1e3, "percent": 100.0 * timeline_us[k] / total}
            for k in GPU_TIMELINE_ROWS]


def kernel_counts(scan: TraceScan, mask: np.ndarray | None = None, top: int | None = None) -> list[dict[str, Any]]:
    """Per GPU event name: ``count`` and ``total_us`` (sum of durations), largest total first."""
    sel = np.ones(scan.n_gpu_events, dtype=bool) if mask is None else mask
    ids = scan.name_id[sel]
    cnt = np.bincount(ids, minlength=len(scan.names))
    tot = np.bincount(ids, weights=scan.dur[sel], minlength=len(scan.names))
    order = np.argsort(-tot, kind="stable")
    rows = [{"name": scan.names[i], "count": int(cnt[i]), "total_us": float(tot[i])}
            for i in order if cnt[i] > 0]
    return rows[:top] if top else rows


def analyze_trace_streaming(path: str | os.PathLike, *, window: LaunchWindow = "linked",
                            top_kernels: int = 20) -> dict[str, Any]:
    """Bounded-memory single-trace summary (JSON-able).

    Returns ``{"path", "backend": "stream", "n_events", "n_gpu_events", "timeline_us" (the eight
    gpu_timeline rows, µs), "gpu_timeline" (TraceLens CSV rows), "kernel_counts" (top kernels),
    "n_kernel_names", "profiler_steps", "distributed_info", "scan_bytes"}``.
    Raises InputError / NoGpuEventsError as :func:`scan_trace`."""
    scan = scan_trace(path)
    mask = window_mask(scan, window)
    tl = gpu_timeline(scan, mask)
    return {
        "path": scan.path,
        "backend": "stream",
        "window": window,
        "n_events": scan.n_events,
        "n_gpu_events": scan.n_gpu_events,
        "timeline_us": tl,
        "gpu_timeline": timeline_rows(tl),
        "kernel_counts": kernel_counts(scan, mask, top=top_kernels),
        "n_kernel_names": len(scan.names),
        "profiler_steps": [s[0] for s in scan.steps],
        "distributed_info": scan.header.get("distributedInfo"),
        "scan_bytes": scan.nbytes(),
    }
