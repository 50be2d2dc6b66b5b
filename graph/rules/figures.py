"""The figures the rules read and the analysts claim: one registry, one entry per figure.

A :class:`Figure` is one measured quantity: its id (the claim ``metric``, a template with
``{fields}`` for a family such as ``gpu_timeline.{row}.percent``), its unit, how the analyst makes
it from the engine's tables (:attr:`Figure.make`, over :class:`Inputs`), how the verifier re-derives
it from its own reader's tables (:attr:`Figure.rederive`, over :class:`Reader`), the tolerance the
two are judged with, the bottleneck classes a confirmed claim of it supports, and, for a value
that is a formula of the numbers its tools returned (a ratio, a boolean), that formula
(:attr:`Figure.from_evidence`), so such a claim is supported by its evidence and can be confirmed
or refuted like any number.

This module holds the figures of the tools (trace engine per rank, across ranks, telemetry, the
log's figures of merit, the precision pair, the class rules); each cause module of
:mod:`.causes` declares the figures it claims, and :mod:`.registry` joins both into the one lookup
(:data:`ai4s_graph.graph.rules.registry.FIGURES`). Pure functions of tables: nothing here opens a
file or reads the environment (``tests/test_layers.py`` checks it).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .diagnosis import trace_class
from ...state import BottleneckClass, Claim, Manifest, Tolerance
from ...state.claimkit import PCT_TOL, REL_TOL, SUPPORT_TOL, TELEMETRY_TOL, is_supported

C = BottleneckClass


@dataclass
class Inputs:
    """What the analyst side reads, as tables already in memory (the tools read the files once):

    - ``rank``: one rank trace's engine figures (the ``TraceAnalysis`` fields of a rank result:
      ``timeline``, ``launch``, ``kernel_count``, ``n_steps``, ``step_time_ms``, ``ops_by_category``,
      ...) with ``path``, ``rank`` and ``label``;
    - ``event_names``: event name -> count over that trace, for the names the causes read
      (:func:`ai4s_graph.graph.rules.registry.event_name_wanted`);
    - ``roofline``: the trace's roofline (:func:`ai4s_graph.tools.perfmodel.roofline.roofline_of`), or None;
    - ``telemetry``: the telemetry analyst's findings (``stats`` ``{"<metric>.<stat>": {"value", ...}}``,
      ``series`` ``{metric: {instance: [(unix s, value)]}}``);
    - ``log``: the facts of the one read of the training log (``path``, ``counts``: pattern key ->
      matching lines, ``last_step_unix``);
    - ``manifest``: the job's :class:`~ai4s_graph.state.Manifest`; ``job``: the job script's fields
      (:func:`ai4s_graph.tools.slurm.scriptparse.parse_job_script`); ``env``: the job's environment
      (the job script's assignments, then the manifest's ``env``);
    - ``collectives``: across ranks, the collectives report of the ranks' analysis passes
      (:class:`ai4s_graph.tools.trace.collectives.CollectiveReport` as a dict: ``per_rank``,
      ``groups``, ``stragglers``), ``{}`` for a single rank;
    - ``fom``: the figures of merit of the one read of the log (``steady_step_time_s``, ...)."""

    rank: dict[str, Any] | None = None
    event_names: dict[str, int] = field(default_factory=dict)
    roofline: dict[str, Any] | None = None
    telemetry: dict[str, Any] = field(default_factory=dict)
    log: dict[str, Any] = field(default_factory=dict)
    manifest: Manifest | None = None
    job: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    collectives: dict[str, Any] = field(default_factory=dict)
    fom: dict[str, Any] = field(default_factory=dict)

    def figure(self, fid: str) -> Any:
        """The value of the registered figure ``fid`` (a metric id such as
        ``cpu.dataloader_step_share_pct`` or ``telemetry.gpu_util.avg``) made from these tables;
        None when its tables are missing. Raises KeyError for a figure no entry of :data:`CORE`
        matches or one without a maker."""
        fig, params = find(fid, CORE)
        if fig is None or fig.make is None:
            raise KeyError(f"no registered figure {fid!r} with a maker")
        return fig.make(self, **params)

    def statistic(self, key: str) -> float | None:
        """A telemetry statistic's value (``"gpu_util.avg"``), or None."""
        return ((self.telemetry.get("stats") or {}).get(key) or {}).get("value")


@dataclass
class Reader:
    """What the verifier side reads: its own readers' tables, never the analyst's figures.

    - ``rank``: the verifier reader's tables of the claim's rank trace (the full-load reader
      :mod:`ai4s_graph.tools.trace.kineto` fed by the analysis pass: ``timeline``, ``launch``,
      ``ops_by_category``, ``kernel_count``, ``short_kernels``, step figures, ``method``; plus
      ``raw_counts`` (raw-text counts of the causes' patterns, no JSON parse) and
      ``roofline_correlation`` (the roofline with kernels linked by correlation id));
    - ``ranks``: rank -> its reader tables (the first file of each rank), for cross-rank claims;
    - ``series``: telemetry ``query_range`` series ``{metric: {instance: [(t, v)]}}``;
    - ``raw_stats``: ``(metric, stat, sub-window) -> value`` from the raw telemetry samples, and
      ``supports_compute`` the same rule as the analyst's on the raw job statistics;
    - ``log``: the verifier's own re-read of the training log (``steps``, ``epochs``,
      ``epoch_losses``, ``n_losses``, ``n_nonfinite_losses``, ``counts``);
    - ``compare``: the precision pair re-derived from both logs (``speedup``, ``class``);
    - ``job_script``: the job script's text, ``job`` its fields; ``manifest``: the job's manifest;
    - ``crossrank``: cross-rank re-derivations by metric (``(value, tolerance, method)``);
    - ``warmup``, ``global_batch_size``: the warm-up steps the analyst declared, the manifest's batch;
    - ``collectives``: the verifier's own cross-rank summary of every rank's communication kernels
      as the full-load reader loaded them (:func:`ai4s_graph.tools.trace.crossrank_check.collective_summary`:
      ``straggler_rank``, ``groups`` with busbw), for a cause that declares ``ranks`` in its
      ``verifier_needs`` (``ranks`` then holds each rank's reader tables)."""

    rank: dict[str, Any] | None = None
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)
    series: dict[str, Any] = field(default_factory=dict)
    raw_stats: dict[tuple, float | None] = field(default_factory=dict)
    log: dict[str, Any] = field(default_factory=dict)
    compare: dict[str, Any] = field(default_factory=dict)
    job_script: str = ""
    job: dict[str, Any] = field(default_factory=dict)
    manifest: Manifest | None = None
    crossrank: dict[str, tuple[Any, Tolerance, str]] = field(default_factory=dict)
    supports_compute: bool | None = None
    warmup: int = 0
    global_batch_size: int | None = None
    collectives: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Rederived:
    """A verifier's re-derived value with how it was obtained. ``tolerance`` None: the figure's;
    ``method`` None: the reader's own description (the trace reader's ``method``)."""

    value: Any
    method: str | None = None
    tolerance: Tolerance | None = None
    note: str = ""


@dataclass(frozen=True)
class Figure:
    """One claimable (or readable) figure; see the module docstring.

    ``id``: exact metric, or a template whose ``{name}`` fields match one dot-free part each
    (``{name:regex}`` for another pattern); ``source``: which tables it comes from (``rank``,
    ``ranks``, ``telemetry``, ``fom``, ``compare``, ``cause``); ``make(inputs, **fields)``: the
    analyst's value; ``rederive(reader, claim, **fields) -> Rederived``: the verifier's;
    ``tolerance``: agreement of the two; ``supports``: classes (values of
    :class:`~ai4s_graph.state.BottleneckClass`) a confirmed claim of it supports; ``from_evidence``:
    the value as a formula of the claim's evidence (a list of the ``returned`` values), for values
    not returned verbatim."""

    id: str
    unit: str
    doc: str
    source: str
    tolerance: Tolerance = field(default_factory=Tolerance)
    supports: tuple[str, ...] = ()
    make: Callable[..., Any] | None = None
    rederive: Callable[..., Rederived] | None = None
    from_evidence: Callable[[list[Any]], Any] | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        """The metric regex of :attr:`id` (fields as named groups)."""
        return _compile(self.id)


_FIELD = re.compile(r"\{(\w+)(?::([^}]+))?\}")
_COMPILED: dict[str, re.Pattern[str]] = {}


def _compile(template: str) -> re.Pattern[str]:
    rx = _COMPILED.get(template)
    if rx is None:
        out, pos = [], 0
        for m in _FIELD.finditer(template):
            out.append(re.escape(template[pos:m.start()]))
            out.append(f"(?P<{m.group(1)}>{m.group(2) or '[^.]+'})")
            pos = m.end()
        out.append(re.escape(template[pos:]))
        rx = _COMPILED[template] = re.compile("^" + "".join(out) + "$")
    return rx


def find(metric: str, figures: Iterable[Figure]) -> tuple[Figure | None, dict[str, str]]:
    """The figure a metric names and its template fields: an exact id first, then the first
    template that matches; ``(None, {})`` when none does."""
    figs = list(figures)
    for f in figs:
        if f.id == metric and "{" not in f.id:
            return f, {}
    for f in figs:
        if "{" in f.id:
            m = f.pattern.match(metric)
            if m:
                return f, m.groupdict()
    return None, {}


def supports(metric: str, klass: str, figures: Iterable[Figure]) -> bool:
    """Whether a confirmed claim of ``metric`` counts as support for class ``klass``."""
    fig, _ = find(metric, figures)
    return fig is not None and klass in fig.supports


def supported(cl: Claim, figures: Iterable[Figure]) -> bool:
    """A claim's value is supported by its evidence: returned verbatim by one of its tool calls
    (:func:`ai4s_graph.state.claimkit.is_supported`), or equal (numbers within
    :data:`~ai4s_graph.state.claimkit.SUPPORT_TOL`) to its figure's formula of what they returned
    (:attr:`Figure.from_evidence`)."""
    if is_supported(cl):
        return True
    fig, _ = find(cl.metric, figures)
    if fig is None or fig.from_evidence is None or cl.value is None:
        return False
    try:
        v = fig.from_evidence([e.returned for e in cl.evidence])
    except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        return False
    if v is None:
        return False
    if isinstance(cl.value, bool) or isinstance(v, bool):
        return isinstance(cl.value, bool) and isinstance(v, bool) and v == cl.value
    if isinstance(cl.value, (int, float)) and isinstance(v, (int, float)):
        return SUPPORT_TOL.agrees(float(cl.value), float(v))
    return str(v).strip() == str(cl.value).strip()


def series_mean(series: Any) -> float | None:
    """Mean of a ``promql.job_series`` result (``{instance: [(t, value), ...]}``) over every point
    of every instance; None when it has none."""
    pts = [float(v) for pairs in (series or {}).values() for _t, v in pairs if v is not None] \
        if isinstance(series, dict) else []
    return sum(pts) / len(pts) if pts else None


def host_cpu_pct(x: Inputs) -> float | None:
    """The node's host CPU busy %: the telemetry statistic ``cpu_util.avg``, else the mean of the
    ``cpu_util`` series; None without either."""
    v = x.statistic("cpu_util.avg")
    return v if v is not None else series_mean((x.telemetry.get("series") or {}).get("cpu_util"))


def returned_dicts(returned: list[Any]) -> dict[str, Any]:
    """The dict-valued ``returned`` of a claim's evidence merged in order (later keys win): the
    numbers a ``from_evidence`` formula reads."""
    out: dict[str, Any] = {}
    for r in returned:
        if isinstance(r, dict):
            out.update(r)
    return out


# ---------------------------------------------------------------------------------------------
# One rank trace: the analyst reads the engine's figures (Inputs.rank), the verifier its reader's
# (Reader.rank), each with the same definition below.
# ---------------------------------------------------------------------------------------------


def timeline_pct(figs: dict[str, Any], row: str) -> float:
    """Percent of the profiled window in a ``gpu_timeline`` row (TraceLens's rows)."""
    return float(figs["timeline"][row]["percent"])


def short_kernel_pct(figs: dict[str, Any]) -> float | None:
    """Percent of kernels shorter than the short-kernel threshold; None without kernels."""
    if not figs.get("kernel_count"):
        return None
    return 100.0 * int((figs.get("short_kernels") or {}).get("count", 0)) / int(figs["kernel_count"])


def kernels_per_step(figs: dict[str, Any]) -> float | None:
    """Kernels launched per profiled step (the engine's own ``kernels_per_step`` when it gave
    one); None without a ProfilerStep."""
    if not figs.get("n_steps"):
        return None
    return float(figs.get("kernels_per_step") or figs["kernel_count"] / figs["n_steps"])


def category_pct(figs: dict[str, Any], category: str) -> float:
    """Percent of GPU kernel time in one op category (0 when the category is absent)."""
    for row in figs.get("ops_by_category") or []:
        if row.get("category") == category:
            return float(row.get("percent") or 0.0)
    return 0.0


def dataloader_share_pct(figs: dict[str, Any]) -> float | None:
    """DataLoader CPU time per step as a percent of the step (the data-loader rule's input, seed
    001 T19); None without a step time or DataLoader time."""
    if not figs.get("step_time_ms") or figs.get("dataloader_ms_per_step") is None:
        return None
    return 100.0 * float(figs["dataloader_ms_per_step"]) / float(figs["step_time_ms"])


def _rank_make(fn: Callable[..., Any], digits: int) -> Callable[..., Any]:
    def make(x: Inputs, **kw: Any) -> Any:
        v = fn(x.rank or {}, **kw) if x.rank else None
        return round(v, digits) if isinstance(v, float) else v
    return make


def _rank_rederive(fn: Callable[..., Any]) -> Callable[..., Rederived]:
    def rederive(r: Reader, claim: Claim | None = None, **kw: Any) -> Rederived:
        return Rederived(fn(r.rank, **kw) if r.rank is not None else None)
    return rederive


#: What the verifier says of a launch figure when its reader saw no launch call in the trace.
NO_LAUNCH_EVENTS = ("not checked: no launch events (cudaLaunchKernel / hipLaunchKernel, a graph launch or a variant) in the trace, "
                    "so kernels per launching step cannot be re-derived from launches")


def _launched_per_step(r: Reader, claim: Claim | None = None, **_kw: Any) -> Rederived:
    """Kernels launched per profiled step, re-derived only from launch evidence: the verifier
    reader's kernel count over its steps when it saw at least one launch call
    (``launch.launch_calls``, or a graph launch: ``launch.graph_launch_calls``); with none the claim is not confirmed from the kernels alone
    (``Rederived(None)``: inconclusive, :data:`NO_LAUNCH_EVENTS`)."""
    f = r.rank
    if f is None or not f.get("n_steps"):
        return Rederived(None)
    launch = f.get("launch") or {}
    if not int(launch.get("launch_calls") or 0) and not int(launch.get("graph_launch_calls") or 0):
        return Rederived(None, note=NO_LAUNCH_EVENTS)
    return Rederived(float(f["kernel_count"]) / float(f["n_steps"]))


def _timeline(row: str, supports_: tuple[str, ...], doc: str) -> Figure:
    return Figure(f"gpu_timeline.{row}.percent", "%", doc, "rank", PCT_TOL, supports_,
                  _rank_make(lambda f: timeline_pct(f, row), 4), _rank_rederive(lambda f: timeline_pct(f, row)))


RANK_FIGURES: tuple[Figure, ...] = (
    _timeline("idle_time", (C.dispatch.value, C.data_loader.value), "GPU idle share of the profiled window"),
    _timeline("computation_time", (C.compute.value, C.memory.value), "GPU computing share of the profiled window"),
    _timeline("exposed_comm_time", (C.communication.value,),
              "communication not overlapped with computation, share of the profiled window"),
    _timeline("exposed_memcpy_time", (), "memory copies overlapped with neither computation nor communication"),
    Figure("gpu_timeline.{row}.percent", "%", "any other gpu_timeline row (busy_time, total_comm_time, ...)", "rank",
           PCT_TOL, (), _rank_make(timeline_pct, 4), _rank_rederive(timeline_pct)),
    Figure("kernels.mean_kernel_us", "µs", "mean GPU kernel duration", "rank", REL_TOL, (C.dispatch.value,),
           _rank_make(lambda f: float((f.get("launch") or {}).get("mean_kernel_us") or 0.0) or None, 3),
           _rank_rederive(lambda f: float(f["launch"]["mean_kernel_us"]))),
    Figure("kernels.short_kernel_count_pct", "%", "share of kernels shorter than the short-kernel threshold", "rank",
           PCT_TOL, (C.dispatch.value,), _rank_make(short_kernel_pct, 3), _rank_rederive(short_kernel_pct)),
    Figure("kernels.kernels_per_step", "kernels/step", "kernels launched per profiled step", "rank", REL_TOL,
           (C.dispatch.value,), _rank_make(kernels_per_step, 3),
           _launched_per_step),
    Figure("ops_by_category.{category}.percent", "%", "share of GPU kernel time of one op category", "rank",
           Tolerance(abs=2.0), (C.compute.value, C.memory.value),
           _rank_make(category_pct, 3), _rank_rederive(category_pct)),
    Figure("cpu.dataloader_step_share_pct", "%", "DataLoader CPU time per step, share of the step", "rank",
           Tolerance(abs=2.0), (C.data_loader.value,), _rank_make(dataloader_share_pct, 3),
           _rank_rederive(dataloader_share_pct)),
    Figure("diagnosis.trace_bottleneck_class", "class", "the class rules (graph/rules/diagnosis.py) on one rank trace",
           "rank", Tolerance(), (),
           lambda x: trace_class(x.rank).klass.value if x.rank else None,
           _rank_rederive(lambda f: trace_class(f).klass.value)),
)
"""Per rank trace (``tl.r<rank>.*`` claims of ``nodes/trace_analyst.py``)."""

# ---------------------------------------------------------------------------------------------
# Across ranks: the analyst's collectives report vs the verifier's arrival order and kernel sizes
# (tools/trace/crossrank_check.py), computed by the trace verifier into Reader.crossrank.
# ---------------------------------------------------------------------------------------------


def _crossrank(r: Reader, claim: Claim | None = None, **_: Any) -> Rederived:
    got = r.crossrank.get(claim.metric) if claim is not None else None
    if got is None:
        return Rederived(None, f"no independent path for metric {claim.metric if claim else '?'}", Tolerance())
    value, tol, method = got
    return Rederived(value, method, tol)


RANKS_FIGURES: tuple[Figure, ...] = (
    Figure("collectives.straggler_rank", "rank", "the rank that arrives last at the synchronising collectives",
           "ranks", Tolerance(abs=0.0), (C.communication.value,), rederive=_crossrank),
    Figure("collectives.{collective}.{msg_bytes:[0-9.eE+-]+}.busbw_gbps", "GB/s",
           "achieved bus bandwidth of one collective and message size (nccl-tests factors)", "ranks",
           Tolerance(rel=0.02), (C.communication.value,), rederive=_crossrank),
    Figure("collectives.{rest:.+}", "", "any other cross-rank figure (no independent path)", "ranks",
           Tolerance(), (C.communication.value,), rederive=_crossrank),
)
"""Across ranks (``tl.multi.*`` claims)."""

# ---------------------------------------------------------------------------------------------
# Telemetry, the figures of merit, the precision pair
# ---------------------------------------------------------------------------------------------


def _tel_make(x: Inputs, metric: str, stat: str, qualifier: str = "") -> Any:
    v = x.statistic(f"{metric}.{stat}")
    return round(float(v), 6) if v is not None else None


def _tel_rederive(r: Reader, claim: Claim | None = None, metric: str = "", stat: str = "",
                  qualifier: str = "") -> Rederived:
    sub = claim_subwindow(claim)
    v = r.raw_stats.get((metric, stat, sub))
    return Rederived(None if v is None else round(v, 6))


def claim_subwindow(claim: Claim | None) -> tuple | None:
    """The sub-window ``(start_offset_s, end_offset_s)`` a telemetry claim's evidence names (None
    for the whole job window): the key of :attr:`Reader.raw_stats`."""
    if claim is None or not claim.evidence:
        return None
    a = claim.evidence[0].args or {}
    s, e = a.get("start_offset_s"), a.get("end_offset_s")
    return None if s is None and e is None else (s, e)


def fom_value(metric: str, r: Reader) -> Any:
    """A figure of merit re-derived from the verifier's own re-read of the log (``r.log``), using
    the warm-up count the analyst declared (``r.warmup``): the median steady step, throughput at
    the global batch, the median complete epoch past the warm-up (all epochs when none is free of
    it, the analyst's stated fallback), loss fell / diverged. None when the re-read has too little."""
    steady = (r.log.get("steps") or [])[r.warmup:]
    if not steady:
        return None
    step = statistics.median(steady)
    if metric == "fom.steady_step_time_s":
        return step
    if metric == "fom.throughput_samples_per_s":
        return r.global_batch_size / step if r.global_batch_size else None
    if metric == "fom.epoch_time_s":
        sums, seen = [], 0
        for ep in r.log.get("epochs") or []:
            if seen >= r.warmup:
                sums.append(sum(ep))
            seen += len(ep)
        if not sums:
            sums = [sum(ep) for ep in r.log.get("epochs") or []]
        return statistics.median(sums) if sums else None
    if metric == "fom.loss_diverged":
        return (r.log["n_nonfinite_losses"] > 0) if r.log.get("n_losses") else None
    if metric == "fom.loss_decreased":
        el = r.log.get("epoch_losses") or []
        return (el[-1] < el[0]) if len(el) >= 2 else None
    return None


def _fom(metric: str, unit: str, doc: str, tol: Tolerance) -> Figure:
    return Figure(metric, unit, doc, "fom", tol, (), lambda x: None,
                  lambda r, claim=None: Rederived(fom_value(metric, r)))


OTHER_FIGURES: tuple[Figure, ...] = (
    Figure("telemetry.supports_compute", "bool", "utilization, SM clock and power all high (seed 001 T2)",
           "telemetry", Tolerance(), (), rederive=lambda r, claim=None: Rederived(r.supports_compute)),
    Figure("telemetry.{metric}.{stat}{qualifier:(?:\\..+)?}", "", "a statistic of a telemetry metric over the job, or "
           "over a sub-window (a qualified metric such as ``telemetry.power.avg.warmup``)", "telemetry", TELEMETRY_TOL,
           (), _tel_make, _tel_rederive),
    _fom("fom.steady_step_time_s", "s", "median steady-state step time (rank 0)", REL_TOL),
    _fom("fom.epoch_time_s", "s", "median epoch time", REL_TOL),
    _fom("fom.throughput_samples_per_s", "samples/s", "global batch / steady step time", REL_TOL),
    _fom("fom.loss_decreased", "bool", "the epoch loss fell from the first to the last epoch", Tolerance()),
    _fom("fom.loss_diverged", "bool", "a logged loss value is NaN/inf", Tolerance()),
    Figure("cpu.host_util_pct", "%", "the node's host CPU busy share (statistic, else series mean); read by "
           "causes, not claimed", "telemetry", Tolerance(), (), lambda x: host_cpu_pct(x)),
    Figure("compare.precision_speedup", "×", "steady step time of the higher precision over the lower one "
           "(seed 000 lesson 13)", "compare", REL_TOL, (),
           rederive=lambda r, claim=None: Rederived(r.compare.get("speedup"))),
    Figure("diagnosis.precision_discriminator_class", "class", "the precision discriminator's class (lessons 13, 22)",
           "compare", Tolerance(), (), rederive=lambda r, claim=None: Rederived(r.compare.get("class"))),
)

CORE: tuple[Figure, ...] = RANK_FIGURES + RANKS_FIGURES + OTHER_FIGURES
"""The figures of the tools (the causes add theirs in :mod:`.registry`)."""
