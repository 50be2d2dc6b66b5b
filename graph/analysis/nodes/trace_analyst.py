"""The trace analyst: one ``trace_rank`` task per rank trace (LangGraph ``Send``, run in worker
processes), then ``trace_analyst`` gathers them into claims about the GPU timeline, the
kernels and the data loader. Claims are MADE here; ``trace_verifier`` checks them.

Every figure comes from the trace engine (:mod:`ai4s_graph.tools.trace.engine`, one bounded-memory
pass per rank, at every trace size); TraceLens, its CSVs and HTA are optional cross-checks whose
agreement or failure is a note on the rank. Each rank's tables are written beside the report as
TraceLens-shaped CSVs (``<out>/perf_report_csvs/rank<label>/``). A rank's identity comes from
:mod:`ai4s_graph.tools.trace.ranks` (distributedInfo, then ``rank<N>`` in the name, then file
order); two files claiming one rank stay apart (labels ``0`` and ``0-dup1``).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from langgraph.types import Send

from ..claimkit import PCT_TOL, claim
from .. import triage
from ..configuration import llm_manifest, llm_request, run_dir
from ..diagnosis import Diagnosis, classify_trace
from ..schema import AnalysisState, RankResult, RankTask
from ...runtime import journal, node
from ....state import BottleneckClass, Claim, Evidence, Outcome, StatusLine
from ....tools.errors import Ai4sError, NoGpuEventsError
from ....tools.trace import ranks as rank_identity
from ....tools.trace.hygiene import GraphKernelsNotRecordedError
from ....tools.trace.stream_fix import is_clip_warning

ANALYST = "trace_analyst"
_POOL: ProcessPoolExecutor | None = None
_POOL_SIZE = 0


def _pool(workers: int) -> ProcessPoolExecutor:
    """A process pool shared by the rank tasks of this process (one trace per worker at a time,
    so peak memory is bounded by ``workers`` traces, never all ranks at once)."""
    global _POOL, _POOL_SIZE
    if _POOL is None or _POOL_SIZE != workers:
        # spawn, not fork: LangGraph runs nodes in threads, and forking a threaded process can
        # deadlock the child on a lock another thread held (seen here as a hung trace_rank).
        _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                    initializer=_die_with_parent, initargs=(os.getpid(),))
        _POOL_SIZE = workers
    return _POOL


def _die_with_parent(parent_pid: int) -> None:
    """Worker initializer: exit when the parent process is gone (killed with SIGKILL, say), so no
    orphaned worker outlives an interrupted run."""
    import threading
    import time

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def rank_files(state: AnalysisState) -> tuple[list[rank_identity.RankFile], list[str]]:
    """Every rank trace listed in the manifest's artifacts with its rank identity
    (:func:`ai4s_graph.tools.trace.ranks.identify_ranks`), and the identity notes."""
    manifest = state.get("manifest")
    base = run_dir(state)
    paths = [base / p for p in (manifest.artifacts.traces if manifest is not None else [])]
    files, notes = rank_identity.identify_ranks(paths)
    return sorted(files, key=lambda f: (f.rank, f.label)), notes


def rank_traces(state: AnalysisState) -> list[tuple[int, str]]:
    """(rank, absolute path) of every rank trace listed in the manifest's artifacts, by rank identity."""
    return [(f.rank, str(f.path)) for f in rank_files(state)[0]]


# A world larger than this is analysed as a SLURM job array when a cluster config is given.
SLURM_ARRAY_MIN_RANKS = 64


def use_slurm_array(state: AnalysisState) -> bool:
    """``--slurm-array``, or a world of at least :data:`SLURM_ARRAY_MIN_RANKS` ranks with a cluster
    config (``--cluster-config``) to submit the array to."""
    req = state["request"]
    if req.slurm_array:
        return True
    return bool(req.cluster_config) and len(rank_traces(state)) >= SLURM_ARRAY_MIN_RANKS


def fan_out_ranks(state: AnalysisState) -> list[Send]:
    """One ``Send('trace_rank', ...)`` per rank trace (worker processes on this machine), or one
    ``trace_array`` task that analyses them as a SLURM job array; straight to the analyst when
    there is no trace."""
    files, _ = rank_files(state)
    if not files:
        return [Send(ANALYST, state)]
    if use_slurm_array(state):
        return [Send("trace_array", state)]
    return [Send("trace_rank", RankTask(request=state["request"], rank=f.rank, path=str(f.path), label=f.label,
                                        n_ranks=len(files))) for f in files]


def _as_rank_result(rec: dict[str, Any], out_dir: str | None = None) -> RankResult:
    """An ``analyze_rank`` record in the shape the analyst reads: the engine's ``TraceAnalysis``
    fields on top, the per-rank record (timeline, comm kernels, steps) under ``stream``, plus
    ``label``, ``tables`` (kernel rows of the CSVs) and ``cross_checks``. With ``out_dir`` the
    rank's TraceLens-layout CSVs are written here, into ``<out_dir>/perf_report_csvs/rank<label>/``
    (``csv_dir``; its large sheets never enter the graph state)."""
    rec = dict(rec)
    sheets = rec.pop("tracelens_sheets", None) or {}
    out = dict(rec.pop("analysis"))
    out["tables"] = rec.pop("tables", None)
    if out_dir is not None and out["tables"] is not None:
        out["csv_dir"] = _write_rank_csvs(Path(out_dir), out, rec.get("label") or str(rec.get("rank")), sheets)
    out["cross_checks"] = rec.get("cross_checks") or []
    out["stream"] = rec
    out["from_cache"] = rec.get("from_cache", False)
    out["rank"] = rec.get("rank")
    out["label"] = rec.get("label") or str(rec.get("rank"))
    out["path"] = rec.get("path")
    return out


def _write_rank_csvs(out_dir: Path, res: dict[str, Any], label: str, sheets: dict[str, Any]) -> str | None:
    """One rank's CSVs (:func:`ai4s_graph.tools.trace.tables.write_tables`, every TraceLens sheet);
    the folder relative to ``out_dir``, or None when it cannot be written (the report says so under
    missing)."""
    from ....tools.trace import tables
    from ....tools.trace.models import TraceAnalysis

    d = out_dir / "perf_report_csvs" / f"rank{label}"
    try:
        fields = {k: res[k] for k in TraceAnalysis.model_fields if k in res}
        tables.write_tables(d, TraceAnalysis.model_validate(fields), {**(res.get("tables") or {}), **sheets})
    except (OSError, ValueError):
        return None
    return str(d.relative_to(out_dir))


def _analyze_one(path: str, rank: int, cache_dir: str | None, label: str,
                 cross_check: tuple[str, ...] = (), out_dir: str | None = None) -> RankResult:
    """Worker-process body: ONE read of one rank trace feeding (a) the engine, through the
    content-hash cache (:func:`ai4s_graph.tools.trace.rank_analysis.analyze_rank`, plus the optional
    cross-checks), (b) the verifier's own reader (:class:`ai4s_graph.tools.trace.kineto.KinetoLoader`:
    its linking, clipping and interval arithmetic; its figures go under ``rederived``, or the reason
    it failed under ``rederive_error``), (c) the trace checks' event-name counts (``triage_names``)
    and (d) the roofline's collector (``roofline_totals`` by External id for the analyst,
    ``rederived.roofline_correlation`` by correlation id for the verifier). When the engine's result
    comes from the cache the others get their own read of the file."""
    from ....tools.perfmodel.roofline import RooflineCollector
    from ....tools.trace import kineto, rank_analysis, stream

    loader, names, roof = kineto.KinetoLoader(path), triage.EventNameCounter(), RooflineCollector()
    consumers = (loader.feed, names.feed, roof.feed)
    res = _as_rank_result(rank_analysis.analyze_rank(path, rank, cache_dir, label=label, cross_check=cross_check,
                                                     also=consumers), out_dir)
    if loader.n == 0:  # the engine's result came from the cache: the others read the file themselves
        stream.feed_events(path, consumers)
    stream.trim_heap()  # the engine's arrays are gone: hand their pages back before the reader's work
    res["triage_names"] = names.counts
    res["roofline_totals"] = _roofline_totals(roof, "external_id")
    res["device_name"] = (res.get("stream") or {}).get("device_name") or ""
    try:
        tr = loader.finish(rank)
        stream.trim_heap()  # the reader's linking temporaries are gone
        rederived = kineto.figures_of(tr)
        del tr
        rederived["roofline_correlation"] = _roofline_totals(roof, "correlation")
        res["rederived"] = rederived
        stream.trim_heap()
    except Exception as e:  # noqa: BLE001 - any failure of that path: the verifier says inconclusive, why
        res["rederive_error"] = str(e) if isinstance(e, Ai4sError) else \
            f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
    return res


def _roofline_totals(roof: Any, link: str) -> dict[str, Any] | None:
    """The collector's totals by ``link``, or None when it could not read the trace (the roofline is
    then left out; the rank's other figures stand)."""
    try:
        return roof.totals(link)
    except Exception:  # noqa: BLE001 - an unreadable roofline input drops the roofline only
        return None


def _checks_note(checks: list[dict[str, Any]]) -> str:
    """``cross-checks: hta agrees, tracelens unavailable`` (one line; failures carry their reason)."""
    if not checks:
        return ""
    parts = []
    for c in checks:
        part = f"{c['tool']} {c['status']}"
        if c["status"] in ("failed", "differs"):
            part += f" ({c['note'][:100]})"
        parts.append(part)
    return "; cross-checks: " + ", ".join(parts)


@node("trace_rank")
def trace_rank(task: RankTask) -> tuple[dict[str, Any], StatusLine]:
    """Analyse one rank trace in a worker process; errors stay with the rank (``error`` key). A
    cross-check's failure (HTA, TraceLens) is a note in the status line, never the rank's failure."""
    req = task["request"]
    workers = req.workers or max(1, min(os.cpu_count() or 1, 8))
    cache_dir = os.environ.get("AI4S_TRACE_CACHE") or str(Path(req.out_dir) / ".ai4s-graph" / "trace-cache")
    rank, path = task["rank"], task["path"]
    label = task.get("label") or str(rank)
    try:
        if task.get("n_ranks") == 1:  # one trace: in this process (one read feeds engine and verifier)
            res = _analyze_one(path, rank, cache_dir, label, req.cross_check, req.out_dir)
        else:
            res = _pool(workers).submit(_analyze_one, path, rank, cache_dir, label, req.cross_check,
                                        req.out_dir).result()
    except NoGpuEventsError as e:
        graphs = isinstance(e, GraphKernelsNotRecordedError)
        return ({"rank_results": [{"rank": rank, "label": label, "path": path, "error": str(e),
                                   "no_gpu_events": True, "graph_kernels_not_recorded": graphs}]},
                StatusLine.make(Outcome.partial, f"rank {label}: {e}"))
    except (Ai4sError, ValueError, TypeError, KeyError) as e:
        msg = str(e) if isinstance(e, Ai4sError) else \
            f"{Path(path).name}: malformed trace event ({type(e).__name__}: {' '.join(str(e).split())[:120]})"
        return ({"rank_results": [{"rank": rank, "label": label, "path": path, "error": msg}]},
                StatusLine.make(Outcome.fail, f"rank {label}: {msg}"))
    res = dict(res)
    from ....tools.trace.backends import check_timeline
    from ....tools.trace.kineto import TimelineRow

    try:
        check_timeline({k: TimelineRow.model_validate(v) for k, v in (res.get("timeline") or {}).items()}, path)
    except Ai4sError as e:
        return ({"rank_results": [{"rank": rank, "label": label, "path": path, "error": str(e)}]},
                StatusLine.make(Outcome.fail, f"rank {label}: {e}"))
    res["rank"], res["label"], res["path"] = rank, label, path
    warn = f"; {len(res.get('warnings') or [])} input warning(s)" if res.get("warnings") else ""
    return ({"rank_results": [res]},
            StatusLine.make(Outcome.ok, f"rank {label}: engine (stream), {res.get('kernel_count', 0)} kernels"
                                        + (" (from the trace cache: same content hash)" if res.get("from_cache") else "")
                                        + warn + _checks_note(res.get("cross_checks") or [])))


@node("trace_array")
def trace_array(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Analyse every rank trace as a SLURM job array (one task per rank, on the cluster itself),
    then gather the per-rank results. The array job id is recorded in
    ``<out>/.ai4s-graph/rank-array/submitted.json`` as soon as sbatch answers, so a resumed run
    waits for the same array instead of submitting another."""
    import json

    from ....tools.trace import slurm_array
    from ....tools.slurm import client as slurm

    req = state["request"]
    work = Path(req.out_dir) / ".ai4s-graph" / "rank-array"
    marker = work / "submitted.json"
    if marker.exists():
        jobid = json.loads(marker.read_text())["jobid"]
    else:
        cfg = slurm.load_cluster_config(req.cluster_config) if req.cluster_config else None
        script = slurm_array.render_slurm_array(
            [(f.rank, str(f.path), f.label) for f in rank_files(state)[0]], work, mem=None,
            partition=cfg.partition if cfg else None, account=cfg.account if cfg else None,
            cache_dir=str(Path(req.out_dir) / ".ai4s-graph" / "trace-cache"))
        jobid = slurm.sbatch(script)
        work.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"jobid": jobid, "script": str(script)}))
    journal(req.out_dir, "trace_array", "submitted", jobid=jobid)
    try:
        tasks = slurm.wait_for_array(jobid, timeout_s=req.wait_timeout_s)
    except slurm.WaitTimeout as e:
        return ({"missing": [f"trace_array: {e}"]}, StatusLine.make(Outcome.fail, str(e)))
    try:
        results = [_as_rank_result(r, state["request"].out_dir) for r in slurm_array.gather_rank_results(work)]
    except Ai4sError as e:
        states = ",".join(sorted({t.base_state for t in tasks}))
        return ({"missing": [f"trace_array: array job {jobid} ({states}): {e}"]},
                StatusLine.make(Outcome.fail, f"array job {jobid} ({states}): {e}"))
    nodes = sorted({n for t in tasks for n in t.nodelist})
    return ({"rank_results": results},
            StatusLine.make(Outcome.ok, f"array job {jobid}: {len(results)} rank traces analysed on "
                                        f"{','.join(nodes) or '?'}"))


def _ev(res: RankResult, query: str, returned: Any) -> Evidence:
    return Evidence(tool="trace.engine", query=f"{Path(res['path']).name}: {query}",
                    returned=returned, args={"path": res["path"], "rank": res.get("rank"), "label": res.get("label")},
                    backend=res.get("backend"))


def trace_class(res: dict[str, Any]) -> Diagnosis:
    """:func:`~ai4s_graph.graph.analysis.diagnosis.classify_trace`, except on a profiled window that is
    not a steady state (``window.degenerate``: some profiled steps launched no GPU work while others
    did, tools/trace/hygiene.py): then ``unknown``, since the rules read a steady-state window (seed 001
    T19) and GPU work in one step of eight must not pass as compute-bound."""
    d = classify_trace(res)
    w = res.get("window") or {}
    if w.get("degenerate"):
        return Diagnosis(BottleneckClass.unknown, f"{w.get('reason')}; the rules need a steady-state window "
                                                  f"(on the busy part alone: {d.klass.value})", d.inputs, 0.3)
    return d


def claims_for_rank(res: RankResult) -> list[Claim]:
    """The deterministic claims about one analysed rank trace (see the module docstring)."""
    r = res.get("label") or res.get("rank", 0)
    tl = res.get("timeline") or {}
    out: list[Claim] = []

    def row(name: str) -> tuple[float, float]:
        v = tl[name]
        return float(v["time_ms"]), float(v["percent"])

    total_ms = row("total_time")[0]
    for name, label in [("idle_time", "idle"), ("computation_time", "computing"),
                        ("exposed_comm_time", "in exposed communication"),
                        ("exposed_memcpy_time", "in exposed memcpy")]:
        ms, pct = row(name)
        if name in ("exposed_comm_time", "exposed_memcpy_time") and pct < 1.0:
            continue
        out.append(claim(f"tl.r{r}.{name}", ANALYST,
                         f"Rank {r}: the GPU is {label} {pct:.1f}% of the profiled window ({ms:.2f} of {total_ms:.2f} ms).",
                         f"gpu_timeline.{name}.percent", round(pct, 4), "%",
                         [_ev(res, f"gpu_timeline.{name}.percent", round(pct, 4))]))
    launch = res.get("launch") or {}
    if launch.get("mean_kernel_us"):
        mk = round(float(launch["mean_kernel_us"]), 3)
        out.append(claim(f"tl.r{r}.mean_kernel_us", ANALYST,
                         f"Rank {r}: the mean GPU kernel lasts {mk:.1f} µs over {res.get('kernel_count')} kernels.",
                         "kernels.mean_kernel_us", mk, "µs", [_ev(res, "launch.mean_kernel_us", mk)]))
    sk = res.get("short_kernels") or {}
    if res.get("kernel_count"):
        n_short = int(sk.get("count", 0))
        frac = round(100.0 * n_short / int(res["kernel_count"]), 3)
        out.append(claim(f"tl.r{r}.short_kernel_pct", ANALYST,
                         f"Rank {r}: {frac:.1f}% of kernels ({n_short} of {res['kernel_count']}) are shorter than "
                         f"{sk.get('threshold_us', 10):g} µs.",
                         "kernels.short_kernel_count_pct", frac, "%",
                         [_ev(res, "short_kernels.count / kernel_count",
                              {"short": n_short, "kernels": res["kernel_count"], "percent": frac})]))
    if res.get("n_steps"):
        kps = round(float(res.get("kernels_per_step") or res["kernel_count"] / res["n_steps"]), 3)
        out.append(claim(f"tl.r{r}.kernels_per_step", ANALYST,
                         f"Rank {r}: {kps:.0f} kernels are launched per step.", "kernels.kernels_per_step", kps,
                         "kernels/step", [_ev(res, "kernel_count / n_steps", kps)]))
    ops = res.get("ops_by_category") or []
    if ops:
        top = max(ops, key=lambda o: float(o.get("kernel_time_ms") or 0))
        pct = round(float(top.get("percent") or 0.0), 3)
        out.append(claim(f"tl.r{r}.top_op_category", ANALYST,
                         f"Rank {r}: {top['category']} ops take {pct:.1f}% of GPU kernel time.",
                         f"ops_by_category.{top['category']}.percent", pct, "%",
                         [_ev(res, f"ops_by_category[{top['category']}].percent", pct)], confidence=0.8))
    if res.get("step_time_ms") and res.get("dataloader_ms_per_step") is not None:
        share = round(100.0 * float(res["dataloader_ms_per_step"]) / float(res["step_time_ms"]), 3)
        out.append(claim(f"tl.r{r}.dataloader_share", ANALYST,
                         f"Rank {r}: the DataLoader takes {share:.1f}% of each profiled step on the CPU "
                         f"({res['dataloader_ms_per_step']:.2f} of {res['step_time_ms']:.2f} ms).",
                         "cpu.dataloader_step_share_pct", share, "%",
                         [_ev(res, "dataloader_ms_per_step / step_time_ms * 100",
                              {"dataloader_ms_per_step": res["dataloader_ms_per_step"],
                               "step_time_ms": res["step_time_ms"], "percent": share})], confidence=0.8))
    d = trace_class(res)
    out.append(claim(f"tl.r{r}.bottleneck", ANALYST,
                     f"Rank {r}: the trace says {d.klass.value}: {d.rule}.", "diagnosis.trace_bottleneck_class",
                     d.klass.value, "class",
                     [Evidence(tool="diagnosis.classify_trace", query=f"rank {r} rules", returned=d.klass.value,
                               args={"rank": r, "path": res["path"], "inputs": d.inputs, "rule": d.rule})],
                     confidence=d.confidence))
    return out


@node(ANALYST)
def trace_analyst(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Gather the rank results into claims (and, in LLM mode, let the LLM add claims and prose)."""
    results = sorted(state.get("rank_results") or [], key=lambda r: r.get("rank", 0))
    if not results:
        return ({"missing": ["trace_analyst: no rank trace was analysed"], "findings": {"trace": None}},
                StatusLine.make(Outcome.fail, "no rank trace was analysed"))
    good = [r for r in results if "error" not in r]
    bad = [r for r in results if "error" in r]
    missing = [f"trace_analyst: {r['error']}" if str(r["error"]).startswith(Path(r["path"]).name)
               else f"trace_analyst: {Path(r['path']).name}: {r['error']}" for r in bad]
    _, id_notes = rank_files(state)
    missing += [f"trace_analyst: {n}" for n in id_notes]
    claims: list[Claim] = []
    for res in good:
        claims.extend(claims_for_rank(res))
        material = _material_clip(res)  # every condition the readers handled; sub-µs clips stay in the findings
        missing += [f"trace_analyst: {Path(res['path']).name}: {w}" for w in res.get("warnings") or []
                    if material or not is_clip_warning(w)]
    tables = _write_tables(state, good)
    ranks = [{k: v for k, v in r.items() if k != "csv_dir"} for r in good]  # the folders are under "tables"
    findings = {"trace": {"ranks": ranks, "errors": bad, "rank_notes": id_notes, "tables": tables,
                          "warnings": {str(r.get("label")): r.get("warnings") for r in good if r.get("warnings")}}}
    claims.extend(triage.attach_trace_triage(findings["trace"], good, state.get("manifest"), str(run_dir(state))))
    if len(good) > 1:
        from ....tools.trace.collectives import CLOCK_NOTE_PREFIXES

        findings["trace"]["multi_rank"] = _multi_rank(state, good)
        claims.extend(findings["trace"]["multi_rank"].pop("claims", []))
        missing += [f"trace_analyst: {n}" for n in (findings["trace"]["multi_rank"].get("collectives") or {}).get(
            "notes", []) if n.startswith(CLOCK_NOTE_PREFIXES)]
    update: dict[str, Any] = {"claims": claims, "findings": findings, "missing": missing}
    if not good:
        graphs = [r for r in bad if r.get("graph_kernels_not_recorded")]
        if graphs:
            st = StatusLine.make(Outcome.partial, graphs[0]["error"])
        elif all(r.get("no_gpu_events") for r in bad):
            st = StatusLine.make(Outcome.partial, f"no GPU events read, no GPU timeline: {bad[0]['error']}")
        else:
            st = StatusLine.make(Outcome.fail, bad[0]["error"])
        return update, st
    if state["request"].llm != "none":
        from ...agents import llm

        res = llm.analyst_pass(ANALYST, llm_request(state), {"manifest": llm_manifest(state), "findings": findings},
                               claims)
        update["usage"] = {ANALYST: res.usage}
        if res.claims is not None:  # the LLM's answer (JSON): validated into claims here
            update["claims"] = [Claim.model_validate(c) for c in res.claims]
        if res.prose:
            update["findings"]["trace"]["prose"] = res.prose
        if res.status.status is not Outcome.ok:
            return update, res.status
    if bad:
        return update, StatusLine.make(Outcome.partial, f"{len(good)} of {len(results)} rank traces analysed; "
                                                        f"{bad[0]['error']}")
    primary = good[0]
    d = trace_class(primary)
    return update, StatusLine.make(Outcome.ok, f"{len(good)} rank trace(s), {primary.get('backend')} backend: "
                                              f"{d.klass.value}, {len(claims)} claims")


def _material_clip(res: RankResult) -> bool:
    """True when the time clipped off overlapping events on one stream exceeds the agreement
    tolerance of a timeline claim (claimkit.PCT_TOL: 1 % of total time), i.e. when it could change a
    claim; smaller clips (sub-µs timestamp jitter, seen on real H200 traces) stay in the findings."""
    total_us = float(((res.get("timeline") or {}).get("total_time") or {}).get("time_ms") or 0.0) * 1e3
    return float(res.get("clipped_excess_us") or 0.0) > (PCT_TOL.abs or 0.0) / 100.0 * total_us


def _write_tables(state: AnalysisState, good: list[RankResult]) -> list[str]:
    """Each rank's engine tables as TraceLens-shaped CSVs (gpu_timeline, ops_summary_by_category,
    kernel_summary, short_kernels_summary) in ``<out>/perf_report_csvs/rank<label>/``; the folders
    written. A folder that cannot be written is skipped (the report says so under missing)."""
    from ....tools.trace import tables
    from ....tools.trace.models import TraceAnalysis

    out_dir = Path(state["request"].out_dir) / "perf_report_csvs"
    written = []
    for res in good:
        if res.get("csv_dir"):  # the rank's worker wrote them, with every TraceLens sheet
            written.append(str(out_dir.parent / res["csv_dir"]))
            continue
        fields = {k: res[k] for k in TraceAnalysis.model_fields if k in res}
        try:
            d = out_dir / f"rank{res.get('label') or res.get('rank')}"
            tables.write_tables(d, TraceAnalysis.model_validate(fields), res.get("tables"))
            written.append(str(d))
        except (OSError, ValueError):
            continue
    return written


def _multi_rank(state: AnalysisState, good: list[RankResult]) -> dict[str, Any]:
    """Per-rank table, collectives (bus bandwidth per collective and message size) and the
    straggler finding, from the ranks' streaming records (:mod:`ai4s_graph.tools.trace.collectives`)."""
    from ....tools.trace import collectives

    table = [{"rank": r.get("rank"), **{k: (r["timeline"][k]["percent"]) for k in
                                        ("computation_time", "exposed_comm_time", "idle_time")}} for r in good]
    out: dict[str, Any] = {"per_rank": table, "claims": []}
    try:
        rep = collectives.build_report([r["stream"] for r in good if r.get("stream")])
    except (Ai4sError, KeyError, ValueError) as e:
        out["collectives_error"] = str(e)
        return out
    d = rep.model_dump(mode="json")
    out["collectives"] = d
    ev = lambda q, ret: Evidence(tool="collectives.build_report", query=q, returned=ret,  # noqa: E731
                                 args={"ranks": rep.ranks})
    sc = rep.stragglers.claim
    if sc is not None:
        out["claims"].append(claim("tl.multi.straggler", ANALYST, sc.statement, "collectives.straggler_rank",
                                   sc.rank, "rank", [ev("stragglers.claim", sc.model_dump(mode="json"))],
                                   confidence=0.7))
    for g in sorted(rep.groups, key=lambda g: -g.total_latency_us)[:3]:
        gd = g.model_dump(mode="json")
        if gd.get("busbw_gbps") is None:
            continue
        key = f"{gd.get('collective', gd.get('name', 'collective'))}.{gd.get('msg_bytes', gd.get('size_bytes', 'n'))}"
        cid = "tl.multi.busbw." + "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in key.lower())
        out["claims"].append(claim(cid, ANALYST, f"{key}: achieved bus bandwidth {gd['busbw_gbps']:.2f} GB/s "
                                   "(mean over instances; nccl-tests busbw factors).", f"collectives.{key}.busbw_gbps",
                                   round(float(gd["busbw_gbps"]), 6), "GB/s", [ev(f"groups[{key}].busbw_gbps", gd)],
                                   confidence=0.7))
    return out
