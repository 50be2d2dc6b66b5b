"""The analysis graph's state: a TypedDict whose list/dict keys merge the parallel branches'
writes (LangGraph reducers). Values are plain JSON-able data (``model_dump()`` of the pydantic
models in ``ai4s_graph.state``) so every checkpoint is readable SQLite/JSON."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict


def merge_dicts(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer: shallow merge, right wins."""
    return {**(a or {}), **(b or {})}


class AnalysisState(TypedDict, total=False):
    """Keys of the ``ai4s-graph run`` state.

    - ``request``: :class:`~ai4s_graph.graph.runtime.RunRequest` as a dict.
    - ``manifest``: :class:`~ai4s_graph.state.Manifest` as a dict (``by_alias=True``).
    - ``stop``: set by the launcher when the graph must stop (e.g. ``TIMEOUT_WAITING``).
    - ``findings``: raw figures by source: ``trace`` (timeline, kernels, ...), ``telemetry``,
      ``fom``, ``compare``. Each analyst writes its own key.
    - ``claims``: :class:`~ai4s_graph.state.Claim` dicts from both analysts.
    - ``verdicts``: :class:`~ai4s_graph.state.VerifiedClaim` dicts from both verifiers.
    - ``statuses``: node name -> its STATUS line.
    - ``missing``: one line per missing or bad input.
    - ``usage``: node name -> LLM token use (``Usage`` dict).
    - ``report``: the synthesizer's :class:`~ai4s_graph.state.Report` dict.
    - ``rank_results``: one ``TraceAnalysis`` dict per rank trace (the ``trace_rank`` fan-out).
    - ``job``: the launcher's submission record (job id, attempt, excluded nodes) in submit mode,
      checkpointed before any wait so a resumed run never submits twice.
    """

    request: dict[str, Any]
    manifest: dict[str, Any]
    stop: str | None
    findings: Annotated[dict[str, Any], merge_dicts]
    claims: Annotated[list[dict[str, Any]], operator.add]
    verdicts: Annotated[list[dict[str, Any]], operator.add]
    statuses: Annotated[dict[str, str], merge_dicts]
    missing: Annotated[list[str], operator.add]
    usage: Annotated[dict[str, Any], merge_dicts]
    report: dict[str, Any]
    rank_results: Annotated[list[dict[str, Any]], operator.add]
    job: dict[str, Any]
