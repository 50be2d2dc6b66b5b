"""The verifier's host sampler paints its layers on the segments between event boundaries, all
events at once (issue 29): the same answer as painting every cell, event by event, in start order
(the innermost, painted last, wins), on hand-built layers with known answers, crossing (non-nested)
events included."""

from __future__ import annotations

import numpy as np

from ai4s_graph.tools.trace import host_sampling as hs


def _paint_cells(n, c0, c1, val):
    """The former per-event painter on cells: reference."""
    lay = np.full(n, hs._NONE, dtype=np.int8)
    for a, b, v in zip(c0, c1, val):
        if b > a:
            lay[a:b] = v
    return lay


def _on_segments(n, c0, c1, val, value=None):
    c0, c1, val = np.asarray(c0, dtype=np.int64), np.asarray(c1, dtype=np.int64), np.asarray(val, dtype=np.int8)
    edges = np.unique(np.concatenate([[0, n], c0, c1]))
    seg = hs._layer((c0, c1, val), edges, value=value)
    return np.repeat(seg, np.diff(edges))  # back to cells


def test_nested_events_innermost_wins_hand_counted():
    # cells 0..9: an op over 1..9 (value 5), inside it a call over 3..6 (value 2), inside that 4..5 (value 1)
    got = _on_segments(10, [1, 3, 4], [9, 6, 5], [5, 2, 1])
    assert got.tolist() == [127, 5, 5, 2, 1, 2, 5, 5, 5, 127]
    cover = _on_segments(10, [1, 3, 4], [9, 6, 5], [5, 2, 1], value=True)
    assert cover.tolist() == [False] + [True] * 8 + [False]


def test_crossing_and_empty_events_the_last_painted_wins():
    # 0..6 (v 3) then 4..9 (v 4) crossing it; an empty event and an inverted one paint nothing
    got = _on_segments(10, [0, 4, 7, 8], [6, 9, 7, 2], [3, 4, 9, 9])
    assert got.tolist() == [3, 3, 3, 3, 4, 4, 4, 4, 4, 127]
    assert _on_segments(10, [7, 8], [7, 2], [9, 9], value=True).tolist() == [False] * 10


def test_kind_many_layers_equal_cell_painting():
    rng = np.random.default_rng(29)
    for n in (1, 2, 7, 64, 1000):
        for k in (0, 1, 5, 40, 300):
            c0 = rng.integers(0, n + 1, k)
            c1 = np.minimum(c0 + rng.integers(-2, n // 2 + 2, k), n).clip(0)
            val = rng.integers(0, 9, k).astype(np.int8)
            assert np.array_equal(_on_segments(n, c0, c1, val), _paint_cells(n, c0, c1, val)), (n, k)
            want = np.zeros(n, dtype=bool)
            for a, b in zip(c0, c1):
                want[a:max(a, b)] = True
            assert np.array_equal(_on_segments(n, c0, c1, val, value=True), want), (n, k)


def test_window_rows_keep_every_open_row_in_order():
    """A step reads only the rows that can be open in it: hand-built rows (a row over the whole
    profile, rows ending exactly at a step's start, one starting at its end, a zero-length one, one
    with an inverted span), steps of 10 µs: the rows open in each step, and their order, are those
    the whole columns give."""
    ts = np.array([0.0, 2.0, 5.0, 9.5, 10.0, 10.0, 19.0, 20.0, 12.0, 15.0, 25.0])
    end = np.array([40.0, 10.0, 9.0, 12.0, 10.0, 14.0, 30.0, 21.0, 11.0, 13.0, 26.0])
    thr = np.arange(ts.size)
    cols = hs._by_start((ts, end, thr, np.zeros(ts.size, dtype=np.int8)))
    assert cols[2].tolist() == [0, 1, 2, 3, 4, 5, 8, 9, 6, 7, 10]  # by start, rows starting together as read
    near = hs._Near(cols, 10.0)
    assert cols[2][near.long].tolist() == [0, 6]  # over 10 µs: the profile-long row and [19, 30)
    for s0, s1, want in ((0.0, 10.0, [0, 1, 2, 3]), (10.0, 20.0, [0, 3, 5, 6, 8, 9]), (20.0, 30.0, [0, 6, 7, 10])):
        got_ts, got_end, got_thr, _ = near.rows(s0, s1)
        open_ = ((got_ts < s1) & (got_end > s0))
        assert sorted(got_thr[open_].tolist()) == want == np.flatnonzero((ts < s1) & (end > s0)).tolist()
        assert np.all(np.diff(got_ts) >= 0)  # in start order
