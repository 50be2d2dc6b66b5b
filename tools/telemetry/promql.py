"""Job-scoped GPU and node telemetry from a Prometheus-compatible TSDB (VictoriaMetrics) through
PromQL: the analysts' path. (The verifiers' path, plain Python over raw samples, is
:mod:`.rawstats`; the metric name map is :mod:`.metrics`; raw exports are :mod:`.export`.)

**Window.** The caller gives the job window ``(start, end)`` in unix seconds: the job's SLURM
start and end (sacct or the manifest). ``rmsjob_info`` is only the join key to the job's
instances, never the clock: Omnistat's ``rmsjob_info`` can outlive the job (a known fault), and a
job shorter than the scrape interval has one sample of it or none inside its window.
:meth:`PromQL.job_window` (first..last ``rmsjob_info`` sample) remains for runs with no SLURM
times and for the cross-check of the two.

**Join.** Telemetry series carry no ``jobid`` (seed 000 lesson 5). A statistic is computed per
raw series first, then joined by HOST to the hosts that carry ``rmsjob_info{jobid}`` within
``JOIN_MARGIN_S`` of the window (``label_replace`` on the host part of ``instance``, so a DCGM
exporter on ``node1:9400`` joins a job-info exporter on ``node1:8001``)::

    avg(
      label_replace(max_over_time(DCGM_FI_DEV_POWER_USAGE[30000ms]), "host", "$1", "instance", "(.+?)(?::[0-9]+)?")
      and on (host)
      (max by (host) (label_replace(max_over_time(rmsjob_info{jobid="94005"}[630000ms] @ 1795970330),
                                    "host", "$1", "instance", "(.+?)(?::[0-9]+)?")) > 0))   @ time=end

**Statistics over the raw samples** (no subquery grid, so a 690 W sample between grid points is
the max): ``max``/``min``/``pNN`` = ``max_over_time``/``min_over_time``/``quantile_over_time`` of
the range vector ``NAME[D]`` at ``time=end`` (``D`` = the job's length plus 1 ms, so the sample at
the start counts). ``avg`` is TIME-WEIGHTED (:func:`.rawstats.time_weighted_mean`): each raw
sample holds until the next, the last until ``end``, over the time from the window's first sample
to ``end``. MetricsQL's ``integrate(NAME[L])`` is that integral ("integral over raw samples",
VictoriaMetrics MetricsQL docs) when its range starts exactly at the first sample ``t_f`` (the
sample at the range start is the one it holds first; measured on 1.79.5, tests/test_promql.py).
So :meth:`PromQL.job_stat` first reads each series' ``t_f`` (``tfirst_over_time(NAME[D])``), then
evaluates, per group of series with one ``t_f``::

    ((integrate(NAME[<end - t_f>ms]) / <end - t_f>) or avg_over_time(NAME[Dms]))
      and (tfirst_over_time(NAME[Dms]) == t_f)

joined with ``or`` (``integrate`` is empty when a series has one sample in the window, whose
time-weighted mean is that sample: hence the ``avg_over_time`` fallback). ``avg_over_time`` (a plain sample mean) would weight densely scraped stretches
more and count the sample AT ``end`` as a full interval: 59.02 % instead of 60 % on the case
``short-job-one-rms-sample``. ``cpu_util`` ``avg`` = ``100 * (1 - Δidle/Δall)`` between the first
and last sample of the window (``last_over_time - first_over_time``), time-weighted by
construction. The same definitions as :mod:`.rawstats`, so the two paths agree to rounding.
VictoriaMetrics drops NaN samples at import, so these statistics are over the finite samples;
:mod:`.rawstats` counts the NaN ones from the export. Sources that combine two raw series
(``hbm_total``, ``hbm_used_pct``, AMD HBM bytes) and ``cpu_util``'s max/min/pNN need values at
common times: they keep a 1 s subquery (``fn((<expr>)[Ds:1s])``), whose points are the last sample
at or before each second.

Errors: an unreachable TSDB raises :class:`ToolUnavailableError` with one line after at most 2
attempts (connection errors only; a 4xx is never retried); a bad job id, an unknown metric or
stat and an unknown job id in :meth:`PromQL.job_window` raise :class:`InputError`. Given a
window, :meth:`PromQL.job_stat` of a job (or metric) with no samples there returns an empty
result (``value=None``, ``sample_count=0``) and :meth:`PromQL.job_series` an empty dict.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from ..errors import InputError, ToolUnavailableError
from .export import HOST_RE, Series, export_raw, host_of, with_retry
from .metrics import (GPU_INDEX_LABEL, METRICS, QUANTILE, STATS, VENDOR_PROBE, MetricDef, Source, Vendor, check_jobid,
                      check_stat, metric_def)
from .gpujoin import JobGpus, job_gpus
from .rawstats import JOIN_MARGIN_S

#: Subquery step (s) for the statistics that need one (see module doc); raised for very long
#: jobs so a series never exceeds ``MAX_SUBQUERY_POINTS`` points.
DEFAULT_STEP_S = 1
MAX_SUBQUERY_POINTS = 20000
#: ``rate()`` window (s) for counter-based node metrics (``cpu_util`` max/min/pNN); 0 = MetricsQL's
#: automatic window (max(step, sample interval)), which suits both our 0.5 s sampler and a 15 s scrape.
DEFAULT_RATE_WINDOW_S = 0
#: Logical metrics whose raw series mark a host's GPU telemetry. More than the utilisation: an
#: exporter whose utilisation samples are all NaN (dropped by VictoriaMetrics at import) still
#: reports power and clocks, and those must not be lost with it.
GPU_PROBE_METRICS = (VENDOR_PROBE, "power", "sm_clock")
#: Per vendor, the raw names of :data:`GPU_PROBE_METRICS`.
GPU_PROBE_BY_VENDOR = {v: tuple(src.inputs[0] for m in GPU_PROBE_METRICS for src in METRICS[m].candidates(v))
                       for v in ("nvidia", "amd")}
#: The metric names whose presence marks a GPU series (any vendor), for coverage checks.
GPU_PROBE_NAMES = tuple(n for names in GPU_PROBE_BY_VENDOR.values() for n in names)


def _host_label(expr: str) -> str:
    return f'label_replace({expr}, "host", "$1", "instance", "{HOST_RE}")'


def job_hosts_expr(jobid: str, window: tuple[float, float], margin_s: float = JOIN_MARGIN_S,
                   matchers: str = "") -> str:
    """PromQL of the job's hosts: ``max by (host)`` of ``rmsjob_info{jobid}`` over ``window`` ±
    ``margin_s``, pinned with ``@`` so it does not move with the evaluation time (instant and range
    queries alike), keeping hosts with a value > 0. ``matchers``: more label matchers for
    ``rmsjob_info`` (``,card!=""``)."""
    jid = check_jobid(jobid)
    start, end = float(window[0]), float(window[1])
    span_ms = int(round((end - start + 2 * margin_s) * 1000))
    at = end + margin_s
    inner = f'max_over_time(rmsjob_info{{jobid="{jid}"{matchers}}}[{span_ms}ms] @ {at:.3f})'
    return f"(max by (host) ({_host_label(inner)}) > 0)"


def _re2_literal(s: str) -> str:
    """``s`` as an RE2 literal inside a PromQL string (punctuation escaped, the backslash doubled)."""
    return "".join(c if c.isalnum() or c in "_-" else "\\\\" + c for c in s)


def _instance_re(hosts: Sequence[str]) -> str:
    """RE2 (inside a PromQL string) for ``instance`` of any of ``hosts``, with or without a port."""
    return "(" + "|".join(_re2_literal(h) for h in sorted(hosts)) + ")(:[0-9]+)?"


def job_join(expr: str, jobid: str, window: tuple[float, float], gpus: JobGpus | None = None,
             index_label: str | None = None) -> str:
    """``expr`` (an instant vector with an ``instance`` label) restricted to the job's hosts:
    ``label_replace(<expr>, "host", ...) and on (host) <job_hosts_expr>``. Values and labels of
    ``expr`` are kept, with a ``host`` label added. Raises ``InputError`` for a bad job id.

    With ``gpus`` whose ``rmsjob_info`` names cards (:class:`~.gpujoin.JobGpus`) and a GPU series'
    ``index_label`` (``gpu`` for dcgm-exporter, whose ``device`` ``nvidia<N>`` fills it when
    absent; ``card`` for Omnistat), the series of each host group with one card set are kept only
    for those GPUs (MetricsQL ``label_match``) and joined to that host group's card-labelled
    ``rmsjob_info``; hosts whose ``rmsjob_info`` has no card label are joined by host alone; the
    terms are joined with ``or``."""
    if gpus is None or not gpus.by_card or index_label is None:
        return f"{_host_label(expr)} and on (host) {job_hosts_expr(jobid, window)}"
    idx = expr if index_label != "gpu" else f'label_replace({expr}, "gpu", "$1", "device", "nvidia([0-9]+)")'
    groups: dict[frozenset[str], list[str]] = {}
    for h, cards in gpus.cards.items():
        groups.setdefault(cards, []).append(h)
    terms = []
    for cards, hosts in sorted(groups.items(), key=lambda kv: sorted(kv[1])):
        inst = f',card!="",instance=~"{_instance_re(hosts)}"'
        terms.append(f'(label_match({_host_label(idx)}, "{index_label}", "{"|".join(sorted(cards, key=int))}") '
                     f"and on (host) {job_hosts_expr(jobid, window, matchers=inst)})")
    if gpus.host_only:
        inst = f',card="",instance=~"{_instance_re(gpus.host_only)}"'
        terms.append(f"({_host_label(expr)} and on (host) {job_hosts_expr(jobid, window, matchers=inst)})")
    return terms[0] if len(terms) == 1 else "(" + " or ".join(terms) + ")"


def _expr(src: Source, rate_window_s: int) -> str:
    """``src.expr`` with its ``[$RWs]`` rate window filled in; ``rate_window_s <= 0`` drops the
    brackets, which MetricsQL (VictoriaMetrics) reads as "window = max(step, sample interval)"."""
    if rate_window_s <= 0:
        return src.expr.replace("[$RWs]", "")
    return src.expr.replace("$RW", str(int(rate_window_s)))


def eval_grid(window: tuple[float, float], step_s: int | None = None) -> tuple[int, int, int]:
    """``(eval_time, duration_s, step_s)`` of a subquery over a job window ``(start, end)`` (unix
    s): ``eval_time = ceil(end)``, ``duration_s = eval_time - floor(start)`` (>= 1) and the step
    (``DEFAULT_STEP_S``, or larger so a subquery has at most ``MAX_SUBQUERY_POINTS`` points).
    Raises ``InputError`` for a window that is not finite with start <= end."""
    start, end = check_window(window)
    t = math.ceil(end)
    dur = max(1, t - math.floor(start))
    if step_s is None:
        step_s = max(DEFAULT_STEP_S, math.ceil(dur / MAX_SUBQUERY_POINTS))
    return t, dur, int(step_s)


def check_window(window: tuple[float, float]) -> tuple[float, float]:
    """``(start, end)`` as floats; ``InputError`` unless finite with ``start <= end``."""
    start, end = float(window[0]), float(window[1])
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise InputError(f"bad time window {window!r}: need finite start <= end (unix seconds)")
    return start, end


def _per_series(src: Source, stat: str, window: tuple[float, float], rate_window_s: int,
                step_s: int | None, t_firsts: Sequence[float] | None = None) -> str:
    """The per-series statistic over the window, evaluated at ``end`` (see module doc).
    ``t_firsts``: the first-sample times of the series (:meth:`PromQL.first_sample_times`),
    needed by the time-weighted ``avg`` of a single gauge; ``InputError`` when it is missing."""
    d_ms = _range_ms(window)
    if src.single:
        sel = f"{src.inputs[0]}[{d_ms}ms]"
        if stat in QUANTILE:
            body = f"quantile_over_time({QUANTILE[stat]}, {sel})"
        elif stat == "avg":
            if t_firsts is None:
                raise InputError("a time-weighted avg needs the series' first sample times (PromQL.first_sample_times)")
            body = tw_avg_expr(src.inputs[0], window, t_firsts)
        else:
            body = f"{stat}_over_time({sel})"
        return f"({body} * {src.scale:.17g})" if src.scale != 1.0 else body
    if src.kind == "cpu_counter" and stat == "avg":
        idle, every = f'{src.inputs[0]}{{mode="idle"}}[{d_ms}ms]', f"{src.inputs[0]}[{d_ms}ms]"
        return (f"(100 * (1 - sum by (instance) (last_over_time({idle}) - first_over_time({idle})) "
                f"/ sum by (instance) (last_over_time({every}) - first_over_time({every}))))")
    t, dur, step = eval_grid(window, step_s)
    inner = f"({_expr(src, rate_window_s)})[{dur}s:{step}s]"
    return f"quantile_over_time({QUANTILE[stat]}, {inner})" if stat in QUANTILE else f"{stat}_over_time({inner})"


def tw_avg_expr(name: str, window: tuple[float, float], t_firsts: Sequence[float]) -> str:
    """MetricsQL of the time-weighted mean of raw gauge ``name`` over ``window`` (unix s), per
    series, evaluated at ``end`` (ms precision), given the distinct first-sample times
    ``t_firsts`` (unix s, ms precision) of its series in the window. Per ``t_f``:
    ``((integrate(name[<end - t_f>ms]) / <end - t_f s>) or avg_over_time(name[Dms])) and
    (tfirst_over_time(name[Dms]) == t_f)`` (``integrate`` is empty for a series with one sample in
    the window, whose time-weighted mean is that sample), the groups joined by ``or``.
    No ``t_firsts`` (no samples): ``avg_over_time(name[Dms])``, which is then empty too."""
    end = round(check_window(window)[1], 3)
    d_ms = _range_ms(window)
    parts = []
    for tf in sorted({round(float(x), 3) for x in t_firsts}):
        span_ms = int(round((end - tf) * 1000))
        guard = f"(tfirst_over_time({name}[{d_ms}ms]) == {tf:.3f})"
        # integrate() of a series with one sample in the window (at t_f) is empty: its value is the mean
        one = f"avg_over_time({name}[{d_ms}ms])"
        body = f"((integrate({name}[{span_ms}ms]) / {span_ms / 1000:.3f}) or {one})" if span_ms > 0 else one
        parts.append(f"({body} and {guard})")
    if not parts:
        return f"avg_over_time({name}[{d_ms}ms])"
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


def _range_ms(window: tuple[float, float]) -> int:
    """The range ``D`` (ms) of a raw-sample statistic evaluated at ``end``: the job's length plus
    one millisecond, so ``(end - D, end]`` holds the sample at the start too (``rawstats.EDGE_S``)."""
    start, end = check_window(window)
    return int(math.ceil((round(end, 3) - start) * 1000)) + 1


def _count_series(src: Source, window: tuple[float, float], rate_window_s: int, step_s: int | None) -> str:
    if src.single or src.kind == "cpu_counter":
        d_ms = _range_ms(window)
        sel = f'{src.inputs[0]}{{mode="idle"}}' if src.kind == "cpu_counter" else src.inputs[0]
        return f"count_over_time({sel}[{d_ms}ms])"
    _, dur, step = eval_grid(window, step_s)
    return f"count_over_time(({_expr(src, rate_window_s)})[{dur}s:{step}s])"


def _index_label(m: MetricDef, vendor: str) -> str | None:
    """The label naming a GPU series' index for the join by card, or None for node metrics."""
    return GPU_INDEX_LABEL.get(vendor) if m.scope == "gpu" else None


def eval_time(window: tuple[float, float], src: Source, stat: str) -> float:
    """When a statistic's query is evaluated: ``end`` (ms precision) for the raw-sample forms,
    ``ceil(end)`` for the subquery forms (their points align to whole seconds)."""
    if src.single or (src.kind == "cpu_counter" and stat == "avg"):
        return round(float(window[1]), 3)
    return float(eval_grid(window)[0])


def stat_query(logical: str, jobid: str, window: tuple[float, float], stat: str = "avg", *,
               vendor: str, by_instance: bool = False, rate_window_s: int = DEFAULT_RATE_WINDOW_S,
               step_s: int | None = None, t_firsts: Sequence[float] | None = None,
               gpus: JobGpus | None = None, source: Source | None = None) -> tuple[str, float]:
    """The PromQL text of :meth:`PromQL.job_stat` and its evaluation time (unix s); see the
    module docstring for the form. ``by_instance``: one value per host (label ``host``).
    ``t_firsts``: first-sample times of the series, for a time-weighted ``avg`` (:func:`tw_avg_expr`).
    ``gpus``: the job's GPUs per host (:func:`job_join`); ``source``: one of the metric's
    :meth:`~.metrics.MetricDef.candidates` (default: the vendor's usual source).
    Raises ``InputError`` for an unknown metric, vendor source, stat or bad window."""
    m = metric_def(logical)
    check_stat(stat)
    src = source or m.sources.get(vendor)
    if src is None:
        raise InputError(f"metric {logical!r} has no {vendor!r} source (has: {', '.join(m.sources)})")
    joined = job_join(_per_series(src, stat, window, rate_window_s, step_s, t_firsts), jobid, window,
                      gpus, _index_label(m, vendor))
    outer = STATS[stat]
    q = f"{outer} by (host) ({joined})" if by_instance else f"{outer}({joined})"
    return q, eval_time(window, src, stat)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class StatResult:
    """One job statistic from PromQL.

    ``value`` (``None`` when the job/metric has no samples in the window) in ``unit``;
    ``query``: the exact PromQL text, evaluated at ``time`` (unix s) — re-run it with
    ``/api/v1/query?query=<query>&time=<time>`` to get ``value``; ``per_instance``: the same
    statistic per host (query ``per_instance_query``); ``sample_count``: raw samples (or subquery
    points, see module doc) that entered the statistic; ``window``: the job window ``(start, end)``
    in unix s; ``vendor``: which metric names were read."""

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
    #: how the report names the source when it is not the metric's usual one ('' = the usual one)
    source_label: str = ""
    #: the job's GPUs per host, when ``rmsjob_info`` names cards (:class:`~.gpujoin.JobGpus`)
    gpus: JobGpus | None = None

    def evidence(self) -> dict[str, Any]:
        """Keyword arguments for ``state.claims.Evidence``: ``tool="promql.job_stat"``, the
        query, the returned value and the evaluation time/window as ``args``."""
        return {
            "tool": "promql.job_stat",
            "query": self.query,
            "returned": self.value,
            "args": {"time": self.time, "window": list(self.window), "metric": self.metric,
                     "stat": self.stat, "unit": self.unit, "vendor": self.vendor,
                     "sample_count": self.sample_count,
                     **({"source": self.source_label} if self.source_label else {})},
            "backend": "victoriametrics",
        }


@dataclass
class Coverage:
    """Which of the job's hosts have GPU telemetry in the window: ``job_hosts`` (hosts with
    ``rmsjob_info{jobid}`` near the window, with their sample counts), ``gpu_hosts`` (every host
    with GPU series in the window, joined or not) and ``unmatched`` (job hosts without GPU series)."""

    job_hosts: dict[str, int]
    gpu_hosts: list[str]

    @property
    def unmatched(self) -> list[str]:
        return sorted(h for h in self.job_hosts if h not in self.gpu_hosts)


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
        self._gpus_cache: dict[tuple[str, tuple[float, float]], JobGpus] = {}

    # -- raw calls ------------------------------------------------------------------------------

    def _call(self, fn: Callable[[], Any], query: str) -> Any:
        try:
            return with_retry(fn, self.url, self.timeout_s)
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
        """Raw samples via ``/api/v1/export`` (see :func:`.export.export_raw`)."""
        return export_raw(self.url, match, start, end, timeout_s=self.timeout_s)

    def check(self) -> None:
        """Raise ``ToolUnavailableError`` unless the TSDB answers a trivial query."""
        self.instant("1", 0)

    # -- job scope ------------------------------------------------------------------------------

    def job_window(self, jobid: str, hint: tuple[float, float] | None = None) -> tuple[float, float]:
        """``(start_s, end_s)``: first and last sample time (unix s) of ``rmsjob_info{jobid}``
        with value > 0 over all instances, read with ``/api/v1/export``. ``hint``: search only
        ``hint`` ± 1 h; ``None``: all time. Only for runs with no SLURM times, and to cross-check
        them: a stale ``rmsjob_info`` (one that outlives the job) stretches this window.

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

    def job_hosts(self, jobid: str, window: tuple[float, float]) -> dict[str, int]:
        """``{host: rmsjob_info samples > 0}`` within ``window`` ± ``JOIN_MARGIN_S`` (raw samples,
        ``/api/v1/export``). ``{}`` when the job has none there."""
        jid = check_jobid(jobid)
        start, end = check_window(window)
        series = self.export(f'rmsjob_info{{jobid="{jid}"}}', start - JOIN_MARGIN_S, end + JOIN_MARGIN_S)
        out: dict[str, int] = {}
        for s in series:
            n = sum(1 for v in s.values if v > 0)
            if n:
                out[s.host] = out.get(s.host, 0) + n
        return out

    def coverage(self, jobid: str, window: tuple[float, float]) -> Coverage:
        """The job's hosts and the hosts that have GPU series (any vendor) in ``window``."""
        start, end = check_window(window)
        d_ms = _range_ms(window)
        names = "|".join(GPU_PROBE_NAMES)
        inner = f'count_over_time({{__name__=~"{names}"}}[{d_ms}ms])'
        q = f"count by (host) ({_host_label(inner)})"
        _wait_until_past(end)
        gpu = sorted({r["metric"].get("host", "") for r in self.instant(q, round(end, 3))})
        return Coverage(self.job_hosts(jobid, window), gpu)

    def detect_vendor(self, jobid: str, window: tuple[float, float]) -> Vendor:
        """``"nvidia"`` if the job's hosts have dcgm-exporter GPU samples (utilisation, power or
        SM clock: :data:`GPU_PROBE_METRICS`) in ``window``, ``"amd"`` if Omnistat ``rocm_*`` ones, else ``"none"`` (a CPU-only job, or GPU series
        that match none of the job's hosts: see :meth:`coverage`)."""
        key = (check_jobid(jobid), check_window(window))
        if key in self._vendor_cache:
            return self._vendor_cache[key]  # type: ignore[return-value]
        found: Vendor = "none"
        for vendor in ("nvidia", "amd"):
            names = "|".join(GPU_PROBE_BY_VENDOR[vendor])
            inner = f'count_over_time({{__name__=~"{names}"}}[{_range_ms(window)}ms])'
            q = f"sum({job_join(inner, jobid, window)})"
            t = round(float(window[1]), 3)
            _wait_until_past(t)
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
        """``stat`` of ``logical_metric`` over job ``jobid`` in ``window`` (unix s: the job's
        SLURM start and end), per raw series, joined by host through ``rmsjob_info`` (module
        doc). ``vendor``: force ``nvidia``/``amd``/``node`` instead of detecting it.

        If the evaluation time is less than ``FRESH_MARGIN_S`` ago (a job that just ended) this
        waits (at most 5 s) first: VictoriaMetrics 1.79 misses the newest samples in an instant
        query at "now".

        Returns a :class:`StatResult`; ``value=None`` and ``sample_count=0`` when nothing matched
        (no GPU telemetry on the job's hosts, or no ``rmsjob_info`` for the job near the window).
        Raises ``InputError`` (bad job id / metric / stat / window) or ``ToolUnavailableError``."""
        m = metric_def(logical_metric)
        check_jobid(jobid)
        check_stat(stat)
        win = check_window(window)
        v = self._vendor_for(m, jobid, win, vendor)
        if v == "none":
            q, t = stat_query(logical_metric, jobid, win, stat, vendor=next(iter(m.sources)), step_s=step_s,
                              t_firsts=())
            return StatResult(m.name, stat, None, m.unit, q, float(t), win, {}, 0, "none")
        gpus = self.job_gpus(jobid, win) if m.scope == "gpu" else None
        src = self.pick_source(m, v, jobid, win, gpus)
        t_firsts = (self.first_sample_times(src.inputs[0], jobid, win, gpus, _index_label(m, v))
                    if src.single and stat == "avg" else None)
        kw = dict(vendor=v, rate_window_s=self.rate_window_s, step_s=step_s, t_firsts=t_firsts, gpus=gpus, source=src)
        q, t = stat_query(logical_metric, jobid, win, stat, **kw)
        q_inst, _ = stat_query(logical_metric, jobid, win, stat, by_instance=True, **kw)
        q_count = (f"sum({job_join(_count_series(src, win, self.rate_window_s, step_s), jobid, win, gpus, _index_label(m, v))})")
        _wait_until_past(t)
        res = self.instant(q, t)
        value = float(res[0]["value"][1]) if res else None
        if value is not None and not math.isfinite(value):
            value = None
        per_inst = {r["metric"].get("host", ""): float(r["value"][1]) for r in self.instant(q_inst, t)}
        cnt = self.instant(q_count, t)
        count = int(float(cnt[0]["value"][1])) if cnt else 0
        return StatResult(m.name, stat, value, m.unit, q, float(t), win, per_inst, count, v,
                          per_instance_query=q_inst, source_metrics=src.inputs, source_label=src.label,
                          gpus=gpus if gpus is not None and gpus.by_card else None)

    def job_gpus(self, jobid: str, window: tuple[float, float]) -> JobGpus:
        """The job's GPUs per host (:class:`~.gpujoin.JobGpus`) from the raw ``rmsjob_info``
        samples within ``window`` ± ``JOIN_MARGIN_S`` (``/api/v1/export``): its ``card`` labels,
        and the other jobs on its hosts. Cached per job and window."""
        jid, win = check_jobid(jobid), check_window(window)
        key = (jid, win)
        if key not in self._gpus_cache:
            lo, hi = win[0] - JOIN_MARGIN_S, win[1] + JOIN_MARGIN_S
            mine = self.export(f'rmsjob_info{{jobid="{jid}"}}', lo, hi)
            hosts = sorted({s.host for s in mine})
            others = (self.export(f'rmsjob_info{{jobid!="{jid}",jobid!="",instance=~"{_instance_re(hosts)}"}}', lo, hi)
                      if hosts else [])
            self._gpus_cache[key] = job_gpus([*mine, *others], jid, lo, hi, lambda s: s.host)
        return self._gpus_cache[key]

    def pick_source(self, m: MetricDef, vendor: str, jobid: str, window: tuple[float, float],
                    gpus: JobGpus | None = None) -> Source:
        """The first of ``m``'s :meth:`~.metrics.MetricDef.candidates` for ``vendor`` whose raw
        series all have samples on the job's GPUs in ``window``; the usual source when none has
        (the statistic is then empty). ``InputError`` when ``m`` has no source for ``vendor``."""
        cands = m.candidates(vendor)
        if not cands:
            raise InputError(f"metric {m.name!r} has no {vendor!r} source (has: {', '.join(m.sources)})")
        if len(cands) == 1:
            return cands[0]
        t = round(window[1], 3)
        for src in cands:
            ok = True
            for name in src.inputs:
                q = f"count({job_join(f'count_over_time({name}[{_range_ms(window)}ms])', jobid, window, gpus, _index_label(m, vendor))})"
                _wait_until_past(t)
                res = self.instant(q, t)
                ok = ok and bool(res) and float(res[0]["value"][1]) > 0
            if ok:
                return src
        return cands[0]

    def first_sample_times(self, name: str, jobid: str, window: tuple[float, float], gpus: JobGpus | None = None,
                           index_label: str | None = None) -> list[float]:
        """The distinct times (unix s, ms precision) of the first raw sample of ``name`` in
        ``window`` over the series on the job's hosts (its GPUs, given ``gpus``: :func:`job_join`)
        (``tfirst_over_time``), for :func:`tw_avg_expr`. ``[]`` when there is none."""
        win = check_window(window)
        q = job_join(f"tfirst_over_time({name}[{_range_ms(win)}ms])", jobid, win, gpus, index_label)
        t = round(win[1], 3)
        _wait_until_past(t)
        return sorted({round(float(r["value"][1]), 3) for r in self.instant(q, t)})

    def series_query(self, logical_metric: str, jobid: str, vendor: str, window: tuple[float, float]) -> str:
        """The PromQL of :meth:`job_series`: ``avg by (host) (<expr joined to the job's hosts>)``."""
        m = metric_def(logical_metric)
        if not m.candidates(vendor):
            raise InputError(f"metric {logical_metric!r} has no {vendor!r} source")
        gpus = self.job_gpus(jobid, window) if m.scope == "gpu" else None
        src = self.pick_source(m, vendor, jobid, window, gpus)
        return f"avg by (host) ({job_join(_expr(src, self.rate_window_s), jobid, window, gpus, _index_label(m, vendor))})"

    def job_series(self, logical_metric: str, jobid: str, window: tuple[float, float], step_s: float = 1.0,
                   *, vendor: str | None = None) -> dict[str, list[tuple[float, float]]]:
        """Time series of ``logical_metric`` for job ``jobid``, averaged over the GPUs of each
        host: ``{host: [(t_unix_s, value), ...]}`` on a ``step_s`` grid from ``floor(start)`` to
        ``ceil(end)`` (for plots; a grid is right here, not for statistics). ``{}`` when nothing
        matched."""
        m = metric_def(logical_metric)
        check_jobid(jobid)
        win = check_window(window)
        v = self._vendor_for(m, jobid, win, vendor)
        if v == "none":
            return {}
        q = self.series_query(logical_metric, jobid, v, win)
        _wait_until_past(math.ceil(win[1]))
        res = self.range(q, math.floor(win[0]), math.ceil(win[1]), step_s)
        return {r["metric"].get("host", ""): [(float(t), float(x)) for t, x in r["values"]] for r in res}


__all__ = ["Coverage", "PromQL", "StatResult", "eval_grid", "host_of", "job_hosts_expr", "job_join", "stat_query"]
