"""The engine's rank timeline: TraceLens's gpu_timeline rows (:func:`.stream.gpu_timeline`) over what
the trace really recorded, per GPU when one file holds several.

* **Several GPUs in one file** (a single process driving two devices: ``nn.DataParallel``, a model
  split over ``cuda:0`` and ``cuda:1``; NVIDIA/PyProf#79, ROCm/omnitrace#208): a GPU event's device is
  ``args.device``, else its ``pid`` (kineto writes each GPU's events under its own pid). Pooling
  the devices into one timeline would read device 0 busy 80 % and device 1 busy 20 % as one GPU
  busy 100 %. Each device gets its own rows over the common window (first start to last end over
  all devices: a device that waits for the other is idle), and the rank's rows are the sums over
  the devices (GPU-time: busy % = the devices' mean busy %). The busiest device is the straggling
  device (the others wait for it).
* **Graph replays partly recorded** (TraceLens#728): a graph launch (``cudaGraphLaunch`` /
  ``hipGraphLaunch`` ...) whose correlation id no GPU event carries replayed kernels the trace did
  not record. Work on a stream runs in launch order, so those kernels ran between the end of the
  GPU work launched before the graph launch and the start of the work launched after it. That
  time is not idle: it leaves the idle and total rows (the timeline covers the recorded GPU work),
  and the note names the launches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .hygiene import GRAPH_RECORD_HINT
from .scan import TraceScan, sorted_unique
from .stream import gpu_timeline, union_length


def launch_index(scan: TraceScan) -> np.ndarray:
    """Per GPU event, the index of the launch (CPU call) with its correlation id, or -1."""
    out = np.full(scan.n_gpu_events, -1, dtype=np.int64)
    lc = scan.launch_corr
    if lc.size == 0:
        return out
    order = np.argsort(lc, kind="stable")
    lc_s = lc[order]
    pos = np.searchsorted(lc_s, scan.corr)
    pos_c = np.minimum(pos, lc_s.size - 1)
    found = (pos < lc_s.size) & (lc_s[pos_c] == scan.corr)
    out[found] = order[pos_c[found]]
    return out


def unrecorded_graph_launches(scan: TraceScan) -> np.ndarray:
    """Indices (into the scan's launches) of graph launches whose correlation id no GPU event
    carries: their replayed kernels were not recorded."""
    gm = scan.graph_launch_mask()
    if not gm.any():
        return np.zeros(0, dtype=np.int64)
    g = np.flatnonzero(gm)
    return g[~np.isin(scan.launch_corr[g], scan.corr)]


def unrecorded_time(scan: TraceScan, sel: np.ndarray, launches: np.ndarray, li: np.ndarray) -> float:
    """µs of the selected GPU events' span in which unrecorded graph replays ran (module docstring):
    the union of the launch-order gaps around ``launches`` minus the recorded busy time. ``sel``: mask
    of GPU events; ``li``: :func:`launch_index`."""
    have = sel & (li >= 0)
    if launches.size == 0 or not have.any():
        return 0.0
    lt = scan.launch_ts[li[have]]
    s = scan.ts[have]
    e = s + scan.dur[have]
    order = np.argsort(lt, kind="stable")
    lt, s, e = lt[order], s[order], e[order]
    end_before = np.maximum.accumulate(e)  # latest end of the work launched up to each position
    start_after = np.minimum.accumulate(s[::-1])[::-1]  # earliest start of the work launched from it on
    pos = np.searchsorted(lt, scan.launch_ts[launches], side="left")
    ok = (pos > 0) & (pos < lt.size)
    a, b = end_before[pos[ok] - 1], start_after[pos[ok]]
    gap = b > a
    if not gap.any():
        return 0.0
    t0 = float(scan.ts[sel].min())
    bs, be = scan.ts[sel] - t0, scan.ts[sel] - t0 + scan.dur[sel]
    gs, ge = a[gap] - t0, b[gap] - t0
    return union_length(np.concatenate([gs, bs]), np.concatenate([ge, be])) - union_length(bs, be)


def rank_timeline(scan: TraceScan, mask: np.ndarray) -> tuple[dict[str, float], list[dict[str, Any]], list[str]]:
    """``(rows_us, per_device, notes)``: the rank's eight gpu_timeline rows in µs over the GPU events
    of ``mask`` (module docstring: per device and summed when the file holds several GPUs, recorded
    graph work only), one dict per device when there are several (``device``, ``n_events``, the rows
    in µs, ``busy_pct``, ``idle_pct``; empty for one), and the notes on both conditions.
    Raises NoGpuEventsError when ``mask`` selects no event."""
    launches = unrecorded_graph_launches(scan)
    li = launch_index(scan) if launches.size else None
    devs = sorted_unique(scan.device[mask]) if mask.any() else np.zeros(0, dtype=np.int32)
    if devs.size <= 1:
        tl = gpu_timeline(scan, mask)
        unknown = unrecorded_time(scan, mask, launches, li) if launches.size else 0.0
        _leave_out(tl, unknown)
        return tl, [], _graph_note(scan, launches, unknown)
    t0 = float(scan.ts[mask].min())
    window = float((scan.ts[mask] + scan.dur[mask]).max()) - t0
    rows: dict[str, float] = {}
    per_device = []
    unknown_all = 0.0
    for d in sorted(devs.tolist(), key=lambda c: (c < 0, abs(c))):  # ids, then named GPUs as first seen
        sel = mask & (scan.device == d)
        tl = gpu_timeline(scan, sel)
        tl["total_time"] = window
        tl["idle_time"] = window - tl["busy_time"]
        unknown = unrecorded_time(scan, sel, launches, li) if launches.size else 0.0
        _leave_out(tl, unknown)
        unknown_all += unknown
        tot = tl["total_time"] or 1.0
        per_device.append({"device": scan.device_label(d), "n_events": int(sel.sum()), **tl,
                           "busy_pct": 100.0 * tl["busy_time"] / tot, "idle_pct": 100.0 * tl["idle_time"] / tot})
        for k, v in tl.items():
            rows[k] = rows.get(k, 0.0) + v
    return rows, per_device, [device_note(per_device, window)] + _graph_note(scan, launches, unknown_all)


def _leave_out(tl: dict[str, float], unknown: float) -> None:
    if unknown > 0.0:
        tl["total_time"] -= unknown
        tl["idle_time"] = max(0.0, tl["idle_time"] - unknown)


def device_note(per_device: list[dict[str, Any]], window_us: float) -> str:
    """The note on a file holding several GPUs: per-device busy share, the summed rows, the
    straggling (busiest) device."""
    top = max(per_device, key=lambda r: (r["busy_time"], -r["n_events"]))
    busy = sum(r["busy_time"] for r in per_device) / (sum(r["total_time"] for r in per_device) or 1.0) * 100.0
    each = ", ".join(f"device {r['device']} busy {r['busy_pct']:.1f}%" for r in per_device)
    return (f"{len(per_device)} GPUs in one trace file (devices {', '.join(r['device'] for r in per_device)}: one "
            f"process driving several devices, e.g. nn.DataParallel or a model split over devices): figures per "
            f"device over the common window of {window_us / 1e3:.3f} ms: {each}; the timeline rows are their sums "
            f"(GPU-time over {len(per_device)} devices: busy {busy:.1f}%); device {top['device']} is the busiest, "
            "the straggling device the others wait for")


def _graph_note(scan: TraceScan, launches: np.ndarray, unknown_us: float) -> list[str]:
    if launches.size == 0:
        return []
    total = int(scan.graph_launch_mask().sum())
    steps = sorted({num for num, t, d in scan.steps for x in scan.launch_ts[launches].tolist() if t <= x < t + d})
    where = f" (in step(s) {', '.join(map(str, steps[:12]))}{' ...' if len(steps) > 12 else ''})" if steps else ""
    apis = ", ".join(sorted({scan.cpu_names[int(i)] for i in scan.launch_name[launches]}))
    return [f"{launches.size} of {total} graph launches ({apis}){where} have no recorded kernels: the "
            f"{unknown_us / 1e3:.3f} ms where their replays ran are left out of idle and total time (the timeline "
            f"covers the recorded GPU work). To record them, {GRAPH_RECORD_HINT}"]


def step_unrecorded(scan: TraceScan) -> dict[int, int]:
    """``{ProfilerStep number: graph launches in it without recorded kernels}`` (the step did launch
    GPU work the trace did not record)."""
    launches = unrecorded_graph_launches(scan)
    out: dict[int, int] = {}
    for x in scan.launch_ts[launches].tolist():
        for num, t, d in scan.steps:
            if t <= x < t + d:
                out[num] = out.get(num, 0) + 1
                break
    return out
