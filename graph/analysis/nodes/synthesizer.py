"""The synthesizer: turns the verified claims into the report. Claims are REPORTED here:
``report.md`` (executive summary first, nodes list near the top, the bottleneck class with its
evidence, every claim with its verdict — refuted ones too —, recommended levers, what was
missing, each node's STATUS line), ``report.json`` and PNG plots, all inside the output directory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..configuration import llm_request
from ..schema import AnalysisState
from ...agents import llm
from ...agents.render import agent_notes_markdown
from ...rules import context as ctx
from ...rules import levers as lever_rules
from ...rules import registry
from ...rules.diagnosis import board_limits
from ...rules.verdict import decide, name_causes, rank_views, reconcile_with_window
from ...runtime import node
from ....state import (Bottleneck, LeverRecommendation, Manifest, Outcome, Report, StatusLine,
                              Tolerance, Verdict, VerifiedClaim, with_note)
from ....tools.cluster.baseline import load_baseline
from ....tools.errors import Ai4sError, InputError
from ....state.publish import ensure_dir
from ....state.report import degrading
from ....state.status import one_line, one_line_model
from ....tools.levers.recommend import lever_policy, recommend_levers
from ....tools.report import analysis_report as ar
from ....tools.report import budget as report_budget
from ....tools.report import html as report_html
from ....tools.report import lead as report_lead
from ....tools.report.templating import render
from ....tools.report import plots as report_plots
from ....tools.report import write as report_write

SYNTH = "synthesizer"


def decide_bottleneck(verdicts: list[VerifiedClaim], findings: dict[str, Any] | None = None) -> Bottleneck:
    """The bottleneck class from CONFIRMED claims only, over all ranks and all sources:
    :func:`ai4s_graph.graph.rules.verdict.decide` (direct measurements decide, indirect tests
    support or contradict; the straggler's class when the other ranks wait for it)."""
    return decide(verdicts, findings)


def levers_for(b: Bottleneck, manifest: Manifest, vendor: str | None,
               ranks: int) -> tuple[list[LeverRecommendation], str | None]:
    """:func:`~ai4s_graph.tools.levers.recommend.recommend_levers` for the class, led by
    ``balance_straggler_rank`` when the verdict is on a straggler the other ranks wait for: the
    first lever follows the cause (the slow rank), not the symptom (their exposed communication)."""
    recs, cat = recommend_levers(b, manifest, vendor, ranks)
    first = lever_rules.straggler_lever(b)
    return ([first] if first else []) + recs, cat


def status_verdict(b: Bottleneck) -> str:
    """The verdict as the synthesizer's STATUS line gives it: the class, and the straggler rank when
    the verdict names one (``compute-bound on rank 1 (straggler)``; issue 27 report 5 point 7: the
    line dropped the straggler the verdict names)."""
    return b.klass.value + (f" on rank {b.straggler} (straggler)" if b.straggler is not None else "")


def _fmt(v: Any, unit: str = "") -> str:
    """A value with its unit for the report (bytes shown in GiB)."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if unit == "bytes" and isinstance(v, (int, float)):
        return f"{v / 2**30:.3f} GiB"
    if isinstance(v, float):
        a = abs(v)
        s = f"{v:.4g}" if a < 1e5 else f"{v:.4e}"
        return f"{s} {unit}".strip()
    return f"{v} {unit}".strip()


def executive_summary(rep: Report, manifest: Manifest, throughput: dict[str, Any] | None = None) -> str:
    """The deterministic executive summary, at most 80 words (the LLM synthesizer may rewrite its
    prose): :func:`ai4s_graph.tools.report.analysis_report.executive_summary`."""
    return ar.executive_summary(rep, manifest, throughput)


def headline_figures(state: AnalysisState) -> dict[str, dict[str, Any]]:
    """A few headline numbers for the summary, taken from confirmed claims only: name ->
    ``{"value": number, "unit": str}`` (the claim's own value and unit)."""
    out: dict[str, dict[str, Any]] = {}
    names = {"gpu_timeline.idle_time.percent": "GPU idle", "gpu_timeline.computation_time.percent": "GPU computing",
             "gpu_timeline.exposed_comm_time.percent": "exposed communication",
             "fom.steady_step_time_s": "steady step", "fom.throughput_samples_per_s": "throughput",
             "telemetry.gpu_util.avg": "mean GPU utilization", "compare.precision_speedup": "precision speedup"}
    for v in state.get("verdicts") or []:
        m = v.claim.metric
        if v.verdict is Verdict.confirmed and m in names and names[m] not in out:
            out[names[m]] = {"value": v.claim.value, "unit": v.claim.unit}
    return out


def confidence_line(b: Bottleneck) -> str:
    """``Confidence 0.62 (deciding rule +14% past its threshold); runner-up: memory-bound (...).``
    plus a BORDERLINE warning when the deciding margin is under ``diagnosis.BORDERLINE_MARGIN``."""
    s = f"Confidence {b.confidence:.2f}"
    if b.margin is not None:
        s += f" (deciding rule {b.margin * 100:+.0f}% past its threshold)"
    if b.runner_up is not None:
        s += f"; runner-up: {b.runner_up.value}" + (
            f" ({b.runner_up_margin * 100:+.0f}% from its threshold)" if b.runner_up_margin is not None else "")
    s += "."
    if b.borderline:
        s += " **Borderline verdict**: the deciding figure is close to its threshold; a re-run could flip it."
    return s


def context_markdown(rep: Report) -> list[str]:
    """Report sections after the verdict: contradictions, ranks, representativeness, progress, busbw."""
    L: list[str] = []
    b = rep.bottleneck
    if b.contradictions:
        L += ["### Contradictions between sources", ""]
        for c in b.contradictions:
            L += [f"- **Direct:** {c.direct}.", f"  **Indirect:** {c.indirect}.",
                  f"  **Wins:** {c.winner}, because {c.why}.", f"  **To settle it:** {c.settle}.",
                  f"  Claims: {', '.join(f'`{x}`' for x in c.claims)}."]
            L += ([f"  **Resolved:** {c.resolved}.", ""] if c.resolved else [""])
    if len(rep.ranks) > 1:
        L += ["### Ranks", "", "| rank | class | computing % | idle % | exposed comm % | waiting (ms) | "
              "waiting / exposed comm | arrives last % |", "|---:|---|---:|---:|---:|---:|---:|---:|"]

        def f(x: float | None, n: int = 1) -> str:
            return "—" if x is None else f"{x:.{n}f}"

        for r in rep.ranks:
            mark = " (critical path)" if r["rank"] == b.critical_rank else ""
            share = r["wait_share_of_exposed_comm"]
            L.append(f"| {r['rank']}{mark} | {r['class']} | {f(r['computation_pct'])} | {f(r['idle_pct'])} | "
                     f"{f(r['exposed_comm_pct'])} | {f(r['wait_ms'], 2)} | "
                     f"{'—' if share is None else f'{share * 100:.0f}%'} | {f(r['pct_arrived_last'], 0)} |")
        L.append("")
    if rep.representativeness:
        L += ["### Representativeness of the profile", "", ar.paragraph(rep.representativeness["statement"]), ""]
    if rep.progress:
        L += ["### Where progress stopped", "", ar.paragraph(rep.progress["statement"]), ""]
    if rep.busbw_context:
        L += ["### Collective bandwidth in context", "", "| collective | message | achieved busbw (GB/s) | "
              "reference (GB/s) | ratio | reference source |", "|---|---:|---:|---:|---:|---|"]
        for r in rep.busbw_context:
            L.append(f"| {r['collective']} | {r['msg_bytes'] / 2**20:.4g} MiB | {r['busbw_gbps']:.1f} | "
                     f"{r['reference_gbps']:.1f} | {r['ratio']:.2f} | {r['reference']} |")
        L.append("")
    return L


def _claim_rows(rep: Report, checks: dict[str, str], rules: list[str]) -> list[dict[str, str]]:
    """The claims appendix's rows (values with their units, the check id instead of its text)."""
    rows = []
    for v in rep.claims:
        c = v.claim
        rows.append({"id": c.id, "statement": ar.scrub(c.statement, rules), "value": _fmt(c.value, c.unit),
                     "verdict": v.verdict.value,
                     "rederived": _fmt(v.rederived_value, c.unit if not isinstance(v.rederived_value, str) else ""),
                     "tolerance": v.tolerance.describe(), "check": checks[v.method],
                     "note": ar.scrub(v.note, rules) if v.note else ""})
    return rows


def render_markdown(rep: Report, manifest: Manifest, not_checked: list[str] = (),
                    dropped: list[LeverRecommendation] = ()) -> str:
    """``report.md`` text from ``templates/report.md.j2``: the headline (at most 3 lines), the
    summary, the verdict with its causes, context, pictures, top kernels, levers, what was missing,
    node status, then the claims and rules appendices; ``not_checked``: the checks that could not
    run, listed with what was missing (they never lower STATUS). References to the seeds are taken
    out of the body and listed as ``docs/rules.md`` ids in the rules appendix. Every string of
    ``rep``, ``manifest`` and ``not_checked`` is made one line first (control characters escaped)."""
    rep, manifest = one_line_model(rep), one_line_model(manifest)  # a user's string never starts a line (issue 26)
    not_checked = [one_line(n) for n in not_checked]
    rules: list[str] = []
    b = rep.bottleneck
    checks = ar.check_ids(rep)
    crit = b.critical_rank if b.critical_rank is not None else (0 if rep.top_kernels else None)
    usage = ""
    if rep.usage:
        tot_in = sum(u.input_tokens for u in rep.usage.values())
        tot_out = sum(u.output_tokens for u in rep.usage.values())
        cost = sum(u.cost_usd for u in rep.usage.values())
        usage = (f"LLM usage: {tot_in} input + {tot_out} output tokens, ${cost:.4f} ("
                 + ", ".join(f"{k}: {u.input_tokens}+{u.output_tokens}" for k, u in rep.usage.items()) + ")")
    intro = (("From the lever catalog `" + rep.lever_catalog + "` (blocked and baked-in levers left out), then the "
              "generic rules, ordered by estimated saving per step (levers without an estimate last, in cost order):")
             if rep.lever_catalog else "From the generic rules (no lever catalog for this model), ordered by estimated "
             "saving per step (levers without an estimate last, in cost order):")
    ctx_lines = [ar.scrub(x, rules) for x in context_markdown(rep)]
    return render("report.md.j2", rep=rep, manifest=manifest,
                  rationale=ar.paragraph(ar.scrub(b.rationale, rules)), confidence=confidence_line(b),
                  supporting=", ".join(f"`{c}`" for c in b.supporting_claims) or "none",
                  causes=ar.causes_rows(rep, checks, dropped), context=ctx_lines,
                  budgets=[{"rank": x["rank"], "steps": x["steps"], "step_ms": x["step_ms"],
                            "critical": x["rank"] == crit and len(rep.step_budget) > 1,
                            "rows": report_budget.budget_rows(x), "path": ar.paragraph(report_budget.path_text(x))}
                           for x in rep.step_budget], plots=[Path(p) for p in rep.plots],
                  annotated=Path(rep.annotated_trace).name if rep.annotated_trace else None,
                  top_kernels=rep.top_kernels, kernels_rank=crit, lever_intro=intro,
                  levers=[{"name": lv.name, "why": ar.scrub(lv.why, rules)} for lv in rep.levers],
                  levers_dropped=[{"name": lv.name, "why": lv.why} for lv in dropped],
                  missing=[ar.rule_ids(m, rules) for m in rep.missing + list(not_checked)],
                  input_notes=[ar.rule_ids(m, rules) for m in rep.input_notes],
                  claims=_claim_rows(rep, checks, rules), checks={ar.scrub(k, rules): v for k, v in checks.items()},
                  rules=sorted(rules, key=lambda r: (r[0], int(re.sub(r"\D", "", r) or 0))), usage=usage)


def telemetry_panels(tel: dict[str, Any]) -> tuple[dict[str, dict[str, list]], dict[str, str]]:
    """The telemetry plot's series, ``{metric: {label: [(unix s, value)]}}``, and units: each GPU
    metric per host and GPU at the raw sample rate (``tel["gpu_series"]``, the telemetry analyst's),
    else per host on the 1 s grid (``tel["series"]``, the hosts' GPU average, labelled ``<host>
    (GPU average)``); node metrics per host. Bytes are shown in GiB."""
    raw = tel.get("gpu_series") or {}
    series: dict[str, dict[str, list]] = {}
    for m, per_host in (tel.get("series") or {}).items():
        if raw.get(m):
            series[m] = dict(raw[m])
        elif per_host:
            gpu = m in raw or m != "cpu_util"
            series[m] = {(f"{h} (GPU average)" if gpu else h) or "?": pts for h, pts in per_host.items()}
    units = dict(tel.get("units") or {})
    for m, u in list(units.items()):  # device memory reads better in GiB than in bytes
        if u == "bytes" and m in series:
            series[m] = {k: [(t, v / 2**30) for t, v in pts] for k, pts in series[m].items()}
            units[m] = "GiB"
    return series, units


def board_lines(gpu: str | None, series: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """The board limits drawn on the telemetry plot: the power limit on ``power`` and the boost
    clock on ``sm_clock``, from the GPU datasheet (:func:`~ai4s_graph.graph.rules.diagnosis.board_limits`),
    100% on ``gpu_util``; ``{}`` entries for an unknown board."""
    out: dict[str, tuple[float, str]] = {}
    lim = board_limits(gpu)
    if lim is not None and "power" in series:
        out["power"] = (lim[0], f"power limit {lim[0]:.0f} W (datasheet)")
    if lim is not None and lim[1] and "sm_clock" in series:
        out["sm_clock"] = (lim[1], f"boost clock {lim[1]:.0f} MHz (datasheet)")
    if "gpu_util" in series:
        out["gpu_util"] = (100.0, "100%")
    return out


def figure_lanes(findings: dict[str, Any], rank: int | None) -> bool:
    """Whether the figures are drawn in processes of their own (:func:`~ai4s_graph.tools.report.
    drawing.lanes_on`) while :func:`annotate_trace` writes the annotated copy of ``rank``'s trace."""
    from ....tools.report.drawing import lanes_on

    path = (_rank_record(findings, rank) or {}).get("path")
    return lanes_on(path if path else None)


def start_plots(state: AnalysisState, out_dir: Path,
                window: tuple[float, float] | None, *, lane: bool = False) -> list[tuple[str, Any]]:
    """The GPU time breakdown and telemetry PNGs started (:class:`~ai4s_graph.tools.report.drawing.
    Drawing`: in processes of their own with ``lane`` (:func:`figure_lanes`), else drawn now);
    returns ``[(what, drawing)]`` for :func:`finish_plots`."""
    # lazy: matplotlib costs +1.3 s import time (python -X importtime), paid only when a report is written
    from ....tools.report.drawing import Drawing

    started: list[tuple[str, Any]] = []
    ranks = ((state.get("findings") or {}).get("trace") or {}).get("ranks") or []
    if ranks:
        started.append(("GPU breakdown plot", Drawing("gpu_breakdown", {f"rank {r.get('rank', i)}": r["timeline"]
                                                                        for i, r in enumerate(ranks)},
                                                      out_dir / "gpu_time_breakdown.png", lane=lane)))
    tel = (state.get("findings") or {}).get("telemetry") or {}
    series, units = telemetry_panels(tel)
    if series:
        crit = next(iter(ranks), None)
        prof = ctx.profiled_window(crit) if crit else None
        started.append(("telemetry plot", Drawing("telemetry", series, units, window, out_dir / "telemetry.png",
                                                  profiled=prof, limits=board_lines(state["manifest"].gpu, series),
                                                  title=f"Telemetry over job {state['manifest'].jobid}",
                                                  lane=lane)))
    return started


def finish_plots(started: list[tuple[str, Any]], problems: list[str]) -> list[str]:
    """The paths of the figures :func:`start_plots` / :func:`start_step_plot` started, in their order;
    a figure that failed is a problem (``synthesizer: <what>: <why>``), not an error."""
    paths = []
    for what, drawing in started:
        try:
            paths.append(str(drawing.result()))
        except Ai4sError as e:
            problems.append(f"synthesizer: {what}: {e}")
    return paths


def _util_series(findings: dict[str, Any]) -> list[tuple[float, float]]:
    """GPU utilization ``[(unix s, %)]`` of the first instance the telemetry analyst queried."""
    per_inst = (((findings.get("telemetry") or {}).get("series") or {}).get("gpu_util")) or {}
    return [(float(t), float(v)) for t, v in next(iter(per_inst.values()), [])] if per_inst else []


def _busbw(req: Any, manifest: Manifest, trace: dict[str, Any], problems: list[str]) -> list[dict[str, Any]]:
    """Achieved all-reduce busbw against ``--baseline`` (read only when there is an all-reduce to
    compare; an unreadable one is a problem, and the datasheet stands in) or the datasheet."""
    groups = (((trace.get("multi_rank") or {}).get("collectives")) or {}).get("groups") or []
    baseline = None
    if req.baseline and ctx.allreduce_groups(groups):
        try:
            baseline = load_baseline(req.baseline)
        except InputError as e:
            problems.append(f"synthesizer: {e}")
    return ctx.busbw_context(groups, baseline, manifest.gpu, manifest.num_nodes)


def context_of(state: AnalysisState, manifest: Manifest, b: Bottleneck, verdicts: list[VerifiedClaim],
               problems: list[str]) -> dict[str, Any]:
    """Report fields that put the verdict in context: the per-rank table, representativeness of
    the critical rank's profile, progress of a job that did not complete (from the facts of the one
    read of the log), and busbw against the ``--baseline`` eval-cluster measurement or the
    datasheet. Problems are appended to ``problems``."""
    findings = state.get("findings") or {}
    util = _util_series(findings)
    out: dict[str, Any] = {"ranks": [v.row() for v in rank_views(verdicts, findings)]}
    trace = findings.get("trace") or {}
    ranks = {r.get("rank"): r for r in trace.get("ranks") or []}
    crit = ranks.get(b.critical_rank if b.critical_rank is not None else 0) or next(iter(ranks.values()), None)
    if crit:
        out["representativeness"] = ctx.representativeness(crit, findings.get("fom"), util, ctx.profiled_window(crit))
    log = findings.get("log") or {}
    if manifest.state.split()[0].upper() != "COMPLETED" and manifest.start and manifest.end:
        planned = (manifest.model_extra or {}).get("steps")
        out["progress"] = ctx.progress(manifest.state, manifest.start, manifest.end, list(log.get("step_times_s") or []),
                                       int(planned) if isinstance(planned, (int, float)) else None, util,
                                       log.get("last_step_unix"))
    out["busbw_context"] = _busbw(state["request"], manifest, trace, problems)
    return out


#: Largest rank trace (bytes on disk) copied into ``annotated_trace.json.gz``: the copy streams, but
#: its size follows the source; above this the report says it was not written (a bound on the
#: output folder, 2x the largest bundled trace of ``bench/accuracy/cases`` ~ 100 MB rounded up).
MAX_ANNOTATED_SOURCE_BYTES = 256 * 2**20


def annotate_trace(findings: dict[str, Any], rank: int | None, out_dir: Path,
                   problems: list[str]) -> Any:
    """Write ``<out_dir>/annotated_trace.json.gz`` (:func:`~ai4s_graph.tools.report.annotated.
    write_annotated_trace`) from the trace of ``rank`` (the critical rank, else the first), with the
    collective waits when the ranks' communication columns are in the findings. Returns the
    :class:`~ai4s_graph.tools.report.annotated.AnnotatedTrace` (its per-step breakdown too), None
    when no trace is present; a trace too large or unreadable is a problem, not an error."""
    from ....tools.report import annotated

    rec = _rank_record(findings, rank)
    path = (rec or {}).get("path")
    if not path or not Path(path).is_file():
        return None
    size = Path(path).stat().st_size
    if size > MAX_ANNOTATED_SOURCE_BYTES:
        problems.append(f"synthesizer: annotated trace not written: rank {rec.get('rank')}'s trace is "
                        f"{size / 2**20:.0f} MiB, over {MAX_ANNOTATED_SOURCE_BYTES / 2**20:.0f} MiB")
        return None
    ranks = ((findings.get("trace") or {}).get("ranks")) or []
    waits: list[dict[str, Any]] = []
    with_comm = [r for r in ranks if isinstance(r.get("comm"), dict)]
    if len(with_comm) > 1:
        try:
            waits = annotated.collective_waits(with_comm, int(rec.get("rank", 0)))
        except (KeyError, ValueError) as e:
            problems.append(f"synthesizer: collective waits not drawn: {e}")
    try:
        return annotated.write_annotated_trace(path, out_dir / "annotated_trace.json.gz", rank=rec.get("rank"),
                                               waits=waits)
    except (Ai4sError, OSError, TypeError, ValueError) as e:  # TypeError: a value orjson cannot write
        problems.append(f"synthesizer: annotated trace not written: {' '.join(str(e).split())[:200]}")
        return None


def step_plot_input(budgets: list[dict[str, Any]], ann: Any, b: Bottleneck) -> dict[str, Any]:
    """What ``step_time_breakdown.png`` draws: per step x per rank, computation / exposed communication /
    exposed memcpy / idle (issue 27 point 3), every rank of the step accounting (``budgets``: the
    report's ``step_budget``; with none, the annotated trace's per-step breakdown of the critical
    rank, ``ann``, None when not yet written), by rank label; {} without steps."""
    per_rank = {str(x["rank"] if x["rank"] is not None else i): x["per_step"] for i, x in enumerate(budgets)
                if x.get("per_step")}
    if not per_rank and getattr(ann, "step_breakdown", None):
        per_rank = {str(b.critical_rank if b.critical_rank is not None else 0): ann.step_breakdown}
    return per_rank


def start_step_plot(per_rank: dict[str, Any], b: Bottleneck, out_dir: Path, *,
                    lane: bool = False) -> list[tuple[str, Any]]:
    """``step_time_breakdown.png`` of :func:`step_plot_input`'s ``per_rank`` started (as
    :func:`start_plots`, ``lane`` too), the straggler's panel marked; [] without steps."""
    from ....tools.report.drawing import Drawing

    if not per_rank:
        return []
    return [("step breakdown plot", Drawing("step_breakdown", per_rank, out_dir / "step_time_breakdown.png",
                                            marked=str(b.straggler) if b.straggler is not None else None,
                                            lane=lane))]


def _rank_record(findings: dict[str, Any], rank: int | None) -> dict[str, Any] | None:
    """The trace analyst's record of ``rank`` (the critical rank), else its first rank's, else None."""
    ranks = ((findings.get("trace") or {}).get("ranks")) or []
    for r in ranks:
        if rank is not None and r.get("rank") == rank:
            return r
    return ranks[0] if ranks else None


def _verdicts(state: AnalysisState) -> list[VerifiedClaim]:
    """Every verdict, plus a claim that no verifier reached as inconclusive (it stays in the report)."""
    verdicts = list(state.get("verdicts") or [])
    verified_ids = {v.claim.id for v in verdicts}
    for c in state.get("claims") or []:
        if c.id not in verified_ids:
            verdicts.append(registry.judge(c, SYNTH, None, Tolerance(), "not reached by a verifier"))
    return verdicts


def _vendor(findings: dict[str, Any], manifest: Manifest) -> str | None:
    """The GPU vendor telemetry saw, else the manifest's GPU name's (``amd``, ``nvidia``, None)."""
    vendor = (findings.get("telemetry") or {}).get("vendor")
    if vendor in (None, "none"):
        g = (manifest.gpu or "").upper()
        vendor = "amd" if ("AMD" in g or "MI3" in g or "INSTINCT" in g) else ("nvidia" if g else None)
    return vendor


def _plot_window(findings: dict[str, Any], manifest: Manifest) -> tuple[float, float] | None:
    """The telemetry window, else the manifest's SLURM start and end, else None."""
    tel = findings.get("telemetry") or {}
    if tel.get("window"):
        return tuple(tel["window"])
    if manifest.start and manifest.end:
        return (manifest.start, manifest.end)
    return None


@node(SYNTH)
def synthesizer(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Write report.md, report.json and the plots into the output directory."""
    req = state["request"]
    out_dir = Path(req.out_dir)
    manifest = state.get("manifest") or Manifest(jobid=req.jobid or "unknown")
    verdicts = _verdicts(state)
    findings = state.get("findings") or {}
    b = decide_bottleneck(verdicts, findings)
    b.supporting_claims = list(dict.fromkeys(b.supporting_claims))
    name_causes(b, findings, verdicts)
    levers, catalog = levers_for(b, manifest, _vendor(findings, manifest), max(1, len(manifest.artifacts.traces)))
    dropped: list[LeverRecommendation] = []  # catalog-blocked or precondition absent (rules/levers.py)
    levers = lever_rules.choose(levers, findings, verdicts, b, policy=lever_policy(manifest), dropped=dropped)
    # the report (and its plots) replace the one in out_dir only after a run that analysed something,
    # and never another job's report without --force (tools/report/write.py)
    dest, kept = report_write.destination(out_dir, manifest.jobid, analysed=bool(state.get("manifest") and verdicts),
                                          force=req.force)
    ensure_dir(dest, out_dir)
    budgets = [x for r in ((findings.get("trace") or {}).get("ranks") or [])
               if (x := report_budget.rank_budget(r.get("step_accounting"), r.get("rank"))) is not None]
    with report_plots.staged() as staged_plots:  # published with the report, in one atomic write
        # the figures are drawn (in processes of their own where the CPUs allow) while the annotated
        # trace is written here; the step plot waits for it only when the annotated trace's own step
        # breakdown is what it draws (no rank has step accounting)
        lane = figure_lanes(findings, b.critical_rank)
        figures = start_plots(state, dest, _plot_window(findings, manifest), lane=lane)
        steps_in = step_plot_input(budgets, None, b)
        step_fig = start_step_plot(steps_in, b, dest, lane=lane)
        ann_problems: list[str] = []
        ann = annotate_trace(findings, b.critical_rank, dest, ann_problems)
        if not steps_in:
            step_fig = start_step_plot(step_plot_input(budgets, ann, b), b, dest, lane=lane)
        plot_problems: list[str] = []
        plots_ = finish_plots(figures, plot_problems)
        plot_problems += ann_problems
        plots_ += finish_plots(step_fig, plot_problems)
    in_context = context_of(state, manifest, b, verdicts, plot_problems)
    reconcile_with_window(b, in_context.get("representativeness"))
    rep = Report(jobid=manifest.jobid, model=manifest.model, state=manifest.state, nodes_list=manifest.nodes_list,
                 bottleneck=b, claims=verdicts, levers=levers, lever_catalog=catalog,
                 missing=list(state.get("missing") or []) + plot_problems,
                 input_notes=list(state.get("input_notes") or []),
                 statuses=dict(state.get("statuses") or {}), figures=headline_figures(state), plots=plots_,
                 usage=dict(state.get("usage") or {}), llm=req.llm, **in_context)
    rep.throughput = ar.throughput(findings.get("fom"))
    crit_rank = _rank_record(findings, b.critical_rank)
    rep.top_kernels = ar.top_kernel_rows((crit_rank or {}).get("top_kernels") or [])
    rep.step_budget = budgets
    rep.telemetry_samples = {m: {k: len(v) for k, v in per.items()}
                             for m, per in telemetry_panels(findings.get("telemetry") or {})[0].items()}
    if b.cause is None and crit_rank:  # issue 34 point 5: a lead, not a guess
        b.lead = report_lead.step_lead(crit_rank.get("step_accounting"), crit_rank.get("rank"), rep.top_kernels)
    if ann is not None:
        rep.annotated_trace = ann.path
    rep.headline = ar.headline(rep)
    rep.executive_summary = executive_summary(rep, manifest, rep.throughput)
    outcome = Outcome.ok
    llm_status = None  # the LLM pass's STATUS: a fallback is said after the deterministic reason
    if req.llm != "none":
        res = llm.synthesizer_pass(llm_request(state), rep.model_dump(mode="json"))  # the LLM reads JSON
        rep.usage[SYNTH] = res.usage
        if res.prose:
            rep.executive_summary = res.prose
        llm_status = res.status
    if not (state.get("manifest") and verdicts):
        outcome = Outcome.fail  # nothing was analysed: the report only says what is missing
    not_checked = list(state.get("not_checked") or [])  # issue 28; kept out of Report so the agents' inputs are unchanged
    lost = degrading(missing=rep.missing, not_checked=not_checked, input_notes=rep.input_notes)
    status = with_note(StatusLine.make(
        Outcome.partial if (lost and outcome is Outcome.ok) else outcome,
        f"{status_verdict(b)}; {len(verdicts)} claims; " + (f"{kept}; this report in {dest}" if kept else f"report.md in {dest}")
        + (f"; {len(lost)} missing input(s)" if lost else "")), llm_status)
    rep.statuses[SYNTH] = status.format()
    md = render_markdown(rep, manifest, not_checked, dropped) + agent_notes_markdown(out_dir, rep)
    page = report_html.report_html(md, {p.name: data for p, data in staged_plots}, f"ai4s-graph report — job {rep.jobid}")
    report_write.write_report(out_dir, dest, json.dumps(dict(rep.model_dump(mode="json"), not_checked=not_checked,
                                                             levers_dropped=[lv.model_dump(mode="json") for lv in dropped]),
                                                        indent=1, ensure_ascii=False) + "\n", md,
                              [*staged_plots, (dest / "report.html", page.encode("utf-8"))])
    return {"report": rep}, status
