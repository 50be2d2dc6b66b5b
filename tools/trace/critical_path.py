"""A step's critical path, and what removing host work saves from it (issue 34).

**The path** is found by walking back in time from the step's end on the host (where
``ProfilerStep#N`` closes), always to what the current link waited for:

- on the host (the combined host timeline of :mod:`.step_window`), the current state is on the
  path, unless it is a blocking call (category ``sync``) during which a GPU event ended: then the
  host waited for that event (the latest GPU end inside the call), the call's tail after it is
  ``sync_return`` and the walk moves to that GPU event;
- on the GPU, the event is on the path; before it, either its launch (the launch call returned
  after the previous event on its stream had ended: the kernel waited for the host; the span from
  the call's start to the kernel's start is ``launch_delay`` and the walk moves to the host at the
  call's start), or the previous event on its stream (the kernel was queued behind it; a gap
  between them is ``gpu_gap``), or, when an event on another stream of the device ended after both
  (a cross-stream event wait: DDP's bucket copies wait for the all-reduce; the trace does not name
  the event waited on, and nothing else holds back a ready kernel), that event (the gap is
  ``gpu_wait``). :meth:`.step_window.GpuColumns.binding` makes that choice.

Every link starts where the one after it began, so the path covers the window end to end and its
length is the step's wall time. HTA builds a graph of every operator and kernel boundary (nodes
and edges as Python objects in a networkx DiGraph, then ``dag_longest_path``; its
``critical_path_analysis.py``): memory and time grow with the whole trace. This walk visits each
link once, O(path length x log n) with numpy searches, and holds one step. Its choices are HTA's
edges: host order within a thread (its call-stack edges), kernel launch delay (runtime start to
kernel start), kernel-kernel on a stream, and GPU-to-host sync edges into blocking calls.

**Savings.** :func:`savings` replays a step with some host work removed (its time zero, and with
``with_gpu_work`` the GPU events it launched zero too), keeping every other duration and
dependency as measured: the host runs its timeline in order; a launched event starts at the
later of its (replayed) launch ready time (the call's return, or its start for a call that returns
after its work began), its stream predecessor's (replayed) end and the cross-stream
event it waited for, the binding one of them plus its measured latency or gap; a blocking call ends at the later of its own replayed start
and its awaited event's replayed end, plus its measured return tail. Nothing removed, the replay
gives the measured step exactly. The saving lies in ``[replay_us, upper_us]``: ``upper_us`` is the
removed work's time on the measured critical path (no path gets shorter by more than the removed
work on it); ``replay_us`` is what the measured dependencies allow, which a lever that also
removes a dependency (the device sync inside ``cudaFree``, say) can only exceed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ...state.steps import HOST_CATEGORIES, CriticalPath, PathSegment, PathShare, Saving
from .host_names import SYNC
from .step_window import GpuColumns, HostColumns, StateTable, StepView
from .stream import CLS_COMM, CLS_MEMCPY

SYNC_CODE = HOST_CATEGORIES.index(SYNC)
GPU_CATEGORY = {0: "gpu:computation", CLS_COMM: "gpu:communication", CLS_MEMCPY: "gpu:memcpy"}

# one link: (kind, category, name id or kernel name id, op name id, site name id, start, end, is_gpu_name)
Link = tuple[str, str, int, int, int, float, float, bool]


def _awaited(by_end: np.ndarray, ends: np.ndarray, a: float, t: float) -> int:
    """The GPU event (``by_end[p]``) whose end (``ends``, sorted) is the latest in ``(a, t]``, or -1."""
    p = int(ends.searchsorted(t, "right")) - 1  # the method: no dispatch wrapper per call
    if p >= 0 and ends[p] > a:
        return int(by_end[p])
    return -1


def walk(view: StepView, host: HostColumns, gpu: GpuColumns, states: StateTable) -> list[Link]:
    """The critical path of one step, oldest link first (see the module docstring). Raises nothing;
    a step without host segments is one ``outside_ops`` link."""
    s0, s1 = view.s0, view.s1
    cat_of = states.cat
    g_sel = view.gpu
    ends_all = gpu.end[g_sel]
    order = np.argsort(ends_all, kind="stable")
    by_end, ends = g_sel[order], ends_all[order]
    c_t0, c_t1 = view.c_t0, view.c_t1
    n_c = c_t0.size
    # the host partition as Python lists: one step walks ~10^3 links, each reading a few rows
    t0_l, sid_l, top_l, site_l = c_t0.tolist(), view.c_sid.tolist(), view.c_top.tolist(), view.c_site.tolist()
    links: list[Link] = []
    t = s1
    on_gpu, g = False, -1
    visited_gpu: set[int] = set()
    budget = 4 * (c_t0.size + g_sel.size) + 16
    while t > s0 and budget > 0:
        budget -= 1
        if not on_gpu:
            i = min(int(c_t1.searchsorted(t, "left")), n_c - 1)
            a = t0_l[i]
            sid = sid_l[i]
            if cat_of[sid] == SYNC_CODE:
                j = _awaited(by_end, ends, a, t)
                if j >= 0 and j not in visited_gpu:
                    e = float(gpu.end[j])
                    if e < t:
                        links.append(("sync", "sync_return", states.name[sid], top_l[i], site_l[i], e, t, False))
                    t, on_gpu, g = e, True, j
                    continue
            links.append(("host", HOST_CATEGORIES[cat_of[sid]], states.name[sid], top_l[i], site_l[i], max(a, s0), t,
                          False))
            t = a
            continue
        visited_gpu.add(g)
        s = float(gpu.ts[g])
        li = int(gpu.launch[g])
        op, site = (int(host.top[li]), int(host.site[li])) if li >= 0 else (-1, -1)
        links.append(("gpu", GPU_CATEGORY.get(int(gpu.cls[g]), "gpu:computation"), int(gpu.name[g]), op, site,
                      max(s, s0), t, True))
        t = s
        if t <= s0:
            break
        how, p, _ready = gpu.binding(g, float(host.ts[li]) if li >= 0 else np.nan,
                                     float(host.end[li]) if li >= 0 else np.nan)
        if how == "launch":
            x = min(float(host.ts[li]), t)
            links.append(("launch", "launch_delay", int(host.name[li]), op, site, max(x, s0), t, False))
            t, on_gpu = x, False
        elif how in ("pred", "cross") and p not in visited_gpu:
            e_p = float(gpu.end[p])
            if e_p < t:
                links.append(("gap", "gpu_gap" if how == "pred" else "gpu_wait", -1, -1, -1, max(e_p, s0), t, False))
                t = e_p
            g = p
        else:
            on_gpu = False
    links.reverse()
    return links


def summarize(links: list[Link], host: HostColumns, gpu: GpuColumns, *, top: int = 10,
              keep_segments: bool = False) -> CriticalPath:
    """A :class:`CriticalPath` from :func:`walk`'s links: µs per path category, the ``top`` largest
    shares by top-level op and by Python call site, and the segments when ``keep_segments``."""
    from .pystack import site_of

    hn, gn = host.names, gpu.names
    by_cat: dict[str, float] = {}
    by_op: dict[str, dict[str, float]] = {}
    by_site: dict[str, float] = {}
    length = 0.0
    segs = []
    for kind, cat, nm, op, site, a, b, is_gpu in links:
        d = b - a
        length += d
        by_cat[cat] = by_cat.get(cat, 0.0) + d
        op_name = hn[op] if op >= 0 else ("(outside ops)" if cat == "outside_ops" else "")
        if op_name:
            per = by_op.setdefault(op_name, {})
            per[cat] = per.get(cat, 0.0) + d
        if site >= 0:
            sk = site_of(hn[site])
            by_site[sk] = by_site.get(sk, 0.0) + d
        if keep_segments:
            name = (gn[nm] if is_gpu else hn[nm]) if nm >= 0 else ""
            segs.append(PathSegment(kind=kind, category=cat, name=name, op=hn[op] if op >= 0 else "",
                                    site=site_of(hn[site]) if site >= 0 else "", start_us=a, end_us=b))
    if segs:
        base = links[0][5]
        segs = [s.model_copy(update={"start_us": s.start_us - base, "end_us": s.end_us - base}) for s in segs]
    tot = length or 1.0
    ops = sorted(((k, sum(v.values()), max(v, key=v.__getitem__)) for k, v in by_op.items()), key=lambda r: -r[1])[:top]
    sites = sorted(by_site.items(), key=lambda kv: -kv[1])[:top]
    return CriticalPath(length_us=length, by_category=by_cat,
                        top_ops=[PathShare(key=k, category=c, us=v, share=v / tot) for k, v, c in ops],
                        top_sites=[PathShare(key=k, us=v, share=v / tot) for k, v in sites],
                        n_segments=len(links), segments=segs if keep_segments else None)


def _matcher(remove: Iterable[str], host: HostColumns):
    """``(category codes, name ids)`` a removal set names: host categories by name, anything else by
    the host name (API call, region, top-level op or Python frame) it equals."""
    rem = set(remove)
    cats = {HOST_CATEGORIES.index(c) for c in rem if c in HOST_CATEGORIES}
    names = {i for i, n in enumerate(host.names) if n in rem}
    return cats, names


def at_launch(col: np.ndarray, idx: np.ndarray, fill: Any) -> np.ndarray:
    """``col[idx]`` where ``idx >= 0``, else ``fill`` (``fill`` an array of ``idx``'s shape, or a
    scalar): a host column at each GPU event's launching call (``idx`` -1: none; with no host event
    at all ``col`` is empty and every ``idx`` is -1)."""
    if col.size == 0:
        return np.broadcast_to(np.asarray(fill, dtype=np.result_type(col.dtype, np.asarray(fill).dtype)),
                               idx.shape).copy()
    return np.where(idx >= 0, col[np.maximum(idx, 0)], fill)


def savings(view: StepView, host: HostColumns, gpu: GpuColumns, states: StateTable, remove: Iterable[str], *,
            with_gpu_work: bool = False, links: list[Link] | None = None) -> Saving:
    """What removing the host work ``remove`` (host categories, or API / region / top-level op / Python
    frame names) saves from the step's critical path, with its bounds (see the module docstring).
    ``with_gpu_work``: the GPU events launched under a removed op or frame go too. ``links``: the
    step's :func:`walk` when already computed."""
    cats, names = _matcher(remove, host)
    st_cat, st_name = states.cat, states.name
    n = view.c_t0.size

    def removed_host(i: int) -> bool:
        sid = int(view.c_sid[i])
        return (st_cat[sid] in cats or st_name[sid] in names or int(view.c_top[i]) in names
                or int(view.c_site[i]) in names)

    rem_h = [removed_host(i) for i in range(n)]
    g_sel = view.gpu
    local = {int(g): k for k, g in enumerate(g_sel.tolist())}
    s_k, e_k = gpu.ts[g_sel], gpu.end[g_sel]
    li = gpu.launch[g_sel]
    rem_g = np.zeros(g_sel.size, dtype=bool)
    if with_gpu_work and names:
        tops, sites, nm = at_launch(host.top, li, -1), at_launch(host.site, li, -1), at_launch(host.name, li, -1)
        sel = np.fromiter(names, dtype=np.int64)
        rem_g = np.isin(tops, sel) | np.isin(sites, sel) | np.isin(nm, sel)
    in_win = (li >= 0) & (at_launch(host.ts, li, -np.inf) >= view.s0)
    l_e = at_launch(host.end, li, np.nan)
    l_s = at_launch(host.ts, li, np.nan)
    new_start = s_k.copy()
    new_end = e_k.copy()
    starts_new = np.empty(n)  # replayed start of each host segment
    c_t0, c_t1 = view.c_t0, view.c_t1

    def host_map(x: float, upto: int, cur_start: float) -> float:
        i = min(int(np.searchsorted(c_t1, x, "left")), n - 1)
        base = starts_new[i] if i < upto else cur_start
        return base if rem_h[i] else base + (x - c_t0[i])

    def compute(k: int, upto: int, cur_start: float) -> None:
        g = int(g_sel[k])
        if not in_win[k]:
            new_start[k] = float(s_k[k])  # launched before the window: as measured
        else:
            how, x, le = gpu.binding(g, float(l_s[k]), float(l_e[k]))
            p = int(gpu.prev[g])
            e_p_old = float(gpu.end[p]) if p >= 0 else -np.inf
            pk = local.get(p, -1)
            e_p_new = float(new_end[pk]) if pk >= 0 else e_p_old
            lam = gam = dlt = 0.0
            e_x_new = -np.inf
            if how == "launch":
                lam = float(s_k[k]) - le
            elif how == "pred":
                gam = float(s_k[k]) - e_p_old
            elif how == "cross":
                xk = local.get(x, -1)
                e_x_new = float(new_end[xk]) if xk >= 0 else float(gpu.end[x])
                dlt = float(s_k[k]) - float(gpu.end[x])
            new_start[k] = max(host_map(le, upto, cur_start) + lam, e_p_new + gam, e_x_new + dlt)
        new_end[k] = new_start[k] + (0.0 if rem_g[k] else float(e_k[k] - s_k[k]))

    by_end = np.argsort(e_k, kind="stable")
    ends_sorted = e_k[by_end]
    start_order = np.argsort(s_k, kind="stable")
    gp = 0
    cur = view.s0
    for i in range(n):
        a, b = float(c_t0[i]), float(c_t1[i])
        starts_new[i] = cur
        j = -1
        if st_cat[int(view.c_sid[i])] == SYNC_CODE:
            p = int(np.searchsorted(ends_sorted, b, "right")) - 1
            if p >= 0 and ends_sorted[p] > a:
                j = int(by_end[p])
        if rem_h[i]:
            continue
        if j < 0:
            cur = cur + (b - a)
            continue
        e_j = float(e_k[j])
        while gp < start_order.size and s_k[start_order[gp]] <= e_j:
            compute(int(start_order[gp]), i, cur)
            gp += 1
        cur = max(cur, float(new_end[j])) + (b - e_j)
    replay = (view.s1 - view.s0) - (cur - view.s0)
    if links is None:
        links = walk(view, host, gpu, states)
    upper = 0.0
    cat_names = {HOST_CATEGORIES[c] for c in cats}
    for kind, cat, nm, op, site, a, b, is_gpu in links:
        hit = (kind == "host" and (cat in cat_names or nm in names)) or op in names or site in names
        if kind == "gpu" and not with_gpu_work:
            hit = False
        if kind in ("launch", "sync") and (nm in names or (kind == "launch" and "launch" in cat_names)
                                           or (kind == "sync" and "sync" in cat_names)):
            hit = True
        if hit:
            upper += b - a
    return Saving(step=view.step, step_us=view.s1 - view.s0, replay_us=max(0.0, replay), upper_us=upper,
                  removed=sorted(set(remove)), with_gpu_work=with_gpu_work)
