"""The LLM verifiers' tools: re-derivation only, never the analysts' tools or their cached results.

Each tool reads the raw input again by a code path the analysts do not use, and records its result
under an evidence id like the analysts' tools (:class:`~ai4s_graph.tools.llm_tools.Recorder`), with
a tool name of its own, so :func:`~ai4s_graph.graph.agents.merge.merge_verdicts` can tell a
re-derivation from a re-run of the claim's own call.

- ``trace`` (trace verifier):
  ``trace_rederive`` (tool ``kineto.rederive``): the full-load reader :mod:`ai4s_graph.tools.trace.kineto`
  run on the rank's trace file now (timeline, launch statistics, op and kernel categories, steps);
  ``trace_stream_kernels`` (tool ``stream.kernel_counts``): the bounded-memory streaming reader
  :mod:`ai4s_graph.tools.trace.stream` (per-kernel-name count, total and mean µs; its own timeline).
- ``telemetry`` (telemetry verifier):
  ``telemetry_raw_stat`` (tool ``telemetry.raw_samples``): the statistic from the raw samples (the
  run's JSON-lines export, or VictoriaMetrics' ``/api/v1/export``) in plain Python, no PromQL, over
  the job window or the sub-window the claim names (offsets in s from the job start);
  ``log_reread`` (tool ``trainlog.reread``): the telemetry verifier's own second reading of the
  training log (:func:`~ai4s_graph.tools.trainlog.reread.reread_log`).
- both: ``node_probe`` (tool ``slurm.srun_probe``): one ``srun -N1 -w <one of the job's nodes>
  --time=00:05:00`` named check per pass (:mod:`ai4s_graph.tools.slurm.probe`), or
  ``"not run: no cluster"``.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..rules.figures import dataloader_share_pct, short_kernel_pct
from ...tools.errors import InputError
from ...tools.llm_tools import Recorder, ToolContext, make_tool
from ...tools.slurm import probe as P
from ...tools.telemetry import export
from ...tools.telemetry.metrics import METRICS
from ...tools.telemetry.subwindow import raw_subwindow_stat
from ...tools.trace import kineto, stream
from ...tools.trainlog.reread import reread_log

__all__ = ["verifier_toolset", "TRACE_VERIFIER_TOOLS", "TELEMETRY_VERIFIER_TOOLS"]

TRACE_VERIFIER_TOOLS = ("trace_rederive", "trace_stream_kernels", "node_probe")
TELEMETRY_VERIFIER_TOOLS = ("telemetry_raw_stat", "log_reread", "node_probe")


class RankArgs(BaseModel):
    """Arguments of ``trace_rederive``."""

    model_config = ConfigDict(extra="forbid")
    rank: int | None = Field(None, description="rank whose trace to re-read; default the lowest rank")


class StreamArgs(BaseModel):
    """Arguments of ``trace_stream_kernels``."""

    model_config = ConfigDict(extra="forbid")
    name_substring: str | None = Field(None, max_length=200, description="only kernels whose name contains this")
    n: int = Field(5, ge=1, le=20)
    rank: int | None = None


class RawStatArgs(BaseModel):
    """Arguments of ``telemetry_raw_stat`` (offsets in s from the job start)."""

    model_config = ConfigDict(extra="forbid")
    metric: Literal["gpu_util", "sm_clock", "mem_clock", "power", "gpu_temp", "mem_bw_util", "hbm_used",
                    "hbm_free", "hbm_total", "hbm_used_pct", "cpu_util", "mem_available", "mem_total",
                    "mem_used_pct", "load1"]
    stat: Literal["avg", "max", "min", "p50", "p90"] = "avg"
    start_offset_s: float | None = Field(None, ge=0, description="sub-window start, s after the job start "
                                                                 "(use the claim's own window)")
    end_offset_s: float | None = Field(None, ge=0, description="sub-window end, s after the job start")


class RereadArgs(BaseModel):
    """``log_reread`` takes no argument."""

    model_config = ConfigDict(extra="forbid")


class ProbeArgs(BaseModel):
    """Arguments of ``node_probe``: the named check."""

    model_config = ConfigDict(extra="forbid")
    check: Literal["matmul", "stream", "gpu_clocks"] = Field(
        description="matmul: short GEMM TFLOP/s; stream: triad GB/s; gpu_clocks: SM clock, max clock, power cap")


def _trace_tools(ctx: ToolContext, rec: Recorder) -> list[Any]:
    def rederive(rank: int | None = None) -> tuple[str, str, Any]:
        r, p = ctx.path_for(rank)
        tr = kineto.load_events(p)  # the file itself, every time: never the analyst's cached analysis
        out: dict[str, Any] = {"rank": r}
        for row, v in kineto.timeline_of(tr).items():
            out[f"gpu_timeline.{row}.percent"] = v.percent
            out[f"gpu_timeline.{row}.time_ms"] = v.time_ms
        for k, v in kineto.launch_stats(tr).items():
            out[f"launch.{k}"] = v
        for c in kineto.ops_by_category(tr):
            out[f"ops_by_category.{c['category']}.percent"] = c["percent"]
        ks = kineto.kernel_stats(tr)
        for c in ks["kernels_by_category"]:
            out[f"kernels_by_category.{c['category']}.percent_of_kernel_time"] = c["percent"]
        out["kernel_count"] = ks["kernel_count"]
        # the figures' own definitions (graph/rules/figures.py), on this reader's tables
        out["short_kernels.count_pct"] = short_kernel_pct(ks) or 0.0
        st = kineto.step_stats(tr)
        out["n_steps"] = st["n_steps"]
        if st["n_steps"]:
            out["kernels_per_step"] = ks["kernel_count"] / st["n_steps"]
        if st.get("step_time_ms"):
            out["step_time_ms"] = st["step_time_ms"]
            out["dataloader_ms_per_step"] = st["dataloader_ms_per_step"]
            out["dataloader_step_share_pct"] = dataloader_share_pct(st)
        return "kineto.rederive", f"{ctx.rel(p)}: full-load kineto re-read (timeline, launch, categories, steps)", out

    def stream_kernels(name_substring: str | None = None, n: int = 5, rank: int | None = None) -> tuple[str, str, Any]:
        r, p = ctx.path_for(rank)
        scan = stream.scan_trace(p)
        rows = [x for x in stream.kernel_counts(scan) if x["count"]]
        ktime = sum(x["total_us"] for x in rows) or 1.0
        if name_substring:
            rows = [x for x in rows if name_substring.lower() in x["name"].lower()]
            if not rows:
                raise InputError(f"no GPU event name contains {name_substring!r}")
        tl = stream.gpu_timeline(scan, stream.window_mask(scan, "linked"))
        total = tl["total_time"] or 1.0
        out: dict[str, Any] = {"rank": r, "filter": name_substring or "all",
                               "kernels": [{"name": x["name"][:160], "count": x["count"], "total_us": x["total_us"],
                                            "mean_us": x["total_us"] / x["count"],
                                            "percent_of_gpu_event_time": 100.0 * x["total_us"] / ktime}
                                           for x in rows[:n]],
                               "matched_count": sum(x["count"] for x in rows),
                               "matched_percent_of_gpu_event_time": 100.0 * sum(x["total_us"] for x in rows) / ktime}
        for k, v in tl.items():
            out[f"gpu_timeline.{k}.percent"] = 100.0 * v / total
        return "stream.kernel_counts", f"{ctx.rel(p)}: streaming re-read, GPU events {name_substring or 'all'}", out

    return [
        make_tool("trace_rederive", "Re-read one rank's profiler trace with the full-load kineto reader (not the "
                  "analyst's analysis): gpu_timeline percent and ms, launch statistics, op-category and "
                  "kernel-category shares, kernel count, kernels per step, DataLoader share of a step.",
                  RankArgs, rederive, rec),
        make_tool("trace_stream_kernels", "Re-read one rank's trace with the streaming reader: GPU events by name "
                  "(count, total and mean µs, share of GPU event time), optionally only names containing a "
                  "text, and the streaming reader's own gpu_timeline percentages.", StreamArgs, stream_kernels, rec),
    ]


def _raw_series(ctx: ToolContext) -> tuple[list[Any], str]:
    files = [ctx.run_dir / p for p in (ctx.manifest.get("artifacts") or {}).get("telemetry") or []]
    if not files:
        files = sorted((ctx.run_dir / "telemetry").glob("*.jsonl"))
    if files:
        return [s for f in files for s in export.load_export(f)], f"raw samples of {', '.join(f.name for f in files)}"
    url = ctx.request.get("tsdb_url") or ctx.context.get("tsdb_url")
    if not url:
        raise InputError("no raw telemetry: no telemetry/*.jsonl export and no --tsdb-url")
    names = ['{__name__=~"DCGM_FI_.*|rocm_.*|node_.*|rmsjob_info"}']
    return export.export_raw(url, names), "raw samples from <tsdb>/api/v1/export"


def _telemetry_tools(ctx: ToolContext, rec: Recorder) -> list[Any]:
    cache: dict[str, Any] = {}
    lock = threading.Lock()

    def raw_stat(metric: str, stat: str = "avg", start_offset_s: float | None = None,
                 end_offset_s: float | None = None) -> tuple[str, str, Any]:
        with lock:
            if "series" not in cache:
                cache["series"], cache["how"] = _raw_series(ctx)
        series, how = cache["series"], cache["how"]
        # offsets count from the analyst's job window: the findings', else the manifest's SLURM times
        tel = (ctx.context.get("findings") or {}).get("telemetry") or {}
        s0, e0 = ctx.manifest.get("start_unix", ctx.manifest.get("start")), ctx.manifest.get("end_unix", ctx.manifest.get("end"))
        base = ((float(tel["window"][0]), float(tel["window"][1])) if tel.get("window")
                else (float(s0), float(e0)) if s0 and e0 else None)
        r, (s, e) = raw_subwindow_stat(series, metric, ctx.jobid(), stat, start_offset_s, end_offset_s, base)
        unit = METRICS[metric].unit
        out = {f"raw.{metric}.{stat}": r.value, "unit": unit, "sample_count": r.sample_count,
               "window_s": [s, e], "per_instance": r.per_instance, "vendor": r.vendor}
        q = f"{how}: {stat} of {metric} over s {s:.1f}-{e:.1f} of the job, plain Python (no PromQL)"
        return "telemetry.raw_samples", q, out

    def reread() -> tuple[str, str, Any]:
        log = ctx.run_dir / ((ctx.manifest.get("artifacts") or {}).get("train_log") or "train.log")
        if not log.is_file():
            raise InputError(f"no training log {ctx.rel(log)}")
        rr = reread_log(log)
        fom = (ctx.context.get("findings") or {}).get("fom") or {}
        warm = int(fom.get("warmup_steps_skipped") or 0)
        steady = rr["steps"][warm:]
        gbs = ctx.manifest.get("global_batch_size")
        out: dict[str, Any] = {"n_steps": len(rr["steps"]), "warmup_steps_skipped": warm, "n_epochs": len(rr["epochs"])}
        if steady:
            step = statistics.median(steady)
            out["steady_step_time_s"] = step
            if gbs:
                out["throughput_samples_per_s"] = gbs / step
        el = rr["epoch_losses"]
        out["loss_decreased"] = (el[-1] < el[0]) if len(el) >= 2 else None
        return "trainlog.reread", f"own re-read of {ctx.rel(log)} (rank-0 step lines, median after {warm} warm-up steps)", out

    return [
        make_tool("telemetry_raw_stat", "A statistic of one GPU or node metric from the RAW telemetry samples in "
                  "plain Python (no PromQL), over the job window or the sub-window a claim names (offsets in s "
                  "from the job start). Use the claim's own window.", RawStatArgs, raw_stat, rec),
        make_tool("log_reread", "Re-read the training log with the verifier's own patterns: step count, steady "
                  "step time (median after the declared warm-up), throughput, loss decreased.", RereadArgs, reread, rec),
    ]


def _probe_tool(ctx: ToolContext, rec: Recorder) -> Any:
    used: list[str] = []

    def probe(check: str) -> tuple[str, str, Any]:
        if used:
            raise InputError(f"one probe per verifier pass (already ran {used[0]})")
        used.append(check)
        nodes = list(ctx.manifest.get("nodes_list") or [])
        res = P.run_probe(check, nodes)
        q = res.get("command") or f"srun -N1 -w <one of {', '.join(nodes) or 'no nodes'}> --time=00:05:00 {check}"
        return "slurm.srun_probe", q, res

    return make_tool("node_probe", "Measure one of the job's nodes directly: srun -N1 -w <node> --time=00:05:00 "
                     "running a named check (matmul: short GEMM TFLOP/s; stream: triad GB/s; gpu_clocks: SM "
                     "clock and power cap). At most one per pass; answers 'not run: no cluster' where no "
                     "cluster is reachable.", ProbeArgs, probe, rec)


@contextlib.contextmanager
def verifier_toolset(domain: Literal["trace", "telemetry"], request: dict[str, Any], context: dict[str, Any],
                     recorder: Recorder) -> Iterator[list[Any]]:
    """The re-derivation tools of ``domain`` (see the module docstring) for one verifier pass,
    recording into ``recorder``. Raises ``ValueError`` for an unknown domain; input problems
    surface as tool errors (``{"error": ...}``), not here."""
    ctx = ToolContext(request, context)
    try:
        if domain == "trace":
            yield [*_trace_tools(ctx, recorder), _probe_tool(ctx, recorder)]
        elif domain == "telemetry":
            yield [*_telemetry_tools(ctx, recorder), _probe_tool(ctx, recorder)]
        else:
            raise ValueError(f"unknown tool domain {domain!r}")
    finally:
        ctx.close()
