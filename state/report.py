"""The synthesizer's report model (``report.json``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .claims import BottleneckClass, VerifiedClaim


class Bottleneck(BaseModel):
    """The bottleneck class with the ids of the confirmed claims that support it."""

    klass: BottleneckClass = BottleneckClass.unknown
    rationale: str = ""
    supporting_claims: list[str] = Field(default_factory=list)
    confidence: float = 0.0


class LeverRecommendation(BaseModel):
    """A recommended lever: a name from the lever catalog (or a free-form one), why it fits the
    bottleneck class, and the evidence (claim ids) that points to it."""

    name: str
    why: str
    claims: list[str] = Field(default_factory=list)


class Usage(BaseModel):
    """LLM token use and cost of one node (zero for the deterministic agents)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model: str | None = None


class Report(BaseModel):
    """Everything ``report.md`` says, as data."""

    jobid: str
    model: str = "unknown"
    state: str = "UNKNOWN"
    nodes_list: list[str] = Field(default_factory=list)
    executive_summary: str = ""
    bottleneck: Bottleneck = Field(default_factory=Bottleneck)
    claims: list[VerifiedClaim] = Field(default_factory=list)
    levers: list[LeverRecommendation] = Field(default_factory=list)
    lever_catalog: str | None = None
    missing: list[str] = Field(default_factory=list, description="inputs that were missing or bad")
    statuses: dict[str, str] = Field(default_factory=dict, description="node -> STATUS line")
    figures: dict[str, Any] = Field(default_factory=dict, description="headline numbers")
    plots: list[str] = Field(default_factory=list)
    usage: dict[str, Usage] = Field(default_factory=dict)
    llm: str = "none"
