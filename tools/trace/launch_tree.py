"""The launcher of every GPU launch: TraceLens's host call-stack rule over a scan's cpu_ops and
launch calls (``BaseTraceToTree.build_host_call_stack_tree``, read in AMD-AGI/TraceLens).

Per thread, the cpu_ops and launch calls are walked in (start, file order) with a stack of open
events: an event pops every open event that ended at or before its start; the open event left on
top is its parent, unless the event ends after it (a *bleed*): a bleed under 1 µs with a
grandparent open pops the parent and nests under the grandparent, a larger one leaves the event
out of the tree. A launch's launcher is the innermost cpu_op above it, pass-through ``execute``
ops skipped.

Two computations of that walk, equal to the last index (``tests/test_launch_tree.py``):

- :func:`nested_parents`, numpy over whole columns, for a thread set with no bleed at all (the
  common case: 407 k nodes of the replicated 176 MB trace in 0.05 s against 0.13 s for the walk,
  2026-12-03 on this 2-core machine). Without a bleed the open events at a start are exactly the
  earlier ones that end after it (each pushed event ends no later than the one below it), so the
  parent of event ``i`` is the last earlier event whose *depth* (how many earlier events end after
  its start, a count by sorting) is one less. Whether a bleed occurred is checked at every event
  with that parent: up to the first bleed the parent found is the walk's, so the check is exact,
  and it answers None at the first one.
- :func:`walk_parents`, the walk itself in Python, for a trace where :func:`nested_parents`
  answered None.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

#: The bleed that still nests (µs): TraceLens's ``build_host_call_stack_tree`` nests a child whose
#: parent ends less than 1 µs after the child's start (when a grandparent is open).
BLEED_US = 1.0

#: Rows per slice where a whole-column temporary would be int64 or float64 (1 MiB of them).
_SLICE = 1 << 17


def launch_parents(scan: Any) -> np.ndarray:
    """Per launch call of ``scan`` (a :class:`~ai4s_graph.tools.trace.scan.TraceScan`), the index
    of its launcher cpu_op (int64, ``scan.launch_corr.size``; -1 for none), by TraceLens's rule
    (module docstring): :func:`nested_parents` when no event bleeds, else :func:`walk_parents`."""
    cols = _walk_columns(scan)
    if cols is None:
        return np.full(scan.launch_corr.size, -1, dtype=np.int64)
    got = nested_parents(*cols)
    return got if got is not None else walk_parents(*cols)


def _walk_columns(scan: Any) -> tuple | None:
    """The walk's inputs: node columns in walk order (node k < n_ops: cpu_op k, else launch
    k - n_ops), thread, start, end; n_ops, n_launches and the ``execute`` flag per cpu_op."""
    n_l, n_o = scan.launch_corr.size, scan.op_ts.size
    if n_l == 0 or n_o == 0:
        return None
    thr = np.concatenate([scan.op_thread, scan.launch_thread])
    start = np.concatenate([scan.op_ts, scan.launch_ts])
    order = np.lexsort((np.concatenate([scan.op_order, scan.launch_order]), start, thr))
    if order.size < 1 << 31:
        order = order.astype(np.int32)  # the node ids, in walk order: half the memory
    end = np.concatenate([scan.op_end, scan.launch_end])[order]
    execute = [i for i, nm in enumerate(scan.cpu_names) if nm == "execute"]
    is_execute = np.isin(scan.op_name, execute) if execute else np.zeros(n_o, dtype=bool)
    return order, thr[order], start[order], end, n_o, n_l, is_execute


def walk_parents(order: np.ndarray, thr: np.ndarray, start: np.ndarray, end: np.ndarray, n_o: int, n_l: int,
                 is_execute: np.ndarray) -> np.ndarray:
    """The walk of the module docstring, in Python: ``order`` (node ids in walk order), ``thr``,
    ``start``, ``end`` (µs) in walk order; ``n_o`` cpu_ops, ``n_l`` launches; ``is_execute`` per
    cpu_op. Returns the launcher cpu_op per launch (int64, n_l; -1 for none). Each stack entry keeps
    the innermost cpu_op at or below it, so the parent is read off the top."""
    nodes, thr_w, start_w, end_w = memoryview(order), memoryview(thr), memoryview(start), memoryview(end)
    execute = memoryview(is_execute) if is_execute.any() else None
    stack: list[tuple[float, int, int]] = []  # (end, node: cpu_op index or -1 for a launch, innermost cpu_op)
    parent = array("q", [-1]) * n_o  # cpu_op index -> parent cpu_op index (or -1)
    parent_of_launch = array("q", [-1]) * n_l
    cur_thr = None
    for k, t, s, e in zip(nodes, thr_w, start_w, end_w):
        if t != cur_thr:
            stack = []
            cur_thr = t
        while stack and s >= stack[-1][0]:
            stack.pop()
        if stack and e > stack[-1][0]:
            if stack[-1][0] - s < BLEED_US and len(stack) >= 2:
                stack.pop()
            else:
                continue  # a large bleed: TraceLens leaves the event out of the tree
        par = stack[-1][2] if stack else -1  # innermost enclosing cpu_op
        if k < n_o:
            parent[k] = par
            stack.append((e, k, k))
        else:
            stack.append((e, -1, par))
            if execute is not None:  # skip pass-through ``execute`` ops, as TraceLens does
                while par >= 0 and execute[par]:
                    par = parent[par]
            parent_of_launch[k - n_o] = par
    return np.frombuffer(parent_of_launch, dtype=np.int64)


def nested_parents(order: np.ndarray, thr: np.ndarray, start: np.ndarray, end: np.ndarray, n_o: int, n_l: int,
                   is_execute: np.ndarray) -> np.ndarray | None:
    """:func:`walk_parents`'s answer over whole columns (same arguments), or None when an event
    bleeds past its parent, or ends before it starts (then only the walk says what the tree is).

    Depth of event i (walk position; its thread's events at positions [a, b)): the earlier events
    of the thread ending after its start, ``(i - a) - #{j in [a, b): end_j <= start_i} +
    #{j >= i: end_j <= start_i}``; a later event ends at or before ``start_i`` only when it is a
    zero-length event at the same start (starts ascend and ends are not before starts), counted by
    a suffix sum over runs of equal starts. Parent: the last earlier event of depth one less, one
    ``searchsorted`` per depth. Memory: about six int32 / bool columns of the walk's length."""
    n = order.size
    if n == 0:
        return np.full(n_l, -1, dtype=np.int64)
    if n >= 1 << 31 or not (end >= start).all():
        return None
    # memory: a few int32 / int64 columns at a time (the scan's own columns are the larger part)
    new_thr = np.ones(n, dtype=bool)
    new_thr[1:] = thr[1:] != thr[:-1]
    tstart = np.flatnonzero(new_thr)
    tend = np.append(tstart[1:], n)
    depth = np.arange(n, dtype=np.int32)
    depth -= np.repeat(tstart, tend - tstart).astype(np.int32)  # earlier events of the thread
    for lo, hi in zip(tstart.tolist(), tend.tolist()):  # minus those ending at or before each start
        ends = np.sort(end[lo:hi])
        for c in range(lo, hi, _SLICE):  # searched a slice at a time: int64 answers of one slice
            depth[c:min(c + _SLICE, hi)] -= np.searchsorted(ends, start[c:min(c + _SLICE, hi)],
                                                            side="right").astype(np.int32)
        del ends
    # plus the events at or after i that end at or before start_i: the zero-length events z >= i
    # of i's run of equal starts (each adds 1 over [its run's first position, z]: a difference
    # column over the zero-length events, few in a trace)
    zs = np.flatnonzero(end == start)
    if zs.size:
        diff = np.zeros(n + 1, dtype=np.int32)
        for lo, hi in zip(tstart.tolist(), tend.tolist()):
            z = zs[(zs >= lo) & (zs < hi)]
            if z.size:
                first = lo + np.searchsorted(start[lo:hi], start[z], side="left")
                np.add.at(diff, first, 1)
                np.add.at(diff, z + 1, -1)
        depth += np.cumsum(diff[:n], dtype=np.int32)
        del diff
    del zs
    # parent: the last position before i, in i's thread, of depth depth_i - 1; the positions of
    # each depth ascend in a stable sort by depth, so one search per depth finds them all
    if depth.min() < 0:
        return None
    tcode = np.cumsum(new_thr, dtype=np.int32) - 1
    del new_thr
    by_depth = np.argsort(depth, kind="stable").astype(np.int32)
    edges = np.concatenate([[0], np.cumsum(np.bincount(depth))])
    par_pos = np.full(n, -1, dtype=np.int32)
    for d in range(1, edges.size - 1):
        above, here = by_depth[edges[d - 1]:edges[d]], by_depth[edges[d]:edges[d + 1]]
        if not here.size:
            continue
        k = np.searchsorted(above, here, side="left") - 1
        cand = above[np.maximum(k, 0)]
        if ((k < 0) | (tcode[cand] != tcode[here])).any():
            return None  # no event of depth d - 1 before one of depth d: not the walk's stack
        par_pos[here] = cand
    del by_depth, tcode, depth
    for c in range(0, n, _SLICE):  # a bleed (or a parent that has ended): the walk decides
        pp = par_pos[c:c + _SLICE]
        pe = end[np.maximum(pp, 0)]
        if ((pp >= 0) & ((end[c:c + _SLICE] > pe) | ~(pe > start[c:c + _SLICE]))).any():
            return None
    del pp, pe
    # innermost cpu_op at or above each node: a cpu_op is its own, a launch passes its parent's on
    is_op = order < n_o
    up = par_pos.copy()  # the position of the node above each, climbing over launches (a launch
    while True:          # inside a launch is rare: few rounds)
        via = (up >= 0) & ~is_op[np.maximum(up, 0)]
        if not via.any():
            break
        up[via] = par_pos[up[via]]
    del par_pos
    parent_op = order[np.maximum(up, 0)]  # the cpu_op index above each node (-1: none)
    parent_op[up < 0] = -1
    del up
    op_parent = np.full(n_o, -1, dtype=np.int64)
    op_parent[order[is_op]] = parent_op[is_op]
    out = np.full(n_l, -1, dtype=np.int64)
    lpos = np.flatnonzero(~is_op)
    par = parent_op[lpos]
    if is_execute.any():  # skip pass-through ``execute`` ops, as TraceLens does
        while True:
            hop = (par >= 0) & is_execute[np.maximum(par, 0)]
            if not hop.any():
                break
            par[hop] = op_parent[par[hop]]
    out[order[lpos] - n_o] = par
    return out
