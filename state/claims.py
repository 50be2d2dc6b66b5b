"""Claims (what an analyst asserts, with the evidence behind it) and verdicts (what a verifier
found when it re-derived the claim independently)."""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class BottleneckClass(str, Enum):
    """The bottleneck classes of the diagnosis rules (seed 001 T1, seed 000 lesson 13)."""

    compute = "compute-bound"
    dispatch = "dispatch-bound"  # also called launch-bound: kernel launch overhead dominates
    memory = "memory-bound"
    data_loader = "data-loader-bound"
    communication = "communication-bound"
    unknown = "unknown"


class Evidence(BaseModel):
    """One tool call and the number (or value) it returned.

    ``tool`` names the typed tool (``tracelens.gpu_timeline``, ``promql.instant``, ``fom.parse_log``);
    ``query`` is the exact query or selector (a PromQL expression, a trace path and row name);
    ``returned`` is what the call returned, verbatim (a number, a string, or a small dict)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    query: str
    returned: float | int | str | bool | dict[str, Any] | list[Any] | None
    args: dict[str, Any] = Field(default_factory=dict)
    backend: str | None = None


Analyst = Literal["trace_analyst", "telemetry_analyst"]


class Claim(BaseModel):
    """A typed claim of an analyst.

    ``metric`` is a dotted key naming what was measured (``gpu_timeline.idle_time.percent``,
    ``telemetry.DCGM_FI_DEV_GPU_UTIL.avg``, ``fom.steady_step_time_s``, ``diagnosis.bottleneck_class``);
    ``value`` is the number in ``unit`` (or a class name for ``unit="class"``); ``confidence`` is the
    analyst's own confidence in [0, 1]."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.:-]*$")
    analyst: Analyst
    statement: str = Field(min_length=1)
    metric: str = Field(min_length=1)
    value: float | int | str | bool | None
    unit: str
    evidence: list[Evidence] = Field(min_length=1)
    confidence: float = Field(ge=0.0, le=1.0, default=0.8)

    @model_validator(mode="after")
    def _finite(self) -> "Claim":
        if isinstance(self.value, float) and not math.isfinite(self.value):
            raise ValueError(f"claim {self.id}: value is not finite")
        return self


class Verdict(str, Enum):
    """A verifier's verdict. ``unsupported``: the claim's number matches no tool result recorded
    as its evidence (an LLM guard); it is never counted as confirmed."""

    confirmed = "confirmed"
    refuted = "refuted"
    inconclusive = "inconclusive"
    unsupported = "unsupported"


class Tolerance(BaseModel):
    """Agreement tolerance: a re-derived number agrees when
    ``|a - b| <= abs`` or ``|a - b| <= rel * max(|a|, |b|)`` (either bound suffices)."""

    abs: float | None = None
    rel: float | None = None

    def agrees(self, a: float, b: float) -> bool:
        """True when ``a`` and ``b`` agree within this tolerance (both finite numbers)."""
        if a is None or b is None:
            return False
        a, b = float(a), float(b)
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        d = abs(a - b)
        if self.abs is not None and d <= self.abs:
            return True
        if self.rel is not None and d <= self.rel * max(abs(a), abs(b)):
            return True
        return self.abs is None and self.rel is None and d == 0.0

    def describe(self) -> str:
        """``±1 pp or ±2%``-style text for reports."""
        parts = []
        if self.abs is not None:
            parts.append(f"±{self.abs:g} abs")
        if self.rel is not None:
            parts.append(f"±{self.rel * 100:g}%")
        return " or ".join(parts) or "exact"


class VerifiedClaim(BaseModel):
    """A claim with a verifier's verdict, the value the verifier re-derived by its own path,
    the tolerance used and a note on how it was re-derived."""

    model_config = ConfigDict(extra="forbid")

    claim: Claim
    verdict: Verdict
    verifier: str
    rederived_value: float | int | str | bool | None = None
    tolerance: Tolerance = Field(default_factory=Tolerance)
    method: str = ""
    note: str = ""
    evidence: list[Evidence] = Field(default_factory=list)
