"""The LLM agents' own words in ``report.md``: the analysts' endorse/dispute lists and mechanism
prose, the verifiers' review prose and refused verdict changes, the synthesizer's reading of the
class and its lever rationale. Read from the notes the passes wrote
(:func:`~ai4s_graph.graph.agents.passes.write_notes`); every number is traced again here, against
the tool results the notes carry and the report's claims, and a text that no longer traces is
withheld with the reason (never printed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .passes import notes_dir
from .tracing import NumberRef, check_text, report_sources

__all__ = ["agent_notes_markdown"]

_ORDER = ("trace_analyst", "telemetry_analyst", "trace_verifier", "telemetry_verifier", "synthesizer")


def _load(out_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    d = notes_dir(out_dir)
    for agent in _ORDER:
        p = d / f"{agent}.json"
        if p.is_file():
            try:
                out[agent] = json.loads(p.read_text())
            except ValueError:
                continue
    return out


def agent_notes_markdown(out_dir: str | Path, report: Any) -> str:
    """Markdown section "Agents (LLM)" for ``report`` (a Report or its dict) from the notes in
    ``out_dir``; ``""`` when the run used no LLM (``report.llm == "none"``) or left no notes."""
    rep = report.model_dump(mode="json") if isinstance(report, BaseModel) else dict(report)
    if (rep.get("llm") or "none") == "none":
        return ""
    notes = _load(Path(out_dir))
    if not notes:
        return ""
    base = report_sources(rep)
    det_class = (rep.get("bottleneck") or {}).get("klass")
    L = ["", "## Agents (LLM)", ""]

    def traced(text: str, n: dict[str, Any]) -> str:
        refs = [NumberRef.model_validate(x) for x in n.get("numbers") or []]
        bad = check_text(text, refs, {**base, **(n.get("records") or {})})
        return text if not bad else f"(withheld: {bad[0]})"

    for agent, n in notes.items():
        if agent.endswith("_analyst"):
            L.append(f"**{agent}** endorses {', '.join(f'`{i}`' for i in n.get('endorsed') or []) or 'no claim'}"
                     + (f"; disputes {', '.join(f'`{i}` ({traced(w, n)})' for i, w in (n.get('disputed') or {}).items())}"
                        if n.get("disputed") else "") + ".")
            if n.get("prose"):
                L += ["", f"> {traced(n['prose'], n)}"]
        elif agent.endswith("_verifier"):
            L.append(f"**{agent}**: {traced(n.get('prose') or 'no review prose', n)}")
            for cid, note in sorted((n.get("notes") or {}).items()):
                L.append(f"- `{cid}`: {traced(note, n)}")
            for r in n.get("refused") or []:
                L.append(f"- refused: {r}")
        else:
            cls = n.get("bottleneck_class")
            if cls:
                same = cls == det_class
                L.append(f"**synthesizer** reads the class as **{cls}**"
                         + (" (as the rules do)." if same else
                            f"; the rules say **{det_class}**: {traced(n.get('class_note') or 'no reason given', n)}"))
            for lever, text in sorted((n.get("levers") or {}).items()):
                L.append(f"- lever `{lever}`: {traced(text, n)}")
        L.append("")
    return "\n".join(L)
