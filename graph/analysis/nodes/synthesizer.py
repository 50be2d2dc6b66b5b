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
from .. import triage
from ..configuration import llm_request
from ..schema import AnalysisState
from ...agents.render import agent_notes_markdown
from ...runtime import node
from ....state import (Bottleneck, BottleneckClass, Manifest, Outcome, Report,
                              StatusLine, Tolerance, Verdict, VerifiedClaim)
from ....tools.errors import Ai4sError
from ....tools.levers.recommend import recommend_levers

SYNTH = "synthesizer"
# Which confirmed measurements count as support for each class (the inputs of its rule).
SUPPORT_METRICS: dict[str, tuple[str, ...]] = {
    BottleneckClass.dispatch.value: ("gpu_timeline.idle_time", "kernels.", "telemetry.gpu_util", "compare."),
    BottleneckClass.compute.value: ("gpu_timeline.computation_time", "ops_by_category.", "telemetry.gpu_util",
                                    "telemetry.sm_clock", "telemetry.power", "telemetry.supports_compute", "compare."),
    BottleneckClass.memory.value: ("gpu_timeline.computation_time", "ops_by_category.", "telemetry.mem_bw_util",
                                   "compare."),
    BottleneckClass.data_loader.value: ("cpu.dataloader_step_share_pct", "gpu_timeline.idle_time",
                                        "telemetry.gpu_util"),
    BottleneckClass.communication.value: ("gpu_timeline.exposed_comm_time", "collectives."),
}


def decide_bottleneck(verdicts: list[VerifiedClaim]) -> Bottleneck:
    """The bottleneck class from CONFIRMED claims only.

    Order of trust: the precision discriminator when it names compute/dispatch/memory (seed 000
    lesson 13 calls it the canonical discriminator) — unless the trace names a communication or
    data-loader cause, which the discriminator cannot see, or the trace shows a mostly idle GPU
    (dispatch-bound) while the discriminator says compute- or memory-bound (then the runs' difference
    is more likely run-to-run variance, lesson 9, and the report says so) —, then the trace rules (rank 0, or the
    class most ranks agree on), then telemetry alone (compute-bound only when utilization, SM
    clock and power are all high, seed 001 T2). ``unknown`` when nothing confirmed decides it."""
    confirmed = [v for v in verdicts if v.verdict is Verdict.confirmed]
    by_metric: dict[str, list[VerifiedClaim]] = {}
    for v in confirmed:
        by_metric.setdefault(v.claim.metric, []).append(v)
    disc = by_metric.get("diagnosis.precision_discriminator_class", [])
    trace = by_metric.get("diagnosis.trace_bottleneck_class", [])
    trace_cls = None
    if trace:
        counts: dict[str, int] = {}
        for v in trace:
            counts[str(v.claim.value)] = counts.get(str(v.claim.value), 0) + 1
        trace_cls = max(counts, key=lambda k: (counts[k], k == str(trace[0].claim.value)))
    support_all = [v for v in confirmed if v.claim.metric.startswith(("gpu_timeline.", "kernels.", "cpu.",
                                                                      "telemetry.", "compare.", "collectives."))]
    def support_for(klass: str) -> list[str]:
        keys = SUPPORT_METRICS.get(klass, ())
        return [v.claim.id for v in support_all if v.claim.metric.startswith(keys)]

    if trace_cls in (BottleneckClass.communication.value, BottleneckClass.data_loader.value):
        support = support_for(trace_cls)
        t = next(v for v in trace if str(v.claim.value) == trace_cls)
        return Bottleneck(klass=BottleneckClass(trace_cls), rationale=t.claim.statement,
                          supporting_claims=[t.claim.id] + support, confidence=t.claim.confidence)
    support = support_for(trace_cls or (str(disc[0].claim.value) if disc else ""))
    if (disc and trace_cls == BottleneckClass.dispatch.value
            and str(disc[0].claim.value) in (BottleneckClass.compute.value, BottleneckClass.memory.value)):
        # A GPU idle most of the window can be neither compute- nor memory-bound: the two runs'
        # difference is more likely run-to-run variance (lesson 9) than precision. Trust the trace.
        t = next(v for v in trace if str(v.claim.value) == trace_cls)
        d = disc[0]
        return Bottleneck(klass=BottleneckClass.dispatch,
                          rationale=f"{t.claim.statement} The precision discriminator said {d.claim.value} "
                                    f"({d.claim.statement.split(': ', 1)[-1]}), but a GPU this idle is neither compute- "
                                    "nor memory-bound: replicate both runs on the same nodes before trusting that "
                                    "difference (lesson 9).",
                          supporting_claims=[t.claim.id] + support, confidence=0.6)
    if disc and str(disc[0].claim.value) != BottleneckClass.unknown.value:
        d = disc[0]
        agree = trace_cls == str(d.claim.value)
        why = d.claim.statement + (f" The trace agrees ({trace_cls})." if agree else
                                   (f" The trace alone said {trace_cls}." if trace_cls else ""))
        return Bottleneck(klass=BottleneckClass(str(d.claim.value)), rationale=why,
                          supporting_claims=[d.claim.id] + ([t.claim.id for t in trace] if agree else []) + support,
                          confidence=0.9 if agree else 0.7)
    if trace_cls and trace_cls != BottleneckClass.unknown.value:
        t = next(v for v in trace if str(v.claim.value) == trace_cls)
        tel = by_metric.get("telemetry.supports_compute", [])
        conf = t.claim.confidence
        why = t.claim.statement
        if tel and trace_cls == BottleneckClass.compute.value:
            conf = min(0.95, conf + 0.1) if tel[0].claim.value is True else conf - 0.2
            why += " " + tel[0].claim.statement
        tel_ids = [x.claim.id for x in tel] if trace_cls == BottleneckClass.compute.value else []
        return Bottleneck(klass=BottleneckClass(trace_cls), rationale=why,
                          supporting_claims=[t.claim.id] + tel_ids + support, confidence=conf)
    tel = by_metric.get("telemetry.supports_compute", [])
    if tel and tel[0].claim.value is True:
        return Bottleneck(klass=BottleneckClass.compute, rationale=tel[0].claim.statement + " (no trace verdict)",
                          supporting_claims=[tel[0].claim.id] + support, confidence=0.5)
    return Bottleneck(klass=BottleneckClass.unknown,
                      rationale="no confirmed trace or precision-discriminator claim decides the class",
                      supporting_claims=support, confidence=0.0)


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
    head = (f"Job {rep.jobid} ({manifest.model}, {manifest.precision}, {rep.state}) on "
            f"{', '.join(rep.nodes_list) or 'unknown nodes'} is **{rep.bottleneck.klass.value}**. "
            f"{rep.bottleneck.rationale}")
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


def render_markdown(rep: Report, manifest: Manifest) -> str:
    """``report.md`` text (see the module docstring for its order)."""
    L: list[str] = [f"# ai4s-graph report — job {rep.jobid}", ""]
    L += [f"**Nodes:** {', '.join(rep.nodes_list) or 'unknown'} · **State:** {rep.state} · **Model:** {rep.model} · "
          f"**Precision:** {manifest.precision} · **Global batch:** {manifest.global_batch_size} · "
          f"**Agents:** {rep.llm}", ""]
    L += ["## Executive summary", "", rep.executive_summary, ""]
    L += [f"## Bottleneck: {rep.bottleneck.klass.value}", "", rep.bottleneck.rationale, "",
          f"Confidence {rep.bottleneck.confidence:.2f}. Supporting confirmed claims: "
          + (", ".join(f"`{c}`" for c in rep.bottleneck.supporting_claims) or "none") + ".", ""]
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
    L += [f"- {m}" for m in rep.missing] or ["Every input the graph reads was present."]
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
    b = decide_bottleneck(verdicts)
    b.supporting_claims = list(dict.fromkeys(b.supporting_claims))
    findings = state.get("findings") or {}
    vendor = (findings.get("telemetry") or {}).get("vendor")
    if vendor in (None, "none"):
        g = (manifest.gpu or "").upper()
        vendor = "amd" if ("AMD" in g or "MI3" in g or "INSTINCT" in g) else ("nvidia" if g else None)
    ranks = max(1, len(manifest.artifacts.traces))
    levers, catalog = recommend_levers(b, manifest, vendor, ranks)
    levers = triage.recommend(levers, findings, verdicts)
    window = None
    tel = (state.get("findings") or {}).get("telemetry") or {}
    if tel.get("window"):
        window = tuple(tel["window"])
    elif manifest.start and manifest.end:
        window = (manifest.start, manifest.end)
    plots_, plot_problems = make_plots(state, out_dir, window)
    rep = Report(jobid=manifest.jobid, model=manifest.model, state=manifest.state, nodes_list=manifest.nodes_list,
                 bottleneck=b, claims=verdicts, levers=levers, lever_catalog=catalog,
                 missing=list(state.get("missing") or []) + plot_problems,
                 statuses=dict(state.get("statuses") or {}), figures=headline_figures(state), plots=plots_,
                 usage=dict(state.get("usage") or {}), llm=req.llm)
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
    (out_dir / "report.json").write_text(rep.model_dump_json(indent=1) + "\n")
    (out_dir / "report.md").write_text(render_markdown(rep, manifest) + agent_notes_markdown(out_dir, rep))
    return {"report": rep}, status
