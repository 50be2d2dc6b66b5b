"""One read of one rank trace feeding every reader: the unit of work of the analysis graph's
``trace_rank`` task (a worker process) and what the SLURM array's tasks can run too.

:func:`read_rank` opens the trace once (:func:`~.rank_analysis.analyze_rank`: the content hash, the
header with rank identity, device and time origin, the events and the trailer come from that open)
and feeds, besides the engine:

- the verifier's reader (:class:`~.kineto.KinetoLoader`: its own linking, clipping and interval
  arithmetic) and, from what it loaded, its tables (:func:`~.kineto.figures_of`) and the
  communication kernels for the cross-rank re-derivations (:func:`~.crossrank_check.comm_table`);
- the causes' event-name counter (:class:`NameCounter`, names chosen by the caller);
- the roofline collector (:class:`~ai4s_graph.tools.perfmodel.roofline.RooflineCollector`),
  summed by External id (the analyst's link) and by correlation id (the verifier's);
- the causes' raw-text counter (:class:`RawCounter`: regular expressions over the document's
  bytes, no JSON parse), the verifier's independent count of the same event names.

- the step accountant (:class:`~.host_timeline.StepAccountant`, issue 34): the time budget of
  every profiled step (GPU split, what the host did in the GPU-idle time, critical path,
  structure, lead) for the analyst and the report;
- the verifier's host sampler (:func:`~.host_sampling.sample_steps` over the verifier's reader
  and its :class:`~.host_sampling.Annotations`): the same budget by a different method (sampling
  the host state on a grid of cells), for the re-derivation of the accounting's claims.

On a long trace the readers other than the engine read it in processes of their own, beside the
engine's pass (:mod:`.lanes`, :func:`read_rank`): the same consumers fed the same events, one read
of the file each, the wall time of the longest. :func:`prefetch` starts them earlier (``ai4s-graph
run``, before the graph's imports), the engine's pass in a lane too, and :func:`read_rank` adopts
them.

The tools count and tabulate; the rules (``graph/rules/``) decide what the numbers mean.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from typing import Any, Callable

from . import crossrank_check, host_sampling, host_timeline, kineto, lanes, rank_analysis, stream
from ..errors import Ai4sError, NoGpuEventsError
from ..report import annotated
from ..perfmodel.roofline import RooflineCollector
from .fastscan import union_fields
from .reader_feed import READER_FIELDS, read_reader  # noqa: F401 (READER_FIELDS re-exported: reader_part's keys)

#: Overlap kept between two byte chunks of the raw counter: longer than any ``"name": "..."`` prefix
#: a pattern can span (event names of kernels with long template arguments stay under ~4 KiB).
RAW_OVERLAP = 1 << 16

#: GPU event categories whose durations the name counter sums by name (kernels, memory copies).
TIMED_CATS = ("kernel", "gpu_memcpy")


class NameCounter:
    """Counts, over trace events fed one at a time (:meth:`feed`), the event names ``wanted``
    accepts (cpu ops, kernels, annotations, python functions). Memory: one flag per distinct name."""

    #: The event keys :meth:`feed` reads (no ``args``).
    FIELDS = (("name", "dur", "cat"), ())

    def __init__(self, wanted: Callable[[str], bool]) -> None:
        self.counts: dict[str, int] = {}
        self.dur_us: dict[str, float] = {}
        """Name -> summed ``dur`` (µs) of the counted complete events (python functions, ops)."""
        self.kernel_us: dict[str, float] = {}
        """Summed ``dur`` (µs) of the counted names' GPU events (:data:`TIMED_CATS`: kernels and
        memory copies), the causes' GPU time by name (a share of the step needs the time, not only
        the count)."""
        self._wanted = wanted
        self._checked: dict[str, bool] = {}

    def feed(self, ev: Any) -> None:
        """Count one event (anything without a string ``name`` is ignored)."""
        self.feed_batch((ev,))

    def feed_batch(self, evs: list | tuple) -> None:
        """Count the events ``evs`` in order (one call for a piece of the parse)."""
        checked, wanted, counts, dur_us, kernel_us = self._checked, self._wanted, self.counts, self.dur_us, self.kernel_us
        for ev in evs:
            n = ev.get("name") if type(ev) is dict else None
            if type(n) is not str:
                continue
            hit = checked.get(n)
            if hit is None:
                hit = checked[n] = bool(wanted(n))
            if hit:
                counts[n] = counts.get(n, 0) + 1
                d = ev.get("dur")
                if type(d) in (int, float) and d > 0:
                    dur_us[n] = dur_us.get(n, 0.0) + d
                    if ev.get("cat") in TIMED_CATS:
                        kernel_us[n] = kernel_us.get(n, 0.0) + float(d)


def kernel_time_by_name(tr: Any, wanted: Callable[[str], bool]) -> dict[str, float]:
    """Kernel (or copy) name -> summed duration (µs) of the verifier reader's GPU events of
    :data:`TIMED_CATS` (of a loaded :class:`~.kineto.KinetoTrace`, after its own clipping) whose name ``wanted`` accepts: the
    verifier's path to the kernel time the analyst's :attr:`NameCounter.kernel_us` sums."""
    out: dict[str, float] = {}
    hit: dict[str, bool] = {}  # ``wanted`` once per distinct name (it asks every cause: ~20 % of the read)
    for g in tr.gpu:
        if g.cat in TIMED_CATS:
            ok = hit.get(g.name)
            if ok is None:
                ok = hit[g.name] = bool(wanted(g.name))
            if ok:
                out[g.name] = out.get(g.name, 0.0) + float(g.dur)
    return out


#: One event name in the raw text: the ``"name": "`` prefix, then the string's text (escapes kept as
#: written) and its closing quote (left out only where the text ends inside the string).
_NAME = re.compile(rb'"name"\s*:\s*"([^"\\]*(?:\\[\s\S][^"\\]*)*"?)')
_KEY = b'"name"'


class RawCounter:
    """Occurrences of ``"name": "<pattern...>`` in a document's raw text, fed chunk by chunk
    (:meth:`feed`, a :class:`~.rawfile.ByteTap` consumer), then :meth:`counts`. ``patterns``: key ->
    regex of the text after ``"name": "``; a pattern reads the name's text and its closing quote, no
    further (every cause's pattern does: they end at ``"`` or inside the name).

    One C-level scan per chunk collects every ``"name": "..."`` string's raw text into a counter of
    distinct names (no JSON parse: the text as written, escapes included); :meth:`counts` asks each
    pattern once per distinct name (15 patterns over a 180 MB trace: 0.25 s against 3.1 s for one
    scan of the text per pattern, measured on ``bench/make_long_trace.py``'s 176 MB trace). A chunk
    is cut at the first ``"name"`` key in its last ``overlap`` bytes (or after the last name that
    closes before them); the rest waits for the next chunk, so a name is counted once, whole.
    Memory: one chunk plus the overlap, and one entry per distinct name."""

    def __init__(self, patterns: dict[str, str], overlap: int = RAW_OVERLAP) -> None:
        self._rx = {k: re.compile(p.encode()) for k, p in patterns.items()}
        self._names: Counter[bytes] = Counter()
        self._carry = b""
        self._overlap = overlap

    def feed(self, chunk: bytes) -> None:
        """Scan one chunk of the document."""
        buf = self._carry + chunk
        cut = max(0, len(buf) - self._overlap)
        split = buf.find(_KEY, cut)
        if split < 0:  # no name key in the overlap: cut after the last name that closes in the buffer
            q = buf.rfind(_KEY, 0, cut + len(_KEY) - 1)  # the last key starting before the cut
            m = _NAME.match(buf, q) if q >= 0 else None
            split = cut if m is None else (max(cut, m.end()) if m.end() < len(buf) else q)
        self._names.update(_NAME.findall(buf, 0, split))
        self._carry = buf[split:]

    def counts(self) -> dict[str, int]:
        """Key -> occurrences in everything fed (the kept overlap included)."""
        names = self._names.copy()
        names.update(_NAME.findall(self._carry))
        return {k: sum(c for n, c in names.items() if rx.match(n)) for k, rx in self._rx.items()}


def raw_counts(path: str, patterns: dict[str, str]) -> dict[str, int]:
    """:class:`RawCounter` over a trace file read now (``.json`` or ``.json.gz``, by content)."""
    rc = RawCounter(patterns)
    stream.feed_events(path, (), taps=(rc.feed,))
    return rc.counts()


def _totals(roof: RooflineCollector, link: str) -> dict[str, Any] | None:
    """The collector's totals by ``link``, or None when it could not read the trace (the roofline is
    then left out; the rank's other figures stand)."""
    try:
        return roof.totals(link)
    except Exception:  # noqa: BLE001 - an unreadable roofline input drops the roofline only
        return None


def read_rank(path: str, rank: int, cache_dir: str | None, label: str, *, wanted: Callable[[str], bool],
              raw_patterns: dict[str, str], cross_check: bool | tuple[str, ...] = (),
              annotate: bool = False) -> dict[str, Any]:
    """One rank trace read once (see the module docstring). Returns ``{"record", "names", "kernel_us",
    "roofline_totals", "roofline_correlation", "raw_counts", "reader" | "reader_error"}``: the
    engine's record (:func:`~.rank_analysis.analyze_rank`, with the optional ``cross_check``
    tools), the event-name counts, the roofline totals by External id and by correlation id (None
    when unreadable), the raw-text counts of ``raw_patterns``, and the verifier reader's tables
    (``timeline``, ``launch``, ``ops_by_category``, ``kernel_count``, ``short_kernels``, step
    figures, ``method``, ``comm``) or, when that reader failed, why (one line); ``name_dur_us``: the
    summed duration (µs) of the counted events by name; ``step_accounting``: the step accountant's
    :class:`~ai4s_graph.state.steps.StepBreakdown` as a dict (or ``step_accounting_error``: why not);
    ``steps_sampled``: the verifier's sampled steps (:class:`~.host_sampling.SampledStep` dicts;
    absent when its reader failed).

    With ``annotate`` (a run's single rank, read in the process that writes the report) the pass
    also makes the annotated trace's copy (:class:`~ai4s_graph.tools.report.annotated.EventCopy`),
    which :func:`~ai4s_graph.tools.report.annotated.write_annotated_trace` then takes instead of
    reading the trace a second time.

    On a long trace (:func:`.lanes.lanes_for`) the verifier's reader, the step accountant, and the
    counters with the annotated copy read the trace in processes of their own while the engine reads
    it here (:mod:`.lanes`): :func:`reader_part`, :func:`steps_part` and :func:`counts_part`, the
    same consumers fed the same events and bytes in the same order, so the same result; a lane that
    gives none is run here after the engine's pass (the counters without the copy: the writer then
    reads the trace itself).

    Lanes :func:`prefetch` started for the same file and arguments are adopted (the read then began
    when they did; the engine's pass too, in a lane of its own: :func:`engine_part`).

    Raises what :func:`~.rank_analysis.analyze_rank` raises (the engine's errors are the rank's;
    InputError for a path with a NUL byte)."""
    if "\x00" in str(path):  # no file can be named so: said in one line before any path call raises ValueError
        from ..files import check_input_file

        check_input_file(path)
    key = _prefetch_key(path, rank, wanted, raw_patterns, annotate, cache_dir, label, cross_check)
    started = _adopt(key, path)
    if started is None and lanes.lanes_for(path):
        started = _Lanes.start(path, rank, wanted, raw_patterns, annotate)
    try:
        return _read_rank(path, rank, cache_dir, label, started, wanted=wanted, raw_patterns=raw_patterns,
                          cross_check=cross_check, annotate=annotate)
    finally:
        if started is not None:
            started.close()


class _Lanes:
    """:func:`read_rank`'s lanes started on the trace open as ``fh``: the verifier's reader, the step
    accountant, the counters (with the annotated copy's ``spool`` when annotating) and, when
    prefetched, the engine's pass; a lane that could not start is None (its part runs in the
    reading process)."""

    def __init__(self, fh: Any, spool: Any, reader: lanes.Lane | None, steps: lanes.Lane | None,
                 counts: lanes.Lane | None, engine: lanes.Lane | None = None, copy: lanes.Lane | None = None) -> None:
        self.fh, self.spool, self.reader, self.steps, self.counts = fh, spool, reader, steps, counts
        self.engine, self.copy = engine, copy
        self.fd, self.ident = fh.fileno(), _fd_identity(fh)
        self.adopted = False  # the spool was handed to the annotated-trace writer

    @classmethod
    def start(cls, path: str, rank: int, wanted: Callable[[str], bool], raw_patterns: dict[str, str],
              annotate: bool, engine: tuple | None = None) -> _Lanes | None:
        """The lanes started now on ``path`` opened now, with ``engine`` (``(cache_dir, label,
        cross_check)``) the engine's pass's too; None when it cannot be opened (the engine reports
        the missing or unreadable file)."""
        try:
            fh = open(path, "rb")  # noqa: SIM115 - the one file every reader reads, closed by close()
        except (OSError, ValueError):  # ValueError: a NUL byte in the path
            return None
        fd = lanes.Fd(fh.fileno())  # each lane gets this open file (a warm lane's over its socket: lanes.warm)
        reader = lanes.start(reader_part, path, fd, rank, wanted, warm=True)
        steps = lanes.start(steps_part, path, fd, warm=True)
        spool = annotated.copy_spool() if annotate else None
        copy = None
        if spool is not None and lane_workers(path) > 0:  # the annotated copy in a lane of its own
            copy = lanes.start(copy_part, path, fd, lanes.Fd(spool.fileno()), warm=True)
        with_spool = spool is not None and copy is None
        counts = lanes.start(counts_part, path, fd, wanted, raw_patterns,
                             lanes.Fd(spool.fileno()) if with_spool else None, warm=True) \
            if spool is not None or not annotate else None
        eng = lanes.start(engine_part, path, fd, rank, *engine, warm=True) if engine is not None else None
        return cls(fh, spool, reader, steps, counts, eng, copy)

    def running(self) -> list[lanes.Lane]:
        return [x for x in (self.reader, self.steps, self.counts, self.engine, self.copy) if x is not None]

    def cancel(self) -> None:
        """Stop every lane (their results are not wanted)."""
        for x in self.running():
            x.cancel()

    def close(self) -> None:
        """Close the trace and the spool (unless adopted: an anonymous file, nothing is left on disk)."""
        if self.spool is not None and not self.adopted:
            self.spool.close()
        self.fh.close()


#: CPUs from which :func:`prefetch` starts lanes by default (:data:`.lanes.PREFETCH_MIN_CPUS`, where
#: the command line's warm lanes ask it too, before this module's imports).
PREFETCH_MIN_CPUS = lanes.PREFETCH_MIN_CPUS

#: Lanes :func:`prefetch` started, by :func:`_prefetch_key`, until a :func:`read_rank` adopts them.
_PREFETCHED: dict[tuple, _Lanes] = {}
_AT_EXIT = False  # drop_prefetched is registered to run at exit


def _prefetch_key(path: str, rank: int, wanted: Callable[[str], bool], raw_patterns: dict[str, str],
                  annotate: bool, cache_dir: str | None, label: str, cross_check: bool | tuple[str, ...]) -> tuple:
    """What the lanes' results depend on: the file (its real path), the rank, the name filter, the
    raw patterns, whether the annotated copy is made, and the engine's cache folder, rank label and
    cross-checks."""
    cc = cross_check if isinstance(cross_check, bool) else tuple(cross_check)
    return (os.path.realpath(path), int(rank), wanted, tuple(sorted(raw_patterns.items())), bool(annotate),
            cache_dir, str(label), cc)


def prefetch(path: str, rank: int, cache_dir: str | None, label: str, *, wanted: Callable[[str], bool],
             raw_patterns: dict[str, str], cross_check: bool | tuple[str, ...] = (), annotate: bool = False) -> bool:
    """Start :func:`read_rank`'s lanes for the trace at ``path`` now (where :func:`.lanes.lanes_for`
    applies), the engine's pass in a lane of its own too (:func:`engine_part`), so that they read
    it while the caller does other work (``ai4s-graph run``: the graph's imports, the launcher, the
    telemetry's database start: ~2.5 s on the 16-core device, 2026-12-03); a :func:`read_rank` of
    the same file with the same arguments adopts them, where the file is still the one opened here
    (its identity: :func:`_fd_identity`). Lanes not adopted are stopped by :func:`drop_prefetched`,
    by a :func:`read_rank` of the same path with other arguments, or at exit. Only on
    :data:`PREFETCH_MIN_CPUS` CPUs or more unless ``AI4S_TRACE_LANES=1``. Returns whether lanes
    started. Never raises (a trace that cannot be opened: False)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open; the launcher refuses it
            return False
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return False
    if not lanes.prefetch_for(path):
        return False
    key = _prefetch_key(path, rank, wanted, raw_patterns, annotate, cache_dir, label, cross_check)
    old = _PREFETCHED.pop(key, None)
    if old is not None:
        old.cancel()
        old.close()
    started = _Lanes.start(path, rank, wanted, raw_patterns, annotate, engine=(cache_dir, label, cross_check))
    if started is None:
        return False
    global _AT_EXIT
    if not _AT_EXIT:
        import atexit

        atexit.register(drop_prefetched)
        _AT_EXIT = True
    _PREFETCHED[key] = started
    return True


def drop_prefetched() -> None:
    """Stop and close every prefetched lane no :func:`read_rank` adopted."""
    while _PREFETCHED:
        _, st = _PREFETCHED.popitem()
        st.cancel()
        st.close()


def _adopt(key: tuple, path: str) -> _Lanes | None:
    """The prefetched lanes of ``key`` when the file at ``path`` is still the one they read (else
    they are stopped); prefetched lanes of the same path with other arguments are stopped."""
    st = _PREFETCHED.pop(key, None)
    for k in [k for k in _PREFETCHED if k[0] == key[0]]:
        other = _PREFETCHED.pop(k)
        other.cancel()
        other.close()
    if st is None:
        return None
    try:
        same = _identity(os.stat(path)) == st.ident
    except OSError:
        same = False
    if not same:  # replaced or rewritten since the prefetch: read the file there now
        st.cancel()
        st.close()
        return None
    return st


def _read_rank(path: str, rank: int, cache_dir: str | None, label: str, lanes_: _Lanes | None, *,
               wanted: Callable[[str], bool], raw_patterns: dict[str, str], cross_check: bool | tuple[str, ...],
               annotate: bool) -> dict[str, Any]:
    """:func:`read_rank` with its lanes started on the trace open as ``lanes_.fh`` (each reads this
    open file, through its inherited descriptor), or None (one process)."""
    if lanes_ is not None:
        fh, fd, ident, spool = lanes_.fh, lanes_.fd, lanes_.ident, lanes_.spool
        reader_lane, steps_lane, counts_lane = lanes_.reader, lanes_.steps, lanes_.counts
    else:
        fh, fd, ident, spool = None, None, None, None
        reader_lane = steps_lane = counts_lane = None
    engine_lane = lanes_.engine if lanes_ is not None else None
    names = roof = raw = loader = notes = acc = copy = None
    also: tuple = ()
    taps: tuple = ()
    # the consumers of a lane that did not start ride on the engine's pass here; with the engine's
    # pass in a lane (prefetched) such a part reads the trace here by itself (_take)
    if counts_lane is None and engine_lane is None:
        names, roof, raw = NameCounter(wanted), RooflineCollector(), RawCounter(raw_patterns)
        also, taps = (names.feed, roof.feed), (raw.feed,)
        if annotate:
            try:
                copy = annotated.EventCopy(path)
            except (Ai4sError, OSError):
                copy = None  # the engine reports an unreadable trace; the writer reads it itself otherwise
            if copy is not None:
                also, taps = also + (copy.feed,), taps + (copy.tap,)
    if reader_lane is None and engine_lane is None:
        loader, notes = kineto.KinetoLoader(path), host_sampling.Annotations()
        also += (loader.feed, notes.feed)
    if steps_lane is None and engine_lane is None:
        acc = host_timeline.StepAccountant(path)
        also += (acc.feed,)
    # each part's value from its lane (run here when the lane gives none: _take)
    take_counts = lambda: _take(counts_lane, ident, counts_part, path, fd, wanted, raw_patterns, None)  # noqa: E731
    take_steps = lambda: _take(steps_lane, ident, steps_part, path, fd)  # noqa: E731
    take_reader = lambda: _take(reader_lane, ident, reader_part, path, fd, rank, wanted)  # noqa: E731
    try:
        try:  # the engine's result is stored in the cache only after every part gave its own (the end)
            if engine_lane is None:
                engine = rank_analysis.analyze_rank(path, rank, cache_dir, label=label, cross_check=cross_check,
                                                    also=also, taps=taps, opened=fh, store=False,
                                                    workers=lane_workers(path) if lanes_ is not None else None)
            else:
                engine = _take(engine_lane, ident, engine_part, path, fd, rank, cache_dir, label, cross_check)
        except NoGpuEventsError:
            # refused at the end of the read: an event a part refuses comes first, as in one process
            # (its consumers see every event before the engine's end-of-read check)
            for lane, take in ((counts_lane, take_counts), (steps_lane, take_steps), (reader_lane, take_reader)):
                if lane is not None:
                    take()
            raise
        if copy is not None:
            copy.finish()
            copy = None
        stream.trim_heap()  # the engine's arrays are gone: hand their pages back before the reader's work
        out: dict[str, Any] = {"record": None}
        if names is not None:
            out.update(_counts_of(names, roof, raw))
            del names, roof, raw
        else:
            got = take_counts()
            snap = got.pop("copy", None)
            if lanes_ is not None and lanes_.copy is not None:
                snap = _copy_of(lanes_.copy, ident)
            if snap is not None and spool is not None and lanes_ is not None:
                lanes_.adopted = annotated.adopt_copy(path, snap, spool)
            out.update(got)
        if acc is not None:
            out.update(_steps_of(acc))
            del acc
        else:
            out.update(take_steps())
        if loader is not None:
            out.update(_reader_of(loader, notes, rank, wanted))
            del loader, notes
        else:
            out.update(take_reader())
        out["record"] = rank_analysis.store_rank(path, rank, cache_dir, engine, cross_check=cross_check, label=label)
    except BaseException:  # the engine failed, or a part run here after its lane failed: the lanes stop
        if copy is not None:
            copy.discard()
        if lanes_ is not None:
            lanes_.cancel()
        raise
    stream.trim_heap()
    return out


def _fd_identity(f: Any) -> tuple[int, int, int, int, int] | None:
    """The open file ``f`` as (device, inode, size, mtime ns, ctime ns), None when it cannot be read:
    what tells a lane's read from a read of another file (replaced, or rewritten in place meanwhile:
    a write moves the ctime even when the mtime is set back, ``os.utime``)."""
    try:
        st = os.fstat(f.fileno())
    except (OSError, ValueError):
        return None
    return _identity(st)


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _take(lane: lanes.Lane | None, ident: tuple | None, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """A part's value from its lane (:func:`.lanes.take`: run here when the lane gave none), run here
    again (from this process's open file) when the lane read another file than ``ident`` (the file
    :func:`read_rank` opened); the part's ``file`` key removed."""
    got = lanes.take(lane, fn, *args)
    if lane is not None and got.get("file") != ident:
        got = fn(*args)
    got.pop("file", None)
    return got


def _copy_of(lane: lanes.Lane, ident: tuple | None) -> dict[str, Any] | None:
    """The annotated copy's snapshot from its lane (:func:`copy_part`), None when the lane gave none
    or read another file than ``ident`` (the writer then reads the trace itself: the copy is an
    optimisation, never run again here)."""
    try:
        got = lane.result()
    except lanes.LaneError:
        return None
    return got.get("copy") if got.get("file") == ident and ident is not None else None


def _counts_of(names: NameCounter, roof: RooflineCollector, raw: RawCounter) -> dict[str, Any]:
    """``{"names", "name_dur_us", "kernel_us", "roofline_totals", "roofline_correlation",
    "raw_counts"}`` from the counters fed the whole trace (see :func:`read_rank`)."""
    return {"names": names.counts, "name_dur_us": names.dur_us, "kernel_us": names.kernel_us,
            "roofline_totals": _totals(roof, "external_id"), "roofline_correlation": _totals(roof, "correlation"),
            "raw_counts": raw.counts()}


def _steps_of(acc: host_timeline.StepAccountant) -> dict[str, Any]:
    """``{"step_accounting": ...}`` from a step accountant fed the whole trace, or
    ``{"step_accounting_error": why}``."""
    try:
        return {"step_accounting": acc.finish().model_dump(mode="json")}
    except Exception as e:  # noqa: BLE001 - the accounting is one more figure: its failure drops it only
        return {"step_accounting_error": str(e) if isinstance(e, Ai4sError) else f"{type(e).__name__}: {e}"[:200]}


def _reader_of(loader: kineto.KinetoLoader, notes: host_sampling.Annotations, rank: int,
               wanted: Callable[[str], bool]) -> dict[str, Any]:
    """``{"reader", "steps_sampled"}`` from the verifier's reader fed the whole trace (its linking,
    tables, communication kernels, sampled steps and kernel time by name), or ``{"reader_error": why}``."""
    out: dict[str, Any] = {}
    try:
        tr = loader.finish(rank)
        stream.trim_heap()  # the reader's linking temporaries are gone
        reader = kineto.figures_of(tr)
        reader["comm"] = crossrank_check.comm_table(tr)
        try:
            out["steps_sampled"] = [s.model_dump() for s in host_sampling.sample_steps(tr, loader, notes)]
        except Ai4sError:
            pass  # no ProfilerStep window: the accounting's claims are then inconclusive
        reader["kernel_us"] = kernel_time_by_name(tr, wanted)
        del tr
        out["reader"] = reader
    except Exception as e:  # noqa: BLE001 - any failure of that path: the verifier says inconclusive, why
        out["reader_error"] = str(e) if isinstance(e, Ai4sError) else \
            f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
    return out


def _reopen(path: str, fd: int | None) -> Any:
    """A new open file of the trace: of the descriptor ``fd`` (this process's, inherited from
    :func:`read_rank`: the very file it opened, even when ``path`` was replaced since; reopened
    through ``/proc/self/fd`` for an offset of its own), else of ``path`` (no ``/proc``: not Linux).
    Raises OSError, InputError for a path with a NUL byte (:func:`~ai4s_graph.tools.files.check_input_file`)."""
    if "\x00" in path:
        from ..files import check_input_file

        check_input_file(path)
    if fd is not None:
        try:
            return open(f"/proc/self/fd/{fd}", "rb")  # noqa: SIM115 - closed by the caller
        except OSError:
            pass
    return open(path, "rb")  # noqa: SIM115


def _feed(path: str, f: Any, consumers: tuple[Callable[[Any], None], ...], taps: tuple = (),
          fields: str | tuple = "all") -> tuple | None:
    """Every event of the trace open as ``f`` (:func:`_reopen`) to ``consumers`` (each fed a list of
    events at a time: :func:`.stream.feed_batches`) and its bytes to ``taps`` (a lane's own read), a
    malformed event named in one line as the engine's pass names it
    (:func:`.guard.named_malformed_events`); ``fields``: the keys the consumers read
    (:func:`.stream.feed_events`). Returns the file's :func:`_fd_identity` when it was
    the same before and after the read, else None. Raises InputError (unreadable trace)."""
    from pathlib import Path

    from .guard import named_malformed_events

    ident = _fd_identity(f)
    with named_malformed_events(Path(path)):
        stream.feed_batches(path, consumers, taps=taps, raw=f, fields=fields)
    return ident if _fd_identity(f) == ident else None


def engine_part(path: str, fd: int | None, rank: int, cache_dir: str | None, label: str,
                cross_check: bool | tuple[str, ...]) -> dict[str, Any]:
    """:func:`read_rank`'s engine pass (:func:`~.rank_analysis.analyze_rank`, read from its cache,
    never written to it: :func:`~.rank_analysis.store_rank` writes it when the read adopts it) from
    a read of its own (a prefetched lane, :func:`prefetch`; ``fd`` as in :func:`reader_part`):
    ``{"value", "from_cache", "sha256"}`` and ``file`` (as :func:`reader_part`). Raises what
    ``analyze_rank`` raises."""
    with _reopen(path, fd) as f:
        ident = _fd_identity(f)
        got = rank_analysis.analyze_rank(path, rank, cache_dir, label=label, cross_check=cross_check, opened=f,
                                         store=False, workers=lane_workers(path))
        same = _fd_identity(f) == ident
    return {**got, "file": ident if same else None}


def reader_part(path: str, fd: int | None, rank: int, wanted: Callable[[str], bool]) -> dict[str, Any]:
    """:func:`read_rank`'s verifier-reader part from a read of its own (a lane, :mod:`.lanes`; ``fd``:
    the descriptor of the trace :func:`read_rank` opened, :func:`_reopen`): ``{"reader",
    "steps_sampled"}`` or ``{"reader_error"}``, and ``file``: the file read (:func:`_fd_identity`;
    None when it changed during the read). Raises what the engine's pass raises for a trace it
    cannot read (InputError), OSError."""
    from pathlib import Path

    from .guard import named_malformed_events

    with _reopen(path, fd) as f:
        ident = _fd_identity(f)
        with named_malformed_events(Path(path)):  # their keys only (.fastscan.decoders), in workers when they fit
            got = read_reader(path, raw=f, workers=lane_workers(path))
        ident = ident if _fd_identity(f) == ident else None
    return {**_reader_of(got.loader, got.notes, rank, wanted), "file": ident}


def steps_part(path: str, fd: int | None) -> dict[str, Any]:
    """:func:`read_rank`'s step accounting from a read of its own (a lane, :mod:`.lanes`; ``fd`` as
    in :func:`reader_part`): ``{"step_accounting"}`` or ``{"step_accounting_error"}``, and ``file``
    (as :func:`reader_part`). Raises InputError (unreadable trace), OSError."""
    from pathlib import Path

    from .guard import named_malformed_events

    with _reopen(path, fd) as f:
        ident = _fd_identity(f)
        with named_malformed_events(Path(path)):  # its keys only (.fastscan.decoders), in workers when they fit
            acc = host_timeline.read_steps(path, raw=f, workers=lane_workers(path))
        ident = ident if _fd_identity(f) == ident else None
    return {**_steps_of(acc), "file": ident}


#: Readers of one long trace in ``run`` (:func:`read_rank`) where they use the parallel pass: the
#: engine's pass, the verifier reader's, the step accountant's, the counters' and the annotated
#: copy's lanes (:func:`copy_part`), each a process of its own.
LANE_READERS = 5
#: Of them, those whose read the parallel pass's workers may take (the counters' lane writes the
#: annotated copy in file order: one read).
LANES_WITH_WORKERS = 3


def lane_workers(p: Any) -> int:
    """Workers of the parallel pass one of :func:`read_rank`'s readers may start
    (:func:`.scan_parallel.workers_for`): the CPUs the readers leave free (:data:`LANE_READERS`),
    shared by the readers that may use them (:data:`LANES_WITH_WORKERS`); 0 (its own one read)
    where that share is below 2."""
    from pathlib import Path

    from . import scan_parallel

    share = (lanes.usable_cpus() - LANE_READERS) // LANES_WITH_WORKERS
    return min(scan_parallel.workers_for(Path(p)), share) if share >= 2 else 0


#: The keys :func:`counts_part`'s counters read (the raw-text counter reads bytes): decoding only
#: these took the counters' lane on the replicated 176 MB trace from 3.30 to 2.94 s of CPU (the
#: means of six alternating pairs, 2.6-3.9 / 2.5-3.2 s: project machine, 2 vCPUs, shared, 2026-12-07).
COUNT_FIELDS = union_fields(NameCounter.FIELDS, RooflineCollector.FIELDS)


def counts_part(path: str, fd: int | None, wanted: Callable[[str], bool], raw_patterns: dict[str, str],
                spool_fd: int | None) -> dict[str, Any]:
    """:func:`read_rank`'s counters (:func:`_counts_of`: event names, roofline, raw text) from a read
    of their own (a lane, :mod:`.lanes`; ``fd`` as in :func:`reader_part`), and with ``spool_fd``
    (the descriptor of an anonymous file :func:`read_rank` made) the annotated trace's copy
    (:class:`~ai4s_graph.tools.report.annotated.EventCopy`) written there: under ``copy``, what
    :func:`~ai4s_graph.tools.report.annotated.adopt_copy` files for the writer; ``file`` (as
    :func:`reader_part`). Raises InputError (unreadable trace) or OSError."""
    names, roof, raw = NameCounter(wanted), RooflineCollector(), RawCounter(raw_patterns)
    also, taps = (names.feed_batch, roof.feed_batch), (raw.feed,)
    with _reopen(path, fd) as f:
        copy = annotated.EventCopy(path, spool_fd=spool_fd, raw=f) if spool_fd is not None else None
        if copy is not None:
            also, taps = also + (copy.feed_batch,), taps + (copy.tap,)
        try:  # the counters' keys only, unless the copy (whole events) rides along
            ident = _feed(path, f, also, taps, fields="all" if copy is not None else COUNT_FIELDS)
        except BaseException:
            if copy is not None:
                copy.discard()
            raise
    out = {**_counts_of(names, roof, raw), "file": ident}
    if copy is not None:
        out["copy"] = copy.snapshot()
    return out


def copy_part(path: str, fd: int | None, spool_fd: int) -> dict[str, Any]:
    """:func:`read_rank`'s annotated copy alone (:class:`~ai4s_graph.tools.report.annotated.EventCopy`
    written to the anonymous file ``spool_fd``) from a read of its own: a lane where the CPUs let
    the other readers use the parallel pass (:func:`lane_workers`), so that the counters' lane
    (:func:`counts_part`) does not carry the copy too. ``{"copy"}`` (what
    :func:`~ai4s_graph.tools.report.annotated.adopt_copy` files) and ``file`` (as
    :func:`reader_part`). Raises InputError (unreadable trace) or OSError."""
    with _reopen(path, fd) as f:
        copy = annotated.EventCopy(path, spool_fd=spool_fd, raw=f)
        try:
            ident = _feed(path, f, (copy.feed_batch,), (copy.tap,))
        except BaseException:
            copy.discard()
            raise
    return {"copy": copy.snapshot(), "file": ident}


def read_counts(path: str, wanted: Callable[[str], bool]) -> tuple[dict[str, int], dict[str, Any] | None]:
    """``(event-name counts, roofline totals by External id)`` of a trace read now: for a rank whose
    analysis ran without the consumers (a SLURM array task). Raises InputError (unreadable)."""
    names, roof = NameCounter(wanted), RooflineCollector()
    stream.feed_events(path, (names.feed, roof.feed))
    return names.counts, _totals(roof, "external_id")
