"""The verifier's reader's own joining of Trace Event Format duration pairs (:mod:`.kineto_reader`),
written apart from the engine's (:mod:`.stream_fix`) so the two readers do not share a blind spot.

Trace Event Format ("Duration Events", "Async Events"): a ``"ph": "B"`` begin is closed by the next
``"ph": "E"`` end on the same (pid, tid), nested as a stack, the end's ``args`` merged into the
begin's; nestable async begins ``"b"`` (and legacy ``"S"``) are closed by an ``"e"`` (``"F"``) of the
same (pid, cat, id) (``id2.global``: any pid), the latest open begin of the end's name. A joined
pair is one complete event; ends that close nothing and begins never ended are counted.
"""

from __future__ import annotations

import math
from collections import defaultdict

PAIR_PH = frozenset("BEbeSF")
INSTANT_PH = frozenset("iIn")


def finite(v) -> float | None:
    """A JSON number or numeric string as a finite float; None otherwise (bool, NaN, inf, lists ...)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        f = float(v)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def hashable(v) -> bool:
    """True when ``v`` can key a dict."""
    try:
        hash(v)
    except TypeError:
        return False
    return True


class Pairs:
    """Open begins and what was joined; ``gpu_cats``: the categories counted as GPU events."""

    def __init__(self, gpu_cats) -> None:
        self.gpu_cats = gpu_cats
        self.open: dict[tuple, list] = {}
        self.begin_order = 0  # file index of the begin of the pair last joined
        self.joined: dict[tuple, int] = defaultdict(int)  # (sync | async, GPU?) -> pairs joined
        self.unmatched_ends: dict[bool, int] = defaultdict(int)  # GPU? -> ends without a begin

    def take(self, ev: dict, ph: str, cat, n: int) -> dict | None:
        """Keep a begin (None), or join an end with the begin it closes into one complete event
        (``ph`` X, ``cat`` the begin's canonical category; None when it closes nothing). ``n``: the
        event's index in the file."""
        if ph in ("B", "E"):
            pid, tid = ev.get("pid"), ev.get("tid")
            key: tuple = ("sync", pid if hashable(pid) else repr(pid), tid if hashable(tid) else repr(tid))
        else:
            id2 = ev.get("id2") if isinstance(ev.get("id2"), dict) else {}
            ident = ev["id"] if ev.get("id") is not None else (id2.get("global") if "global" in id2 else id2.get("local"))
            scope = None if (ev.get("id") is None and "global" in id2) else ev.get("pid")
            key = tuple(v if hashable(v) else repr(v) for v in ("async", scope, ev.get("cat"), "global" in id2, ident))
        if ph in ("B", "b", "S"):
            self.open.setdefault(key, []).append((ev, n, cat))
            return None
        open_ = self.open.get(key)
        if not open_:
            self.unmatched_ends[cat in self.gpu_cats] += 1
            return None
        at = len(open_) - 1
        if key[0] == "async" and ev.get("name"):  # the latest open begin of the end's name
            named = [j for j, (b, _n, _c) in enumerate(open_) if b.get("name") in (ev.get("name"), None)]
            at = named[-1] if named else at
        begin, self.begin_order, bcat = open_.pop(at)
        t0, t1 = finite(begin.get("ts")), finite(ev.get("ts"))
        joined = dict(begin, ph="X", dur=(t1 - t0) if t0 is not None and t1 is not None else None,
                      cat=bcat if bcat is not None else cat)
        if not joined.get("name") and ev.get("name"):
            joined["name"] = ev["name"]
        if isinstance(ev.get("args"), dict) and ev["args"]:
            joined["args"] = {**(begin["args"] if isinstance(begin.get("args"), dict) else {}), **ev["args"]}
        self.joined[(key[0], joined["cat"] in self.gpu_cats)] += 1
        return joined

    def gpu_lost(self) -> int:
        """GPU events whose pair could not be joined (an end without a begin, a begin never ended)."""
        return self.unmatched_ends[True] + sum(c in self.gpu_cats for v in self.open.values() for _b, _n, c in v)

    def counts(self) -> dict[str, tuple]:
        """``joined`` (B/E pairs, async pairs, GPU ones), ``lone_ends``, ``never_ended`` (events, GPU
        ones), as :func:`.hygiene.input_notes` takes them."""
        j = self.joined
        still = [c for v in self.open.values() for _b, _n, c in v]
        return {"joined": (j["sync", True] + j["sync", False], j["async", True] + j["async", False],
                           j["sync", True] + j["async", True]),
                "lone_ends": (sum(self.unmatched_ends.values()), self.unmatched_ends[True]),
                "never_ended": (len(still), sum(c in self.gpu_cats for c in still))}
