"""The job's GPU telemetry per host and GPU at the raw sample rate, for the report's telemetry plot
(issue 27 point 3): the stored samples themselves (VictoriaMetrics ``/api/v1/export``, no PromQL
grid and no average over a host's GPUs), joined to the job the way the raw-sample statistics are
(:mod:`.rawstats`: the job's hosts from ``rmsjob_info{jobid}``, and its cards where ``rmsjob_info``
names them), each logical metric combined from its vendor series by its :class:`~.metrics.Source`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .export import Series
from .metrics import METRICS
from .rawstats import EDGE_S, JOIN_MARGIN_S, _combined, _gpu_number, _pick_source, job_cards, raw_job_hosts

MAX_POINTS = 2000
"""Samples kept per series (a 0.25 s sampler over 8 minutes; longer series keep every k-th sample,
said in the result): bounds the state a long job carries into the report."""


def gpu_series(series_list: Sequence[Series], metrics: Sequence[str], jobid: str, window: tuple[float, float],
               vendor: str | None = None, max_points: int = MAX_POINTS) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``{metric: {"<host> gpu <index>": [(unix s, value), ...]}}`` from raw samples ``series_list``
    (what ``/api/v1/export`` or an export file returns: the metrics' vendor series and
    ``rmsjob_info``) inside ``window`` (unix s), for each GPU-scope metric of ``metrics``
    (:data:`~.metrics.METRICS` names; node metrics and unknown names are skipped); values in the
    metric's unit (``hbm_used`` in bytes). A series longer than ``max_points`` keeps every k-th
    sample (k = ceil(n / max_points)) and its label says so (``... (every 3rd sample)``). A metric
    with no sample on the job's GPUs is absent. ``{}`` when the job has no ``rmsjob_info`` in the
    window."""
    hosts = raw_job_hosts(series_list, jobid, window, JOIN_MARGIN_S)
    if not hosts:
        return {}
    cards = job_cards(series_list, jobid, window)
    lo, hi = float(window[0]), float(window[1])
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for metric in metrics:
        m = METRICS.get(metric)
        if m is None or m.scope != "gpu":
            continue
        _, src = _pick_source(m, series_list, set(hosts), vendor)
        groups: dict[tuple, dict[str, Series]] = {}
        for s in series_list:
            c = cards.get(s.host)
            if s.name in src.inputs and s.host in hosts and (c is None or _gpu_number(s.metric) in c):
                groups.setdefault(s.labels_without_name(), {})[s.name] = s
        per: dict[str, list[tuple[float, float]]] = {}
        for by_name in groups.values():
            if len(by_name) != len(src.inputs):
                continue
            first = next(iter(by_name.values()))
            ts, vs = _combined(by_name, src)
            # the window's end at whole ms, where PromQL evaluates the claims' statistics (promql.py queries
            # at round(end, 3)): a SLURM end of …713.756802 keeps the sample at …713.757 the claims count
            # (issue 27 report 5 point 3: 180 samples in the claims, 179 drawn)
            end = round(hi, 3)
            pts = [(float(t), float(v)) for t, v in zip(ts, vs) if lo - EDGE_S <= t <= end and np.isfinite(v)]
            if not pts:
                continue
            idx = _gpu_number(first.metric)
            label = f"{first.host} gpu {idx if idx is not None else '?'}"
            k = math.ceil(len(pts) / max_points) if max_points > 0 else 1
            if k > 1:
                pts = pts[::k]
                label += f" (every {k}{'nd' if k == 2 else 'rd' if k == 3 else 'th'} sample)"
            per[label] = pts
        if per:
            out[metric] = dict(sorted(per.items()))
    return out


def selectors(metrics: Sequence[str], jobid: str) -> list[str]:
    """The ``/api/v1/export`` selectors :func:`gpu_series` needs: ``rmsjob_info{jobid}`` and every
    vendor series any source of the GPU-scope ``metrics`` reads."""
    names = sorted({n for mt in metrics if (m := METRICS.get(mt)) is not None and m.scope == "gpu"
                    for v in m.sources for src in m.candidates(v) for n in src.inputs})
    return [f'rmsjob_info{{jobid="{jobid}"}}', *(f'{{__name__="{n}"}}' for n in names)]


__all__ = ["MAX_POINTS", "gpu_series", "selectors"]
