"""A telemetry statistic from raw samples over a sub-window of the job (offsets from its start).

A claim about part of a job ("the power over the first 5 s") must be checked over that part, not
over the whole job. :func:`raw_subwindow_stat` turns the offsets into a window in unix seconds,
counted from the job window the caller gives (the one the analyst's offsets counted from), and
applies :func:`~ai4s_graph.tools.telemetry.rawstats.raw_job_stat_detail` over it.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import InputError
from . import rawstats
from .export import Series

__all__ = ["subwindow_of", "raw_subwindow_stat"]


def subwindow_of(args: dict[str, Any] | None) -> tuple[float, float | None] | None:
    """``(start_offset_s, end_offset_s or None)`` named by a tool call's arguments, or None when
    they name no sub-window (both absent)."""
    a = args or {}
    if a.get("start_offset_s") is None and a.get("end_offset_s") is None:
        return None
    e = a.get("end_offset_s")
    return float(a.get("start_offset_s") or 0.0), (float(e) if e is not None else None)


def raw_subwindow_stat(series: Sequence[Series], metric: str, jobid: str, stat: str,
                       start_offset_s: float | None, end_offset_s: float | None,
                       base: tuple[float, float] | None = None) -> tuple[rawstats.RawStat, tuple[float, float]]:
    """The statistic of ``metric`` over the sub-window, and that window as offsets ``(s, e)`` in s.

    ``base``: the job window (unix s) the offsets count from; default the span of the job's
    ``rmsjob_info`` samples. ``end_offset_s`` None = the job's end. Raises :class:`InputError` for
    a sub-window outside the job window or an unknown job id."""
    if base is None:
        windows = rawstats.raw_job_windows(series, jobid)
        if not windows:
            raise InputError(f"no rmsjob_info samples for job {jobid} in the raw telemetry")
        base = (min(w[0] for w in windows.values()), max(w[1] for w in windows.values()))
    w0, w1 = float(base[0]), float(base[1])
    s = w0 + (start_offset_s or 0.0)
    e = w0 + end_offset_s if end_offset_s is not None else w1
    if not (w0 <= s < e <= w1 + 1e-6):
        raise InputError(f"sub-window [{start_offset_s}, {end_offset_s}] s is outside the job window of {w1 - w0:.1f} s")
    return rawstats.raw_job_stat_detail(series, metric, jobid, stat, window=(s, e)), (s - w0, e - w0)
