"""Job statistics from raw telemetry samples in plain Python (the verifiers' path: no PromQL).

Input: :class:`~.export.Series` from a JSON-lines export or ``/api/v1/export``. The job's
instances are the hosts that carry an ``rmsjob_info{jobid}`` sample with value > 0 near the job
(``rmsjob_info`` is the join key only, never the clock); a telemetry series belongs to the job
when its host (``instance`` without a ``:port``, :func:`~.export.host_of`) is one of them, so a
DCGM exporter on ``node1:9400`` joins a job-info exporter on ``node1:8001``.

The time window is given by the caller (the job's SLURM start and end). Without one, each host's
first..last ``rmsjob_info`` sample is used (:func:`raw_job_windows`): the fallback for a run with
no SLURM times, which a stale ``rmsjob_info`` series (one that outlives the job, a known Omnistat
fault) stretches.

Where the job's ``rmsjob_info`` on a host carries a ``card`` label (Omnistat PR#111: several jobs
share the node, each on its own GPUs), only the GPU series of those cards count there
(:func:`job_cards`, read with this module's own code, independent of :mod:`.gpujoin` that the
PromQL path uses); a host without the label counts all its GPUs. A metric's alternate sources
(DCGM profiling counters when ``DCGM_FI_DEV_GPU_UTIL`` is absent) are picked by presence, in
the same order as :mod:`.promql`.

Statistics per series, then across series (:data:`~.metrics.STATS`):

- ``avg``: the TIME-WEIGHTED mean over the window (:func:`time_weighted_mean`): the raw samples in
  ``[start, end]`` as a step function, each sample's value holding until the next sample (the last
  one until ``end``), divided by the time they cover (from the first sample in the window to
  ``end``). This is what VictoriaMetrics' ``integrate()`` sums (MetricsQL docs: "integral over
  raw samples"; a sample holds until the next, as in Prometheus' instant-vector semantics), and
  what :mod:`.promql` evaluates. A plain sample mean weights densely scraped stretches more and
  counts the sample AT ``end`` (which describes the time after the job) like a full interval: on
  the case ``short-job-one-rms-sample`` (100 % for 5 s, then 20 %, at 4 Hz) it gives 59.02 %
  instead of the job's 60 %. A sample before the window start is never held into it (the
  exporter may have been silent, and it describes the time before the job); the stretch before
  the window's first sample is left out of the mean. Sources that combine two raw series
  (``hbm_used_pct``, ``mem_used_pct``, AMD HBM bytes) average the combined values at their common
  sample times (the PromQL path reads them on a 1 s subquery grid: the same to the grid's
  resolution).
- ``max``/``min``/``pNN``: over every raw sample in ``[start, end]`` (the range vector
  ``m[D]`` evaluated at ``end`` with ``D`` one millisecond longer than the job, so the sample at
  the start counts): no evaluation grid, so a 690 W sample between grid points is the max.
- NaN/inf samples (an exporter that lost the device) are left out of every statistic (a
  VictoriaMetrics import drops them too) and counted (:attr:`RawStat.nan_count`); when every sample in
  the window is NaN the statistic is ``None`` with ``sample_count == 0`` and ``nan_count > 0``,
  which callers report as "all NaN", not as an absent series.
- ``cpu_util`` (a counter): ``avg`` = ``100 * (1 - Δidle / Δall)`` between the first and the last
  sample in the window (a time-weighted mean by construction); other statistics over the
  utilisation of each pair of consecutive samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .export import Series, host_of
from .metrics import METRICS, QUANTILE, STATS, MetricDef, Source, _g, check_jobid, check_stat

#: Slack (s) at the window start: the PromQL range is ``(end - D, end]`` with whole milliseconds.
EDGE_S = 0.001
#: How far around the job window an ``rmsjob_info`` sample still names the job's hosts (s): one
#: Prometheus look-back delta (5 min), longer than any exporter's scrape interval, so a job shorter
#: than the scrape interval (one sample, or none inside its window) still finds its hosts.
JOIN_MARGIN_S = 300.0


def raw_job_windows(series_list: Sequence[Series], jobid: str) -> dict[str, tuple[float, float]]:
    """Per instance, the first and last timestamp (unix s) of ``rmsjob_info{jobid}`` samples
    with value > 0. ``{}`` when the job has none."""
    jid = check_jobid(jobid)
    win: dict[str, tuple[float, float]] = {}
    for s in series_list:
        if s.name != "rmsjob_info" or s.metric.get("jobid") != jid:
            continue
        ts = [t for t, v in zip(s.timestamps, s.values) if v > 0]
        if not ts:
            continue
        lo, hi = min(ts), max(ts)
        if s.instance in win:
            lo, hi = min(lo, win[s.instance][0]), max(hi, win[s.instance][1])
        win[s.instance] = (lo, hi)
    return win


def raw_job_hosts(series_list: Sequence[Series], jobid: str, window: tuple[float, float] | None = None,
                  margin_s: float = JOIN_MARGIN_S) -> dict[str, int]:
    """The job's hosts: ``{host: number of rmsjob_info{jobid} samples > 0}`` within ``window`` ±
    ``margin_s`` (all time when ``window`` is None). ``{}`` when there is none."""
    jid = check_jobid(jobid)
    lo, hi = (float(window[0]) - margin_s, float(window[1]) + margin_s) if window else (-np.inf, np.inf)
    out: dict[str, int] = {}
    for s in series_list:
        if s.name == "rmsjob_info" and s.metric.get("jobid") == jid:
            n = sum(1 for t, v in zip(s.timestamps, s.values) if v > 0 and lo <= t <= hi)
            if n:
                out[s.host] = out.get(s.host, 0) + n
    return out


def job_cards(series_list: Sequence[Series], jobid: str, window: tuple[float, float] | None = None,
              margin_s: float = JOIN_MARGIN_S) -> dict[str, set[int] | None]:
    """``{host: the job's GPU indices there, or None when its rmsjob_info has no card label}``
    from the raw ``rmsjob_info{jobid}`` samples > 0 within ``window`` ± ``margin_s`` (all time
    when None). The ``card`` label (Omnistat PR#111) is read here with this module's own reader:
    one index, or a list of indices and ranges (``0,1``, ``0-3``, ``[0-1,4]``, ``IDX:0-3``).
    Raises ``InputError`` for a card label that is neither."""
    jid = check_jobid(jobid)
    lo, hi = (float(window[0]) - margin_s, float(window[1]) + margin_s) if window else (-np.inf, np.inf)
    out: dict[str, set[int] | None] = {}
    for s in series_list:
        if s.name != "rmsjob_info" or s.metric.get("jobid") != jid:
            continue
        if not any(v > 0 and lo <= t <= hi for t, v in zip(s.timestamps, s.values)):
            continue
        card = s.metric.get("card")
        if card is None:
            out.setdefault(s.host, None)
            continue
        found: set[int] = set()
        body = card.replace("IDX:", "").replace("[", " ").replace("]", " ").replace(",", " ")
        for tok in body.split():
            a, _, b = tok.partition("-")
            if not (a.isdigit() and (not b or b.isdigit())) or (b and int(b) < int(a)):
                raise InputError(f"rmsjob_info card label {card!r} on {s.host} is not a list of GPU indices")
            found.update(range(int(a), int(b or a) + 1))
        prev = out.get(s.host)
        out[s.host] = found | (prev or set())
    return out


def _gpu_number(labels: dict[str, str]) -> int | None:
    """A GPU series' index: Omnistat ``card``, dcgm-exporter ``gpu``, else ``device`` ``nvidia<N>``."""
    for k in ("card", "gpu"):
        if labels.get(k, "").isdigit():
            return int(labels[k])
    dev = labels.get("device", "")
    return int(dev[6:]) if dev.startswith("nvidia") and dev[6:].isdigit() else None


def time_weighted_mean(timestamps: Sequence[float], values: Sequence[float], end: float) -> float:
    """The time-weighted mean of samples ``(timestamps[i], values[i])`` (unix s, ascending, all
    finite, all ``<= end``) over ``[timestamps[0], end]``: each value holds until the next sample,
    the last one until ``end`` (a step function, as VictoriaMetrics' ``integrate()`` reads raw
    samples). When the samples cover no time (one sample, at ``end``) it is their plain mean.

    Example: samples 100 at 0.00, 0.25, ..., 4.75 s and 20 at 5.00, ..., 10.00 s, end 10 s ->
    (100 * 5 + 20 * 5) / 10 = 60 (the plain mean of the 41 samples is 59.02). Raises
    ``InputError`` when there are no samples."""
    if not len(values):
        raise InputError("time-weighted mean of no samples")
    # whole milliseconds (as the TSDB stores times): unix seconds in float64 resolve only ~0.2 µs
    t = np.round(np.asarray(timestamps, dtype=float) * 1000.0).astype(np.int64)
    v = np.asarray(values, dtype=float)
    w = np.diff(np.append(t, max(int(round(float(end) * 1000.0)), int(t[-1])))) / 1000.0
    total = float(w.sum())
    if total <= 0:
        return float(v.mean())
    return float((v * w).sum() / total)


def _stat_of(values: Sequence[float], stat: str) -> float:
    a = np.asarray(values, dtype=float)
    if stat == "avg":
        return float(a.mean())
    if stat == "max":
        return float(a.max())
    if stat == "min":
        return float(a.min())
    return float(np.quantile(a, QUANTILE[stat]))


def _across(values: Sequence[float], stat: str) -> float:
    outer = STATS[stat]
    return float(max(values) if outer == "max" else min(values) if outer == "min" else np.mean(values))


def _pick_source(m: MetricDef, series_list: Sequence[Series], hosts: set[str], vendor: str | None) -> tuple[str, Source]:
    if vendor is not None and not m.candidates(vendor):
        raise InputError(f"metric {m.name!r} has no {vendor!r} source")
    present = {s.name for s in series_list if s.host in hosts}
    if vendor is not None:
        cands = [(vendor, c) for c in m.candidates(vendor)]
    else:
        cands = [(v, c) for v in m.sources for c in m.candidates(v)]
    for v, src in cands:
        if all(i in present for i in src.inputs):
            return v, src
    return cands[0] if cands else next(iter(m.sources.items()))


def _combined(by_name: dict[str, Series], src: Source) -> tuple[list[float], list[float]]:
    """Timestamps and values of ``src`` combined at the timestamps all inputs share."""
    maps = [dict(zip(by_name[n].timestamps, by_name[n].values)) for n in src.inputs]
    common = sorted(set(maps[0]).intersection(*maps[1:])) if len(maps) > 1 else sorted(maps[0])
    vals = []
    for t in common:
        args = [m[t] for m in maps]
        vals.append(src.combine(*args) if src.combine else args[0])
    return common, vals


def _cpu_stat(series_list: Sequence[Series], src: Source, hosts: set[str], windows: dict[str, tuple[float, float]],
              stat: str) -> dict[str, tuple[float, int]]:
    """``{host: (statistic, intervals)}`` of host CPU utilisation from ``node_cpu_seconds_total``."""
    acc: dict[str, dict[float, list[float]]] = {}
    for s in series_list:
        if s.name == src.inputs[0] and s.host in hosts:
            per_t = acc.setdefault(s.host, {})
            for t, v in zip(s.timestamps, s.values):
                cell = per_t.setdefault(t, [0.0, 0.0])
                cell[1] += v
                if s.metric.get("mode") == "idle":
                    cell[0] += v
    out = {}
    for host, per_t in acc.items():
        lo, hi = windows[host]
        ts = sorted(per_t)
        pts = [t for t in ts if lo - EDGE_S <= t <= hi]
        if len(pts) < 2:
            continue
        if stat == "avg":
            d_idle, d_all = per_t[pts[-1]][0] - per_t[pts[0]][0], per_t[pts[-1]][1] - per_t[pts[0]][1]
            if d_all > 0:
                out[host] = (100.0 * (1.0 - d_idle / d_all), len(pts) - 1)
            continue
        utils = []
        for a, b in zip(pts, pts[1:]):
            d_idle, d_all = per_t[b][0] - per_t[a][0], per_t[b][1] - per_t[a][1]
            if d_all > 0 and d_idle >= 0:
                utils.append(100.0 * (1.0 - d_idle / d_all))
        if utils:
            out[host] = (_stat_of(utils, stat), len(utils))
    return out


@dataclass
class RawStat:
    """What :func:`raw_job_stat_detail` returns: ``value`` (``None`` if no samples),
    ``per_instance`` values (keyed by host), ``sample_count`` (raw samples in the window, or
    counter intervals for ``cpu_util``), the ``vendor`` whose names were read, the per-host
    ``windows`` used and ``window_source`` (``"given"`` or ``"rmsjob_info"``)."""

    value: float | None
    per_instance: dict[str, float]
    sample_count: int
    vendor: str
    windows: dict[str, tuple[float, float]]
    window_source: str = "given"
    hosts: dict[str, int] = field(default_factory=dict)
    #: NaN/inf samples in the window, left out of the statistic (``sample_count`` is the finite ones).
    nan_count: int = 0
    #: the source read (its raw names), and how the report names it when it is not the usual one
    source_metrics: tuple[str, ...] = ()
    source_label: str = ""


def raw_job_stat_detail(series_list: Sequence[Series], metric: str, jobid: str, stat: str = "avg",
                        *, vendor: str | None = None, window: tuple[float, float] | None = None) -> RawStat:
    """Like :func:`raw_job_stat`, with per-host values, sample count and windows."""
    check_stat(stat)
    if window is not None:
        start, end = float(window[0]), float(window[1])
        if not (np.isfinite(start) and np.isfinite(end)) or end < start:
            raise InputError(f"bad time window {window!r}: need finite start <= end (unix seconds)")
        hosts = raw_job_hosts(series_list, jobid, (start, end))
        if not hosts:
            raise InputError(f"unknown job id {jobid!r}: no rmsjob_info{{jobid=\"{jobid}\"}} samples within "
                             f"{JOIN_MARGIN_S:.0f} s of its window in the export")
        windows = {h: (start, end) for h in hosts}
        source = "given"
    else:
        inst_w = raw_job_windows(series_list, jobid)
        if not inst_w:
            raise InputError(f"unknown job id {jobid!r}: no rmsjob_info{{jobid=\"{jobid}\"}} samples in the export")
        hosts = raw_job_hosts(series_list, jobid)
        windows = {}
        for inst, (lo, hi) in inst_w.items():
            h = host_of(inst)
            windows[h] = (min(lo, windows.get(h, (lo, hi))[0]), max(hi, windows.get(h, (lo, hi))[1]))
        source = "rmsjob_info"
    mdef = METRICS.get(metric)
    if mdef is not None:
        vendor, src = _pick_source(mdef, series_list, set(windows), vendor)
    else:
        src, vendor = _g(metric), vendor or "raw"
    # a GPU series counts when its host is the job's and, where rmsjob_info names cards, it is one of them
    cards = job_cards(series_list, jobid, window) if (mdef is None or mdef.scope == "gpu") else {}

    def mine(s: Series) -> bool:
        c = cards.get(s.host)
        return c is None or _gpu_number(s.metric) in c
    per_series: list[tuple[str, float, int]] = []
    nan_count = 0
    if src.kind == "cpu_counter":
        per_series = [(h, v, n) for h, (v, n) in _cpu_stat(series_list, src, set(windows), windows, stat).items()]
    else:
        groups: dict[tuple, dict[str, Series]] = {}
        for s in series_list:
            if s.name in src.inputs and s.host in windows and mine(s):
                groups.setdefault(s.labels_without_name(), {})[s.name] = s
        for by_name in groups.values():
            if len(by_name) != len(src.inputs):
                continue
            host = next(iter(by_name.values())).host
            lo, hi = windows[host]
            ts, vs = _combined(by_name, src)
            pts = [(t, v) for t, v in zip(ts, vs) if lo - EDGE_S <= t <= hi]
            finite = [(t, v) for t, v in pts if np.isfinite(v)]
            nan_count += len(pts) - len(finite)
            if not finite:
                continue
            if stat == "avg" and src.single:
                # end at millisecond precision: TSDB times are whole milliseconds (promql evaluates there)
                val = time_weighted_mean([t for t, _ in finite], [v for _, v in finite], round(hi, 3))
            else:
                val = _stat_of([v for _, v in finite], stat)
            per_series.append((host, val, len(finite)))
    if not per_series:
        return RawStat(None, {}, 0, vendor, windows, source, hosts, nan_count, src.inputs, src.label)
    per_host: dict[str, list[float]] = {}
    for h, v, _ in per_series:
        per_host.setdefault(h, []).append(v)
    return RawStat(value=_across([v for _, v, _ in per_series], stat),
                   per_instance={h: _across(vs, stat) for h, vs in per_host.items()},
                   sample_count=sum(n for _, _, n in per_series), vendor=vendor, windows=windows,
                   window_source=source, hosts=hosts, nan_count=nan_count, source_metrics=src.inputs,
                   source_label=src.label)


def raw_job_stat(series_list: Sequence[Series], metric: str, jobid: str, stat: str = "avg",
                 *, vendor: str | None = None, window: tuple[float, float] | None = None) -> float | None:
    """The statistic of ``metric`` over job ``jobid`` from raw samples (no PromQL).

    ``metric``: a logical name of :data:`~.metrics.METRICS` (vendor chosen by which raw names are
    present on the job's hosts, or ``vendor=``) or a raw metric name (``DCGM_FI_DEV_POWER_USAGE``).
    ``window``: ``(start, end)`` unix seconds, the job's SLURM times; ``None`` falls back to each
    host's ``rmsjob_info`` span. Statistics as in the module docstring. Returns the value in the
    metric's unit (``None`` when the job's hosts have no samples of the metric in the window).
    Raises ``InputError`` for a bad or unknown job id (no ``rmsjob_info`` samples near the window),
    a bad window or an unknown stat."""
    return raw_job_stat_detail(series_list, metric, jobid, stat, vendor=vendor, window=window).value
