"""The engine's own input fixes, applied during and right after its one pass (:mod:`.stream`): numbers
as written by other tools, Trace Event Format duration pairs, and same-stream clipping. The
verifier's reader (:mod:`.kineto_reader`) applies the same rules with its own code.

* **Numbers** (:func:`num`): ``ts`` / ``dur`` as JSON numbers or numeric strings (rocprof writes
  strings); anything else (bool, list, NaN, inf) is no number and the event is dropped, counted.
* **Duration pairs** (:class:`DurationPairs`, Trace Event Format, "Duration Events" and "Async
  Events"): a ``"ph": "B"`` event is closed by the next ``"ph": "E"`` on the same (pid, tid), pairs
  nest as a stack per thread, and the end's ``args`` merge into the begin's; nestable async pairs
  ``"ph": "b"`` / ``"e"`` (and the legacy ``"S"`` / ``"F"``) match on (pid, cat, id), an end closing the
  latest open begin of its name. A joined pair is one complete event (``ts`` = begin, ``dur`` =
  end - begin) that the pass reads like any ``"ph": "X"`` event. An end without a begin and a begin
  never ended are dropped and counted; instants (``"ph": "i"`` / ``"I"`` / ``"n"``) on GPU rows mark
  a moment, not GPU work, and are left out, counted.
* **Clipping** (:func:`clip_stream_overlaps`): work on one stream runs in issue order (CUDA C++
  Programming Guide, "Streams"; HIP likewise), so an event whose recorded end runs past the start
  of the next event on its (device, stream) is clipped at that start. A zero-length event (``dur``
  0: a fill kernel the profiler timed as zero, pytorch/kineto#136) is a point in time: it never
  clips another event, and it is never clipped.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .hygiene import input_notes, num  # noqa: F401 (re-exported)
from .scan import NO_STREAM, TraceScan

from .codes import INSTANT_PHASES, PAIR_PHASES  # noqa: F401 (re-exported)
_BEGIN_ASYNC = frozenset({"b", "S"})


def _hashable(v: Any) -> Any:
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


class DurationPairs:
    """Joins duration pairs into complete events while the pass reads them (see the module
    docstring). Memory: the begins still open (the nesting depth per thread, the async ones in
    flight); O(1) work per event."""

    def __init__(self) -> None:
        self._open: dict[tuple, list[tuple[dict, int, Any]]] = {}
        self.joined: dict[tuple[str, Any], int] = {}  # (phase kind "B" / "b", category) -> pairs joined
        self.unmatched_end: dict[Any, int] = {}
        self.order = 0  # event index of the begin of the pair last joined

    def take(self, ev: dict, ph: str, n: int, cat: Any) -> dict | None:
        """Take a begin (kept; returns None) or an end (returns the joined complete event, with
        ``cat`` the begin's canonical category, or None when it closes nothing). ``n``: the event's
        index in the file; ``cat``: its canonical category (:func:`.categories.canonical_category`)."""
        if ph == "B" or ph == "E":
            key = ("B", _hashable(ev.get("pid")), _hashable(ev.get("tid")))
        else:
            aid = ev.get("id")
            scope = ev.get("pid")
            if aid is None and isinstance(ev.get("id2"), dict):
                id2 = ev["id2"]
                aid = ("global", id2.get("global")) if "global" in id2 else ("local", id2.get("local"))
                if "global" in id2:
                    scope = None
            key = ("b", _hashable(scope), _hashable(ev.get("cat")), _hashable(aid))
        if ph == "B" or ph in _BEGIN_ASYNC:
            self._open.setdefault(key, []).append((ev, n, cat))
            return None
        stack = self._open.get(key)
        if not stack:
            self.unmatched_end[cat] = self.unmatched_end.get(cat, 0) + 1
            return None
        pos = len(stack) - 1
        name = ev.get("name")
        if key[0] == "b" and name:  # an async end closes the latest open begin of its name
            while pos >= 0 and stack[pos][0].get("name") not in (name, None):
                pos -= 1
            if pos < 0:
                pos = len(stack) - 1
        begin, order, bcat = stack.pop(pos)
        b_ts, e_ts = num(begin.get("ts")), num(ev.get("ts"))
        out = dict(begin)
        out["ph"] = "X"
        out["dur"] = (e_ts - b_ts) if (b_ts is not None and e_ts is not None) else None
        if not out.get("name") and name:
            out["name"] = name
        ea = ev.get("args")
        if isinstance(ea, dict) and ea:
            ba = begin.get("args")
            out["args"] = {**ba, **ea} if isinstance(ba, dict) else dict(ea)
        if bcat is None:
            bcat = cat
        out["cat"] = bcat
        k = (key[0], bcat)
        self.joined[k] = self.joined.get(k, 0) + 1
        self.order = order
        return out

    def still_open(self) -> dict[Any, int]:
        """``{category: begins never ended}`` once the pass is over."""
        out: dict[Any, int] = {}
        for stack in self._open.values():
            for _ev, _n, cat in stack:
                out[cat] = out.get(cat, 0) + 1
        return out

    def gpu_lost(self, gpu_cats) -> int:
        """GPU events of pairs that could not be joined (ends without a begin, begins never ended)."""
        return (sum(v for c, v in self.unmatched_end.items() if c in gpu_cats)
                + sum(v for c, v in self.still_open().items() if c in gpu_cats))

    def counts(self, gpu_cats) -> dict[str, tuple]:
        """``joined`` (B/E pairs, async pairs, GPU ones), ``lone_ends`` and ``never_ended`` (events,
        GPU ones): the keyword arguments of :func:`.hygiene.input_notes`."""
        sync = sum(v for (k, _c), v in self.joined.items() if k == "B")
        asyn = sum(v for (k, _c), v in self.joined.items() if k == "b")
        gpu = sum(v for (_k, c), v in self.joined.items() if c in gpu_cats)
        left = self.still_open()
        return {"joined": (sync, asyn, gpu),
                "lone_ends": (sum(self.unmatched_end.values()),
                              sum(v for c, v in self.unmatched_end.items() if c in gpu_cats)),
                "never_ended": (sum(left.values()), sum(v for c, v in left.items() if c in gpu_cats))}


def clip_stream_overlaps(scan: TraceScan) -> list[tuple[int, int, float]]:
    """Clip each GPU event of positive length whose end runs past the start of the next such event
    on its (device, stream) at that start (in place on ``scan.dur``; ``scan.dur_raw`` keeps the
    recorded values). Zero-length events take no part (module docstring); events without a stream
    (:data:`.scan.NO_STREAM`) are left alone. Returns and stores ``scan.overlaps``: ``(i, j,
    excess_us)`` per clipped event i, j its successor; ``scan.zero_inside`` counts the zero-length
    events that lie inside another event on their stream (the ones that would have clipped it)."""
    has = scan.stream != NO_STREAM
    idx = np.flatnonzero(has)
    out: list[tuple[int, int, float]] = []
    scan.zero_inside = 0
    if idx.size > 1:
        order = idx[np.lexsort((scan.ts[idx], scan.stream[idx], scan.device[idx]))]
        zero = scan.dur_raw[order] == 0.0
        if zero.any():
            scan.zero_inside = _zero_inside(scan, order, zero)
        chain = order[~zero]
        dev, st = scan.device[chain], scan.stream[chain]
        same = (dev[1:] == dev[:-1]) & (st[1:] == st[:-1])
        end = scan.ts[chain] + scan.dur_raw[chain]
        nxt = scan.ts[chain][1:]
        bad = np.flatnonzero(same & (end[:-1] > nxt))
        for b in bad.tolist():
            i, j = int(chain[b]), int(chain[b + 1])
            excess = float(end[b] - nxt[b])
            scan.dur[i] = max(0.0, float(nxt[b] - scan.ts[i]))
            out.append((i, j, excess))
    scan.overlaps = out
    return out


def _zero_inside(scan: TraceScan, order: np.ndarray, zero: np.ndarray) -> int:
    """Zero-length events (in ``order``, flagged by ``zero``) that start at or after the start and
    before the end of the positive-length event before them on their (device, stream)."""
    pos = np.where(~zero, np.arange(order.size), -1)
    prev = np.maximum.accumulate(pos)  # index (in order) of the latest positive event at or before each
    z = np.flatnonzero(zero & (prev >= 0))
    if z.size == 0:
        return 0
    p = prev[z]
    same = (scan.device[order[z]] == scan.device[order[p]]) & (scan.stream[order[z]] == scan.stream[order[p]])
    t = scan.ts[order[z]]
    inside = (t >= scan.ts[order[p]]) & (t < scan.ts[order[p]] + scan.dur_raw[order[p]])
    return int((same & inside).sum())


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 3] + "..."


def duplicate_pairs(scan: TraceScan) -> list[tuple[int, int, float]]:
    """The clipped pairs of :func:`clip_stream_overlaps` (``scan.overlaps``) that are exact
    duplicates: the successor has the same name, correlation id, start and recorded length as the
    clipped event on the same (device, stream). A GPU executes one stream in order, so two records
    of one kernel at one instant are one execution written twice (a merged or re-exported trace),
    not an overlap."""
    out = []
    for i, j, excess in scan.overlaps:
        if (scan.ts[i] == scan.ts[j] and scan.dur_raw[i] == scan.dur_raw[j] and scan.name_id[i] == scan.name_id[j]
                and scan.corr[i] == scan.corr[j]):
            out.append((i, j, excess))
    return out


def overlap_warnings(scan: TraceScan, limit: int = 3) -> list[str]:
    """The scan's notes (:attr:`.scan.TraceScan.notes`), the zero-length events left unclipping
    (:func:`.hygiene.input_notes`), the exact duplicates counted in one line
    (:func:`duplicate_pairs`: not called overlaps), then one warning line per other clipped event
    (the ``limit`` largest excesses, then a count)."""
    out = list(scan.notes) + input_notes(zero_inside=scan.zero_inside)
    dups = duplicate_pairs(scan)
    if dups:
        i = dups[0][0]
        out.append(f"{len(dups)} exact duplicate GPU event(s) (the same name, stream, correlation id, ts and dur as "
                   f"another event; the first '{_short(scan.names[scan.name_id[i]])}' at ts {scan.ts[i]:.3f} us): a "
                   "merged or twice-written trace; each is counted again in the kernel counts, not in the times "
                   "(its time is its twin's)")
    seen = {(i, j) for i, j, _ in dups}
    rows = sorted((r for r in scan.overlaps if (r[0], r[1]) not in seen), key=lambda x: -x[2])
    for i, j, excess in rows[:limit]:
        out.append(f"GPU event '{_short(scan.names[scan.name_id[i]])}' (stream {scan.stream_id(i)}, ts {scan.ts[i]:.3f} us) "
                   f"runs {excess:.3f} us past the start of '{_short(scan.names[scan.name_id[j]])}' (ts {scan.ts[j]:.3f} us) "
                   "on the same stream: clipped at that start")
    if len(rows) > limit:
        out.append(f"... and {len(rows) - limit} more overlapping GPU events on one stream, clipped the same way")
    return out


def is_clip_warning(line: str) -> bool:
    """True for the per-event clip lines of :func:`overlap_warnings` (their weight is judged by the
    clipped time, :func:`~ai4s_graph.graph.analysis.nodes.trace_analyst._material_clip`)."""
    return line.endswith("clipped at that start") or line.endswith("clipped the same way")
