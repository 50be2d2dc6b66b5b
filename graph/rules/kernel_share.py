"""Kernel-time shares for the kernel-level causes: the time of one kernel family (a name pattern)
as a share of the profiled window, from the tables the one pass made (the analyst's kernel time by
name, :attr:`ai4s_graph.tools.trace.onepass.NameCounter.kernel_us`; the verifier reader's,
:func:`ai4s_graph.tools.trace.onepass.kernel_time_by_name`). Pure functions of tables."""

from __future__ import annotations

import re
from typing import Any


def family_us(kernel_us: dict[str, float] | None, include: re.Pattern[str],
              exclude: re.Pattern[str] | None = None) -> float:
    """Summed kernel time (µs) of the names ``include`` matches and ``exclude`` does not."""
    return sum(v for k, v in (kernel_us or {}).items()
               if include.search(k) and not (exclude is not None and exclude.search(k)))


def window_us(timeline: dict[str, Any] | None) -> float | None:
    """The GPU timeline's ``total_time`` (the profiled window, µs), or None when absent or zero."""
    row = (timeline or {}).get("total_time") or {}
    ms = row.get("time_ms") if isinstance(row, dict) else getattr(row, "time_ms", None)
    return float(ms) * 1e3 if ms else None


def share(part_us: float, total_us: float | None) -> float | None:
    """``part_us / total_us`` rounded to 4 digits and capped at 1 (kernels on several streams can
    overlap), or None without a window."""
    if not total_us:
        return None
    return round(min(1.0, part_us / total_us), 4)
