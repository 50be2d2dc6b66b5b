"""The lever picker of ``ai4s-graph optimize --llm``: an LLM chooses the next lever among the
catalog's eligible ones, with a reason tied to the verified bottleneck; a deterministic picker runs
without a key (or when the LLM's answer is refused).

Both plug into the optimizer through its seam, ``pick_lever(picker=...)``
(:func:`ai4s_graph.tools.levers.catalog.pick_lever` via ``graph.optimize.graph.run_loop``).
:func:`make_picker` returns a :class:`Picker`, a callable ``(candidates, context) -> Lever | None``
that also keeps what it decided (:attr:`Picker.picks`: lever, reason, by whom, status) and writes
each pick to ``<loop dir>/.ai4s-graph/agent_notes/lever_picker.jsonl``.

The LLM's answer (:class:`~ai4s_graph.graph.agents.schemas.PickAnswer`) is accepted only when:
the lever is one of the candidates; the cited claims are confirmed claims of the analysis report;
when the report's class is verified (a confirmed claim supports it) and some candidate targets it,
the chosen lever targets it too; and every number in the reason traces to a report claim's field
(:mod:`~ai4s_graph.graph.agents.tracing`). Otherwise it is sent back, then the deterministic pick
is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ...state.loop import Lever
from ...state.publish import append
from ...state.status import Outcome
from ...tools.levers.catalog import rule_picker
from .runner import dumps, run_agent
from .schemas import PickAnswer
from .tracing import check_text, report_sources

__all__ = ["Picker", "make_picker", "deterministic_reason", "verified_support"]


def verified_support(report: dict[str, Any] | None) -> list[str]:
    """Ids of the report's confirmed claims that support its bottleneck class
    (``bottleneck.supporting_claims`` with verdict ``confirmed``); ``[]`` without a report."""
    if not report:
        return []
    sup = set((report.get("bottleneck") or {}).get("supporting_claims") or [])
    return sorted(vc["claim"]["id"] for vc in report.get("claims") or []
                  if vc.get("verdict") == "confirmed" and vc["claim"]["id"] in sup)


def deterministic_reason(lever: Lever, context: dict[str, Any]) -> str:
    """Why :func:`rule_picker` chose ``lever``: recommended by the report, targets the class, status."""
    why = []
    if lever.name in (context.get("recommended") or []):
        why.append("recommended by the report")
    k = context.get("bottleneck")
    if k and any(t.value == k for t in lever.targets):
        why.append(f"targets {k}")
    why.append(f"status {lever.status.value}")
    return "rule picker: " + ", ".join(why)


class Picker:
    """A lever picker for ``pick_lever(picker=...)``; ``llm`` False = the deterministic one.

    ``report``: the analysis report dict (claims, bottleneck) or None; ``request``: ``out_dir``
    (the loop directory: token ledger and notes), ``llm_model``, ``max_tokens_total``."""

    def __init__(self, *, llm: bool, report: dict[str, Any] | None, request: dict[str, Any]) -> None:
        self.llm = llm
        self.report = report or {}
        self.request = request
        self.picks: list[dict[str, Any]] = []

    def __call__(self, candidates: list[Lever], context: dict[str, Any]) -> Lever | None:
        if not candidates:
            return None
        status = ""
        if self.llm:
            lever, reason, status = self._ask(candidates, context)
            if lever is not None:
                return self._keep(lever, reason, "llm", status)
        lever = rule_picker(candidates, context)
        if lever is None:
            return None
        return self._keep(lever, deterministic_reason(lever, context), "rules", status)

    def _keep(self, lever: Lever, reason: str, by: str, status: str) -> Lever:
        rec = {"lever": lever.name, "reason": reason, "by": by, "llm_status": status}
        self.picks.append(rec)
        out = self.request.get("out_dir")
        if out:
            append(Path(out) / ".ai4s-graph" / "agent_notes" / "lever_picker.jsonl", json.dumps(rec, sort_keys=True) + "\n",
                   root=out)  # a link on the way is refused
        return lever

    def _ask(self, candidates: list[Lever], context: dict[str, Any]) -> tuple[Lever | None, str, str]:
        by_name = {c.name: c for c in candidates}
        klass = context.get("bottleneck")
        support = verified_support(self.report)
        confirmed = {vc["claim"]["id"] for vc in self.report.get("claims") or [] if vc.get("verdict") == "confirmed"}
        targeting = [c.name for c in candidates if klass and any(t.value == klass for t in c.targets)]
        sources = report_sources(self.report) if self.report else {}

        def validate(ans: BaseModel) -> str | None:
            assert isinstance(ans, PickAnswer)
            if ans.lever not in by_name:
                return f"{ans.lever!r} is not a candidate; candidates: {sorted(by_name)}"
            bad = [c for c in ans.claims if c not in confirmed]
            if bad:
                return f"claims {bad} are not confirmed claims of the report"
            if support and not ans.claims:
                return f"cite the confirmed claims the choice rests on (the class rests on {support})"
            if support and targeting and ans.lever not in targeting:
                return f"the verified class is {klass}; pick one of the levers that target it: {targeting}"
            errs = check_text(ans.reason, ans.numbers, sources)
            return ("numbers not traced: " + "; ".join(errs[:6])) if errs else None

        user = dumps({
            "task": "lever_picker: choose the next lever among the candidates and answer with submit_pick.",
            "bottleneck": {"class": klass, "verified_by": support,
                           "rationale": (self.report.get("bottleneck") or {}).get("rationale", "")},
            "confirmed_claims": [{"id": vc["claim"]["id"], "metric": vc["claim"]["metric"], "value": vc["claim"]["value"],
                                  "unit": vc["claim"]["unit"], "cite_as": f"claim:{vc['claim']['id']}:value"}
                                 for vc in sorted(self.report.get("claims") or [], key=lambda v: v["claim"]["id"])
                                 if vc.get("verdict") == "confirmed"],
            "candidates": [{"name": c.name, "status": c.status.value, "targets": [t.value for t in c.targets],
                            "variance": c.variance.value, "description": c.description} for c in candidates],
            "recommended": list(context.get("recommended") or []),
            "history": [{k: r.get(k) for k in ("iteration", "lever", "outcome", "fom", "delta_pct") if k in r}
                        for r in context.get("journal") or []],
        })
        o = run_agent("lever_picker", self.request, user, [], "submit_pick", PickAnswer, validate,
                      "Submit the lever, the reason, the confirmed claims it rests on, and a numbers entry for "
                      "every number in the reason.")
        status = o.status.format() if o.status else ""
        if o.answer is None or (o.status is not None and o.status.status is not Outcome.ok):
            return None, "", status
        ans: PickAnswer = o.answer  # type: ignore[assignment]
        cited = f" (rests on {', '.join(ans.claims)})" if ans.claims else ""
        return by_name[ans.lever], ans.reason + cited, status


def make_picker(llm: str, *, report_path: str | Path | None, loop_dir: str | Path,
                model: str | None = None, max_tokens_total: int | None = None) -> Picker:
    """The picker for ``optimize --llm <llm>``: ``none`` = the deterministic :func:`rule_picker`
    (with reasons), anything else = the LLM picker with model string ``model`` (default
    :data:`~ai4s_graph.graph.agents.runner.DEFAULT_MODEL`). ``report_path``: the analysis
    ``report.json`` whose confirmed claims the reason must rest on (unreadable -> no report)."""
    report = None
    if report_path and Path(report_path).is_file():
        try:
            report = json.loads(Path(report_path).read_text())
        except ValueError:
            report = None
    req = {"out_dir": str(loop_dir), "llm_model": model, "max_tokens_total": max_tokens_total}
    return Picker(llm=llm != "none", report=report, request=req)
