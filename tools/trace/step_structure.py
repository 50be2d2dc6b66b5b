"""Structure one step shows, as figures for the cause modules (issue 34 item 4), and the lead
(item 6): counts of host calls, device-to-host bytes, the same op sequence repeated on batch-1
shapes, the step-time distribution, and the largest GPU-idle attribution with its numbers.

**Repetition.** Per host thread, the step's top-level cpu_ops whose first tensor input has leading
dimension 1 (``record_shapes``' ``Input Dims``), as signatures (name + all input dims), in time order;
the run covering the most of them that is one block of ``p`` ops repeated ``k >= 2`` times
(:func:`longest_repeat`: a prefix's minimal period is ``i - pi[i-1]``, ``pi`` the Knuth-Morris-Pratt
prefix function; linear per start, no threshold). A module's forward run per sample on a batch of one is such a run
(every sample's ops are the same sequence); a batched forward has no batch-1 run.
"""

from __future__ import annotations

import statistics

import numpy as np

from ...state.steps import HOST_CATEGORIES, Lead, Repetition, StepAccount, StepDistribution, StepStructure
from .host_names import ALLOCATOR, LAUNCH, OPTIMIZER, SYNC, SYNC_OPS, copy_direction
from .pystack import site_of
from .step_feed import Signatures, batch1  # noqa: F401 (re-exported: the feed's, numpy-free)
from .step_window import KIND_OP, KIND_RUNTIME, GpuColumns, HostColumns, StepView
from .stream import KIND_MEMCPY

_CODE = {c: i for i, c in enumerate(HOST_CATEGORIES)}


def minimal_period(seq: list[int]) -> int:
    """The smallest ``p >= 1`` with ``seq[i] == seq[i + p]`` for every valid ``i`` (``len(seq)`` when
    none is shorter; 0 for an empty sequence): Knuth-Morris-Pratt's prefix function, O(n)."""
    pi = _prefix_function(seq)
    return len(seq) - pi[-1] if seq else 0


def _prefix_function(seq: list[int]) -> list[int]:
    n = len(seq)
    pi = [0] * n
    k = 0
    for i in range(1, n):
        while k and seq[i] != seq[k]:
            k = pi[k - 1]
        if seq[i] == seq[k]:
            k += 1
        pi[i] = k
    return pi


#: Where a repeated run may start in a step's batch-1 sequence (a few batch-1 ops before the loop).
MAX_RUN_OFFSET = 8


def longest_repeat(seq: list[int]) -> tuple[int, int, int]:
    """``(start, period, k)`` of the run ``seq[start:start + k * period]`` that is one block repeated
    ``k >= 2`` times and covers the most elements (then the most repetitions), for runs starting in the
    first :data:`MAX_RUN_OFFSET` positions; ``(0, 0, 0)`` when none. For each start, the prefix function
    gives every prefix's minimal period (``i - pi[i-1]``): O(MAX_RUN_OFFSET x n), no threshold."""
    best = (0, 0, 0)
    for start in range(min(MAX_RUN_OFFSET, max(len(seq) - 1, 0))):
        pi = _prefix_function(seq[start:])
        for i, v in enumerate(pi, start=1):
            p = i - v
            k = i // p
            if k >= 2 and (k * p, k) > (best[2] * best[1], best[2]):
                best = (start, p, k)
    return best


def repetition(view: StepView, host: HostColumns, sigs: Signatures) -> Repetition | None:
    """The batch-1 top-level op run repeated most (``k >= 2``) on one thread of the step, or None."""
    best: Repetition | None = None
    for thr, ks in view.top_ops.items():
        seq_k = [k for k in ks if host.sig[k] >= 0 and host.ts[k] >= view.s0]
        if len(seq_k) < 2:
            continue
        seq = [int(host.sig[k]) for k in seq_k]
        a, p, k = longest_repeat(seq)
        if k < 2:
            continue
        if best is None or (k * p, k) > (best.k * best.period, best.k):
            run = seq_k[a:a + k * p]
            us = float(sum(min(host.end[i], view.s1) - host.ts[i] for i in run))
            best = Repetition(k=k, period=p, thread=int(thr), ops=[host.names[host.name[i]] for i in run[: min(p, 8)]],
                              shape=sigs.dims[seq[a]], us=us, top_ops=len(ks), site=_run_site(view, host, run, int(thr)))
    return best


def _run_site(view: StepView, host: HostColumns, run: list[int], thr: int) -> str:
    """The Python call site (``file:line (function)``) most of the run's ops start under on their
    thread (the step timeline's cell at each op's start), ``""`` without stacks."""
    if view.c_t0.size == 0:
        return ""
    at = np.asarray([host.ts[i] for i in run], dtype=np.float64)
    j = np.clip(np.searchsorted(view.c_t0, at, "right") - 1, 0, view.c_t0.size - 1)
    sites = view.c_site[j][(view.c_thr[j] == thr) & (view.c_site[j] >= 0)]
    if sites.size == 0:
        return ""
    ids, n = np.unique(sites, return_counts=True)
    return site_of(host.names[int(ids[int(np.argmax(n))])])


def _sync_ops(h: np.ndarray, host: HostColumns) -> int:
    """How many blocking calls (``sync`` runtime calls) among the host events ``h`` run inside an
    ``aten::item``-class op on their thread: one per device scalar read (``.item()``, ``.tolist()``)."""
    ids = [i for i, n in enumerate(host.names) if n in SYNC_OPS]
    ops = h[(host.kind[h] == KIND_OP) & np.isin(host.name[h], ids)] if ids else h[:0]
    syncs = h[(host.kind[h] == KIND_RUNTIME) & (host.cat[h] == _CODE[SYNC])]
    n = 0
    for c in range(0, syncs.size if ops.size else 0, 1024):
        sc = syncs[c:c + 1024]
        inside = ((host.thr[sc][:, None] == host.thr[ops][None, :]) & (host.ts[sc][:, None] >= host.ts[ops][None, :])
                  & (host.end[sc][:, None] <= host.end[ops][None, :]))
        n += int(inside.any(axis=1).sum())
    return n


def structure(view: StepView, host: HostColumns, gpu: GpuColumns, sigs: Signatures,
              mem: tuple[np.ndarray, np.ndarray]) -> StepStructure:
    """Counts of the step (host events and GPU work launched in ``[s0, s1)``; see :class:`StepStructure`).
    ``mem``: device memory events ``(ts, Total Allocated)`` sorted by ts."""
    h = view.host[(host.ts[view.host] >= view.s0) & (host.ts[view.host] < view.s1)]
    kind, cat = host.kind[h], host.cat[h]
    rt = kind == KIND_RUNTIME
    out = StepStructure(
        launches=int(np.sum(rt & (cat == _CODE[LAUNCH]))),
        allocator_calls=int(np.sum(rt & (cat == _CODE[ALLOCATOR]))),
        sync_calls=int(np.sum(rt & (cat == _CODE[SYNC]))),
        sync_ops=_sync_ops(h, host),
        optimizer_steps=int(np.sum((kind == KIND_OP) & (cat == _CODE[OPTIMIZER]))),
    )
    g = gpu.launched_by(h[rt])  # GPU work launched in the step, or starting in it without a launch call
    own = view.gpu[(gpu.launch[view.gpu] < 0) & (gpu.ts[view.gpu] >= view.s0)]
    g = np.concatenate([g, own])
    out.gpu_events = int(g.size)
    for k in g[gpu.kind[g] == KIND_MEMCPY].tolist():
        d = copy_direction(gpu.names[gpu.name[k]])
        b = max(0, int(gpu.nbytes[k]))
        if d == "d2h":
            out.d2h_copies += 1
            out.d2h_bytes += b
        elif d == "h2d":
            out.h2d_copies += 1
            out.h2d_bytes += b
    out.repeated = repetition(view, host, sigs)
    m_ts, m_alloc = mem
    if m_ts.size:
        a, b = np.searchsorted(m_ts, view.s0), np.searchsorted(m_ts, view.s1)
        if b > a:
            out.device_min_allocated_bytes = int(m_alloc[a:b].min())
    return out


def distribution(walls_us: list[float]) -> StepDistribution:
    """Median, mean, max and min of the steps' wall times (ms)."""
    if not walls_us:
        return StepDistribution()
    ms = [w / 1e3 for w in walls_us]
    return StepDistribution(n=len(ms), median_ms=statistics.median(ms), mean_ms=statistics.fmean(ms), max_ms=max(ms),
                            min_ms=min(ms))


_PHRASE = {
    "outside_ops": "outside any recorded op",
    "op": "in the CPU side of {name}",
    "launch": "launching GPU work ({name})",
    "sync": "waiting on the device ({name})",
    "allocator": "in the allocator ({name})",
    "dataloader": "in the DataLoader ({name})",
    "optimizer": "in the optimizer step ({name})",
    "runtime_other": "in other runtime calls ({name})",
}


#: categories whose time spreads over many names: the sentence gives the total, then the largest name
_AGGREGATE = {"op": "in the CPU side of recorded ops", "launch": "launching GPU work",
              "runtime_other": "in other runtime calls"}


def lead(steps: list[StepAccount], preceded_by: str = "") -> Lead | None:
    """The largest GPU-idle attribution over the steps (by category, then its largest name, op and
    site), with per-step means and the structure figures a sentence needs; None without steps."""
    if not steps:
        return None
    n = len(steps)
    by_cat: dict[str, float] = {}
    for s in steps:
        for c, v in s.idle_by_host_us.items():
            by_cat[c] = by_cat.get(c, 0.0) + v / n
    if not by_cat or max(by_cat.values()) <= 0:
        return None
    cat = max(by_cat, key=lambda c: (by_cat[c], -HOST_CATEGORIES.index(c)))
    names: dict[tuple[str, str], float] = {}
    sites: dict[str, float] = {}
    for s in steps:
        for a in s.idle_top:
            if a.category == cat:
                names[(a.name, a.op)] = names.get((a.name, a.op), 0.0) + a.us
        for x in s.idle_sites:
            if x.category == cat:
                sites[x.site] = sites.get(x.site, 0.0) + x.us
    name, op = max(names, key=names.__getitem__) if names else ("", "")
    name_us = names.get((name, op), 0.0) / n
    site = max(sites, key=sites.__getitem__) if sites else ""
    step_us = statistics.fmean(s.wall_us for s in steps)
    idle_us = statistics.fmean(s.gpu.idle_us for s in steps)
    us = by_cat[cat]
    st = [s.structure for s in steps]
    ctx: dict[str, float | int | str] = {
        "d2h_copies_per_step": statistics.fmean(x.d2h_copies for x in st),
        "d2h_mb_per_step": statistics.fmean(x.d2h_bytes for x in st) / 1e6,
        "allocator_calls_per_step": statistics.fmean(x.allocator_calls for x in st),
        "sync_calls_per_step": statistics.fmean(x.sync_calls for x in st),
        "launches_per_step": statistics.fmean(x.launches for x in st),
        "optimizer_steps_per_step": statistics.fmean(x.optimizer_steps for x in st),
    }
    reps = [x.repeated for x in st if x.repeated is not None]
    if reps:
        r = max(reps, key=lambda r: r.k)
        ctx.update(repeated_k=r.k, repeated_period=r.period, repeated_first_op=r.ops[0] if r.ops else "")
    on_path = statistics.fmean(s.critical_path.by_category.get(cat, 0.0) for s in steps)
    what = _PHRASE[cat].format(name=name or op or "?")
    text = f"the host spent {us / 1e3:.3g} ms of the {step_us / 1e3:.3g} ms step {what} while the GPU was idle"
    if cat in _AGGREGATE and name_us < us:
        text = (f"the host spent {us / 1e3:.3g} ms of the {step_us / 1e3:.3g} ms step {_AGGREGATE[cat]} while the GPU "
                f"was idle (largest: {name or op}, {name_us / 1e3:.3g} ms)")
    if site:
        text += f", at {site}"
    if cat in ("outside_ops", "sync") and ctx["d2h_copies_per_step"] >= 1:
        text += (f"; the step holds {ctx['d2h_copies_per_step']:.0f} device-to-host copies of "
                 f"{ctx['d2h_mb_per_step']:.3g} MB")
    if preceded_by:
        text += f"; its longest stretch comes right after {preceded_by}"
    return Lead(category=cat, name=name, op=op, site=site, us=us, name_us=name_us, step_us=step_us, idle_us=idle_us,
                share=us / step_us if step_us else 0.0, on_critical_path_us=on_path, preceded_by=preceded_by,
                context=ctx, text=text)


def preceding_states(view: StepView, state_cat: list[int], state_label) -> dict[int, str]:
    """Per host category code present in the step: the host state (``state_label(state id)``) right
    before that category's longest stretch, ``""`` when the stretch opens the step."""
    cats = np.asarray(state_cat, dtype=np.int16)[view.c_sid]
    d = view.c_t1 - view.c_t0
    out: dict[int, str] = {}
    for c in np.unique(cats).tolist():
        idx = np.flatnonzero(cats == c)
        i = int(idx[int(np.argmax(d[idx]))])
        j = i - 1
        while j >= 0 and cats[j] == c:
            j -= 1
        out[int(c)] = state_label(int(view.c_sid[j])) if j >= 0 else ""
    return out


__all__ = ["Signatures", "batch1", "distribution", "lead", "longest_repeat", "minimal_period", "preceding_states", "repetition", "structure"]
