"""The step's time budget per rank (issue 34 point 6) and its critical path (point 2), as numbers for
``report.json`` (``step_budget``) and as rows for ``report.md``'s tables, from each rank's step
accounting (:class:`~ai4s_graph.state.steps.StepBreakdown` as a dict, ``rank["step_accounting"]``).

Both sides of a rank's table add up to its mean profiled step: the GPU side is computation +
exposed communication + exposed memcpy + idle (TraceLens's gpu_timeline definitions clipped to the
step), the host side is the host state at every instant (``state/steps.py:HOST_CATEGORIES``), each
with the part of it spent while the GPU was idle (those parts add up to the GPU idle time) and its
time on the step's critical path. Rendering only: no verdict is drawn here.
"""

from __future__ import annotations

from typing import Any

from ...state.steps import HOST_CATEGORIES

GPU_ROWS = (("computation", "computation_us", "gpu:computation"),
            ("exposed communication", "exposed_comm_us", "gpu:communication"),
            ("exposed memcpy", "exposed_memcpy_us", "gpu:memcpy"), ("idle", "idle_us", None))
"""GPU side: label, field of ``mean_gpu``, critical-path category."""
HOST_LABELS = {"launch": "launching GPU work", "allocator": "in the allocator", "sync": "waiting on the device (sync)",
               "dataloader": "in the DataLoader", "optimizer": "in the optimizer step",
               "runtime_other": "other runtime calls", "op": "ops' CPU side", "outside_ops": "outside any recorded op"}
"""Host category -> its words in the table (``tools/trace/host_names.py`` defines each)."""
PATH_OTHER = {"launch_delay": "launch to kernel start", "gpu_gap": "gaps on a stream", "gpu_wait": "cross-stream waits",
              "sync_return": "sync returns"}
"""Critical-path categories that are neither a host state nor a GPU part (``state/steps.py:CriticalPath``)."""
TOP = 3
"""Ops and call sites listed per rank (the accounting keeps the largest of each step)."""


def _path_tops(steps: list[dict[str, Any]], key: str, length_us: float) -> list[dict[str, Any]]:
    tot: dict[str, float] = {}
    for s in steps:
        for x in (s.get("critical_path") or {}).get(key) or []:
            tot[x["key"]] = tot.get(x["key"], 0.0) + float(x["us"])
    n = len(steps)
    top = sorted(tot.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    return [{"key": k, "ms": v / n / 1e3, "share": v / length_us if length_us > 0 else 0.0} for k, v in top]


def rank_budget(acc: dict[str, Any] | None, rank: int | None) -> dict[str, Any] | None:
    """One rank's budget, means per profiled step in ms: ``{"rank", "steps", "step_ms", "unit": "ms",
    "per_step": [{"step", "wall_ms", "computation_ms", "exposed_comm_ms", "exposed_memcpy_ms", "idle_ms"}]``
    (each profiled step's GPU split, the step picture's bars),
    "gpu": {label: ms}, "host": {category: ms}, "host_while_gpu_idle": {category: ms},
    "critical_path": {"length_ms", "by_category": {category: ms}, "top_ops": [{key, ms, share}],
    "top_sites": [...], "has_python_stacks", "python_stack_note"}}``; None without steps. ``share``:
    of the summed critical-path length of the steps (each path spans its step)."""
    steps = (acc or {}).get("steps") or []
    if not steps:
        return None
    n = len(steps)
    mean_gpu = acc.get("mean_gpu") or {}
    path_len = sum(float((s.get("critical_path") or {}).get("length_us") or 0.0) for s in steps)
    by_cat: dict[str, float] = {}
    for s in steps:
        for k, v in ((s.get("critical_path") or {}).get("by_category") or {}).items():
            by_cat[k] = by_cat.get(k, 0.0) + float(v) / n / 1e3
    per_step = [{"step": int(s["step"]), "wall_ms": float(s["wall_us"]) / 1e3,
                 "computation_ms": float(s["gpu"]["computation_us"]) / 1e3,
                 "exposed_comm_ms": float(s["gpu"]["exposed_comm_us"]) / 1e3,
                 "exposed_memcpy_ms": float(s["gpu"]["exposed_memcpy_us"]) / 1e3,
                 "idle_ms": float(s["gpu"]["idle_us"]) / 1e3} for s in steps]
    return {"rank": rank, "steps": n, "unit": "ms", "per_step": per_step,
            "step_ms": sum(float(s["wall_us"]) for s in steps) / n / 1e3,
            "gpu": {label: float(mean_gpu.get(f) or 0.0) / 1e3 for label, f, _ in GPU_ROWS},
            "host": {c: float((acc.get("mean_host_us") or {}).get(c) or 0.0) / 1e3 for c in HOST_CATEGORIES},
            "host_while_gpu_idle": {c: float((acc.get("mean_idle_by_host_us") or {}).get(c) or 0.0) / 1e3
                                    for c in HOST_CATEGORIES},
            "critical_path": {"length_ms": path_len / n / 1e3, "by_category": by_cat,
                              "top_ops": _path_tops(steps, "top_ops", path_len),
                              "top_sites": _path_tops(steps, "top_sites", path_len),
                              "has_python_stacks": bool(acc.get("has_python_stacks")),
                              "python_stack_note": str(acc.get("python_stack_note") or "")}}


def budget_rows(b: dict[str, Any]) -> list[dict[str, Any]]:
    """The table rows of one rank's budget (:func:`rank_budget`): ``side`` (GPU / host), ``what``,
    ``ms``, ``pct`` (of the step), ``idle_ms`` (host rows: of it while the GPU was idle; None for
    GPU rows), ``path_ms`` (its time on the critical path; None for GPU idle). Host rows with no
    time are left out."""
    step = b["step_ms"] or 0.0
    path = b["critical_path"]["by_category"]

    def pct(ms: float) -> float:
        return 100.0 * ms / step if step > 0 else 0.0

    rows = [{"side": "GPU", "what": label, "ms": b["gpu"][label], "pct": pct(b["gpu"][label]), "idle_ms": None,
             "path_ms": path.get(pc, 0.0) if pc else None} for label, _, pc in GPU_ROWS]
    rows += [{"side": "host", "what": HOST_LABELS[c], "ms": b["host"][c], "pct": pct(b["host"][c]),
              "idle_ms": b["host_while_gpu_idle"][c], "path_ms": path.get(c, 0.0)}
             for c in HOST_CATEGORIES if b["host"][c] > 0]
    return rows


def path_text(b: dict[str, Any]) -> str:
    """The critical path of one rank in a sentence: its top ops and call sites with their shares,
    the other path parts (launch delays, stream gaps) when present, or why no call site is named."""
    cp = b["critical_path"]
    s = f"Critical path ({cp['length_ms']:.4g} ms per step): top ops " + (
        ", ".join(f"`{x['key']}` {100 * x['share']:.0f}%" for x in cp["top_ops"]) or "none recorded")
    if cp["top_sites"]:
        s += "; top Python call sites " + ", ".join(f"`{x['key']}` {100 * x['share']:.0f}%" for x in cp["top_sites"])
    elif not cp["has_python_stacks"]:
        s += "; no Python call site: the trace holds no Python stacks (profile with with_stack=True)"
    other = [f"{w} {cp['by_category'][k]:.3g} ms" for k, w in PATH_OTHER.items() if cp["by_category"].get(k, 0) >= 0.001]
    if other:
        s += "; also on the path: " + ", ".join(other)
    return s + "."


__all__ = ["GPU_ROWS", "HOST_LABELS", "budget_rows", "path_text", "rank_budget"]
