"""The verifier reader's feed over pieces of a trace (:class:`ReaderFeed`): the reader's loader
(:class:`.kineto_reader.KinetoLoader`) and the annotations it does not keep (:class:`Annotations`),
fed a chunk each in the parallel pass's workers (:mod:`.scan_parallel`, kind ``reader``) and joined
in file order in the reading process (:meth:`ReaderFeed.absorb`) into what one feed over the whole
trace keeps: the same columns, tables and counts, hence the same linking, figures and sampling
after :meth:`.kineto_reader.KinetoLoader.finish`. Neither this module nor the loader's imports
numpy (a worker's RSS).

**Joining.** The loader's tables (names, threads, repeated pid / stream / device / category
values) are in the order of first appearance in a piece; taken in file order their union in order
is the whole trace's, and each piece's codes are re-coded to it. Event order numbers (``o_ord``,
``r_ord``: every element of ``traceEvents`` counts) are offset by the elements before the piece,
the communication kernels' metadata by the GPU events before it. Caches of pure functions of a
value (canonical categories, GPU kinds) are merged as they are.

**When a piece hands back** (:meth:`ReaderFeed.export` raises :class:`PieceRefused`; the reader
then reads the trace in one process, which names the event): the loader stopped on an event (its
error names the event's index in the whole file), or the piece held a duration pair half
(``B``/``E``/``b``/``e``/``S``/``F``: a pair may span pieces).
"""

from __future__ import annotations

import math
from typing import Any, BinaryIO

from .fastscan import union_fields
from .hygiene import STEP_NAME_RE
from .kineto_reader import FIELDS as LOADER_FIELDS, KinetoLoader

#: The event keys :meth:`Annotations.feed` reads (no ``args``; :func:`.fastscan.decoders`).
ANNOTATION_FIELDS = (("cat", "ph", "ts", "dur", "name", "pid", "tid"), ())
#: The keys the verifier's reader and its annotations read (one read feeding both:
#: :func:`.onepass.reader_part`, the parallel pass's workers of kind ``reader``).
READER_FIELDS = union_fields(LOADER_FIELDS, ANNOTATION_FIELDS)
#: The loader's event counters, summed over pieces.
COUNTERS = ("n", "bad_durations", "instants", "bad_numbers", "ill_typed")
#: The loader's columns appended as they are (no code to re-code).
PLAIN = ("o_ts", "o_end", "r_ts", "r_end", "r_corr", "r_ext", "g_corr", "g_ext", "flow_ids", "g_ts", "g_dur",
         "g_kind")


class PieceRefused(Exception):
    """A piece the parallel pass does not join (see the module docstring): the one read takes the trace."""


class Annotations:
    """The annotations the verifier's reader does not keep (``user_annotation`` events: regions and
    record_function names; and which thread each ``ProfilerStep#N`` ran on), fed one event at a time."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, str, tuple]] = []
        self.step_threads: dict[int, tuple] = {}

    def feed(self, ev) -> None:
        if type(ev) is not dict or ev.get("cat") != "user_annotation" or ev.get("ph", "X") != "X":
            return
        try:
            ts, dur = float(ev["ts"]), float(ev.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            return
        name = ev.get("name") or ""
        key = (ev.get("pid"), ev.get("tid"))
        m = STEP_NAME_RE.match(name)
        if m:
            self.step_threads[int(m.group(1))] = key
        elif math.isfinite(ts) and math.isfinite(dur) and dur >= 0:
            self.rows.append((ts, ts + dur, name, key))


class ReaderFeed:
    """The verifier reader's consumers of one read: ``loader`` (:class:`.kineto_reader.KinetoLoader`
    of ``path``) and ``notes`` (:class:`Annotations`), fed each event in turn."""

    def __init__(self, path: str = "") -> None:
        self.loader = KinetoLoader(path)
        self.notes = Annotations()

    def feed(self, ev: Any) -> None:
        """Feed one event to both consumers."""
        self.loader.feed(ev)
        self.notes.feed(ev)

    def feed_batch(self, evs: list) -> None:
        """:meth:`feed` each event of ``evs`` (a decoded piece of the trace), in order."""
        lf, nf = self.loader.feed, self.notes.feed
        for ev in evs:
            lf(ev)
            nf(ev)

    def export(self) -> dict[str, Any]:
        """The piece's state as picklable parts, for :meth:`absorb`. Raises :class:`PieceRefused`
        (the module docstring says when)."""
        ld = self.loader
        if ld.error is not None:
            raise PieceRefused("the verifier's reader stopped on an event")
        pr = ld.pairs
        if pr.open or pr.joined or pr.unmatched_ends:
            raise PieceRefused("duration pairs (read by the one pass)")
        out: dict[str, Any] = {k: getattr(ld, k).tobytes() for k in PLAIN}
        for k in ("g_name", "g_pid", "g_stream", "g_device", "g_cat", "r_name", "r_thr", "r_ord", "o_name",
                  "o_thr", "o_ord"):
            out[k] = getattr(ld, k).tobytes()
        out.update({k: getattr(ld, k) for k in COUNTERS})
        keyed = {c: key for key, c in ld._codes.items()}
        out.update(names=ld.names, threads=list(ld.threads), values=[(v, keyed.get(c)) for c, v in enumerate(ld.values)],
                   steps=ld.steps, dataloader=ld.dataloader, launch_key=ld.launch_key, g_comm=ld.g_comm,
                   cats=ld._cats, kinds=ld._kind, renamed=ld.renamed, other_device=ld.other_device,
                   rows=self.notes.rows, step_threads=self.notes.step_threads)
        return out

    def absorb(self, part: dict[str, Any]) -> None:
        """Join the parts of the next piece of the trace (:meth:`export`) after what was fed so far."""
        import numpy as np  # the joining process only

        from .join_codes import codes_of, offset, recoded

        ld = self.loader

        nmap = np.fromiter((ld._nid(name) for name in part["names"]), dtype=np.int64, count=len(part["names"]))
        tmap = codes_of(part["threads"], ld.threads)
        vmap = np.empty(len(part["values"]), dtype=np.int64)
        for j, (v, key) in enumerate(part["values"]):
            c = ld._codes.get(key) if key is not None else None
            if c is None:
                c = len(ld.values)
                ld.values.append(v)
                if key is not None:
                    ld._codes[key] = c
            vmap[j] = c
        n0, g0 = ld.n, len(ld.g_ts)
        for k in PLAIN:
            getattr(ld, k).frombytes(part[k])
        ld.g_name.frombytes(recoded(part["g_name"], nmap))
        ld.r_name.frombytes(recoded(part["r_name"], nmap))
        ld.o_name.frombytes(recoded(part["o_name"], nmap))
        for k in ("g_pid", "g_stream", "g_device", "g_cat"):
            getattr(ld, k).frombytes(recoded(part[k], vmap))
        ld.r_thr.frombytes(recoded(part["r_thr"], tmap))
        ld.o_thr.frombytes(recoded(part["o_thr"], tmap))
        ld.r_ord.frombytes(offset(part["r_ord"], n0))
        ld.o_ord.frombytes(offset(part["o_ord"], n0))
        ld.steps.extend(part["steps"])
        ld.dataloader.extend(part["dataloader"])
        ld.g_comm.update((i + g0, v) for i, v in part["g_comm"].items())
        for k in COUNTERS:
            setattr(ld, k, getattr(ld, k) + part[k])
        if ld.launch_key is None:
            ld.launch_key = part["launch_key"]
        for raw, v in part["cats"].items():
            ld._cats.setdefault(raw, v)
        for kk, v in part["kinds"].items():
            ld._kind.setdefault(kk, v)
        for key, k in part["renamed"].items():
            ld.renamed[key] = ld.renamed.get(key, 0) + k
        for key, k in part["other_device"].items():
            ld.other_device[key] = ld.other_device.get(key, 0) + k
        self.notes.rows.extend(part["rows"])
        self.notes.step_threads.update(part["step_threads"])



def read_reader(path: str, *, raw: BinaryIO | None = None, workers: int | None = None) -> ReaderFeed:
    """A :class:`ReaderFeed` of ``path`` fed every event of the trace (``raw``: the file already
    open), its loader not yet finished: by ``workers`` processes of the parallel pass
    (:func:`.scan_parallel.read_parallel`, kind ``reader``; default
    :func:`.scan_parallel.workers_for`, at least 2 to apply, and the fast parser only), else, or when
    that pass hands back, by one read of :data:`READER_FIELDS` (:func:`.stream.feed_events`). Either
    way the same state (``tests/test_step_feed.py``). Raises InputError (missing, empty, truncated,
    not a trace)."""
    from pathlib import Path

    from . import fastscan, scan_parallel
    from .stream import feed_events

    p = Path(path)
    if fastscan.parser_name() == "fast":
        w = scan_parallel.workers_for(p) if workers is None else workers
        if w >= 2:
            got = ReaderFeed(path)
            if scan_parallel.read_parallel(p, w, "reader", got, raw=raw):
                return got
    got = ReaderFeed(path)
    feed_events(path, (got.loader.feed, got.notes.feed), fields=READER_FIELDS, raw=raw)
    return got


#: The parallel pass's consumer of kind ``reader`` (:data:`.scan_parallel.KINDS`).
PIECE_CONSUMER = (ReaderFeed, "feed_batch", READER_FIELDS)
