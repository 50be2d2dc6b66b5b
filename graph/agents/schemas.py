"""What the LLM agents return: the final tools' argument schemas and the pass result."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...state.report import Usage
from ...state.status import Outcome, StatusLine
from .tracing import NumberRef

__all__ = ["LlmResult", "NewClaim", "AnalystAnswer", "Review", "VerifierAnswer", "SynthAnswer", "PickAnswer"]

_NUMBERS = ("one entry per number you write anywhere in this answer (statements, prose, notes): "
            "the number as written, its unit, and ref = <source>:<field> of the tool result field it is "
            "taken from (exactly or rounded)")


class LlmResult(BaseModel):
    """What one LLM pass returns to its node.

    - ``claims`` (analysts): Claim dicts: the deterministic claims, unchanged, followed by the claims
      the LLM added from its own tool calls (ids ``llm.<domain>.<name>``); ``None`` when the LLM
      path gave nothing (the node keeps its deterministic claims).
    - ``verdicts`` (verifiers): VerifiedClaim dicts with the LLM's reviews merged by
      :func:`~ai4s_graph.graph.agents.merge.merge_verdicts`; ``None`` when the LLM path gave nothing.
    - ``prose``: the analyst's mechanism, the verifier's review, or the executive summary
      (synthesizer; on failure the deterministic summary); every number in it traced.
    - ``levers``: lever name -> explanation (synthesizer only).
    - ``endorsed`` / ``disputed``: deterministic claim ids the analyst stands behind / rejects (id ->
      reason); for a verifier, ``disputed`` holds the verdict changes the merge refused.
    - ``bottleneck_class`` / ``class_note``: the synthesizer's own reading of the class and, when it
      differs from the deterministic class, why.
    - ``numbers``: the traced number references of the prose; ``usage``: tokens and USD cost;
      ``status``: the node's STATUS line for the LLM part (``partial`` when it fell back);
      ``tool_calls``, ``llm_calls``, ``malformed_retries``, ``no_tool_turns``, ``forced_final``: how
      the loop went; ``evidence``: every tool result recorded.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    agent: str
    claims: list[dict[str, Any]] | None = None
    verdicts: list[dict[str, Any]] | None = None
    prose: str | None = None
    levers: dict[str, str] = Field(default_factory=dict)
    endorsed: list[str] = Field(default_factory=list)
    disputed: dict[str, str] = Field(default_factory=dict)
    bottleneck_class: str | None = None
    class_note: str = ""
    numbers: list[NumberRef] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    status: StatusLine
    tool_calls: int = 0
    llm_calls: int = 0
    malformed_retries: int = 0
    no_tool_turns: int = 0
    forced_final: bool = False
    evidence: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the LLM path finished with ``STATUS=ok``."""
        return self.status.status == Outcome.ok


class NewClaim(BaseModel):
    """A claim the analyst adds from its own tool calls."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="short id, e.g. gemm_share")
    statement: str = Field(min_length=1, description="one sentence a performance engineer can check")
    metric: str = Field(min_length=1, description="dotted key of what was measured")
    value: float | int | str | bool = Field(description="the number exactly as the cited field holds it")
    unit: str
    value_ref: str = Field(min_length=3, description="ev<n>:<field path> of the tool result field the value is")
    confidence: float = Field(ge=0.0, le=1.0, default=0.7)


class AnalystAnswer(BaseModel):
    """Final answer of an analyst."""

    model_config = ConfigDict(extra="forbid")

    endorsed: list[str] = Field(default_factory=list, description="ids of the given claims you stand behind")
    disputed: dict[str, str] = Field(default_factory=dict, description="given claim id -> why you doubt it")
    new_claims: list[NewClaim] = Field(default_factory=list)
    prose: str = Field(min_length=1, description="the mechanism, citing claim ids")
    numbers: list[NumberRef] = Field(default_factory=list, description=_NUMBERS)


class Review(BaseModel):
    """A verifier's review of one verdict."""

    model_config = ConfigDict(extra="forbid")

    claim_id: str
    verdict: Literal["confirmed", "refuted", "inconclusive", "unsupported"]
    rederived_ref: str | None = Field(None, description="ev<n>:<field> of YOUR tool result holding the re-derived "
                                                        "value (required to confirm or refute)")
    note: str = ""


class VerifierAnswer(BaseModel):
    """Final answer of a verifier."""

    model_config = ConfigDict(extra="forbid")

    reviews: list[Review] = Field(default_factory=list)
    prose: str = ""
    numbers: list[NumberRef] = Field(default_factory=list, description=_NUMBERS)


class SynthAnswer(BaseModel):
    """Final answer of the synthesizer."""

    model_config = ConfigDict(extra="forbid")

    executive_summary: str = Field(min_length=1)
    lever_explanations: dict[str, str] = Field(default_factory=dict)
    bottleneck_class: str = Field(min_length=1, description="your own reading of the bottleneck class from the "
                                                            "verified claims")
    class_note: str = Field("", description="when your class differs from the report's: why (required then)")
    numbers: list[NumberRef] = Field(default_factory=list, description=_NUMBERS)


class PickAnswer(BaseModel):
    """Final answer of the lever picker."""

    model_config = ConfigDict(extra="forbid")

    lever: str = Field(min_length=1, description="one of the candidate lever names")
    reason: str = Field(min_length=1, description="one or two sentences tying the lever to the verified bottleneck")
    claims: list[str] = Field(default_factory=list, description="ids of confirmed claims the reason rests on")
    numbers: list[NumberRef] = Field(default_factory=list, description=_NUMBERS)
