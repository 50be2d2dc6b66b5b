"""Interval-union arithmetic in plain Python, for the verifier's reader (:mod:`.kineto`).

Intervals are ``(start, end)`` pairs in µs; a list is *normalised* when it is sorted and its
intervals do not overlap (what :func:`merge_intervals` returns).
"""

from __future__ import annotations


def merge_intervals(intervals) -> list[tuple[float, float]]:
    """Union of (start, end) intervals as sorted, non-overlapping intervals (touching ones
    merge)."""
    out: list[tuple[float, float]] = []
    cs = ce = None
    for s, e in sorted(intervals):
        if cs is not None and s <= ce:
            if e > ce:
                ce = e
        else:
            if cs is not None:
                out.append((cs, ce))
            cs, ce = s, e
    if cs is not None:
        out.append((cs, ce))
    return out


def subtract_intervals(b: list[tuple[float, float]], a: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``b − a`` for sorted, non-overlapping interval lists (the parts of b not covered by a)."""
    result = []
    j = 0
    n = len(a)
    for bs, be in b:
        cur = bs
        while j < n and a[j][1] <= bs:
            j += 1
        k = j
        while k < n and a[k][0] < be:
            s, e = a[k]
            if s > cur:
                result.append((cur, min(be, s)))
            cur = max(cur, e)
            if cur >= be:
                break
            k += 1
        if cur < be:
            result.append((cur, be))
    return result


def total_length(intervals) -> float:
    """Sum of interval lengths (µs in, µs out)."""
    return sum(e - s for s, e in intervals)
