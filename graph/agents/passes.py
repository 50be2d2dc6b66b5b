"""The three LLM passes of ``ai4s-graph run --llm``: analyst, verifier, synthesizer.

Each builds one user message, runs :func:`~ai4s_graph.graph.agents.runner.run_agent` with its
tools, validates the final answer (every number traced to a tool-result field:
:mod:`~ai4s_graph.graph.agents.tracing`; a rejected answer goes back to the model), and returns an
:class:`~ai4s_graph.graph.agents.schemas.LlmResult`. The prose, endorse/dispute lists and verifier
notes are also written to ``<out>/.ai4s-graph/agent_notes/<agent>.json`` with the tool results they
cite, for :func:`~ai4s_graph.graph.agents.render.agent_notes_markdown`. A failure never raises:
the node keeps its deterministic result and ``status`` says ``STATUS=partial`` with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ...state.claims import BottleneckClass, Claim, VerifiedClaim
from ...state.publish import publish
from ...state.status import Outcome, StatusLine
from ...tools import llm_tools as agent_tools
from ...tools.errors import Ai4sError
from .merge import merge_verdicts, to_evidence
from .runner import AgentOutcome, compact, dumps, run_agent, scrub
from .schemas import AnalystAnswer, LlmResult, SynthAnswer, VerifierAnswer
from .tracing import NumberRef, check_text, claim_sources, report_sources, trace_value
from .verifier_tools import verifier_toolset

__all__ = ["analyst_pass", "verifier_pass", "synthesizer_pass", "notes_dir", "write_notes"]

_DOMAIN = {"trace_analyst": "trace", "trace_verifier": "trace",
           "telemetry_analyst": "telemetry", "telemetry_verifier": "telemetry"}
_CLASSES = {c.value for c in BottleneckClass}


def notes_dir(out_dir: str | Path) -> Path:
    """Where the passes leave their prose for the report: ``<out>/.ai4s-graph/agent_notes``."""
    return Path(out_dir) / ".ai4s-graph" / "agent_notes"


def write_notes(out_dir: str | Path | None, agent: str, notes: dict[str, Any]) -> None:
    """Write one pass's notes (JSON) for the report; nothing when there is no output directory."""
    if not out_dir:
        return
    publish(notes_dir(out_dir) / f"{agent}.json", json.dumps(notes, sort_keys=True, default=str, indent=1) + "\n",
            root=out_dir)  # atomic; a link on the way is refused


def _fail_result(agent: str, reason: str) -> LlmResult:
    return LlmResult(agent=agent, status=StatusLine.make(Outcome.partial, f"{agent} LLM: {reason}; deterministic result kept"))


def _result(agent: str, o: AgentOutcome, records: list[dict[str, Any]], **kw: Any) -> LlmResult:
    return LlmResult(agent=agent, usage=o.usage, status=o.status or StatusLine.make(Outcome.partial, "no outcome"),
                     tool_calls=o.tool_calls, llm_calls=o.llm_calls, malformed_retries=o.malformed,
                     no_tool_turns=o.no_tool_turns, forced_final=o.forced_final, evidence=records, **kw)


def _untraced(texts: list[str], refs: list[NumberRef], sources: dict[str, Any]) -> str | None:
    bad = [b for t in texts for b in check_text(t, refs, sources)]
    if not bad:
        return None
    return ("numbers not traced to a tool-result field: " + "; ".join(bad[:6])
            + ". Add a numbers entry {text, unit, ref: <source>:<field>} for each, or leave the number out")


def _dump(x: Any) -> dict[str, Any]:
    return x.model_dump(mode="json") if isinstance(x, BaseModel) else dict(x)


def _sources(recorder: Any, extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, **{k: r["returned"] for k, r in recorder.by_id().items()}}


def analyst_pass(agent: str, request: dict[str, Any], context: dict[str, Any],
                 claims: list[dict[str, Any]]) -> LlmResult:
    """Run an LLM analyst over the deterministic figures and claims.

    ``agent``: ``trace_analyst`` or ``telemetry_analyst``. ``context``: ``manifest`` (dict),
    ``findings`` (the deterministic figures) and for the telemetry analyst optionally ``tsdb_url``.
    ``claims``: the deterministic Claim dicts. The LLM may call the domain's tools
    (:mod:`ai4s_graph.tools.llm_tools`) at most ``MAX_TOOL_CALLS`` times, then answers with
    :class:`AnalystAnswer`. A new claim's value must trace to the field ``value_ref`` of one of its
    own tool results (that result becomes the claim's evidence); every number in statements, prose
    and dispute reasons must trace (:func:`check_text`). Returns ``claims`` = the deterministic
    claims (unchanged) + the new ones (ids ``llm.<domain>.<name>``), ``prose``,
    ``endorsed``/``disputed``; on failure ``claims=None`` and ``STATUS=partial``."""
    if agent not in ("trace_analyst", "telemetry_analyst"):
        raise ValueError(f"unknown analyst {agent!r}")
    det = [Claim.model_validate(_dump(c)).model_dump(mode="json") for c in claims]
    recorder = agent_tools.Recorder()
    det_ids = {c["id"] for c in det}
    csrc = claim_sources(det)

    def validate(ans: BaseModel) -> str | None:
        assert isinstance(ans, AnalystAnswer)
        own = recorder.by_id()
        for nc in ans.new_claims:
            src = nc.value_ref.rsplit(":", 1)[0]
            if src not in own:
                return f"claim {nc.name}: value_ref {nc.value_ref!r} must name a field of one of your tool results (ev<n>)"
            err = trace_value(nc.value, nc.unit, nc.value_ref, {src: own[src]["returned"]})
            if err:
                return f"claim {nc.name}: {err}"
        unknown = [i for i in [*ans.endorsed, *ans.disputed] if i not in det_ids]
        if unknown:
            return f"unknown claim ids {unknown}"
        return _untraced([*(nc.statement for nc in ans.new_claims), ans.prose, *ans.disputed.values()],
                         ans.numbers, _sources(recorder, csrc))

    user = dumps(scrub({
        "task": f"{agent}: review the deterministic claims, run extra queries with the tools where they help, "
                "and answer with submit_analysis.",
        "manifest": compact(context.get("manifest") or {}),
        "findings": compact(context.get("findings") or {}),
        "claims": [{"id": c["id"], "statement": c["statement"], "metric": c["metric"], "value": c["value"],
                    "unit": c["unit"], "cite_as": f"claim:{c['id']}:value"} for c in det],
    }, request))
    try:
        with agent_tools.toolset(_DOMAIN[agent], request, context, recorder) as tools:
            o = run_agent(agent, request, user, tools, "submit_analysis", AnalystAnswer, validate,
                          "Submit your analysis: endorsed/disputed claim ids, new claims with value_ref, prose, "
                          "and a numbers entry for every number you write.")
    except Ai4sError as e:  # a missing input for the tools must not lose the deterministic result
        return _fail_result(agent, f"tools unavailable: {e}")
    records = recorder.dump()
    if o.answer is None:
        return _result(agent, o, records)
    ans: AnalystAnswer = o.answer  # type: ignore[assignment]
    rec = recorder.by_id()
    new: list[Claim] = []
    for nc in ans.new_claims:
        cid = f"llm.{agent.split('_')[0]}.{nc.name}"
        if cid in det_ids or any(c.id == cid for c in new):
            continue
        new.append(Claim(id=cid, analyst=agent, statement=nc.statement, metric=nc.metric, value=nc.value,
                         unit=nc.unit, evidence=[to_evidence(rec[nc.value_ref.rsplit(":", 1)[0]])],
                         confidence=nc.confidence))
    write_notes(request.get("out_dir"), agent, {
        "agent": agent, "prose": ans.prose, "endorsed": ans.endorsed, "disputed": ans.disputed,
        "numbers": [n.model_dump() for n in ans.numbers], "records": {k: r["returned"] for k, r in rec.items()}})
    return _result(agent, o, records, claims=[_dump(c) for c in claims] + [c.model_dump(mode="json") for c in new],
                   prose=ans.prose, endorsed=ans.endorsed, disputed=ans.disputed, numbers=ans.numbers)


def verifier_pass(agent: str, request: dict[str, Any], context: dict[str, Any],
                  verdicts: list[dict[str, Any]]) -> LlmResult:
    """Let an LLM verifier re-check the deterministic verdicts with re-derivation tools only.

    ``agent``: ``trace_verifier`` or ``telemetry_verifier``; ``context`` as for
    :func:`analyst_pass`; ``verdicts``: VerifiedClaim dicts. The tools are
    :func:`~ai4s_graph.graph.agents.verifier_tools.verifier_toolset`'s (never the analysts');
    the answer (:class:`VerifierAnswer`) is applied by :func:`merge_verdicts`, which accepts a
    change only with an independent, field-specific re-derivation over the claim's window. Notes
    and prose must have every number traced. Returns ``verdicts`` (merged), ``prose``, and in
    ``disputed`` the refused changes; on failure ``verdicts=None`` and ``STATUS=partial``."""
    if agent not in ("trace_verifier", "telemetry_verifier"):
        raise ValueError(f"unknown verifier {agent!r}")
    det = [VerifiedClaim.model_validate(_dump(v)).model_dump(mode="json") for v in verdicts]
    recorder = agent_tools.Recorder()
    ids = {v["claim"]["id"] for v in det}
    csrc = claim_sources(det)

    def validate(ans: BaseModel) -> str | None:
        assert isinstance(ans, VerifierAnswer)
        unknown = [r.claim_id for r in ans.reviews if r.claim_id not in ids]
        if unknown:
            return f"unknown claim ids {unknown}"
        own = recorder.by_id()
        bad = [r.rederived_ref for r in ans.reviews if r.rederived_ref and r.rederived_ref.split(":", 1)[0] not in own]
        if bad:
            return f"rederived_ref {bad} must name a field of one of your own tool results (ev<n>:<field>)"
        return _untraced([ans.prose, *(r.note for r in ans.reviews)], ans.numbers, _sources(recorder, csrc))

    user = dumps(scrub({
        "task": f"{agent}: re-derive these claims with your own tools (independent of the claim's evidence, over "
                "the claim's own window) and answer with submit_review.",
        "manifest": compact(context.get("manifest") or {}),
        "verdicts": [{"claim_id": v["claim"]["id"], "statement": v["claim"]["statement"], "metric": v["claim"]["metric"],
                      "value": v["claim"]["value"], "unit": v["claim"]["unit"], "verdict": v["verdict"],
                      "rederived_value": v.get("rederived_value"), "method": v.get("method", ""),
                      "evidence": [{"tool": e["tool"], "args": e.get("args", {}), "query": e.get("query", "")}
                                   for e in v["claim"].get("evidence") or []]} for v in det],
    }, request))
    try:
        with verifier_toolset(_DOMAIN[agent], request, context, recorder) as tools:
            o = run_agent(agent, request, user, tools, "submit_review", VerifierAnswer, validate,
                          "Submit your review: one entry per verdict you re-derived, with rederived_ref into your "
                          "own tool result, and a numbers entry for every number you write.")
    except Ai4sError as e:
        return _fail_result(agent, f"tools unavailable: {e}")
    records = recorder.dump()
    if o.answer is None:
        return _result(agent, o, records)
    ans: VerifierAnswer = o.answer  # type: ignore[assignment]
    findings = context.get("findings") or {}
    ranks = (findings.get("trace", findings) if isinstance(findings, dict) else {}).get("ranks") or []
    backends = {str(r.get("path")): str(r.get("backend")) for r in ranks if r.get("path") and r.get("backend")}
    merged, refused = merge_verdicts(det, [r.model_dump() for r in ans.reviews], agent, recorder.by_id(), backends)
    if refused and o.status is not None:
        o.status = StatusLine.make(o.status.status, f"{o.status.reason}; {len(refused)} LLM verdict changes refused")
    write_notes(request.get("out_dir"), agent, {
        "agent": agent, "prose": ans.prose, "refused": refused,
        "notes": {r.claim_id: r.note for r in ans.reviews if r.note},
        "numbers": [n.model_dump() for n in ans.numbers],
        "records": {k: r["returned"] for k, r in recorder.by_id().items()}})
    return _result(agent, o, records, verdicts=[v.model_dump(mode="json") for v in merged], prose=ans.prose or None,
                   disputed={i.split(":")[0]: i for i in refused}, numbers=ans.numbers)


def synthesizer_pass(request: dict[str, Any], report: dict[str, Any]) -> LlmResult:
    """Write the executive summary, lever explanations and an own reading of the class of
    ``report`` (a Report dict).

    Every number in the summary, explanations and class note must trace to a report claim's
    ``value``/``rederived_value`` or the job id (:func:`report_sources`); a class that differs
    from the report's needs a ``class_note`` saying why. A rejected answer is sent back (at most
    ``MAX_MALFORMED_RETRIES`` times), then the deterministic ``executive_summary`` is kept with
    ``STATUS=partial``. Lever explanations are only kept for levers in the report."""
    agent = "synthesizer"
    report = _dump(report)
    fallback = report.get("executive_summary") or ""
    lever_names = {lv.get("name") for lv in report.get("levers") or []}
    sources = report_sources(report)
    det_class = (report.get("bottleneck") or {}).get("klass")

    def validate(ans: BaseModel) -> str | None:
        assert isinstance(ans, SynthAnswer)
        unknown = [n for n in ans.lever_explanations if n not in lever_names]
        if unknown:
            return f"unknown levers {unknown}; explain only the report's levers"
        if ans.bottleneck_class not in _CLASSES:
            return f"bottleneck_class must be one of {sorted(_CLASSES)}"
        if det_class and ans.bottleneck_class != det_class and not ans.class_note.strip():
            return f"your class {ans.bottleneck_class} differs from the report's {det_class}: say why in class_note"
        return _untraced([ans.executive_summary, *ans.lever_explanations.values(), ans.class_note], ans.numbers, sources)

    user = dumps({"task": "synthesizer: write the executive summary and lever explanations, and read the bottleneck "
                          "class from the verified claims; answer with submit_summary.",
                  "report": compact(scrub(_report_view(report), request), max_list=80)})
    o = run_agent(agent, request, user, [], "submit_summary", SynthAnswer, validate,
                  "Submit the executive summary (markdown), one explanation per recommended lever, your class, and a "
                  "numbers entry for every number you write.")
    if o.answer is None:
        r = _result(agent, o, [])
        r.prose = fallback
        return r
    ans: SynthAnswer = o.answer  # type: ignore[assignment]
    write_notes(request.get("out_dir"), agent, {
        "agent": agent, "summary": ans.executive_summary, "levers": ans.lever_explanations,
        "bottleneck_class": ans.bottleneck_class,
        "class_note": ans.class_note, "numbers": [n.model_dump() for n in ans.numbers], "records": {}})
    return _result(agent, o, [], prose=ans.executive_summary, levers=dict(ans.lever_explanations),
                   bottleneck_class=ans.bottleneck_class, class_note=ans.class_note, numbers=ans.numbers)


def _report_view(report: dict[str, Any]) -> dict[str, Any]:
    """What the synthesizer sees: the report without plots, statuses and usage; claims sorted by id."""
    keep = ("jobid", "model", "state", "nodes_list", "bottleneck", "levers", "missing", "executive_summary")
    view = {k: report.get(k) for k in keep if k in report}
    view["claims"] = [{"id": vc["claim"]["id"], "statement": vc["claim"]["statement"], "metric": vc["claim"]["metric"],
                       "value": vc["claim"]["value"], "unit": vc["claim"]["unit"], "verdict": vc["verdict"],
                       "rederived_value": vc.get("rederived_value"), "note": vc.get("note", ""),
                       "cite_as": f"claim:{vc['claim']['id']}:value"}
                      for vc in sorted(report.get("claims") or [], key=lambda vc: vc["claim"]["id"])]
    # the two branches' claims and problems arrive in thread-finishing order: sort for a stable prompt
    if view.get("missing"):
        view["missing"] = sorted(view["missing"])
    return view
