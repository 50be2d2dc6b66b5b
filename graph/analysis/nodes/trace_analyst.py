"""The trace analyst: one ``trace_rank`` task per rank trace (LangGraph ``Send``, run in worker
processes), then ``trace_analyst`` gathers them into claims about the GPU timeline, the
kernels and the data loader, and the trace causes' claims (``graph/rules/registry.py``). Claims
are MADE here; ``trace_verifier`` checks them.

Each rank trace is read ONCE (:func:`ai4s_graph.tools.trace.onepass.read_rank`, in the worker): the
engine's figures (:mod:`ai4s_graph.tools.trace.engine`, bounded memory at every trace size), the
rank identity, device and time origin from its header, the causes' event-name counts, the roofline's
collector, and the verifier reader's tables (kept apart under ``reader``: the analyst never reads
them). TraceLens, its CSVs and HTA are optional cross-checks whose agreement or failure is a note on
the rank. Each rank's tables are written beside the report as TraceLens-shaped CSVs
(``<out>/perf_report_csvs/rank<label>/``). A rank's identity comes from
:mod:`ai4s_graph.tools.trace.ranks` (distributedInfo as the pass read it, then ``rank<N>`` in the
name, then file order); two files claiming one rank stay apart (labels ``0`` and ``0-dup1``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from langgraph.types import Send

from ..configuration import llm_manifest, llm_request, run_dir, trace_cache_dir, trace_paths
from ..inputs import job_script
from ..schema import AnalysisState, RankResult, RankTask
from .rank_worker import VERIFIER_KEYS, analyze_one, as_rank_result
from ...agents import llm
from ...rules import context as ctx, registry
from ...rules.diagnosis import Diagnosis, trace_class
from ...rules.figures import Inputs
from ...runtime import node
from ....state import Claim, Evidence, Outcome, StatusLine, with_note
from ....state.claimkit import PCT_TOL, claim
from ....tools.errors import Ai4sError, InputError, NoGpuEventsError
from ....tools.files import changed_since_adoption, fingerprint
from ....tools.perfmodel.datasheet import device_for
from ....tools.perfmodel.roofline import roofline_of
from ....tools.slurm.scriptparse import env_from_script
from ....tools.trace import collectives, onepass, tables as trace_tables, workers
from ....tools.trace import ranks as rank_identity
from ....tools.trace.backends import check_timeline
from ....tools.trace.hygiene import GraphKernelsNotRecordedError
from ....tools.trace.models import TimelineRow, TraceAnalysis
from ....tools.trace.stream_fix import is_clip_warning

ANALYST = "trace_analyst"
__all__ = ["ANALYST", "VERIFIER_KEYS", "analyze_one", "as_rank_result", "trace_class", "claims_for_rank",
           "fan_out_ranks", "trace_rank", "trace_analyst"]

NOT_IN_FINDINGS = (*VERIFIER_KEYS, "csv_dir")


def provisional_files(state: AnalysisState) -> list[rank_identity.RankFile]:
    """Every rank trace with the identity its name or order gives (nothing is read): what the
    fan-out sends; the final identity takes each file's ``distributedInfo`` from its analysis pass
    (:func:`identify`)."""
    paths = trace_paths(state)
    files, _ = rank_identity.identify_ranks(paths, header_ranks=[None] * len(paths))
    return sorted(files, key=lambda f: (f.rank, f.label))


# A world larger than this is analysed as a SLURM job array when a cluster config is given.
SLURM_ARRAY_MIN_RANKS = 64


def use_slurm_array(state: AnalysisState) -> bool:
    """``--slurm-array``, or a world of at least :data:`SLURM_ARRAY_MIN_RANKS` ranks with a cluster
    config (``--cluster-config``) to submit the array to."""
    req = state["request"]
    if req.slurm_array:
        return True
    return bool(req.cluster_config) and len(trace_paths(state)) >= SLURM_ARRAY_MIN_RANKS


def fan_out_ranks(state: AnalysisState) -> list[Send]:
    """One ``Send('trace_rank', ...)`` per rank trace (worker processes on this machine), or one
    ``trace_array`` task that analyses them as a SLURM job array; straight to the analyst when
    there is no trace."""
    files = provisional_files(state)
    if not files:
        return [Send(ANALYST, state)]
    if use_slurm_array(state):
        return [Send("trace_array", state)]
    return [Send("trace_rank", RankTask(request=state["request"], rank=f.rank, path=str(f.path), label=f.label,
                                        n_ranks=len(files))) for f in files]


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
    n_workers = req.workers or max(1, min(os.cpu_count() or 1, 8))
    cache_dir = trace_cache_dir(req)
    rank, path = task["rank"], task["path"]
    label = task.get("label") or str(rank)
    try:
        if task.get("n_ranks") == 1:  # one trace: in this process (one read feeds engine and verifier)
            res = analyze_one(path, rank, cache_dir, label, req.cross_check, req.out_dir, annotate=True)
        else:
            res = workers.pool(n_workers).submit(analyze_one, path, rank, cache_dir, label, req.cross_check,
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
    try:
        check_timeline({k: TimelineRow.model_validate(v) for k, v in (res.get("timeline") or {}).items()}, path)
    except Ai4sError as e:
        return ({"rank_results": [{"rank": rank, "label": label, "path": path, "error": str(e)}]},
                StatusLine.make(Outcome.fail, f"rank {label}: {e}"))
    res["rank"], res["label"], res["path"] = rank, label, path
    said = rank_identity.header_rank({"rank": (res.get("stream") or {}).get("trace_rank")})
    shown = str(said) if said is not None and said != rank and label == str(rank) else label
    warn = f"; {len(res.get('warnings') or [])} input warning(s)" if res.get("warnings") else ""
    return ({"rank_results": [res]},
            StatusLine.make(Outcome.ok, f"rank {shown}: engine (stream), {res.get('kernel_count', 0)} kernels"
                                        + (" (from the trace cache: same content hash)" if res.get("from_cache") else "")
                                        + warn + _checks_note(res.get("cross_checks") or [])))


def identify(state: AnalysisState, results: list[RankResult]) -> tuple[list[RankResult], list[str]]:
    """The rank results with their final identity (:func:`ai4s_graph.tools.trace.ranks.assign_identity`
    over the manifest's traces, each file's ``distributedInfo.rank`` as its analysis pass read it),
    sorted by rank, and the identity notes. Nothing is read here."""
    ranked, notes = rank_identity.assign_identity([str(p) for p in trace_paths(state)], results)
    return rank_identity.mark_foreign(ranked, state.get("manifest")), notes


def _ev(res: RankResult, query: str, returned: Any) -> Evidence:
    return Evidence(tool="trace.engine", query=f"{Path(res['path']).name}: {query}",
                    returned=returned, args={"path": res["path"], "rank": res.get("rank"), "label": res.get("label")},
                    backend=res.get("backend"))


def _value(metric: str, x: Inputs) -> Any:
    """The analyst's value of a registered figure (:attr:`ai4s_graph.graph.rules.figures.Figure.make`)."""
    fig, params = registry.figure_of(metric)
    return fig.make(x, **params)


def claims_for_rank(res: RankResult) -> list[Claim]:
    """The deterministic claims about one analysed rank trace, each value made by its figure of
    the registry (:data:`ai4s_graph.graph.rules.registry.FIGURES`) from the engine's tables."""
    r = res.get("label") or res.get("rank", 0)
    tl = res.get("timeline") or {}
    x = Inputs(rank=res)
    out: list[Claim] = []
    total_ms = float(tl["total_time"]["time_ms"])
    for name, label in [("idle_time", "idle"), ("computation_time", "computing"),
                        ("exposed_comm_time", "in exposed communication"),
                        ("exposed_memcpy_time", "in exposed memcpy")]:
        ms, metric = float(tl[name]["time_ms"]), f"gpu_timeline.{name}.percent"
        pct = _value(metric, x)
        if name in ("exposed_comm_time", "exposed_memcpy_time") and pct < 1.0:
            continue
        out.append(claim(f"tl.r{r}.{name}", ANALYST,
                         f"Rank {r}: the GPU is {label} {pct:.1f}% of the profiled window ({ms:.2f} of {total_ms:.2f} ms).",
                         metric, pct, "%", [_ev(res, metric, pct)]))
    mk = _value("kernels.mean_kernel_us", x)
    if mk:
        out.append(claim(f"tl.r{r}.mean_kernel_us", ANALYST,
                         f"Rank {r}: the mean GPU kernel lasts {mk:.1f} µs over {res.get('kernel_count')} kernels.",
                         "kernels.mean_kernel_us", mk, "µs", [_ev(res, "launch.mean_kernel_us", mk)]))
    if res.get("kernel_count"):
        sk = res.get("short_kernels") or {}
        n_short, frac = int(sk.get("count", 0)), _value("kernels.short_kernel_count_pct", x)
        out.append(claim(f"tl.r{r}.short_kernel_pct", ANALYST,
                         f"Rank {r}: {frac:.1f}% of kernels ({n_short} of {res['kernel_count']}) are shorter than "
                         f"{sk.get('threshold_us', 10):g} µs.",
                         "kernels.short_kernel_count_pct", frac, "%",
                         [_ev(res, "short_kernels.count / kernel_count",
                              {"short": n_short, "kernels": res["kernel_count"], "percent": frac})]))
    kps = _value("kernels.kernels_per_step", x)
    if kps is not None:
        out.append(claim(f"tl.r{r}.kernels_per_step", ANALYST,
                         f"Rank {r}: {kps:.0f} kernels are launched per step.", "kernels.kernels_per_step", kps,
                         "kernels/step", [_ev(res, "kernel_count / n_steps", kps)]))
    ops = res.get("ops_by_category") or []
    if ops:
        top = max(ops, key=lambda o: float(o.get("kernel_time_ms") or 0))
        metric = f"ops_by_category.{top['category']}.percent"
        pct = _value(metric, x)
        out.append(claim(f"tl.r{r}.top_op_category", ANALYST,
                         f"Rank {r}: {top['category']} ops take {pct:.1f}% of GPU kernel time.", metric, pct, "%",
                         [_ev(res, f"ops_by_category[{top['category']}].percent", pct)], confidence=0.8))
    share = _value("cpu.dataloader_step_share_pct", x)
    if share is not None:
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


def _roofline(res: RankResult, gpu: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The first rank's roofline from the pass's collector totals (None without totals, shapes or
    a known GPU), on the device :func:`~ai4s_graph.tools.perfmodel.datasheet.device_for` picks from
    the manifest's ``gpu`` and the trace's device, and that choice's note when the two disagree."""
    name, note = device_for(gpu, res.get("device_name"))
    totals = res.get("roofline_totals")
    if totals is None:
        return None, note
    try:
        return roofline_of(totals, name, Path(res["path"]).name), note
    except InputError:
        return None, note


def cause_claims(state: AnalysisState, trace_findings: dict[str, Any],
                 good: list[RankResult]) -> tuple[list[Claim], list[str]]:
    """The trace causes of the registry on the first good rank (its event-name counts, roofline),
    the training log's facts and the telemetry statistics (both in the state already: the telemetry
    analyst ran one superstep earlier), the job's environment. Adds ``triage`` (``[{id, lever,
    why}]``) and ``roofline`` to ``trace_findings`` when a rank was analysed; returns the claims and
    the causes' ``not checked: ... needs ...`` lines; the cross-rank collectives report
    (``trace_findings["multi_rank"]["collectives"]``, made before) and the log's figures of merit go
    to the causes too (:func:`ai4s_graph.graph.rules.registry.not_checked`:
    a cause that needs a rank trace says so when none was analysed). Never raises on missing inputs."""
    manifest = state.get("manifest")
    findings = state.get("findings") or {}
    res = good[0] if good else None
    if res is not None and "event_names" not in res:  # no analysis-pass counts (a SLURM-array rank): one read here
        try:
            res = dict(res)
            res["event_names"], res["roofline_totals"] = onepass.read_counts(res["path"], registry.event_name_wanted)
        except Ai4sError:
            res = None
    if res is None:
        x = Inputs(telemetry=findings.get("telemetry") or {}, log=findings.get("log") or {}, manifest=manifest)
        return [], registry.not_checked(ANALYST, x)
    script = job_script(state)
    m = manifest.model_dump(mode="json", by_alias=False) if manifest is not None else {}
    rf, device_note = _roofline(res, m.get("gpu"))
    if device_note:
        trace_findings["device_note"] = device_note
    x = Inputs(rank=res, event_names=res.get("event_names") or {}, roofline=rf,
               telemetry=findings.get("telemetry") or {}, log=findings.get("log") or {}, manifest=manifest,
               env={**env_from_script(script), **(m.get("env") or {})},
               collectives=((trace_findings.get("multi_rank") or {}).get("collectives")) or {},
               fom=findings.get("fom") or {})
    found = registry.detect(ANALYST, x)
    trace_findings["triage"] = registry.lever_entries(found)
    trace_findings["roofline"] = rf
    return [f.claim for f in found], registry.not_checked(ANALYST, x)


def _no_rank_status(bad: list[RankResult]) -> StatusLine:
    """The analyst's STATUS when no rank trace could be analysed: ``partial`` for a CPU-only run or
    graph kernels that were not recorded, ``fail`` otherwise (the first rank's error)."""
    graphs = [r for r in bad if r.get("graph_kernels_not_recorded")]
    if graphs:
        return StatusLine.make(Outcome.partial, graphs[0]["error"])
    if all(r.get("no_gpu_events") for r in bad):
        return StatusLine.make(Outcome.partial, f"no GPU events read, no GPU timeline: {bad[0]['error']}")
    return StatusLine.make(Outcome.fail, bad[0]["error"])


def _rank_missing(good: list[RankResult], bad: list[RankResult], id_notes: list[str]) -> list[str]:
    """What the report lists as missing for the rank traces: each failed rank's error, the identity
    notes, the input warnings of a rank whose hygiene could change a claim, and a rank holding too
    little GPU work for a class (:func:`ai4s_graph.tools.trace.hygiene.gpu_activity_problem`)."""
    missing = [f"trace_analyst: {r['error']}" if str(r["error"]).startswith(Path(r["path"]).name)
               else f"trace_analyst: {Path(r['path']).name}: {r['error']}" for r in bad]
    missing += [f"trace_analyst: {n}" for n in id_notes]
    for res in good:  # every condition the readers handled; sub-µs clips stay in the findings
        material = _material_clip(res)
        missing += [f"trace_analyst: {Path(res['path']).name}: {w}" for w in res.get("warnings") or []
                    if material or not is_clip_warning(w)]
        if res.get("insufficient_gpu_activity"):  # no class from this rank: said as a caveat (STATUS=partial)
            missing.append(f"trace_analyst: {Path(res['path']).name}: no bottleneck class: "
                           f"{res['insufficient_gpu_activity']}")
    return missing


def with_run_steps(state: AnalysisState, good: list[RankResult]) -> list[RankResult]:
    """Each rank result with the run's steady step outside the profiler (``run_step``:
    :func:`ai4s_graph.graph.rules.context.with_run_step`) from the facts of the one read of the log
    (its steady step times, the warm-up steps skipped before them; per-step log lines only), so
    the class rules read a profiler-stretched window over the run's step (issue 24 point 2)."""
    log = (state.get("findings") or {}).get("log") or {}
    fom_ = (state.get("findings") or {}).get("fom") or {}
    if not log.get("step_times_s") or fom_.get("step_time_source") != "per-step log lines":
        return good
    m = state.get("manifest")
    return [ctx.with_run_step(r, log["step_times_s"], int(log.get("warmup_steps_skipped") or 0),
                              log.get("batches_per_epoch"), m.num_workers if m is not None else None) for r in good]


@node(ANALYST)
def trace_analyst(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Gather the rank results into claims (and, in LLM mode, let the LLM add claims and prose)."""
    results, id_notes = identify(state, list(state.get("rank_results") or []))
    if not results:
        return ({"missing": ["trace_analyst: no rank trace was analysed"], "findings": {"trace": None},
                 "not_checked": cause_claims(state, {}, [])[1]},
                StatusLine.make(Outcome.fail, "no rank trace was analysed"))
    bad = [r for r in results if "error" in r]
    good = with_run_steps(state, [r for r in results if "error" not in r])
    missing = _rank_missing(good, bad, id_notes)
    m = state.get("manifest")
    if m is not None:  # a trace replaced between adoption and now (after its read): its stat says so
        base = run_dir(state)
        by_path = {str(base / rel): (rel, fp) for rel, fp in (m.artifacts.fingerprints or {}).items()}
        for res in good:
            rel, fp = by_path.get(str(res.get("path")), (None, None))
            try:
                now = fingerprint(res["path"]) if rel else None
            except OSError:
                now = {"size": -1}
            line = changed_since_adoption(rel, fp, now)
            if line:
                missing.append(f"trace_analyst: {line}")
    input_notes: list[str] = _rank_input_notes(good)
    claims: list[Claim] = [c for res in good for c in claims_for_rank(res)]
    tables = _write_tables(state, good)
    view = [{k: v for k, v in r.items() if k not in NOT_IN_FINDINGS} for r in good]  # the CSV folders: under "tables"
    findings = {"trace": {"ranks": view, "errors": bad, "rank_notes": id_notes, "tables": tables,
                          "warnings": {str(r.get("label")): r.get("warnings") for r in good if r.get("warnings")}}}
    if len(good) > 1:  # before the causes: the communication causes read the cross-rank report
        findings["trace"]["multi_rank"] = _multi_rank(good)
    found, not_checked = cause_claims(state, findings["trace"], view)
    claims.extend(found)
    if findings["trace"].get("device_note"):  # two sources disagree on the GPU: said with the inputs
        input_notes.append(f"trace_analyst: rank {view[0].get('label')}: {findings['trace']['device_note']}")
    if len(good) > 1:
        claims.extend(findings["trace"]["multi_rank"].pop("claims", []))
        # what was done to the ranks' clocks: a note on the inputs, not a missing input (state/report.py:NOTE_KINDS)
        input_notes += [f"trace_analyst: {n}" for n in (findings["trace"]["multi_rank"].get("collectives") or {}).get(
            "notes", []) if n.startswith(collectives.CLOCK_NOTE_PREFIXES)]
    update: dict[str, Any] = {"claims": claims, "findings": findings, "missing": missing, "not_checked": not_checked,
                              "input_notes": input_notes}
    if not good:
        return update, _no_rank_status(bad)
    llm_status = None  # the LLM pass's STATUS: a fallback is said after the deterministic reason
    if state["request"].llm != "none":
        res = llm.analyst_pass(ANALYST, llm_request(state), {"manifest": llm_manifest(state), "findings": findings},
                               claims)
        update["usage"] = {ANALYST: res.usage}
        if res.claims is not None:  # the LLM's answer (JSON): validated into claims here
            update["claims"] = [Claim.model_validate(c) for c in res.claims]
        if res.prose:
            update["findings"]["trace"]["prose"] = res.prose
        llm_status = res.status
    if bad:
        return update, with_note(StatusLine.make(Outcome.partial, f"{len(good)} of {len(results)} rank traces "
                                                                  f"analysed; {bad[0]['error']}"), llm_status)
    primary = good[0]
    d: Diagnosis = trace_class(primary)
    return update, with_note(StatusLine.make(Outcome.ok, f"{len(good)} rank trace(s), {primary.get('backend')} "
                                                         f"backend: {d.klass.value}, {len(claims)} claims"), llm_status)


def _rank_input_notes(good: list[RankResult]) -> list[str]:
    """The input warnings :func:`_rank_missing` does not list (clips too small to change a claim,
    :func:`_material_clip`), as notes on what was done to the inputs: every warning the
    ``trace_rank`` STATUS line counts ("4 input warning(s)") is listed in report.md, under missing
    or here (issue 27 report 5 point 5; ``overlap_warnings`` bounds them: 3 clip lines and a count per
    rank). A note, never a lower STATUS (``state/report.py:NOTE_KINDS``)."""
    return [f"trace_analyst: {Path(res['path']).name}: {w} (clipped time under {PCT_TOL.abs:g}% of the window: no claim changes)"
            for res in good if not _material_clip(res) for w in res.get("warnings") or [] if is_clip_warning(w)]


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
    out_dir = Path(state["request"].out_dir) / "perf_report_csvs"
    written = []
    for res in good:
        if res.get("csv_dir"):  # the rank's worker wrote them, with every TraceLens sheet
            written.append(str(out_dir.parent / res["csv_dir"]))
            continue
        fields = {k: res[k] for k in TraceAnalysis.model_fields if k in res}
        try:
            d = out_dir / f"rank{res.get('label') or res.get('rank')}"
            trace_tables.write_tables(d, TraceAnalysis.model_validate(fields), res.get("tables"),
                                      root=state["request"].out_dir)
            written.append(str(d))
        except (OSError, ValueError):  # a link under perf_report_csvs/ is refused (UnsafePathError, an OSError)
            continue
    return written


def _multi_rank(good: list[RankResult]) -> dict[str, Any]:
    """Per-rank table, collectives (bus bandwidth per collective and message size) and the
    straggler finding, from the ranks' streaming records (:mod:`ai4s_graph.tools.trace.collectives`)."""
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
