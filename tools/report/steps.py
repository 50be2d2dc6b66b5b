"""Per-step GPU time breakdown (the PyTorch profiler TensorBoard "step time breakdown" view, in
TraceLens's gpu_timeline categories): for each ProfilerStep, its wall time split into computation,
exposed communication, exposed memcpy and idle (the step's time the GPU did nothing: host work,
launch gaps, waits). GPU events are clipped to the step's ``[ts, ts + dur)``; the four parts sum to
the step's duration. Class codes are :data:`ai4s_graph.tools.trace.stream.CLS_COMP` / ``CLS_COMM``
/ ``CLS_MEMCPY`` (TraceLens's assignment, :func:`~ai4s_graph.tools.trace.stream.tracelens_classes`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace.scan import CLS_COMM, CLS_COMP, CLS_MEMCPY
from ..trace.stream import union_length


def step_breakdown(start_us: np.ndarray, end_us: np.ndarray, cls: np.ndarray,
                   steps: list[tuple[int, float, float]]) -> list[dict[str, Any]]:
    """``[{"step", "dur_ms", "computation_ms", "exposed_comm_ms", "exposed_memcpy_ms", "idle_ms"}]``
    per step ``(number, ts_us, dur_us)``, in step order, from GPU intervals ``[start_us, end_us)``
    with class codes ``cls`` (same length). computation = union of compute events; exposed comm =
    union(compute | comm) - computation; exposed memcpy = union(all) - union(compute | comm); idle =
    step duration - union(all). Raises ValueError when the arrays differ in length."""
    s, e, c = (np.asarray(x) for x in (start_us, end_us, cls))
    if not (s.shape == e.shape == c.shape):
        raise ValueError(f"step_breakdown: arrays of lengths {s.size}, {e.size}, {c.size}")
    out = []
    for num, t, d in sorted(steps, key=lambda x: x[1]):
        a, b = np.maximum(s, t), np.minimum(e, t + d)
        m = b > a
        a, b, k = a[m], b[m], c[m]
        comp = k == CLS_COMP
        cc = comp | (k == CLS_COMM)
        comp_t = union_length(a[comp], b[comp])
        cc_t = union_length(a[cc], b[cc])
        busy = union_length(a, b)
        out.append({"step": int(num), "dur_ms": d / 1e3, "computation_ms": comp_t / 1e3,
                    "exposed_comm_ms": (cc_t - comp_t) / 1e3, "exposed_memcpy_ms": (busy - cc_t) / 1e3,
                    "idle_ms": max(d - busy, 0.0) / 1e3})
    return out


__all__ = ["step_breakdown", "CLS_COMP", "CLS_COMM", "CLS_MEMCPY"]
