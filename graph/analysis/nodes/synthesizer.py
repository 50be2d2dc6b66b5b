"""The synthesizer: turns the verified claims into the report. Claims are REPORTED here:
``report.md`` (executive summary first, nodes list near the top, the bottleneck class with its
evidence, every claim with its verdict — refuted ones too —, recommended levers, what was
missing, each node's STATUS line), ``report.json`` and PNG plots, all inside the output directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..claimkit import verdict
from .. import context as ctx
from .. import triage
from ..configuration import llm_request, run_dir
from ..verdict import decide, reconcile_with_window
from ..schema import AnalysisState
from ...agents.render import agent_notes_markdown
from ...runtime import node
from ....state import (Bottleneck, LeverRecommendation, Manifest, Outcome, Report, StatusLine,
                              Tolerance, Verdict, VerifiedClaim)
from ....tools.errors import Ai4sError
from ....tools.levers.recommend import recommend_levers

SYNTH = "synthesizer"


def decide_bottleneck(verdicts: list[VerifiedClaim], findings: dict[str, Any] | None = None) -> Bottleneck:
    """The bottleneck class from CONFIRMED claims only, over all ranks and all sources:
    :func:`ai4s_graph.graph.analysis.verdict.decide` (direct measurements decide, indirect tests
    support or contradict; the straggler's class when the other ranks wait for it)."""
    return decide(verdicts, findings)


def levers_for(b: Bottleneck, manifest: Manifest, vendor: str | None,
               ranks: int) -> tuple[list[LeverRecommendation], str | None]:
    """:func:`~ai4s_graph.tools.levers.recommend.recommend_levers` for the class, led by
    ``balance_straggler_rank`` when the verdict is on a straggler the other ranks wait for: the
    first lever follows the cause (the slow rank), not the symptom (their exposed communication)."""
    recs, cat = recommend_levers(b, manifest, vendor, ranks)
    if b.straggler is not None:
        recs.insert(0, LeverRecommendation(
            name="balance_straggler_rank",
            why=(f"rank {b.straggler} is the straggler the other ranks wait for: give it less work (check its data "
                 "shard and per-rank batch) or fix its node (probe its GPU and mounts with `ai4s-graph probe`, "
                 "lesson 19) before tuning communication; then its own class's levers below"),
            claims=b.supporting_claims[:3]))
    return recs, cat


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


def executive_summary(rep: Report, manifest: Manifest) -> str:
    """The deterministic executive summary (the LLM synthesizer may rewrite its prose)."""
    if not rep.claims and rep.missing:
        return (f"Nothing was analysed for job {rep.jobid}: {rep.missing[0]}. "
                f"{len(rep.missing)} input(s) missing in all (see 'What was missing').")
    counts: dict[str, int] = {}
    for v in rep.claims:
        counts[v.verdict.value] = counts.get(v.verdict.value, 0) + 1
    b = rep.bottleneck
    head = (f"Job {rep.jobid} ({manifest.model}, {manifest.precision}, {rep.state}) on "
            f"{', '.join(rep.nodes_list) or 'unknown nodes'} is **{b.scope or b.klass.value}**"
            + (" (borderline)" if b.borderline else "") + f". {b.rationale}")
    if rep.progress:
        head += " " + rep.progress["statement"]
    if rep.representativeness and not rep.representativeness.get("representative", True):
        head += " " + rep.representativeness["statement"]
    figs = "; ".join(f"{k}: {v}" for k, v in rep.figures.items())
    lever = f" First lever to try: `{rep.levers[0].name}` — {rep.levers[0].why}." if rep.levers else ""
    tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    miss = f" Missing: {len(rep.missing)} input(s) (see 'What was missing')." if rep.missing else ""
    return f"{head}{lever} Claims: {tally or 'none'}. {('Headline figures: ' + figs + '.') if figs else ''}{miss}"


def headline_figures(state: AnalysisState) -> dict[str, str]:
    """A few headline numbers for the summary, taken from confirmed claims only."""
    out: dict[str, str] = {}
    names = {"gpu_timeline.idle_time.percent": "GPU idle", "gpu_timeline.computation_time.percent": "GPU computing",
             "gpu_timeline.exposed_comm_time.percent": "exposed communication",
             "fom.steady_step_time_s": "steady step", "fom.throughput_samples_per_s": "throughput",
             "telemetry.gpu_util.avg": "mean GPU utilization", "compare.precision_speedup": "precision speedup"}
    for v in state.get("verdicts") or []:
        m = v.claim.metric
        if v.verdict is Verdict.confirmed and m in names and names[m] not in out:
            out[names[m]] = _fmt(v.claim.value, v.claim.unit)
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
        L += ["### Representativeness of the profile", "", rep.representativeness["statement"], ""]
    if rep.progress:
        L += ["### Where progress stopped", "", rep.progress["statement"], ""]
    if rep.busbw_context:
        L += ["### Collective bandwidth in context", "", "| collective | message | achieved busbw (GB/s) | "
              "reference (GB/s) | ratio | reference source |", "|---|---:|---:|---:|---:|---|"]
        for r in rep.busbw_context:
            L.append(f"| {r['collective']} | {r['msg_bytes'] / 2**20:.4g} MiB | {r['busbw_gbps']:.1f} | "
                     f"{r['reference_gbps']:.1f} | {r['ratio']:.2f} | {r['reference']} |")
        L.append("")
    return L


def render_markdown(rep: Report, manifest: Manifest, not_checked: list[str] = ()) -> str:
    """``report.md`` text (see the module docstring for its order); ``not_checked``: the checks
    that could not run, listed with what was missing (they never lower STATUS)."""
    L: list[str] = [f"# ai4s-graph report — job {rep.jobid}", ""]
    L += [f"**Nodes:** {', '.join(rep.nodes_list) or 'unknown'} · **State:** {rep.state} · **Model:** {rep.model} · "
          f"**Precision:** {manifest.precision} · **Global batch:** {manifest.global_batch_size} · "
          f"**Agents:** {rep.llm}", ""]
    L += ["## Executive summary", "", rep.executive_summary, ""]
    b = rep.bottleneck
    L += [f"## Bottleneck: {b.klass.value}", ""]
    if b.scope and b.scope != b.klass.value:
        L += [f"**{b.scope}**", ""]
    L += [b.rationale, "", confidence_line(b) + " Supporting confirmed claims: "
          + (", ".join(f"`{c}`" for c in b.supporting_claims) or "none") + ".", ""]
    L += context_markdown(rep)
    for p in rep.plots:
        L += [f"![{Path(p).stem}]({Path(p).name})", ""]
    L += ["## Claims and verdicts", "",
          "Every claim was re-derived by a verifier from the raw inputs by a different path; refuted and "
          "unsupported claims stay here so later runs do not re-derive them.", "",
          "| id | claim | value | verdict | re-derived | tolerance | how it was checked |",
          "|---|---|---:|---|---:|---|---|"]
    for v in rep.claims:
        c = v.claim
        L.append(f"| `{c.id}` | {c.statement} | {_fmt(c.value, c.unit)} | **{v.verdict.value}** | "
                 f"{_fmt(v.rederived_value, c.unit if not isinstance(v.rederived_value, str) else '')} | "
                 f"{v.tolerance.describe()} | {v.method}{(' — ' + v.note) if v.note else ''} |")
    L += ["", "### Evidence", ""]
    for v in rep.claims:
        for e in v.claim.evidence:
            ret = json.dumps(e.returned, default=str)
            if len(ret) > 160:
                ret = ret[:157] + "…"
            L.append(f"- `{v.claim.id}` ← `{e.tool}`: `{e.query}` returned `{ret}`")
    L += ["", "## Recommended levers", ""]
    L += [("From the lever catalog `" + rep.lever_catalog + "` (blocked and baked-in levers left out), then the "
           "generic rules of `tools/levers/rules.py`, ordered by estimated saving per step (`tools/levers/impact.py`; levers "
           "without an estimate last, in cost order):") if rep.lever_catalog else
          "From the generic rules of `tools/levers/rules.py` (no lever catalog for this model), ordered by estimated saving "
          "per step (`tools/levers/impact.py`; levers without an estimate last, in cost order):", ""]
    if rep.levers:
        L += [f"{i}. `{lv.name}` — {lv.why}" for i, lv in enumerate(rep.levers, 1)]
    else:
        L.append("The bottleneck class is unknown, so no lever is recommended; fill the missing inputs first.")
    L += ["", "## What was missing", ""]
    L += [f"- {m}" for m in rep.missing + list(not_checked)] or ["Every input the graph reads was present."]
    L += ["", "## Node status", "", "```"] + [f"{k}: {v}" for k, v in rep.statuses.items()] + ["```", ""]
    if rep.usage:
        tot_in = sum(u.input_tokens for u in rep.usage.values())
        tot_out = sum(u.output_tokens for u in rep.usage.values())
        cost = sum(u.cost_usd for u in rep.usage.values())
        L += ["---", f"LLM usage: {tot_in} input + {tot_out} output tokens, ${cost:.4f} "
              + "(" + ", ".join(f"{k}: {u.input_tokens}+{u.output_tokens}" for k, u in rep.usage.items()) + ")", ""]
    return "\n".join(L)


def make_plots(state: AnalysisState, out_dir: Path, window: tuple[float, float] | None) -> tuple[list[str], list[str]]:
    """GPU time breakdown and telemetry PNGs; returns (paths, problems)."""
    from ....tools.report import plots

    paths, problems = [], []
    ranks = ((state.get("findings") or {}).get("trace") or {}).get("ranks") or []
    if ranks:
        try:
            paths.append(str(plots.plot_gpu_breakdown({f"rank {r.get('rank', i)}": r["timeline"]
                                                       for i, r in enumerate(ranks)}, out_dir / "gpu_time_breakdown.png")))
        except Ai4sError as e:
            problems.append(f"synthesizer: GPU breakdown plot: {e}")
    tel = (state.get("findings") or {}).get("telemetry") or {}
    series = {m: next(iter(per_inst.values())) for m, per_inst in (tel.get("series") or {}).items() if per_inst}
    units = dict(tel.get("units") or {})
    for m, u in list(units.items()):  # device memory reads better in GiB than in bytes
        if u == "bytes" and m in series:
            series[m] = [(t, v / 2**30) for t, v in series[m]]
            units[m] = "GiB"
    if series:
        try:
            paths.append(str(plots.plot_telemetry(series, units, window, out_dir / "telemetry.png",
                                                  title=f"Telemetry over job {state['manifest'].jobid}")))
        except Ai4sError as e:
            problems.append(f"synthesizer: telemetry plot: {e}")
    return paths, problems


def context_of(state: AnalysisState, manifest: Manifest, b: Bottleneck, verdicts: list[VerifiedClaim],
               problems: list[str]) -> dict[str, Any]:
    """Report fields that put the verdict in context: the per-rank table, representativeness of
    the critical rank's profile, progress of a job that did not complete, and busbw against the
    ``--baseline`` eval-cluster measurement or the datasheet. Problems are appended to
    ``problems``."""
    from ..verdict import rank_views
    from ....tools.trainlog import fom as fom_tool

    req = state["request"]
    findings = state.get("findings") or {}
    tel = findings.get("telemetry") or {}
    per_inst = (tel.get("series") or {}).get("gpu_util") or {}
    util = [(float(t), float(v)) for t, v in next(iter(per_inst.values()), [])] if per_inst else []
    out: dict[str, Any] = {"ranks": [v.row() for v in rank_views(verdicts, findings)]}
    trace = findings.get("trace") or {}
    ranks = {r.get("rank"): r for r in trace.get("ranks") or []}
    crit = ranks.get(b.critical_rank if b.critical_rank is not None else 0) or next(iter(ranks.values()), None)
    if crit:
        out["representativeness"] = ctx.representativeness(crit, findings.get("fom"), util, ctx.profiled_window(crit))
    log = run_dir(state) / (manifest.artifacts.train_log or "train.log")
    if manifest.state.split()[0].upper() != "COMPLETED" and manifest.start and manifest.end:
        steps: list[float] = []
        try:
            steps = fom_tool.parse_log(log, global_batch_size=manifest.global_batch_size).step_times_s
        except (Ai4sError, OSError):
            pass
        planned = (manifest.model_extra or {}).get("steps")
        out["progress"] = ctx.progress(manifest.state, manifest.start, manifest.end, steps,
                                       int(planned) if isinstance(planned, (int, float)) else None, util,
                                       ctx.last_step_timestamp(log, ctx.STEP_LINE) if log.exists() else None)
    groups = (((trace.get("multi_rank") or {}).get("collectives")) or {}).get("groups") or []
    rows, probs = ctx.busbw_context(groups, req.baseline, manifest.gpu, manifest.num_nodes)
    out["busbw_context"] = rows
    problems.extend(f"synthesizer: {p}" for p in probs)
    return out


@node(SYNTH)
def synthesizer(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Write report.md, report.json and the plots into the output directory."""
    req = state["request"]
    out_dir = Path(req.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = state.get("manifest") or Manifest(jobid=req.jobid or "unknown")
    verdicts = list(state.get("verdicts") or [])
    verified_ids = {v.claim.id for v in verdicts}
    # a claim that no verifier reached stays in the report as inconclusive
    for c in state.get("claims") or []:
        if c.id not in verified_ids:
            verdicts.append(verdict(c, SYNTH, None, Tolerance(), "not reached by a verifier"))
    findings = state.get("findings") or {}
    b = decide_bottleneck(verdicts, findings)
    b.supporting_claims = list(dict.fromkeys(b.supporting_claims))
    vendor = (findings.get("telemetry") or {}).get("vendor")
    if vendor in (None, "none"):
        g = (manifest.gpu or "").upper()
        vendor = "amd" if ("AMD" in g or "MI3" in g or "INSTINCT" in g) else ("nvidia" if g else None)
    ranks = max(1, len(manifest.artifacts.traces))
    levers, catalog = levers_for(b, manifest, vendor, ranks)
    levers = triage.recommend(levers, findings, verdicts)
    levers.sort(key=lambda lv: lv.name != "balance_straggler_rank")  # the cause first, whatever the estimates
    window = None
    tel = (state.get("findings") or {}).get("telemetry") or {}
    if tel.get("window"):
        window = tuple(tel["window"])
    elif manifest.start and manifest.end:
        window = (manifest.start, manifest.end)
    plots_, plot_problems = make_plots(state, out_dir, window)
    in_context = context_of(state, manifest, b, verdicts, plot_problems)
    reconcile_with_window(b, in_context.get("representativeness"))
    rep = Report(jobid=manifest.jobid, model=manifest.model, state=manifest.state, nodes_list=manifest.nodes_list,
                 bottleneck=b, claims=verdicts, levers=levers, lever_catalog=catalog,
                 missing=list(state.get("missing") or []) + plot_problems,
                 statuses=dict(state.get("statuses") or {}), figures=headline_figures(state), plots=plots_,
                 usage=dict(state.get("usage") or {}), llm=req.llm, **in_context)
    rep.executive_summary = executive_summary(rep, manifest)
    outcome = Outcome.ok
    reason_extra = ""
    if req.llm != "none":
        from ...agents import llm

        res = llm.synthesizer_pass(llm_request(state), rep.model_dump(mode="json"))  # the LLM reads JSON
        rep.usage[SYNTH] = res.usage
        if res.prose:
            rep.executive_summary = res.prose
        if res.status.status is not Outcome.ok:
            outcome, reason_extra = res.status.status, f"; LLM: {res.status.reason}"
    if not state.get("manifest"):
        outcome = Outcome.fail  # nothing was analysed: the report only says what is missing
    status = StatusLine.make(
        Outcome.partial if (rep.missing and outcome is Outcome.ok) else outcome,
        f"{b.klass.value}; {len(verdicts)} claims; report.md in {out_dir}"
        + (f"; {len(rep.missing)} missing input(s)" if rep.missing else "") + reason_extra)
    rep.statuses[SYNTH] = status.format()
    not_checked = list(state.get("not_checked") or [])  # issue 28; kept out of Report so the agents' inputs are unchanged
    (out_dir / "report.json").write_text(json.dumps(dict(rep.model_dump(mode="json"), not_checked=not_checked), indent=1,
                                                    ensure_ascii=False) + "\n")
    (out_dir / "report.md").write_text(render_markdown(rep, manifest, not_checked) + agent_notes_markdown(out_dir, rep))
    return {"report": rep}, status
