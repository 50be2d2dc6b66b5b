"""The typed tools, wrapped as langchain-core ``StructuredTool``s for the LLM agents.

Each tool has a pydantic argument schema, calls the same typed tool the deterministic path uses,
and records its result in a :class:`Recorder` under an evidence id (``ev1``, ``ev2``, ...): the
tool name, the query text, the arguments and what it returned. An agent cites those ids; the
runner (:mod:`ai4s_graph.graph.agents.llm`) copies the recorded results into each claim's
:class:`~ai4s_graph.state.Evidence`, so a claim's number can always be traced to a tool call.

Tools by domain (:func:`toolset`):

- ``trace`` (trace analyst and verifier), over the run's rank traces:
  ``trace_timeline`` (:func:`ai4s_graph.tools.trace.backends.analyze_trace`: TraceLens's GPU timeline,
  op categories, launch statistics), ``trace_top_kernels`` (top kernels, optionally of one op
  category, :mod:`ai4s_graph.tools.trace.kineto`), ``trace_ops_for_kernel`` (the CPU ops that launched
  the kernels whose name contains a text).
- ``telemetry`` (omnistat analyst and verifier): ``telemetry_stat``
  (:meth:`ai4s_graph.tools.telemetry.promql.PromQL.job_stat` over the job window or a sub-window of it,
  joined through ``rmsjob_info``, seed 000 lesson 5) and ``fom_read``
  (:func:`ai4s_graph.tools.trainlog.fom.parse_log` of the training log).

Results are JSON-able dicts with floats rounded to 6 significant digits and paths relative to the
run directory, so a request body (and a cassette) does not depend on where the data sits.
Errors of the typed tools (:class:`~ai4s_graph.tools.errors.InputError`,
``ToolUnavailableError``) are returned to the model as ``{"error": "<one line>"}`` and are not
recorded as evidence.
"""

from __future__ import annotations

import contextlib
import math
import threading
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import Ai4sError, InputError

__all__ = ["Recorder", "toolset", "TRACE_TOOLS", "TELEMETRY_TOOLS", "round_floats", "ToolContext", "make_tool"]

TRACE_TOOLS = ("trace_timeline", "trace_top_kernels", "trace_ops_for_kernel")
TELEMETRY_TOOLS = ("telemetry_stat", "fom_read")


def round_floats(obj: Any, digits: int = 6) -> Any:
    """``obj`` with every float rounded to ``digits`` significant digits (values of 1e6 and more,
    e.g. unix times and byte counts, to 3 decimals; non-finite -> None), tuples turned into lists: a stable, compact JSON form for prompts and evidence."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return float(f"{obj:.{digits}g}") if abs(obj) < 1e6 else round(obj, 3)
    if isinstance(obj, dict):
        return {str(k): round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [round_floats(v, digits) for v in obj]
    if isinstance(obj, BaseModel):
        return round_floats(obj.model_dump(mode="json"), digits)
    return str(obj)


class Recorder:
    """Records every successful tool call of one agent pass under ``ev<n>`` (thread-safe).

    A record is ``{"id", "tool", "query", "args", "returned"}``: the shape of
    :class:`~ai4s_graph.state.Evidence` plus the id the agent cites."""

    def __init__(self) -> None:
        self._records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def record(self, tool: str, query: str, args: dict[str, Any], returned: Any) -> str:
        """Store one result; returns its evidence id."""
        with self._lock:
            eid = f"ev{len(self._records) + 1}"
            self._records.append({"id": eid, "tool": tool, "query": query, "args": dict(args),
                                  "returned": returned})
            return eid

    def by_id(self) -> dict[str, dict[str, Any]]:
        """Evidence id -> record."""
        with self._lock:
            return {r["id"]: r for r in self._records}

    def dump(self) -> list[dict[str, Any]]:
        """All records, oldest first."""
        with self._lock:
            return [dict(r) for r in self._records]


# --------------------------------------------------------------------------------------------
# Argument schemas
# --------------------------------------------------------------------------------------------


class TraceTimelineArgs(BaseModel):
    """Arguments of ``trace_timeline``."""

    model_config = ConfigDict(extra="forbid")
    rank: int | None = Field(None, description="rank whose trace to read; default the lowest rank")


class TopKernelsArgs(BaseModel):
    """Arguments of ``trace_top_kernels``."""

    model_config = ConfigDict(extra="forbid")
    category: str | None = Field(None, description="op category (GEMM, elementwise, reduce, NORM_fwd, NORM_bwd, "
                                                   "SDPA_fwd, SDPA_bwd, CONV_fwd, CONV_bwd, triton, other, ...) "
                                                   "or null for all kernels")
    n: int = Field(5, ge=1, le=20, description="how many kernels")
    rank: int | None = Field(None, description="rank; default the lowest rank")


class OpsForKernelArgs(BaseModel):
    """Arguments of ``trace_ops_for_kernel``."""

    model_config = ConfigDict(extra="forbid")
    kernel_substring: str = Field(min_length=2, max_length=200, description="text contained in the kernel name")
    n: int = Field(5, ge=1, le=20)
    rank: int | None = None


class TelemetryStatArgs(BaseModel):
    """Arguments of ``telemetry_stat`` (offsets in s from the job start)."""

    model_config = ConfigDict(extra="forbid")
    metric: Literal["gpu_util", "sm_clock", "mem_clock", "power", "gpu_temp", "mem_bw_util", "hbm_used",
                    "hbm_free", "hbm_total", "hbm_used_pct", "cpu_util", "mem_available", "mem_total",
                    "mem_used_pct", "load1"]
    stat: Literal["avg", "max", "min", "p50", "p90"] = "avg"
    start_offset_s: float | None = Field(None, ge=0, description="sub-window start, seconds after the job start")
    end_offset_s: float | None = Field(None, ge=0, description="sub-window end, seconds after the job start")


class FomReadArgs(BaseModel):
    """Arguments of ``fom_read``."""

    model_config = ConfigDict(extra="forbid")
    warmup_steps: int | None = Field(None, ge=0, description="leading steps to skip; default the parser's rule")


# --------------------------------------------------------------------------------------------
# The toolset
# --------------------------------------------------------------------------------------------


class ToolContext:
    """What the tools of one pass share: run directory, traces, manifest, TSDB (lazily started).

    ``request``: the RunRequest dict (``perf_run``, ``tsdb_url``, ``jobid``); ``context``:
    ``manifest`` and ``findings``. Call :meth:`close` (or use :func:`toolset`) to stop a
    VictoriaMetrics it started."""

    def __init__(self, request: dict[str, Any], context: dict[str, Any]) -> None:
        self.request = request
        self.context = context
        self.manifest = dict(context.get("manifest") or {})
        self.run_dir = Path(request.get("perf_run") or ".")
        self._kineto: dict[str, Any] = {}
        self._analysis: dict[str, Any] = {}
        self._stack = contextlib.ExitStack()
        self._tsdb: str | None = None
        self._lock = threading.Lock()

    # -- paths -----------------------------------------------------------------------------
    def rel(self, p: str | Path) -> str:
        """``p`` relative to the run directory (its file name when outside it)."""
        try:
            return str(Path(p).resolve().relative_to(self.run_dir.resolve()))
        except ValueError:
            return Path(p).name

    def rank_paths(self) -> dict[int, Path]:
        """Rank -> trace path, from the findings' ``ranks[].path`` or the manifest's artifacts."""
        out: dict[int, Path] = {}
        findings = self.context.get("findings") or {}
        trace = findings.get("trace", findings) if isinstance(findings, dict) else {}
        for i, r in enumerate((trace or {}).get("ranks") or []):
            if r.get("path"):
                out[int(r.get("rank", i) if r.get("rank") is not None else i)] = Path(r["path"])
        if not out:
            for i, p in enumerate((self.manifest.get("artifacts") or {}).get("traces") or []):
                out[i] = self.run_dir / p
        return out

    def path_for(self, rank: int | None) -> tuple[int, Path]:
        """(rank, trace path) for ``rank`` (None: the lowest); raises ``InputError`` when absent."""
        paths = self.rank_paths()
        if not paths:
            raise InputError("no rank traces in this run")
        r = min(paths) if rank is None else rank
        if r not in paths:
            raise InputError(f"no trace for rank {r}; ranks: {sorted(paths)}")
        return r, paths[r]

    def kineto(self, path: Path) -> Any:
        """The analyst tools' kineto load of ``path`` (loaded once per pass)."""
        from .trace import kineto

        with self._lock:
            key = str(path)
            if key not in self._kineto:
                self._kineto[key] = kineto.load_events(path)
            return self._kineto[key]

    def analysis(self, path: Path) -> dict[str, Any]:
        """The TraceAnalysis dict of ``path``: the one the analyst computed when it is in the
        findings (same tool, same input), else :func:`tracelens.analyze_trace`."""
        key = str(path)
        with self._lock:
            if key in self._analysis:
                return self._analysis[key]
        findings = self.context.get("findings") or {}
        trace = findings.get("trace", findings) if isinstance(findings, dict) else {}
        for r in (trace or {}).get("ranks") or []:
            if str(r.get("path")) == key and r.get("timeline"):
                self._analysis[key] = r
                return r
        from .trace import backends as tracelens

        a = tracelens.analyze_trace(path).model_dump(mode="json")
        with self._lock:
            self._analysis[key] = a
        return a

    # -- telemetry ---------------------------------------------------------------------------
    def jobid(self) -> str:
        """The job id (manifest, else request)."""
        return str(self.manifest.get("jobid") or self.request.get("jobid") or "")

    def tsdb(self) -> str:
        """URL of a TSDB holding the job's telemetry: ``--tsdb-url``, else a VictoriaMetrics
        started on loopback (once per toolset, stopped when the toolset closes) and loaded with
        the run's ``telemetry/*.jsonl`` exports."""
        with self._lock:
            if self._tsdb:
                return self._tsdb
            url = self.request.get("tsdb_url") or self.context.get("tsdb_url")
            if not url:
                files = [self.run_dir / p for p in (self.manifest.get("artifacts") or {}).get("telemetry") or []]
                if not files:
                    files = sorted((self.run_dir / "telemetry").glob("*.jsonl"))
                if not files:
                    raise InputError(f"no telemetry: no --tsdb-url and no telemetry/*.jsonl in {self.run_dir.name}")
                from .telemetry.victoria import VictoriaMetrics

                vm = self._stack.enter_context(VictoriaMetrics())
                for f in files:
                    vm.import_jsonl(f)
                url = vm.url
            self._tsdb = url
            return url

    def window(self, pq: Any) -> tuple[float, float]:
        """The job window (unix s): the findings' telemetry window, else PromQL's job window."""
        tel = (self.context.get("findings") or {}).get("telemetry") or {}
        if tel.get("window"):
            return float(tel["window"][0]), float(tel["window"][1])
        s, e = self.manifest.get("start_unix", self.manifest.get("start")), self.manifest.get("end_unix", self.manifest.get("end"))
        hint = (float(s), float(e)) if s and e else None
        return pq.job_window(self.jobid(), hint=hint)

    def close(self) -> None:
        """Stop what this context started (a VictoriaMetrics)."""
        self._stack.close()


def make_tool(name: str, description: str, schema: type[BaseModel], fn: Any, recorder: Recorder) -> Any:
    """A StructuredTool whose call runs ``fn(**args) -> (tool, query, returned)``, records the
    result (floats rounded by :func:`round_floats`) and returns ``{"evidence_id", "tool", "query",
    "result"}`` as a dict; an :class:`Ai4sError` becomes ``{"error": "<one line>"}``, unrecorded."""
    from langchain_core.tools import StructuredTool

    def run(**kwargs: Any) -> dict[str, Any]:
        args = {k: v for k, v in kwargs.items() if v is not None}
        try:
            tool, query, returned = fn(**kwargs)
        except Ai4sError as e:
            return {"error": str(e)}
        returned = round_floats(returned)
        eid = recorder.record(tool, query, args, returned)
        return {"evidence_id": eid, "tool": tool, "query": query, "result": returned}

    return StructuredTool.from_function(func=run, name=name, description=description, args_schema=schema)


def _trace_tools(ctx: ToolContext, rec: Recorder) -> list[Any]:
    def timeline(rank: int | None = None) -> tuple[str, str, Any]:
        r, p = ctx.path_for(rank)
        a = ctx.analysis(p)
        out: dict[str, Any] = {"rank": r, "backend": a.get("backend")}
        for row, v in (a.get("timeline") or {}).items():
            out[f"gpu_timeline.{row}.percent"] = v["percent"]
            out[f"gpu_timeline.{row}.time_ms"] = v["time_ms"]
        for c in a.get("ops_by_category") or []:
            out[f"ops_by_category.{c['category']}.percent"] = c["percent"]
        launch = a.get("launch") or {}
        for k in ("mean_kernel_us", "median_gap_us", "launch_calls", "mean_launch_cpu_us"):
            if k in launch:
                out[f"launch.{k}"] = launch[k]
        for k in ("kernel_count", "n_steps", "kernels_per_step", "step_time_ms", "dataloader_ms_per_step"):
            if a.get(k) is not None:
                out[k] = a[k]
        return "tracelens.analyze_trace", f"{ctx.rel(p)}: gpu_timeline, ops_by_category, launch", out

    def top_kernels(category: str | None = None, n: int = 5, rank: int | None = None) -> tuple[str, str, Any]:
        from .trace import kineto

        r, p = ctx.path_for(rank)
        tr = ctx.kineto(p)
        kernels = [g for g in tr.gpu if g.cat == "kernel"]
        ktime = sum(g.dur for g in kernels) or 1.0
        agg: dict[str, list[float]] = {}
        cats: set[str] = set()
        for g in kernels:
            cat = kineto.categorize_op(tr.cpu_ops[g.launcher][2], g.name) if g.launcher >= 0 else "unlinked"
            cats.add(cat)
            if category is not None and cat.lower() != category.lower():
                continue
            a = agg.setdefault(g.name, [0, 0.0])
            a[0] += 1
            a[1] += g.dur
        if category is not None and not agg:
            raise InputError(f"no kernels of category {category!r}; categories: {', '.join(sorted(cats))}")
        sel = sum(v[1] for v in agg.values())
        rows = [{"name": k[:160], "count": int(c), "total_us": t, "mean_us": t / c,
                 "percent_of_kernel_time": 100.0 * t / ktime}
                for k, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:n]]
        out = {"rank": r, "category": category or "all", "kernels": rows,
               "category_kernel_time_us": sel, "category_percent_of_kernel_time": 100.0 * sel / ktime,
               "kernel_time_us": ktime}
        return "kineto.kernel_stats", f"{ctx.rel(p)}: top {n} kernels of category {category or 'all'}", out

    def ops_for_kernel(kernel_substring: str, n: int = 5, rank: int | None = None) -> tuple[str, str, Any]:
        r, p = ctx.path_for(rank)
        tr = ctx.kineto(p)
        needle = kernel_substring.lower()
        agg: dict[str, list[float]] = {}
        matched = 0
        for g in tr.gpu:
            if g.cat != "kernel" or needle not in g.name.lower():
                continue
            matched += 1
            op = tr.cpu_ops[g.launcher][2] if g.launcher >= 0 else "(no cpu op)"
            a = agg.setdefault(op, [0, 0.0])
            a[0] += 1
            a[1] += g.dur
        if not matched:
            raise InputError(f"no kernel name contains {kernel_substring!r}")
        rows = [{"op": k, "kernels": int(c), "kernel_time_us": t}
                for k, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:n]]
        out = {"rank": r, "kernel_substring": kernel_substring, "matched_kernels": matched, "ops": rows}
        return "kineto.ops_for_kernel", f"{ctx.rel(p)}: cpu ops launching kernels containing {kernel_substring!r}", out

    return [
        make_tool("trace_timeline", "TraceLens GPU timeline of one rank's profiler trace: busy/idle/computation/"
              "exposed communication/exposed memcpy time (ms and % of total), op-category shares of kernel time, "
              "kernel launch statistics, kernels per step, DataLoader ms per step.", TraceTimelineArgs, timeline, rec),
        make_tool("trace_top_kernels", "Top GPU kernels by total time, optionally only those launched by ops of one "
              "category, with count, total and mean µs and share of all kernel time.", TopKernelsArgs, top_kernels, rec),
        make_tool("trace_ops_for_kernel", "The CPU ops (aten::...) that launched the kernels whose name contains a text: "
              "kernels and kernel time per op.", OpsForKernelArgs, ops_for_kernel, rec),
    ]


def _telemetry_tools(ctx: ToolContext, rec: Recorder) -> list[Any]:
    def stat(metric: str, stat: str = "avg", start_offset_s: float | None = None,
             end_offset_s: float | None = None) -> tuple[str, str, Any]:
        from .telemetry import promql

        pq = promql.PromQL(ctx.tsdb())
        w0, w1 = ctx.window(pq)
        s = w0 + (start_offset_s or 0.0)
        e = w0 + end_offset_s if end_offset_s is not None else w1
        if not (w0 <= s < e <= w1 + 1e-6):
            raise InputError(f"sub-window [{start_offset_s}, {end_offset_s}] s is outside the job window "
                             f"of {w1 - w0:.1f} s")
        r = pq.job_stat(metric, ctx.jobid(), (s, e), stat=stat)
        out = {f"telemetry.{metric}.{stat}": r.value, "unit": r.unit, "sample_count": r.sample_count,
               "window_s": [s - w0, e - w0], "per_instance": r.per_instance, "vendor": r.vendor,
               "eval_time": r.time}
        return "promql.job_stat", r.query, out

    def fom_read(warmup_steps: int | None = None) -> tuple[str, str, Any]:
        from .trainlog import fom

        log = ctx.run_dir / ((ctx.manifest.get("artifacts") or {}).get("train_log") or "train.log")
        gbs = ctx.manifest.get("global_batch_size")
        res = fom.parse_log(log, global_batch_size=gbs, warmup_steps=warmup_steps,
                            fom_kind=fom.fom_kind_for_model(ctx.manifest.get("model")))
        d = res.model_dump(mode="json")
        keep = ("format", "n_steps", "n_timed_steps", "n_epochs", "batches_per_epoch", "warmup_steps_skipped",
                "steady_step_time_s", "step_time_p10_s", "step_time_p90_s", "step_time_mean_s", "epoch_time_s",
                "global_batch_size", "throughput_samples_per_s", "throughput_realized_samples_per_s",
                "realized_batch", "partial_step_fraction", "loss_sanity_pass", "loss_decreased",
                "primary_fom", "primary_fom_name")
        out = {f"fom.{k}": d.get(k) for k in keep}
        q = f"parse_log({ctx.rel(log)}, global_batch_size={gbs}, warmup_steps={warmup_steps})"
        return "fom.parse_log", q, out

    return [
        make_tool("telemetry_stat", "A statistic (avg/max/min/p50/p90 over time, then across GPUs) of one GPU or node "
              "metric over the job window or a sub-window of it (offsets in s from the job start), from "
              "VictoriaMetrics with PromQL joined to the job through rmsjob_info. Time-averaged values; never "
              "compare them with burst rates.", TelemetryStatArgs, stat, rec),
        make_tool("fom_read", "Re-read the training log's figures of merit: steady step time (median after warm-up), "
              "epoch time, nominal and realized throughput, loss sanity.", FomReadArgs, fom_read, rec),
    ]


@contextlib.contextmanager
def toolset(domain: Literal["trace", "telemetry"], request: dict[str, Any], context: dict[str, Any],
            recorder: Recorder) -> Iterator[list[Any]]:
    """The StructuredTools of ``domain`` for one agent pass, recording into ``recorder``.

    ``request``: the RunRequest dict (``perf_run``, ``tsdb_url``); ``context``: ``manifest`` and
    ``findings`` (the trace findings with ``ranks[].path``, or telemetry findings with
    ``window``). A VictoriaMetrics started for the telemetry tools is stopped on exit. Raises
    ``ValueError`` for an unknown domain; input problems surface as tool errors, not here."""
    ctx = ToolContext(request, context)
    try:
        if domain == "trace":
            yield _trace_tools(ctx, recorder)
        elif domain == "telemetry":
            yield _telemetry_tools(ctx, recorder)
        else:
            raise ValueError(f"unknown tool domain {domain!r}")
    finally:
        ctx.close()
