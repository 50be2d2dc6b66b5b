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
