"""A telemetry statistic over several wall-clock spans of a job, from the raw samples.

A claim about part of a job (the host CPU over the steady steps only, the profiler's steps and the
job's start left out) names its spans in unix seconds; the verifier re-derives the statistic over
exactly those spans from the raw samples (:mod:`.rawstats`: for ``cpu_util`` the counters'
``100 * (1 - Δidle / Δall)`` between the first and last sample inside a span, plain Python, no
PromQL), independent of the analyst's PromQL ``query_range`` grid.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..errors import InputError
from . import rawstats
from .export import Series

__all__ = ["raw_spans_stat", "spans_key", "claim_spans"]


def spans_key(spans: Iterable[Sequence[float]]) -> tuple[tuple[float, float], ...]:
    """``spans`` (pairs of unix s) as a hashable key, each time rounded to the millisecond."""
    return tuple((round(float(a), 3), round(float(b), 3)) for a, b in spans)


def claim_spans(evidence_args: Iterable[dict[str, Any] | None]) -> list[tuple[str, tuple]]:
    """``(metric, spans key)`` of every evidence item whose ``args`` name ``spans`` (a list of
    ``[start, end]`` unix s) and the logical telemetry ``metric`` they are over."""
    out = []
    for a in evidence_args:
        a = a or {}
        if a.get("spans") and a.get("metric"):
            out.append((str(a["metric"]), spans_key(a["spans"])))
    return out


def raw_spans_stat(series: Sequence[Series], metric: str, jobid: str,
                   spans: Sequence[Sequence[float]], stat: str = "avg") -> tuple[float | None, int]:
    """The ``stat`` of logical ``metric`` (:data:`~.metrics.METRICS`, e.g. ``cpu_util`` in %) over
    the union of ``spans`` (unix s, disjoint) from raw samples: each span's
    :func:`~.rawstats.raw_job_stat_detail` weighted by its sample count (counter intervals for
    ``cpu_util``: equal for a regular sampler, so a time weighting). Returns ``(value, samples)``,
    ``(None, 0)`` when no span holds two samples. Raises :class:`InputError` for a bad span or
    when no ``rmsjob_info`` sample of ``jobid`` lies near a span (the job's hosts are unknown)."""
    num, n = 0.0, 0
    for a, b in spans:
        if not float(a) < float(b):
            raise InputError(f"bad span [{a}, {b}]: need start < end (unix seconds)")
        r = rawstats.raw_job_stat_detail(series, metric, jobid, stat, window=(float(a), float(b)))
        if r.value is not None and r.sample_count > 0:
            num += float(r.value) * r.sample_count
            n += r.sample_count
    return (num / n, n) if n else (None, 0)
