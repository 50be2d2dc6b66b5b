"""Job-scoped GPU and node telemetry from a Prometheus-compatible TSDB (VictoriaMetrics), plus an
independent raw-sample path for the verifiers.

Two paths compute the same numbers:

1. **PromQL** (:class:`PromQL`, the analysts' path). Telemetry series carry no ``jobid`` label;
   a job's samples are selected by joining on ``instance`` with Omnistat's ``rmsjob_info``
   (seed 000 lesson 5, :func:`job_join`). Old jobs need an explicit evaluation time inside the
   job window (lesson 20), and a subquery needs an explicit step: on VictoriaMetrics 1.79
   ``avg_over_time((<joined>)[41s])`` returned an empty vector where ``[41s:1s]`` returned 89.4 %
   for job 91003 (``/work/shared/notes/victoriametrics.md``). So a statistic is
   ``<outer>(<fn>_over_time((<joined>)[<D>s:<S>s]))`` evaluated at ``time=ceil(end)`` with
   ``D = ceil(end) - floor(start)``; the query text is kept in :class:`StatResult` so a claim
   can carry it as evidence.
2. **Raw** (:func:`load_export` / :func:`export_raw` + :func:`raw_job_stat`, the verifiers'
   path, no PromQL). Reads the JSON-lines export (``/api/v1/export`` format), finds each
   instance's job window from the ``rmsjob_info{jobid}`` samples and computes the statistic from
   every raw sample inside it.

The subquery samples each series once per step (the last sample at or before each whole
second) while the raw path uses every sample, so the two agree closely but not bit-for-bit
(job 91003 ``gpu_util`` avg: 89.41 % vs 89.38 %); compare with a small tolerance.

Statistics (``stat``): ``avg``, ``max``, ``min``, ``p50``, ``p90`` over time per series (a GPU, or
a node for node metrics), then across series: ``avg`` -> mean, ``max`` -> max, ``min`` -> min,
``pNN`` -> mean of the per-series quantiles. Quantiles interpolate linearly between order
statistics (Prometheus ``quantile_over_time`` and ``numpy.quantile`` default).

Metric names (one logical name each, :data:`METRICS`):

- NVIDIA: dcgm-exporter's names (``DCGM_FI_DEV_*``; NVIDIA dcgm-exporter
  ``etc/default-counters.csv`` and the DCGM field docs), as in the shared perf-runs exports.
- AMD: Omnistat's ``rocm_*`` names, from ROCm/omnistat ``docs/metrics.md`` ("ROCm" collector
  table) and ``omnistat/collector_amdsmi.py`` (which adds ``rocm_vram_busy_percentage`` =
  amd-smi ``average_umc_activity``; power and sclk carry a ``source`` label, temperature a
  ``location`` label). Omnistat reports VRAM as ``rocm_vram_used_percentage`` and
  ``rocm_vram_total_bytes`` only, so used/free bytes are derived from the two.
- Node (CPU-only jobs): node_exporter's ``node_cpu_seconds_total`` (counter, label ``mode``),
  ``node_memory_MemAvailable_bytes``, ``node_memory_MemTotal_bytes``, ``node_load1``. (Omnistat's
  host collector has equivalents — ``omnistat_host_cpu_aggregate_core_utilization``,
  ``omnistat_mem_available_bytes``, ``omnistat_mem_total_bytes``, ``omnistat_host_cpu_load1`` —
  not mapped here.)

HBM is normalised to **bytes** on both vendors (dcgm-exporter's ``FB_*`` fields are MiB and are
multiplied by 1048576). ``hbm_total`` on NVIDIA is ``FB_USED + FB_FREE`` (excludes the driver's
``FB_RESERVED``).

Errors: an unreachable TSDB raises :class:`ToolUnavailableError` with one line
("TSDB at http://127.0.0.1:9 unreachable: connection refused") after at most 2 attempts
(connection errors only; a 4xx is never retried); a bad job id (anything outside
``[A-Za-z0-9_.-]+``), an unknown metric or stat, a malformed export, and an unknown job id in
:meth:`PromQL.job_window` / :func:`raw_job_stat` raise :class:`InputError`.
Unknown-job policy: :meth:`PromQL.job_window` raises ``InputError`` ("unknown job id ...: no
rmsjob_info samples"), so an analyst learns it before asking for statistics; given an explicit
window, :meth:`PromQL.job_stat` of a job (or metric) with no samples there returns an empty
result (``value=None``, ``sample_count=0``) and :meth:`PromQL.job_series` an empty dict.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_fixed
from urllib3.util.retry import Retry

from ..errors import InputError, ToolUnavailableError

Vendor = Literal["nvidia", "amd", "none"]
Stat = Literal["avg", "max", "min", "p50", "p90"]

STATS: dict[str, tuple[str, str]] = {
    # stat -> (PromQL *_over_time call with {inner} placeholder, outer aggregation across series)
    "avg": ("avg_over_time({inner})", "avg"),
    "max": ("max_over_time({inner})", "max"),
    "min": ("min_over_time({inner})", "min"),
    "p50": ("quantile_over_time(0.5, {inner})", "avg"),
    "p90": ("quantile_over_time(0.9, {inner})", "avg"),
}
_QUANTILE = {"p50": 0.5, "p90": 0.9}

JOBID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
MIB = 1048576.0
#: Subquery step (s) for job statistics: one point per second (notes: ``[41s:1s]``); raised for
#: very long jobs so a series never exceeds ``MAX_SUBQUERY_POINTS`` points.
DEFAULT_STEP_S = 1
MAX_SUBQUERY_POINTS = 20000
#: ``rate()`` window (s) for counter-based node metrics (``cpu_util``); 0 = MetricsQL's automatic
#: window (max(step, sample interval)), which suits both our 0.5 s sampler and a 15 s scrape.
DEFAULT_RATE_WINDOW_S = 0


# --------------------------------------------------------------------------------------------
# Metric map
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """How one vendor exposes a logical metric.

    ``expr``: PromQL expression without the job join (``$RW`` is replaced by the rate window);
    ``inputs``: the raw metric names it reads; ``combine``: the same arithmetic on raw values at
    one timestamp (one argument per input, same label set); ``kind``: ``gauge`` or
    ``cpu_counter`` (util % from ``node_cpu_seconds_total`` deltas)."""

    expr: str
    inputs: tuple[str, ...]
    combine: Callable[..., float] | None = None
    kind: Literal["gauge", "cpu_counter"] = "gauge"


@dataclass(frozen=True)
class MetricDef:
    """A logical metric: ``unit`` of the normalised value, ``scope`` ``gpu`` or ``node``, and
    its ``sources`` per vendor (``nvidia``, ``amd`` for GPU metrics; ``node`` for node metrics)."""

    name: str
    unit: str
    scope: Literal["gpu", "node"]
    description: str
    sources: dict[str, Source] = field(default_factory=dict)


def _g(name: str) -> Source:
    return Source(expr=name, inputs=(name,))


METRICS: dict[str, MetricDef] = {
    m.name: m
    for m in [
        MetricDef("gpu_util", "%", "gpu", "GPU busy (graphics/compute activity) percent", {
            "nvidia": _g("DCGM_FI_DEV_GPU_UTIL"),
            "amd": _g("rocm_utilization_percentage"),
        }),
        MetricDef("sm_clock", "MHz", "gpu", "SM / GFX (shader) clock", {
            "nvidia": _g("DCGM_FI_DEV_SM_CLOCK"),
            "amd": _g("rocm_sclk_clock_mhz"),
        }),
        MetricDef("mem_clock", "MHz", "gpu", "memory clock", {
            "nvidia": _g("DCGM_FI_DEV_MEM_CLOCK"),
            "amd": _g("rocm_mclk_clock_mhz"),
        }),
        MetricDef("power", "W", "gpu", "board / socket power", {
            "nvidia": _g("DCGM_FI_DEV_POWER_USAGE"),
            "amd": _g("rocm_average_socket_power_watts"),
        }),
        MetricDef("gpu_temp", "°C", "gpu", "GPU (edge/die) temperature", {
            "nvidia": _g("DCGM_FI_DEV_GPU_TEMP"),
            "amd": _g("rocm_temperature_celsius"),
        }),
        MetricDef("mem_bw_util", "%", "gpu",
                  "memory-controller busy percent (NVIDIA mem copy util; AMD UMC activity)", {
            "nvidia": _g("DCGM_FI_DEV_MEM_COPY_UTIL"),
            "amd": _g("rocm_vram_busy_percentage"),
        }),
        MetricDef("hbm_used", "bytes", "gpu", "device memory in use", {
            "nvidia": Source("DCGM_FI_DEV_FB_USED * 1048576", ("DCGM_FI_DEV_FB_USED",),
                             lambda used: used * MIB),
            "amd": Source("rocm_vram_used_percentage / 100 * rocm_vram_total_bytes",
                          ("rocm_vram_used_percentage", "rocm_vram_total_bytes"),
                          lambda pct, total: pct / 100 * total),
        }),
        MetricDef("hbm_free", "bytes", "gpu", "device memory free", {
            "nvidia": Source("DCGM_FI_DEV_FB_FREE * 1048576", ("DCGM_FI_DEV_FB_FREE",),
                             lambda free: free * MIB),
            "amd": Source("(100 - rocm_vram_used_percentage) / 100 * rocm_vram_total_bytes",
                          ("rocm_vram_used_percentage", "rocm_vram_total_bytes"),
                          lambda pct, total: (100 - pct) / 100 * total),
        }),
        MetricDef("hbm_total", "bytes", "gpu", "device memory total (NVIDIA: used + free)", {
            "nvidia": Source("(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) * 1048576",
                             ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
                             lambda used, free: (used + free) * MIB),
            "amd": _g("rocm_vram_total_bytes"),
        }),
        MetricDef("hbm_used_pct", "%", "gpu", "device memory in use, percent of total", {
            "nvidia": Source("100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
                             ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
                             lambda used, free: 100 * used / (used + free)),
            "amd": _g("rocm_vram_used_percentage"),
        }),
        MetricDef("cpu_util", "%", "node", "host CPU busy percent (all cores, 100 - idle)", {
            "node": Source('100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[$RWs])))',
                           ("node_cpu_seconds_total",), kind="cpu_counter"),
        }),
        MetricDef("mem_available", "bytes", "node", "host memory available", {
            "node": _g("node_memory_MemAvailable_bytes"),
        }),
        MetricDef("mem_total", "bytes", "node", "host memory total", {
            "node": _g("node_memory_MemTotal_bytes"),
        }),
        MetricDef("mem_used_pct", "%", "node", "host memory in use, percent (1 - available/total)", {
            "node": Source("100 * (1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes)",
                           ("node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes"),
                           lambda avail, total: 100 * (1 - avail / total)),
        }),
        MetricDef("load1", "1", "node", "host 1-minute load average", {
            "node": _g("node_load1"),
        }),
    ]
}

#: The metric that decides the vendor in :meth:`PromQL.detect_vendor`.
VENDOR_PROBE = "gpu_util"


def metric_def(logical: str) -> MetricDef:
    """The :class:`MetricDef` of a logical metric name; ``InputError`` if unknown."""
    try:
        return METRICS[logical]
    except KeyError:
        raise InputError(f"unknown telemetry metric {logical!r}; known: {', '.join(METRICS)}") from None


def check_jobid(jobid: str) -> str:
    """``jobid`` if it matches ``[A-Za-z0-9_.-]+`` (guards PromQL label values against
    injection: a quote or brace would end the matcher); else ``InputError``."""
    s = str(jobid)
    if not JOBID_RE.match(s):
        raise InputError(f"bad job id {s!r}: only letters, digits, '_', '.', '-' are allowed")
    return s


def _check_stat(stat: str) -> str:
    if stat not in STATS:
        raise InputError(f"unknown statistic {stat!r}; use one of {', '.join(STATS)}")
    return stat


def job_join(expr: str, jobid: str) -> str:
    """Restrict ``expr`` to the instances and times where job ``jobid`` ran (seed 000 lesson 5):

    ``(<expr>) * on (instance) group_left() (max by (instance) (rmsjob_info{jobid="<jobid>"}))``

    ``rmsjob_info`` is 1 while the job runs on an instance, so the product keeps ``expr``'s
    values and labels. Raises ``InputError`` for a job id outside ``[A-Za-z0-9_.-]+``."""
    jid = check_jobid(jobid)
    return f'({expr}) * on (instance) group_left() (max by (instance) (rmsjob_info{{jobid="{jid}"}}))'


def _expr(src: Source, rate_window_s: int) -> str:
    """``src.expr`` with its ``[$RWs]`` rate window filled in; ``rate_window_s <= 0`` drops the
    brackets, which MetricsQL (VictoriaMetrics) reads as "window = max(step, sample interval)"."""
    if rate_window_s <= 0:
        return src.expr.replace("[$RWs]", "")
    return src.expr.replace("$RW", str(int(rate_window_s)))


def eval_grid(window: tuple[float, float], step_s: int | None = None) -> tuple[int, int, int]:
    """``(eval_time, duration_s, step_s)`` for a job window ``(start, end)`` in unix seconds:
    ``eval_time = ceil(end)``, ``duration_s = eval_time - floor(start)`` (>= 1) and the step
    (``DEFAULT_STEP_S``, or larger so a subquery has at most ``MAX_SUBQUERY_POINTS`` points).
    VictoriaMetrics aligns subquery points to multiples of the step, so whole seconds keep the
    last point at ``ceil(end)`` — still inside the job, before staleness runs on past it."""
    start, end = float(window[0]), float(window[1])
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise InputError(f"bad time window {window!r}: need finite start <= end (unix seconds)")
    t = math.ceil(end)
    dur = max(1, t - math.floor(start))
    if step_s is None:
        step_s = max(DEFAULT_STEP_S, math.ceil(dur / MAX_SUBQUERY_POINTS))
    return t, dur, int(step_s)


def stat_query(logical: str, jobid: str, window: tuple[float, float], stat: str = "avg", *,
               vendor: str, by_instance: bool = False, rate_window_s: int = DEFAULT_RATE_WINDOW_S,
               step_s: int | None = None) -> tuple[str, int]:
    """The PromQL text of :meth:`PromQL.job_stat` and its evaluation time (unix s), e.g. for
    job 91003 (window 1795960758.009..1795960794.83, NVIDIA, avg)::

        avg(avg_over_time(((DCGM_FI_DEV_GPU_UTIL) * on (instance) group_left()
            (max by (instance) (rmsjob_info{jobid="91003"})))[37s:1s]))   @ time=1795960795
    """
    m = metric_def(logical)
    _check_stat(stat)
    src = m.sources.get(vendor)
    if src is None:
        raise InputError(f"metric {logical!r} has no {vendor!r} source (has: {', '.join(m.sources)})")
    t, dur, step = eval_grid(window, step_s)
    inner = f"({job_join(_expr(src, rate_window_s), jobid)})[{dur}s:{step}s]"
    fn, outer = STATS[stat]
    body = fn.format(inner=inner)
    q = f"{outer} by (instance) ({body})" if by_instance else f"{outer}({body})"
    return q, t


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class StatResult:
    """One job statistic from PromQL.

    ``value`` (``None`` when the job/metric has no samples in the window) in ``unit``;
    ``query``: the exact PromQL text, evaluated at ``time`` (unix s) — re-run it with
    ``/api/v1/query?query=<query>&time=<time>`` to get ``value``; ``per_instance``: the same
    statistic per instance (query ``per_instance_query``); ``sample_count``: number of subquery
    points (one per series per step) that entered the statistic; ``window``: the job window
    ``(start, end)`` in unix s; ``vendor``: which metric names were read."""

    metric: str
    stat: str
    value: float | None
    unit: str
    query: str
    time: float
    window: tuple[float, float]
    per_instance: dict[str, float]
    sample_count: int
    vendor: str
    per_instance_query: str = ""
    source_metrics: tuple[str, ...] = ()

    def evidence(self) -> dict[str, Any]:
        """Keyword arguments for ``state.claims.Evidence``: ``tool="promql.job_stat"``, the
        query, the returned value and the evaluation time/window as ``args``."""
        return {
            "tool": "promql.job_stat",
            "query": self.query,
            "returned": self.value,
            "args": {"time": self.time, "window": list(self.window), "metric": self.metric,
                     "stat": self.stat, "unit": self.unit, "vendor": self.vendor,
                     "sample_count": self.sample_count},
            "backend": "victoriametrics",
        }


@dataclass(frozen=True)
class Series:
    """One raw time series: ``metric`` labels (with ``__name__``), ``timestamps`` in unix
    **seconds** (ascending, unique) and ``values``."""

    metric: dict[str, str]
    timestamps: tuple[float, ...]
    values: tuple[float, ...]

    @property
    def name(self) -> str:
        return self.metric.get("__name__", "")

    @property
    def instance(self) -> str:
        return self.metric.get("instance", "")

    def labels_without_name(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in self.metric.items() if k != "__name__"))


# --------------------------------------------------------------------------------------------
# HTTP with bounded retries
# --------------------------------------------------------------------------------------------

_CONN_ERRORS = (requests.ConnectionError, requests.Timeout)


def _unreachable(url: str, err: BaseException, timeout_s: float) -> ToolUnavailableError:
    text = str(err).lower()
    if isinstance(err, requests.Timeout):
        why = f"no answer within {timeout_s:g}s"
    elif "refused" in text:
        why = "connection refused"
    elif "name or service not known" in text or "nodename nor servname" in text or "resolve" in text:
        why = "host name not resolved"
    elif "no route" in text:
        why = "no route to host"
    else:
        why = type(err).__name__
    return ToolUnavailableError(f"TSDB at {url} unreachable: {why}")


def _with_retry(fn: Callable[[], Any], url: str, timeout_s: float, attempts: int = 2) -> Any:
    """Run ``fn`` with a bounded retry on connection errors only (never on HTTP 4xx/5xx)."""
    wrapped = retry(retry=retry_if_exception_type(_CONN_ERRORS), stop=stop_after_attempt(attempts),
                    wait=wait_fixed(0.2), reraise=True)(fn)
    try:
        return wrapped()
    except _CONN_ERRORS as e:
        raise _unreachable(url, e, timeout_s) from None


def _parse_export_lines(lines: Iterable[bytes | str], origin: str) -> list[Series]:
    merged: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    labels_of: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    n = 0
    for i, line in enumerate(lines, 1):
        if isinstance(line, str):
            line = line.encode()
        if not line.strip():
            continue
        try:
            d = orjson.loads(line)
            metric = {str(k): str(v) for k, v in d["metric"].items()}
            ts, vs = d["timestamps"], d["values"]
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise InputError(f"malformed telemetry export {origin}: line {i} is not a "
                             f'{{"metric","values","timestamps"}} JSON object') from None
        if len(ts) != len(vs):
            raise InputError(f"malformed telemetry export {origin}: line {i} has "
                             f"{len(vs)} values but {len(ts)} timestamps")
        key = tuple(sorted(metric.items()))
        labels_of[key] = metric
        bucket = merged.setdefault(key, {})
        for t, v in zip(ts, vs):
            bucket[float(t) / 1000.0] = float(v)  # later duplicates win, as VM dedup keeps the last
        n += 1
    out = []
    for key, bucket in merged.items():
        ts_sorted = sorted(bucket)
        out.append(Series(labels_of[key], tuple(ts_sorted), tuple(bucket[t] for t in ts_sorted)))
    return out


def load_export(path: str | Path) -> list[Series]:
    """Read a VictoriaMetrics JSON-lines export (``/api/v1/export`` format; timestamps in ms)
    into :class:`Series` (timestamps in s). Lines of the same series are merged (an export may
    split one series over several lines) and duplicate timestamps are kept once.

    Raises ``InputError`` for a missing, empty or malformed file (one line, with line number)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"telemetry export not found: {p}")
    with p.open("rb") as f:
        series = _parse_export_lines(f, str(p))
    if not series:
        raise InputError(f"telemetry export is empty: {p}")
    return series


def export_raw(url: str, match: str | Sequence[str], start: float | None = None, end: float | None = None,
               *, timeout_s: float = 30.0) -> list[Series]:
    """Raw samples from a live VictoriaMetrics via ``GET /api/v1/export`` (no PromQL
    evaluation: the server returns stored samples). ``match``: one or more series selectors
    (``rmsjob_info{jobid="91003"}``); ``start``/``end``: unix seconds (optional).

    Returns ``[]`` when nothing matches. Raises ``ToolUnavailableError`` when unreachable
    (bounded retry), ``InputError`` when the server rejects the selector (HTTP 4xx)."""
    base = url.rstrip("/")
    params: list[tuple[str, str]] = [("match[]", m) for m in ([match] if isinstance(match, str) else match)]
    if start is not None:
        params.append(("start", f"{float(start):.3f}"))
    # Without an explicit end, VictoriaMetrics 1.79 stops about a second before "now" and drops
    # just-written samples (seen here); ask up to an hour ahead instead.
    params.append(("end", f"{float(end) if end is not None else time.time() + 3600:.3f}"))

    def call() -> requests.Response:
        return requests.get(f"{base}/api/v1/export", params=params, timeout=timeout_s)

    r = _with_retry(call, base, timeout_s)
    if 400 <= r.status_code < 500:
        raise InputError(f"TSDB at {base} rejected export of {match!r}: HTTP {r.status_code}: "
                         f"{' '.join(r.text.split())[:160]}")
    if r.status_code >= 500:
        raise ToolUnavailableError(f"TSDB at {base} failed export: HTTP {r.status_code}")
    return _parse_export_lines(r.content.splitlines(), f"{base}/api/v1/export")


# --------------------------------------------------------------------------------------------
# Raw path (verifiers): no PromQL
# --------------------------------------------------------------------------------------------


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


def _stat_of(values: Sequence[float], stat: str) -> float:
    a = np.asarray(values, dtype=float)
    if stat == "avg":
        return float(a.mean())
    if stat == "max":
        return float(a.max())
    if stat == "min":
        return float(a.min())
    return float(np.quantile(a, _QUANTILE[stat]))


def _across(values: Sequence[float], stat: str) -> float:
    outer = STATS[stat][1]
    return float(max(values) if outer == "max" else min(values) if outer == "min" else np.mean(values))


def _pick_source(m: MetricDef, series_list: Sequence[Series], instances: set[str], vendor: str | None) -> tuple[str, Source]:
    if vendor is not None:
        if vendor not in m.sources:
            raise InputError(f"metric {m.name!r} has no {vendor!r} source")
        return vendor, m.sources[vendor]
    present = {s.name for s in series_list if s.instance in instances}
    for v, src in m.sources.items():
        if all(i in present for i in src.inputs):
            return v, src
    return next(iter(m.sources.items()))


def _raw_values(series_list: Sequence[Series], src: Source, windows: dict[str, tuple[float, float]]) -> dict[tuple, tuple[str, list[float]]]:
    """Per output series (labels without name): (instance, values inside the job window)."""
    out: dict[tuple, tuple[str, list[float]]] = {}
    if src.kind == "cpu_counter":
        # per instance and timestamp: (idle seconds summed over CPUs, all-mode seconds summed)
        acc: dict[str, dict[float, list[float]]] = {}
        for s in series_list:
            if s.name != src.inputs[0] or s.instance not in windows:
                continue
            lo, hi = windows[s.instance]
            per_t = acc.setdefault(s.instance, {})
            for t, v in zip(s.timestamps, s.values):
                if lo <= t <= hi:
                    cell = per_t.setdefault(t, [0.0, 0.0])
                    cell[1] += v
                    if s.metric.get("mode") == "idle":
                        cell[0] += v
        for inst, per_t in acc.items():
            ts = sorted(per_t)
            utils = []
            for a, b in zip(ts, ts[1:]):
                d_idle, d_all = per_t[b][0] - per_t[a][0], per_t[b][1] - per_t[a][1]
                if d_all > 0 and d_idle >= 0:
                    utils.append(100.0 * (1.0 - d_idle / d_all))
            if utils:
                out[(("instance", inst),)] = (inst, utils)
        return out
    # gauges: group input series by label set (minus name), combine at equal timestamps
    groups: dict[tuple, dict[str, Series]] = {}
    for s in series_list:
        if s.name in src.inputs and s.instance in windows:
            groups.setdefault(s.labels_without_name(), {})[s.name] = s
    for key, by_name in groups.items():
        if len(by_name) != len(src.inputs):
            continue
        inst = next(iter(by_name.values())).instance
        lo, hi = windows[inst]
        maps = [dict(zip(by_name[n].timestamps, by_name[n].values)) for n in src.inputs]
        common = sorted(set(maps[0]).intersection(*maps[1:])) if len(maps) > 1 else sorted(maps[0])
        vals = []
        for t in common:
            if lo <= t <= hi:
                args = [m[t] for m in maps]
                vals.append(src.combine(*args) if src.combine else args[0])
        if vals:
            out[key] = (inst, vals)
    return out


@dataclass
class RawStat:
    """What :func:`raw_job_stat_detail` returns: ``value`` (``None`` if no samples),
    ``per_instance`` values, ``sample_count`` (raw samples, or counter intervals for
    ``cpu_util``), the ``vendor`` whose names were read and the per-instance job ``windows``."""

    value: float | None
    per_instance: dict[str, float]
    sample_count: int
    vendor: str
    windows: dict[str, tuple[float, float]]


def raw_job_stat_detail(series_list: Sequence[Series], metric: str, jobid: str, stat: str = "avg",
                        *, vendor: str | None = None) -> RawStat:
    """Like :func:`raw_job_stat`, with per-instance values, sample count and windows."""
    _check_stat(stat)
    windows = raw_job_windows(series_list, jobid)
    if not windows:
        raise InputError(f"unknown job id {jobid!r}: no rmsjob_info{{jobid=\"{jobid}\"}} samples in the export")
    if metric in METRICS:
        vendor, src = _pick_source(METRICS[metric], series_list, set(windows), vendor)
    else:
        src, vendor = _g(metric), vendor or "raw"
    per_series = _raw_values(series_list, src, windows)
    if not per_series:
        return RawStat(None, {}, 0, vendor, windows)
    stats = [(inst, _stat_of(vals, stat)) for inst, vals in per_series.values()]
    per_inst: dict[str, list[float]] = {}
    for inst, v in stats:
        per_inst.setdefault(inst, []).append(v)
    return RawStat(
        value=_across([v for _, v in stats], stat),
        per_instance={i: _across(vs, stat) for i, vs in per_inst.items()},
        sample_count=sum(len(vals) for _, vals in per_series.values()),
        vendor=vendor,
        windows=windows,
    )


def raw_job_stat(series_list: Sequence[Series], metric: str, jobid: str, stat: str = "avg",
                 *, vendor: str | None = None) -> float | None:
    """The statistic of ``metric`` over job ``jobid`` from raw samples (no PromQL).

    ``metric``: a logical name of :data:`METRICS` (vendor chosen by which raw names are present,
    or ``vendor=``) or a raw metric name (``DCGM_FI_DEV_POWER_USAGE``). Each instance's window is
    the first..last ``rmsjob_info{jobid}`` sample with value > 0; every raw sample of that
    instance inside it (inclusive) counts. Per series the statistic over time, then across series
    as in the module docstring. Returns the value in the metric's unit (``None`` when the job ran
    but the metric has no samples). Raises ``InputError`` for a bad or unknown job id (no
    ``rmsjob_info`` samples) or an unknown stat."""
    return raw_job_stat_detail(series_list, metric, jobid, stat, vendor=vendor).value


# --------------------------------------------------------------------------------------------
# PromQL path (analysts)
# --------------------------------------------------------------------------------------------


#: An instant query at a time less than this many seconds ago misses the newest samples on
#: VictoriaMetrics 1.79 (seen here: a query at ceil(now) right after an import counted 8 of 12
#: samples, and all 12 two seconds later).
FRESH_MARGIN_S = 1.5


def _wait_until_past(t_eval: float, max_wait_s: float = 5.0) -> None:
    """Sleep (at most ``max_wait_s``) until ``t_eval`` is ``FRESH_MARGIN_S`` in the past, so a
    just-finished job is evaluated on all its samples. Analyses normally run well after the job."""
    lag = t_eval + FRESH_MARGIN_S - time.time()
    if lag > 0:
        time.sleep(min(lag, max_wait_s))


class PromQL:
    """PromQL client for job-scoped telemetry, built on ``prometheus_api_client.PrometheusConnect``
    (plus ``requests`` for ``/api/v1/export``).

    ``url``: the TSDB (``http://127.0.0.1:8428``); ``timeout_s``: per-request timeout;
    ``rate_window_s``: ``rate()`` window for counter metrics (0: automatic, VictoriaMetrics only). Unreachable -> one-line
    ``ToolUnavailableError`` after at most 2 attempts (connection errors only)."""

    def __init__(self, url: str, timeout_s: float = 10.0, *, rate_window_s: int = DEFAULT_RATE_WINDOW_S):
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.rate_window_s = int(rate_window_s)
        # urllib3-level retries off: tenacity does the (bounded) retrying.
        self._prom = PrometheusConnect(url=self.url, disable_ssl=True, retry=Retry(total=0, connect=0, read=0),
                                       timeout=self.timeout_s)
        self._vendor_cache: dict[tuple[str, tuple[float, float]], str] = {}

    # -- raw calls ------------------------------------------------------------------------------

    def _call(self, fn: Callable[[], Any], query: str) -> Any:
        try:
            return _with_retry(fn, self.url, self.timeout_s)
        except PrometheusApiClientException as e:
            m = re.search(r"HTTP Status Code (\d+)", str(e))
            code = int(m.group(1)) if m else 0
            detail = " ".join(str(e).split())[:200]
            if 400 <= code < 500:
                raise InputError(f"TSDB at {self.url} rejected query {query[:120]!r}: {detail}") from None
            raise ToolUnavailableError(f"TSDB at {self.url} failed: {detail}") from None

    def instant(self, query: str, time: float) -> list[dict[str, Any]]:
        """``/api/v1/query`` at unix ``time``; the ``data.result`` list (``metric``, ``value``)."""
        return self._call(lambda: self._prom.custom_query(query, params={"time": f"{time:.3f}"}), query)

    def range(self, query: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        """``/api/v1/query_range`` (start/end rounded to whole seconds); ``data.result``."""
        s = datetime.fromtimestamp(start, tz=timezone.utc)
        e = datetime.fromtimestamp(end, tz=timezone.utc)
        return self._call(lambda: self._prom.custom_query_range(query, s, e, f"{step_s:g}s"), query)

    def export(self, match: str | Sequence[str], start: float | None = None, end: float | None = None) -> list[Series]:
        """Raw samples via ``/api/v1/export`` (see :func:`export_raw`)."""
        return export_raw(self.url, match, start, end, timeout_s=self.timeout_s)

    def check(self) -> None:
        """Raise ``ToolUnavailableError`` unless the TSDB answers a trivial query."""
        self.instant("1", 0)

    # -- job scope ------------------------------------------------------------------------------

    def job_window(self, jobid: str, hint: tuple[float, float] | None = None) -> tuple[float, float]:
        """``(start_s, end_s)``: first and last sample time (unix s) of ``rmsjob_info{jobid}``
        with value > 0 over all instances, read with ``/api/v1/export`` (an instant query needs
        a time inside the window, which is what we are looking for; seed lesson 20). ``hint``:
        search only ``hint`` ± 1 h (e.g. the manifest's start/end); ``None``: all time.

        Raises ``InputError`` for a bad job id or an unknown one (no samples)."""
        jid = check_jobid(jobid)
        start = end = None
        if hint is not None:
            start, end = float(hint[0]) - 3600, float(hint[1]) + 3600
        series = self.export(f'rmsjob_info{{jobid="{jid}"}}', start, end)
        ts = [t for s in series for t, v in zip(s.timestamps, s.values) if v > 0]
        if not ts:
            where = f" between {start:.0f} and {end:.0f}" if hint is not None else ""
            raise InputError(f'unknown job id {jid!r}: no rmsjob_info{{jobid="{jid}"}} samples{where} at {self.url}')
        return min(ts), max(ts)

    def detect_vendor(self, jobid: str, window: tuple[float, float]) -> Vendor:
        """``"nvidia"`` if the job's instances have dcgm-exporter GPU samples in ``window``,
        ``"amd"`` if Omnistat ``rocm_*`` ones, else ``"none"`` (a CPU-only job)."""
        key = (check_jobid(jobid), (float(window[0]), float(window[1])))
        if key in self._vendor_cache:
            return self._vendor_cache[key]  # type: ignore[return-value]
        t, dur, step = eval_grid(window)
        _wait_until_past(t)
        found: Vendor = "none"
        for vendor in ("nvidia", "amd"):
            src = METRICS[VENDOR_PROBE].sources[vendor]
            q = f"sum(count_over_time(({job_join(src.expr, jobid)})[{dur}s:{step}s]))"
            res = self.instant(q, t)
            if res and float(res[0]["value"][1]) > 0:
                found = vendor  # type: ignore[assignment]
                break
        self._vendor_cache[key] = found
        return found

    def _vendor_for(self, m: MetricDef, jobid: str, window: tuple[float, float], vendor: str | None) -> str:
        if vendor is not None:
            return vendor
        if m.scope == "node":
            return "node"
        return self.detect_vendor(jobid, window)

    def job_stat(self, logical_metric: str, jobid: str, window: tuple[float, float], stat: str = "avg",
                 *, vendor: str | None = None, step_s: int | None = None) -> StatResult:
        """``stat`` of ``logical_metric`` over job ``jobid`` in ``window`` (unix s, e.g. from
        :meth:`job_window`), joined through ``rmsjob_info`` and evaluated at ``ceil(end)`` with a
        1 s subquery step (see :func:`stat_query`). ``vendor``: force ``nvidia``/``amd``/``node``
        instead of detecting it.

        If ``ceil(end)`` is less than ``FRESH_MARGIN_S`` ago (a job that just ended) this waits
        (at most 5 s) first: VictoriaMetrics 1.79 misses the newest samples in an instant query
        at "now".

        Returns a :class:`StatResult`; ``value=None`` and ``sample_count=0`` when nothing matched
        (no GPU telemetry, or no ``rmsjob_info`` for the job in the window). Raises
        ``InputError`` (bad job id / metric / stat / window) or ``ToolUnavailableError``."""
        m = metric_def(logical_metric)
        check_jobid(jobid)
        _check_stat(stat)
        win = (float(window[0]), float(window[1]))
        v = self._vendor_for(m, jobid, win, vendor)
        if v == "none":
            q, t = stat_query(logical_metric, jobid, win, stat, vendor="nvidia", step_s=step_s)
            return StatResult(m.name, stat, None, m.unit, q, float(t), win, {}, 0, "none")
        kw = dict(vendor=v, rate_window_s=self.rate_window_s, step_s=step_s)
        q, t = stat_query(logical_metric, jobid, win, stat, **kw)
        q_inst, _ = stat_query(logical_metric, jobid, win, stat, by_instance=True, **kw)
        _, dur, step = eval_grid(win, step_s)
        src = m.sources[v]
        q_count = f"sum(count_over_time(({job_join(_expr(src, self.rate_window_s), jobid)})[{dur}s:{step}s]))"
        _wait_until_past(t)
        res = self.instant(q, t)
        value = float(res[0]["value"][1]) if res else None
        if value is not None and not math.isfinite(value):
            value = None
        per_inst = {r["metric"].get("instance", ""): float(r["value"][1]) for r in self.instant(q_inst, t)}
        cnt = self.instant(q_count, t)
        count = int(float(cnt[0]["value"][1])) if cnt else 0
        return StatResult(m.name, stat, value, m.unit, q, float(t), win, per_inst, count, v,
                          per_instance_query=q_inst, source_metrics=src.inputs)

    def series_query(self, logical_metric: str, jobid: str, vendor: str) -> str:
        """The PromQL of :meth:`job_series`: ``avg by (instance) (<joined expr>)``."""
        m = metric_def(logical_metric)
        src = m.sources.get(vendor)
        if src is None:
            raise InputError(f"metric {logical_metric!r} has no {vendor!r} source")
        return f"avg by (instance) ({job_join(_expr(src, self.rate_window_s), jobid)})"

    def job_series(self, logical_metric: str, jobid: str, window: tuple[float, float], step_s: float = 1.0,
                   *, vendor: str | None = None) -> dict[str, list[tuple[float, float]]]:
        """Time series of ``logical_metric`` for job ``jobid``, averaged over the GPUs of each
        instance: ``{instance: [(t_unix_s, value), ...]}`` on a ``step_s`` grid from
        ``floor(start)`` to ``ceil(end)`` (for plots). ``{}`` when nothing matched."""
        m = metric_def(logical_metric)
        check_jobid(jobid)
        win = (float(window[0]), float(window[1]))
        v = self._vendor_for(m, jobid, win, vendor)
        if v == "none":
            return {}
        q = self.series_query(logical_metric, jobid, v)
        _wait_until_past(math.ceil(win[1]))
        res = self.range(q, math.floor(win[0]), math.ceil(win[1]), step_s)
        return {r["metric"].get("instance", ""): [(float(t), float(x)) for t, x in r["values"]] for r in res}
