"""The launcher rule (:mod:`ai4s_graph.tools.trace.launch_tree`): the numpy computation
(``nested_parents``) equals the walk (``walk_parents``, TraceLens's host call-stack rule) to the
last index wherever it answers, answers on every family without a bleed, and hands a family with
one to the walk; hand-built trees with known launchers, and the real traces the suite holds."""

from __future__ import annotations

import numpy as np
import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.tools.trace import launch_tree as L, stream


def _cols(ops, launches, execute=()):
    """Walk columns from ``ops`` / ``launches``: lists of (thread, start, end) in file order;
    ``execute``: indices of the ops named ``execute``."""
    o = np.array(ops, dtype=float).reshape(-1, 3)
    la = np.array(launches, dtype=float).reshape(-1, 3)
    n_o, n_l = len(o), len(la)
    thr = np.concatenate([o[:, 0], la[:, 0]]).astype(np.int64)
    start = np.concatenate([o[:, 1], la[:, 1]])
    end = np.concatenate([o[:, 2], la[:, 2]])
    file_order = np.concatenate([np.arange(n_o), n_o + np.arange(n_l)])
    order = np.lexsort((file_order, start, thr))
    is_ex = np.zeros(n_o, dtype=bool)
    is_ex[list(execute)] = True
    return order, thr[order], start[order], end[order], n_o, n_l, is_ex


def test_hand_built_tree_has_the_known_launchers():
    # thread 1: A [0,100) holds B [10,50) (launch 0 at 20 inside B) and an execute op E [60,90)
    # (launch 1 inside E: its launcher skips E to A); launch 2 at 95 sits directly in A; thread 2:
    # C [0,10) with launch 3 at 5, and launch 4 at 20 outside every op
    ops = [(1, 0, 100), (1, 10, 50), (1, 60, 90), (2, 0, 10)]
    launches = [(1, 20, 21), (1, 61, 62), (1, 95, 96), (2, 5, 6), (2, 20, 21)]
    cols = _cols(ops, launches, execute=[2])
    want = [1, 0, 0, 3, -1]
    assert L.walk_parents(*cols).tolist() == want
    assert L.nested_parents(*cols).tolist() == want


def test_zero_length_ops_and_equal_starts():
    # a zero-length op at the start of its parent, then a launch at that same instant: the
    # zero-length op has ended at that start (popped), so the launch's launcher is the outer op
    ops = [(0, 0, 10), (0, 5, 5), (0, 5, 8)]
    launches = [(0, 5, 6), (0, 9, 9.5)]
    cols = _cols(ops, launches)
    want = [2, 0]
    assert L.walk_parents(*cols).tolist() == want
    assert L.nested_parents(*cols).tolist() == want


def test_a_bleed_goes_to_the_walk():
    # B [10, 100.5) ends past A [0, 100) and A ends 90 µs after B's start: B is left out of the
    # tree (TraceLens's rule), its launch goes to A; the numpy path hands the family to the walk
    cols = _cols([(0, 0, 100), (0, 10, 100.5)], [(0, 20, 21)])
    assert L.nested_parents(*cols) is None
    assert L.walk_parents(*cols).tolist() == [0]
    # C [49.5, 60) starts 0.5 µs before B [10, 50) ends, with A open below B: B is popped and C
    # nests under A; C's launch has C as its launcher
    cols = _cols([(0, 0, 100), (0, 10, 50), (0, 49.5, 60)], [(0, 55, 56)])
    assert L.nested_parents(*cols) is None
    assert L.walk_parents(*cols).tolist() == [2]


def _random_family(rng, bleed: bool):
    """A random forest of nested ops per thread (parents first in the file), zero-length launches inside
    some ops and outside every one, some ops named ``execute``; with ``bleed``, some children end
    past their parents (by less and by more than 1 µs) and the file order is shuffled. Times are rounded to whole µs at random:
    equal starts and zero-length ops."""
    ops, launches = [], []
    for t in range(int(rng.integers(1, 4))):
        def grow(s, e, depth):
            ops.append((t, s, e))
            k = int(rng.integers(0, 4)) if depth < 5 else 0
            cuts = np.sort(rng.uniform(s, e, size=2 * k))
            if rng.random() < 0.3:
                cuts = np.clip(np.round(cuts), s, e)
            for a, b in zip(cuts[::2].tolist(), cuts[1::2].tolist()):
                if bleed and rng.random() < 0.15:
                    b = b + float(rng.choice([0.3, 5.0]))
                if rng.random() < 0.5:
                    launches.append((t, a, a))
                grow(a, b, depth + 1)
        for r in range(int(rng.integers(1, 4))):
            grow(1000.0 * r, 1000.0 * r + float(rng.uniform(10, 900)), 0)
        x = float(rng.uniform(0, 3000))
        launches.append((t, x, x))
    if bleed:  # file order is not start order: at equal starts a child may come before its parent
        ops = [ops[i] for i in rng.permutation(len(ops))]
    execute = [i for i in range(len(ops)) if rng.random() < 0.2]
    return ops, launches, execute


@pytest.mark.parametrize("seed", range(40))
def test_numpy_path_equals_the_walk(seed):
    rng = np.random.default_rng(seed)
    cols = _cols(*_random_family(rng, bleed=False))
    got = L.nested_parents(*cols)
    assert got is not None and np.array_equal(got, L.walk_parents(*cols))
    cols = _cols(*_random_family(rng, bleed=True))
    got = L.nested_parents(*cols)
    if got is not None:  # no bleed drawn: it must still be the walk's answer
        assert np.array_equal(got, L.walk_parents(*cols))


def test_bleeding_families_are_handed_to_the_walk():
    """Over many bleeding families the numpy path answers only where it equals the walk, and
    refuses at least some (a check that refused nothing would not be checking)."""
    refused = 0
    for seed in range(100, 160):
        cols = _cols(*_random_family(np.random.default_rng(seed), bleed=True))
        got = L.nested_parents(*cols)
        if got is None:
            refused += 1
        else:
            assert np.array_equal(got, L.walk_parents(*cols)), seed
    assert refused >= 10


def test_every_trace_the_suite_holds_takes_the_numpy_path_to_the_walks_answer():
    traces = sorted((REPO_ROOT / "examples" / "perf-runs").glob("*/traces/*.json.gz")) + \
        sorted((REPO_ROOT / "tests" / "data" / "traces").rglob("*.json*"))
    seen = 0
    for p in traces:
        try:
            scan = stream.scan_trace(p)
        except Exception:  # noqa: BLE001 - odd inputs the suite keeps for their errors
            continue
        cols = L._walk_columns(scan)
        if cols is None:
            continue
        got = L.nested_parents(*cols)
        walk = L.walk_parents(*cols)
        assert got is None or np.array_equal(got, walk), p
        seen += got is not None
    assert seen >= 14  # the H200 runs of examples/perf-runs: 4 of one rank, 5 of two
