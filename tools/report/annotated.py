"""``<out>/annotated_trace.json.gz``: one rank's kineto trace with the findings drawn on it, for
Perfetto (ui.perfetto.dev) or chrome://tracing.

Every event of the rank's trace is copied as it is, then one more process (``ai4s-graph findings
(rank N)``, a pid the trace does not use, sorted first) holds three tracks of complete (``"X"``)
events in the Trace Event Format (Google, "Trace Event Format", 2016: ``ph``, ``ts``/``dur`` in µs,
``pid``/``tid``, ``M`` metadata events ``process_name``, ``thread_name``, ``process_sort_index``):

- ``steps``: one event per ``ProfilerStep#N`` (the one rule of what a step is,
  :data:`ai4s_graph.tools.trace.hygiene.STEP_NAME_RE`), its number and duration in ``args``;
- ``GPU idle``: the gaps between the rank's busy GPU intervals (the union of its kernel, memcpy and
  memset events, as the engine's ``idle_time`` is ``total - busy``: :func:`~ai4s_graph.tools.trace.
  stream.gpu_timeline`), each named by its cause: the ``gap_label`` hook when one is given (the
  per-step host attribution will provide it), else the DataLoader's CPU events it overlaps, else
  ``idle: cause not attributed``;
- ``collective waits``: per matched collective, the time from this rank's communication kernel start
  to the last rank's arrival (:func:`collective_waits`, from :mod:`ai4s_graph.tools.trace.collectives`:
  TraceLens's matching), named after the rank waited for.

The copy streams: one event in memory at a time (:func:`~ai4s_graph.tools.trace.stream.iter_events`),
plus 17 bytes per GPU event for the busy intervals and their class (the per-step breakdown,
:mod:`.steps`, returned in ``step_breakdown``); the output is gzip-compressed and written
atomically (:mod:`.writer`). Top-level keys before ``traceEvents`` (``distributedInfo``,
``deviceProperties``...) are written before it, those after it after it.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import queue
import threading
from array import array
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import orjson
from pydantic import BaseModel

from ..trace.hygiene import STEP_NAME_RE
from ..trace.stream import iter_events, merged_intervals, read_header
from ..trace.scan import CLS_COMM, CLS_COMP, CLS_MEMCPY, COMM_RE, ROCM_LEGACY_MEMCPY_RE
from .steps import step_breakdown
from .writer import open_atomic

#: Top-level keys kineto writes before ``traceEvents`` (torch/profiler, libkineto ChromeTraceLogger).
HEADER_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "record_shapes", "with_stack", "with_modules",
               "with_flops", "profile_memory", "cuda_runtime_version", "cuda_driver_version", "cupti_version",
               "hip_runtime_version", "trace_id", "displayTimeUnit", "baseTimeNanoseconds", "traceName")
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
CAT = "ai4s_graph"
TRACKS = {"steps": 1, "GPU idle": 2, "collective waits": 3}
"""Track name -> tid in the findings process."""

#: Gaps shorter than this (µs) are not drawn: below TraceLens's/HTA's 1 µs timestamp resolution a
#: "gap" is rounding between back-to-back kernels (HTA rounds event bounds to whole µs).
MIN_GAP_US = 1.0

#: Events serialized per ``orjson.dumps`` call of the copy (one call per event costs ~1 µs of Python each).
BATCH = 4096

GapLabel = Callable[[float, float], "tuple[str, dict[str, Any]] | None"]


class AnnotatedTrace(BaseModel):
    """What :func:`write_annotated_trace` wrote: ``path``, events copied, and the events of each
    track (``steps``, ``idle_gaps``, ``collective_waits``), the findings' ``pid`` and the idle time
    drawn (µs)."""

    path: str
    events_copied: int
    step_breakdown: list[dict[str, Any]] = []
    steps: int
    idle_gaps: int
    idle_us: float
    collective_waits: int
    pid: int


def collective_waits(rank_results: list[dict[str, Any]], rank: int) -> list[dict[str, Any]]:
    """Rank ``rank``'s waits at matched collectives, from the per-rank records of
    :func:`~ai4s_graph.tools.trace.rank_analysis.analyze_rank` (their ``comm`` columns): for each
    collective where another rank arrived later, ``{"ts", "dur", "name", "args"}`` with ``ts`` this
    rank's kernel start (its own trace clock) and ``dur`` the wait (latest start - own start, µs);
    where this rank arrived last (the straggler), the others' longest wait for it instead: ``ts`` its
    start minus that wait, ``dur`` = its start - the earliest start, ``args.waited_for_by_rank`` the
    rank that arrived first. Empty with fewer than two ranks or no communication kernel."""
    from ..trace.collectives import _long_comm_frame, match_collectives, per_collective

    if len({int(r["rank"]) for r in rank_results}) < 2:
        return []
    long = _long_comm_frame(rank_results)
    if long.empty:
        return []
    df, simplified = match_collectives(long)
    per = per_collective(df, simplified).set_index("collective_id")
    mine = df[df["rank"] == int(rank)]
    earliest = df.groupby("collective_id")["ts"].min()
    out = []
    for cid, ts in zip(mine["collective_id"].tolist(), mine["ts"].tolist()):
        row = per.loc[cid]
        wait = float(row["latest_start"]) - float(ts)
        if wait <= 0:  # this rank arrived last: the others waited for it, up to (its start - the first start)
            held = float(ts) - float(earliest.loc[cid])
            first = int(row["earliest_arrival_rank"])
            if held > 0 and first != int(rank):
                out.append({"ts": float(ts) - held, "dur": held,
                            "name": f"rank {first} waits {held:.0f} µs for this rank ({row['collective']})",
                            "args": {"collective_id": str(cid), "collective": str(row["collective"]),
                                     "waited_for_by_rank": first, "wait_us": held}})
            continue
        last = int(row["last_arrival_rank"])
        size = row["msg_bytes"]
        out.append({"ts": float(ts), "dur": wait,
                    "name": f"wait {wait:.0f} µs for rank {last} ({row['collective']})",
                    "args": {"collective_id": str(cid), "collective": str(row["collective"]), "waits_for_rank": last,
                             "wait_us": wait, "msg_bytes": float(size) if size == size else None}})
    return out


def idle_intervals(scan: Any) -> tuple[np.ndarray, np.ndarray]:
    """The engine's idle intervals of a :class:`~ai4s_graph.tools.trace.stream.TraceScan`: the gaps
    between the merged busy blocks of its linked GPU events (clipped durations), ``(starts, ends)``
    in µs; their lengths sum to the engine's ``idle_time`` (``total - busy``)."""
    from ..trace.stream import window_mask

    sel = window_mask(scan, "linked")
    bs, be = merged_intervals(scan.ts[sel], scan.ts[sel] + scan.dur[sel])
    return be[:-1], bs[1:]


class _LoaderLabel:
    """The default gap cause: the DataLoader's CPU events the gap overlaps (by its largest share).
    Called with one gap ``(a, b)`` (µs) it gives the label or None; :meth:`possible` answers for
    every gap at once whether any event may overlap it (one vectorized binary search over the
    starts and the running maximum of the ends), so that the sum runs only there: 80 k scalar
    searches were ~0.3 of 0.76 s of the annotated trace's findings on the replicated 176 MB trace
    (cProfile, project machine, 2026-12-04)."""

    def __init__(self, loader: list[tuple[float, float]]) -> None:
        self.starts = np.asarray([s for s, _ in loader], dtype=float)
        self.ends = np.asarray([e for _, e in loader], dtype=float)
        order = np.argsort(self.starts, kind="stable")
        self.by_start = self.starts[order]
        # latest end of the first k by start
        self.reach = np.maximum.accumulate(self.ends[order]) if self.starts.size else self.ends

    def possible(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per gap (``a``, ``b``: starts and ends, µs, same shape): False where no event starts
        before its end and ends after its start (every overlap <= 0: the sum is 0), or it is empty."""
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if not self.starts.size:
            return np.zeros(a.shape, dtype=bool)
        k = np.searchsorted(self.by_start, b, side="left")  # the events starting before the gap's end
        hit = k > 0
        hit[hit] = self.reach[k[hit] - 1] > a[hit]
        return hit & (b > a)

    def __call__(self, a: float, b: float) -> tuple[str, dict[str, Any]] | None:
        if not self.possible(np.asarray([a]), np.asarray([b]))[0]:
            return None
        return self.share(a, b)

    def share(self, a: float, b: float) -> tuple[str, dict[str, Any]] | None:
        """The label of the gap ``(a, b)`` from the events' summed overlap with it (None when 0),
        without :meth:`possible`'s test."""
        ov = float(np.sum(np.clip(np.minimum(self.ends, b) - np.maximum(self.starts, a), 0.0, None)))
        if ov <= 0:
            return None
        return "waiting for the DataLoader", {"dataloader_overlap_pct": 100.0 * min(ov, b - a) / (b - a)}


def _dataloader_label(loader: list[tuple[float, float]]) -> _LoaderLabel:
    """The default gap cause of the DataLoader's CPU events ``loader`` (``(start, end)`` µs pairs):
    :class:`_LoaderLabel`."""
    return _LoaderLabel(loader)


def _gpu_classes() -> Callable[[str, str], int]:
    """:func:`_gpu_class` asked once per distinct ``(cat, name)``."""
    seen: dict[tuple[str, str], int] = {}

    def cls(cat: str, name: str) -> int:
        got = seen.get((cat, name))
        if got is None:
            got = seen[(cat, name)] = _gpu_class(cat, name)
        return got

    return cls


def _gpu_class(cat: str, name: str) -> int:
    """TraceLens's gpu_timeline class of one GPU event (as :func:`~ai4s_graph.tools.trace.stream.
    tracelens_classes`): memcpy events and ROCm legacy copy kernels -> memcpy; a name with
    nccl/rccl -> communication; else computation."""
    if cat == "gpu_memcpy" or (cat == "kernel" and ROCM_LEGACY_MEMCPY_RE.match(name)):
        return CLS_MEMCPY
    return CLS_COMM if COMM_RE.search(name) else CLS_COMP


#: The pids the findings process's own pid is chosen beside (one above the largest): a JSON number
#: orjson writes as an integer, a signed 64-bit one (a float pid beyond it is not a process id).
_PID_RANGE = (-(2**63), 2**63 - 2)


def _int_pid(v: Any) -> int | None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return None
    p = int(v)
    return p if _PID_RANGE[0] <= p <= _PID_RANGE[1] else None


def write_annotated_trace(trace: str | os.PathLike[str], out: str | os.PathLike[str], *, rank: int | None = None,
                          waits: Iterable[dict[str, Any]] = (), gap_label: GapLabel | None = None,
                          idle: tuple[np.ndarray, np.ndarray] | None = None,
                          min_gap_us: float = MIN_GAP_US) -> AnnotatedTrace:
    """Copy the kineto trace ``trace`` (``.json`` / ``.json.gz``) to ``out`` (gzip JSON) with the
    findings tracks of the module docstring. ``waits``: the rank's collective waits
    (:func:`collective_waits`); ``gap_label(start_us, end_us) -> (name, args) | None``: the cause of
    an idle gap (None: the default rule); ``idle``: the gaps to draw, ``(starts, ends)`` µs (the
    engine's, :func:`idle_intervals`, when the caller holds the rank's scan; default: the gaps
    between the busy blocks of every GPU event copied); ``min_gap_us``: shortest gap drawn.

    Returns an :class:`AnnotatedTrace`. Raises InputError (one line) for a missing, empty, truncated
    or malformed trace; ``OSError`` when ``out`` cannot be written (an earlier file there is kept)."""
    src = Path(trace)
    if not src.is_file():
        head = read_header(src, HEADER_KEYS)  # raises the one-line InputError for a missing file
    prepared = _PREPARED.pop(_file_key(src), None)
    if prepared is not None:  # made by the rank's one read: no second read of the trace
        return prepared.write(out, rank, waits, gap_label, idle, min_gap_us)
    with open(src, "rb") as fh:  # one open for the header and the events (a run opens each trace at most twice)
        head = read_header(src, HEADER_KEYS, raw=fh)
        fh.seek(0)
        return _write(src, fh, head, out, rank, waits, gap_label, idle, min_gap_us)


#: The gzip member header of a prepared copy (RFC 1952: magic, deflate, no flags, mtime 0, fastest, OS unknown).
_GZIP_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"
#: Prepared copies by (resolved path, size, mtime): what :func:`write_annotated_trace` takes instead of a read.
_PREPARED: dict[tuple[str, int, int], "EventCopy"] = {}


def _file_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


class EventCopy:
    """The copy's events made during the rank's one read (:func:`~ai4s_graph.tools.trace.onepass.read_rank`
    feeds :meth:`feed` every event and :meth:`tap` every decoded byte), so that
    :func:`write_annotated_trace` does not read the trace again: the header keys and events are
    deflated as they come (compression level 1, raw deflate, ended by a sync flush: whole bytes, no
    final block) into an anonymous temporary file, with their CRC-32 and length; the findings'
    inputs are collected as :func:`_write` collects them; the last :data:`~ai4s_graph.tools.trace.
    trailer.TAIL_BYTES` decoded bytes give the trailer keys (:func:`~ai4s_graph.tools.trace.trailer.
    trailer_keys`, as the reader's own pass finds them). :meth:`finish` files it for the writer, which
    then adds the findings as one more deflate run and the gzip trailer: one gzip member whose text
    is the same as the re-read's. Memory: one batch of events and the tail; disk: the compressed copy.
    Raises InputError (from :func:`~ai4s_graph.tools.trace.stream.read_header`) for a trace whose
    header cannot be read.

    ``spool_fd``: the descriptor of a file the compressed copy goes to (a lane's copy,
    :func:`~ai4s_graph.tools.trace.onepass.counts_part`: an anonymous file of the report's process,
    inherited; handed back by :meth:`snapshot` and :func:`adopt_copy`), default an anonymous
    temporary file; ``raw``: the trace already open (its header is read from it). Raises OSError
    when ``spool_fd`` cannot be opened."""

    def __init__(self, path: str | os.PathLike[str], *, spool_fd: int | None = None,
                 raw: Any = None) -> None:
        import tempfile
        import zlib

        from ..trace.trailer import TAIL_BYTES

        self.src = Path(path)
        self.key = _file_key(self.src)
        self.head = read_header(self.src, HEADER_KEYS, raw=raw)
        self._zlib = zlib
        self._z = zlib.compressobj(1, zlib.DEFLATED, -15)
        # closed by write() or when dropped
        self._f = tempfile.TemporaryFile() if spool_fd is None else os.fdopen(os.dup(spool_fd), "w+b")  # noqa: SIM115
        # the CRC and the deflate run in a thread of their own (zlib releases the GIL on large
        # buffers: they overlap the pass's parse); at most 8 batches wait for it
        self._q: queue.Queue = queue.Queue(maxsize=8)
        self._fail: list[str] = []
        self._thread = threading.Thread(target=self._deflate, name="annotated-copy", daemon=True)
        self._thread.start()
        self.crc, self.size = 0, 0
        self._keep = TAIL_BYTES
        self._tail = bytearray()
        self._total = 0
        self.trailer: dict[str, Any] = {}
        self.error: str | None = None
        self.col = _Collect(self._emit)
        self._emit(_opening(self.head))

    def _emit(self, b: bytes) -> None:
        self._q.put(b)

    def _deflate(self) -> None:
        """The copy's thread: CRC, length and deflate of each piece, in order, until ``None``."""
        while (b := self._q.get()) is not None:
            if self._fail:
                continue
            try:
                self.crc = self._zlib.crc32(b, self.crc)
                self.size += len(b)
                self._f.write(self._z.compress(b))
            except Exception as e:  # noqa: BLE001 - a full disk, say: the copy is dropped, the writer reads
                self._fail.append(f"{type(e).__name__}: {e}"[:200])

    def _stop(self) -> None:
        self._q.put(None)
        self._thread.join()

    def discard(self) -> None:
        """Drop the copy (the pass failed): its thread ends, its file goes."""
        self._stop()
        self._f.close()

    def feed(self, ev: Any) -> None:
        """Take one event of the pass (a dict). Never raises: an event the copy cannot take (a number
        orjson cannot write) ends the copy, and the writer then reads the trace itself."""
        self.feed_batch((ev,))

    def feed_batch(self, evs: list[Any] | tuple) -> None:
        """:meth:`feed` of every event of ``evs``, in order (:meth:`_Collect.feed_batch`)."""
        if self.error is None:
            try:
                self.col.feed_batch(evs)
            except Exception as e:  # noqa: BLE001 - the copy is an optimisation: its failure drops it only
                self.error = f"{type(e).__name__}: {e}"[:200]

    def tap(self, chunk: bytes) -> None:
        """Take the pass's next decoded bytes (the tail is kept for the trailer keys)."""
        self._total += len(chunk)
        self._tail += chunk
        if len(self._tail) > 2 * self._keep:
            del self._tail[: len(self._tail) - self._keep]

    def finish(self) -> None:
        """The pass is over: end the copy's deflate run and file it for :func:`write_annotated_trace`
        (not when the copy failed: the writer then reads the trace)."""
        from ..trace.trailer import trailer_keys

        if self.error is None:
            try:
                self.col.flush()
            except Exception as e:  # noqa: BLE001 - as in feed()
                self.error = f"{type(e).__name__}: {e}"[:200]
        self._stop()
        if self.error is None and self._fail:
            self.error = self._fail[0]
        if self.error is not None:
            self._f.close()
            return
        self._f.write(self._z.flush(self._zlib.Z_SYNC_FLUSH))
        self.trailer = trailer_keys(bytes(self._tail[-self._keep:]), whole=self._total <= self._keep)
        self._tail = bytearray()
        _file(self.key, self)

    def snapshot(self) -> dict[str, Any]:
        """:meth:`finish`, then what :func:`adopt_copy` needs to file this copy in another process:
        the file key, header, CRC-32 and length of the deflated text, trailer keys, the findings'
        inputs (``col``: events copied, GPU spans and classes, steps, DataLoader calls, pids), or
        ``error`` (why the copy was dropped). The spool file is closed, its bytes flushed."""
        self.finish()
        _PREPARED.pop(self.key, None)
        if self.error is not None:
            return {"error": self.error}
        self._f.close()
        c = self.col
        return {"key": self.key, "head": self.head, "crc": self.crc, "size": self.size, "trailer": self.trailer,
                "col": {"n": c.n, "g_ts": c.g_ts, "g_end": c.g_end, "g_cls": c.g_cls, "steps": c.steps,
                        "loader": c.loader, "pids": c.pids}}

    def write(self, out: str | os.PathLike[str], rank: int | None, waits: Iterable[dict[str, Any]],
              gap_label: GapLabel | None, idle: tuple[np.ndarray, np.ndarray] | None,
              min_gap_us: float) -> AnnotatedTrace:
        """The annotated trace at ``out`` from this copy (see the class docstring)."""
        import shutil
        import struct

        zl = self._zlib
        z = zl.compressobj(1, zl.DEFLATED, -15)
        crc, size = self.crc, self.size
        try:
            with open_atomic(out, "wb") as raw:
                raw.write(_GZIP_HEAD)
                self._f.seek(0)
                shutil.copyfileobj(self._f, raw, 1 << 20)

                def write(b: bytes) -> None:
                    nonlocal crc, size
                    crc, size = zl.crc32(b, crc), size + len(b)
                    raw.write(z.compress(b))

                res = _finish(write, self.col, self.head, self.trailer, out, rank, waits, gap_label, idle, min_gap_us)
                raw.write(z.flush())
                raw.write(struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF))
        finally:
            self._f.close()
        return res


def copy_spool() -> Any:
    """A new anonymous file for a lane's copy (:meth:`EventCopy.snapshot`; the lane writes it through
    the inherited descriptor): nothing stays on disk when either process ends, however it ends.
    None when none can be made (the copy is then made in this process)."""
    import tempfile

    try:
        return tempfile.TemporaryFile()  # noqa: SIM115 - closed by the caller, or by the adopted copy's write()
    except OSError:
        return None


def adopt_copy(path: str | os.PathLike[str], snap: dict[str, Any], spool: Any) -> bool:
    """File the copy another process made of the trace at ``path`` into the open file ``spool``
    (:meth:`EventCopy.snapshot`) for :func:`write_annotated_trace`, as :meth:`EventCopy.finish`
    files its own; the filed copy then owns ``spool`` (its write closes it). Not when the copy was
    dropped, or when the trace is not the file the copy read (its path, size or mtime changed
    since): then the writer reads the trace itself and the caller closes ``spool``. Returns whether
    it was filed; raises nothing."""
    import zlib

    try:
        key = _file_key(Path(path))
    except OSError:
        return False
    if snap.get("error") is not None or tuple(snap.get("key") or ()) != key:
        return False
    c = EventCopy.__new__(EventCopy)
    c.src, c.key, c.head, c._zlib = Path(path), key, snap["head"], zlib
    c.crc, c.size, c.trailer, c.error, c._f = snap["crc"], snap["size"], snap["trailer"], None, spool
    col = _Collect.__new__(_Collect)
    col.__dict__.update(snap["col"])
    c.col = col
    _file(key, c)
    return True


#: Prepared copies kept at most: a process that reads traces and never writes their annotated copy
#: (a long-lived caller of :func:`~ai4s_graph.tools.trace.onepass.read_rank`) would otherwise hold
#: one open spool file per read (an adversarial trial, 2026-12-03); a run writes the one it made.
MAX_PREPARED = 4


def _file(key: tuple[str, int, int], copy: "EventCopy") -> None:
    """File ``copy`` for :func:`write_annotated_trace` under ``key``: a copy filed before under the
    same key, and the oldest past :data:`MAX_PREPARED`, are dropped (their spool files closed)."""
    old = _PREPARED.pop(key, None)
    if old is not None and old is not copy:
        old._f.close()
    _PREPARED[key] = copy
    while len(_PREPARED) > MAX_PREPARED:
        _PREPARED.pop(next(iter(_PREPARED)))._f.close()


def _write(src: Path, fh: Any, head: dict[str, Any], out: str | os.PathLike[str], rank: int | None,
           waits: Iterable[dict[str, Any]], gap_label: GapLabel | None,
           idle: tuple[np.ndarray, np.ndarray] | None, min_gap_us: float) -> AnnotatedTrace:
    """:func:`write_annotated_trace`'s copy, from the open source file ``fh``."""
    trailer: dict[str, Any] = {}
    # compresslevel 1 (GzipFile's default is 9): measured on a 19.4 MB rank trace (bench/make_long_trace.py),
    # 0.05 s against 0.49 s of CPU for 1.95 MB against 1.33 MB: the copy of a 1 GB trace saves ~20 s
    with open_atomic(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=1) as z, \
            io.BufferedWriter(z, buffer_size=1 << 20) as gz:  # type: ignore[arg-type]
        gz.write(_opening(head))
        col = _Collect(gz.write)
        for ev in iter_events(src, trailer=trailer, raw=fh):
            col.feed(ev)
        col.flush()
        return _finish(gz.write, col, head, trailer, out, rank, waits, gap_label, idle, min_gap_us)


def _opening(head: dict[str, Any]) -> bytes:
    """The copy's text before its first event: the header keys, then the events list opened."""
    return b"{" + b"".join(orjson.dumps(k) + b":" + orjson.dumps(v) + b"," for k, v in head.items()) + \
        b'"traceEvents":['


class _Collect:
    """The copy's events, written a batch at a time to ``write``, and what its findings need (the GPU
    events' spans and class, the steps, the DataLoader calls, the pids), fed one event at a time."""

    def __init__(self, write: Callable[[bytes], Any]) -> None:
        self.write = write
        self.n = 0
        self.batch: list[dict[str, Any]] = []
        self.g_ts, self.g_end, self.g_cls = array("d"), array("d"), array("b")
        self.steps: list[tuple[int, float, float]] = []
        self.loader: list[tuple[float, float]] = []
        self.pids: set[int] = set()
        self._gpu_class = _gpu_classes()
        self._loader_name: dict[str, bool] = {}  # name -> holds "dataloader" (asked once per distinct name)

    def feed(self, ev: dict[str, Any]) -> None:
        """Take one event (:meth:`feed_batch` of it alone)."""
        self.feed_batch((ev,))

    def feed_batch(self, evs: list[dict[str, Any]] | tuple) -> None:
        """Take the events ``evs`` in order (a piece of the parse at once: one call instead of one
        per event); the batch is written whenever it holds :data:`BATCH` events or more (the same
        bytes at any cut: a list's dumps is its events' joined by commas). A value that is not an
        event dict raises (AttributeError), as a name that is not a string where a step's may be."""
        if not evs:
            return
        self.batch.extend(evs)
        if len(self.batch) >= BATCH:
            self.flush()
        pids, g_ts, g_end, g_cls = self.pids, self.g_ts, self.g_end, self.g_cls
        gpu_class, steps, loader, loader_name = self._gpu_class, self.steps, self.loader, self._loader_name
        step_match = STEP_NAME_RE.match
        for ev in evs:
            p = ev.get("pid")
            if type(p) is int and _PID_RANGE[0] <= p <= _PID_RANGE[1]:
                pids.add(p)
            elif (p := _int_pid(p)) is not None:
                pids.add(p)
            cat, ts, dur = ev.get("cat"), ev.get("ts"), ev.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or not dur >= 0:
                continue
            if type(cat) is str and cat in GPU_CATS:  # (a list or dict as cat: not a GPU event, not hashable)
                g_ts.append(float(ts))
                g_end.append(float(ts) + float(dur))
                n = ev.get("name")
                g_cls.append(gpu_class(cat, n if type(n) is str else ""))  # a number or null: no name
                continue
            name = ev.get("name")
            if type(name) is not str:  # a number, list or null: no name (neither a step nor a DataLoader call)
                continue
            if cat in (None, "user_annotation") and (m := step_match(name)):
                steps.append((int(m.group(1)), float(ts), float(dur)))
            elif cat in ("cpu_op", "user_annotation", "python_function", None):
                hit = loader_name.get(name)
                if hit is None:
                    hit = loader_name[name] = "dataloader" in name.lower()
                if hit:
                    loader.append((float(ts), float(ts) + float(dur)))

    def flush(self) -> None:
        """Write the batched events."""
        _copy(self.write, self.batch, self.n)
        self.n += len(self.batch)
        self.batch = []


def _finish(write: Callable[[bytes], Any], col: _Collect, head: dict[str, Any], trailer: dict[str, Any],
            out: str | os.PathLike[str], rank: int | None, waits: Iterable[dict[str, Any]],
            gap_label: GapLabel | None, idle: tuple[np.ndarray, np.ndarray] | None,
            min_gap_us: float) -> AnnotatedTrace:
    """Write the findings tracks, the list's end, the trailer keys and the document's end after the
    copied events of ``col``; what was written."""
    pid = (max(col.pids) + 1) if col.pids else 1_000_000
    fallback = _dataloader_label(col.loader)
    gts, gend = np.frombuffer(col.g_ts, dtype=np.float64), np.frombuffer(col.g_end, dtype=np.float64)
    if idle is None:
        bs, be = merged_intervals(gts, gend) if len(col.g_ts) else (np.zeros(0), np.zeros(0))
        idle = (be[:-1], bs[1:])
    texts, counts, idle_us = _finding_texts(pid, rank, col.steps, idle, waits, gap_label, fallback, min_gap_us)
    for i in range(0, len(texts), BATCH):  # the bytes one dumps of each BATCH of events gave
        write((b"," if (i or col.n) else b"") + b",".join(texts[i:i + BATCH]))  # no comma after an empty list
    write(b"]")
    for k, v in trailer.items():
        if k not in head and k != "traceEvents":
            write(b"," + orjson.dumps(k) + b":" + orjson.dumps(v))
    write(b"}")
    steps = col.steps
    per_step = step_breakdown(gts, gend, np.frombuffer(col.g_cls, dtype=np.int8), steps) if steps else []
    return AnnotatedTrace(path=str(out), events_copied=col.n, step_breakdown=per_step, steps=counts["steps"],
                          idle_gaps=counts["GPU idle"], idle_us=idle_us, collective_waits=counts["collective waits"],
                          pid=pid)


def _copy(write: Callable[[bytes], Any], batch: list[dict[str, Any]], n: int) -> None:
    """Write ``batch``'s events (``n`` events written before them): one ``orjson.dumps`` of the list,
    its brackets cut, gives the same bytes as each event's dumps joined by commas."""
    if batch:
        body = orjson.dumps(batch, option=orjson.OPT_SERIALIZE_NUMPY)
        write((b"," if n else b"") + body[1:-1])


#: The name of an idle gap no rule explains (:func:`_finding_texts`).
UNATTRIBUTED = "idle: cause not attributed"


def _finding_texts(pid: int, rank: int | None, steps: list[tuple[int, float, float]],
                   idle: tuple[np.ndarray, np.ndarray], waits: Iterable[dict[str, Any]], label: GapLabel | None,
                   fallback: _LoaderLabel, min_gap_us: float) -> tuple[list[bytes], dict[str, int], float]:
    """The findings process's events as JSON texts (each ``orjson.dumps`` of its event: metadata,
    then the three tracks' events), the events of each track, and the idle gaps' summed length (µs,
    added in their order). A gap no rule names (``label``, else the DataLoader's share) is written
    from the texts of one dumps of the gaps' starts and lengths (the same numbers' texts as a
    float's own dumps: every float64, NaN and infinities included, checked in
    ``tests/test_batch_feeds.py``): 80 k gaps of the replicated 176 MB trace took the annotated
    trace's findings from 0.41 to ~0.1 s (project machine, 2026-12-08)."""
    dumps = orjson.dumps
    who = f"rank {rank}" if rank is not None else "this trace"
    evs: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": f"ai4s-graph findings ({who})"}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": -1}}]
    for name, tid in TRACKS.items():
        evs.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
        evs.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    counts = dict.fromkeys(TRACKS, 0)
    for num, ts, dur in sorted(steps, key=lambda s: s[1]):
        evs.append({"ph": "X", "pid": pid, "tid": TRACKS["steps"], "cat": CAT, "name": f"step {num}", "ts": ts,
                    "dur": dur, "args": {"step": num, "duration_ms": dur / 1e3}})
        counts["steps"] += 1
    texts = [dumps(ev) for ev in evs]
    ga, gb = np.asarray(idle[0], dtype=float), np.asarray(idle[1], dtype=float)
    with np.errstate(invalid="ignore"):  # inf - inf: a NaN length, kept and written as null
        keep = ~((gb - ga) < min_gap_us)  # a NaN length is kept, as a scalar test would
        ga, gb = ga[keep], gb[keep]
        lengths = gb - ga
    idle_us = 0.0
    if ga.size:
        ts_t = dumps(ga, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")
        len_t = dumps(lengths, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")
        head = dumps({"ph": "X", "pid": pid, "tid": TRACKS["GPU idle"], "cat": CAT, "name": UNATTRIBUTED})[:-1] + b',"ts":'
        gaps = [head + t + b',"dur":' + d + b',"args":{"idle_us":' + d + b"}}" for t, d in zip(ts_t, len_t)]
        starts, ends = ga.tolist(), gb.tolist()
        ask = range(ga.size) if label is not None else np.flatnonzero(fallback.possible(ga, gb)).tolist()
        maybe = fallback.possible(ga, gb) if label is not None else None
        for i in ask:  # the gaps a rule may name (every gap with a label; else those a DataLoader call overlaps)
            a, b = starts[i], ends[i]
            got = (label(a, b) if label is not None else None) or \
                (fallback.share(a, b) if (maybe is None or maybe[i]) else None)
            if got:
                gaps[i] = dumps({"ph": "X", "pid": pid, "tid": TRACKS["GPU idle"], "cat": CAT, "name": got[0],
                                 "ts": a, "dur": b - a, "args": {"idle_us": b - a, **got[1]}})
        texts += gaps
        for d in lengths.tolist():  # in the gaps' order, as the events are written
            idle_us += d
        counts["GPU idle"] = int(ga.size)
    for w in waits:
        texts.append(dumps({"ph": "X", "pid": pid, "tid": TRACKS["collective waits"], "cat": CAT, "name": w["name"],
                            "ts": w["ts"], "dur": w["dur"], "args": w.get("args") or {}}))
        counts["collective waits"] += 1
    return texts, counts, idle_us
