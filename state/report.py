"""The synthesizer's report model (``report.json``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .claims import BottleneckClass, VerifiedClaim


class Contradiction(BaseModel):
    """Two sources that disagree about the class (issue 13): the direct measurement and the
    indirect test, each with its number, which one wins and why, and what to run to settle it."""

    direct: str = Field(description="the direct measurement, with its number")
    direct_class: BottleneckClass
    indirect: str = Field(description="the indirect test, with its number")
    indirect_class: BottleneckClass | str
    winner: str
    why: str
    settle: str
    claims: list[str] = Field(default_factory=list)
    resolved: str | None = Field(None, description="how a later check settled it, when one did")


class NamedCause(BaseModel):
    """A cause a confirmed claim names: its id (``bench/accuracy/cases.py:CAUSES``), the claim,
    the measured share (0..1) of the profiled step time it costs (None: not measurable) and the
    levers its finding offers, first lever first."""

    id: str
    claim: str
    share: float | None = None
    levers: list[str] = Field(default_factory=list)


class ReportLead(BaseModel):
    """What to look at when no cause is named (issue 34 point 5): the largest attribution of the
    critical rank's profiled step in the step accounting, labelled a lead (not a verdict).
    ``category``: a GPU-busy part (``gpu:computation``, ``gpu:communication``, ``gpu:memcpy``) or a
    host category of the GPU-idle time (``state/steps.py:HOST_CATEGORIES``); ``us`` of the mean
    ``step_us`` (µs per profiled step), ``share`` = us / step_us; ``name``/``site``: its largest name
    and Python call site (``""`` when none); ``text``: the sentence with its numbers; ``confirm``: the
    measurement that would confirm it; ``critical_path_top_op`` / ``critical_path_top_site``:
    ``{key, ms, share}`` (ms per step, share of the path) of the step's critical path (None without one)."""

    rank: int | None = None
    category: str
    name: str = ""
    site: str = ""
    us: float
    step_us: float
    share: float
    unit: str = "us"
    text: str
    confirm: str
    critical_path_top_op: dict[str, Any] | None = None
    critical_path_top_site: dict[str, Any] | None = None


class Bottleneck(BaseModel):
    """The bottleneck class with the ids of the confirmed claims that support it.

    ``scope`` says what limits the job across ranks (e.g. "compute-bound on rank 1, which the
    other ranks wait for (straggler)"); ``critical_rank`` is the rank classified (the straggler
    when one exists); ``confidence`` comes from the margins of the rules that decided, adjusted
    by agreeing (+) or contradicting (−) indirect tests; ``runner_up`` is the class whose rule came
    closest; ``borderline`` when the deciding margin is under ``diagnosis.BORDERLINE_MARGIN``."""

    klass: BottleneckClass = BottleneckClass.unknown
    rationale: str = ""
    supporting_claims: list[str] = Field(default_factory=list)
    confidence: float = 0.0
    scope: str = ""
    critical_rank: int | None = None
    straggler: int | None = None
    waiting_share: float | None = Field(None, description="share (0..1) of the other ranks' exposed "
                                                          "communication that is waiting for the straggler")
    margin: float | None = None
    runner_up: BottleneckClass | None = None
    runner_up_margin: float | None = None
    borderline: bool = False
    contradictions: list[Contradiction] = Field(default_factory=list)
    cause: str | None = Field(None, description="the cause the report names (the first of ``causes``), None "
                                                "when no confirmed claim names one")
    causes: list[NamedCause] = Field(default_factory=list)
    lead: ReportLead | None = Field(None, description="when no cause is named: the largest attribution of the "
                                                      "step, what to look at (issue 34 point 5)")


class LeverRecommendation(BaseModel):
    """A recommended lever: a name from the lever catalog (or a free-form one), why it fits the
    bottleneck class, and the evidence (claim ids) that points to it."""

    name: str
    why: str
    claims: list[str] = Field(default_factory=list)
    saving_ms_low: float | None = Field(None, description="estimated saving per step, low end (ms; None: not estimated)")
    saving_ms_high: float | None = Field(None, description="estimated saving per step, high end (ms)")
    step_ms: float | None = Field(None, description="the step time the saving is a share of (ms)")
    step_basis: Literal["run", "profiled"] | None = Field(
        None, description="which step step_ms is: 'run' the run's steady step outside the profiler (the log's), "
                          "'profiled' the trace's profiled step")


class Usage(BaseModel):
    """LLM token use and cost of one node (zero for the deterministic agents)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model: str | None = None


class NoteKind(BaseModel):
    """One kind of line the report lists about its inputs: the section of report.md it goes under,
    whether it lowers the run's STATUS to ``partial``, and what it means."""

    section: str
    degrades: bool
    meaning: str


NOTE_KINDS: dict[str, NoteKind] = {
    "missing": NoteKind(section="What was missing", degrades=True,
                        meaning="an input the verdict reads was missing or bad (a rank trace that failed, a metric "
                                "with no samples, a plot not drawn): the report is partial"),
    "not_checked": NoteKind(section="What was missing", degrades=False,
                            meaning="a check that could not run for want of an input; the verdict did not need it "
                                    "(issue 28: its line, never a lower STATUS)"),
    "input_notes": NoteKind(section="What was done to the inputs", degrades=False,
                            meaning="what the analysis did to the inputs, e.g. the ranks' clocks aligned on the "
                                    "ends of their collectives: information, nothing is missing"),
}
"""The one table of which report notes lower STATUS (issue 27: ``partial`` means something the
verdict needed is missing; an informational note is a note). Keys are the analysis state's list
channels (``graph/analysis/schema.py``) and the :class:`Report` fields of the same name."""


def degrading(**lists: list[str]) -> list[str]:
    """The entries of the given note lists (keyword = a :data:`NOTE_KINDS` key) that lower STATUS
    to ``partial``, in order. Raises ``KeyError`` for a kind the table does not define."""
    return [x for k, v in lists.items() if NOTE_KINDS[k].degrades for x in v or []]


REPORT_SCHEMA_VERSION = 2
"""``report.json``'s layout version: 2 = numbers as numbers with ``unit`` fields (``figures``),
``headline``, ``throughput``, ``top_kernels``, ``annotated_trace`` (later, additive:
``bottleneck.lead``, ``step_budget`` with each rank's ``per_step`` GPU split); 1 (no field) = issue 27 part 1."""


class Report(BaseModel):
    """Everything ``report.md`` says, as data."""

    schema_version: int = REPORT_SCHEMA_VERSION
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
    input_notes: list[str] = Field(default_factory=list, description="what was done to the inputs "
                                   "(informational: never lowers STATUS, NOTE_KINDS)")
    statuses: dict[str, str] = Field(default_factory=dict, description="node -> STATUS line")
    figures: dict[str, Any] = Field(default_factory=dict, description="headline numbers: name -> "
                                                                    "{value (a number), unit}")
    headline: list[str] = Field(default_factory=list, description="report.md's first lines (at most 3)")
    throughput: dict[str, Any] | None = Field(None, description="steady and realized samples/s, which "
                                                                "includes warm-up")
    top_kernels: list[dict[str, Any]] = Field(default_factory=list, description="critical rank's kernels by "
                                                                                "total time (total_ms, percent)")
    step_budget: list[dict[str, Any]] = Field(default_factory=list, description="per rank: the profiled step's "
                                              "time budget, GPU and host categories in ms per step, and its "
                                              "critical path (tools/report/budget.py:rank_budget)")
    telemetry_samples: dict[str, dict[str, int]] = Field(default_factory=dict, description="the telemetry plot's "
                                                        "lines: metric -> series (host and GPU) -> samples drawn")
    annotated_trace: str | None = Field(None, description="the Perfetto-openable trace with the findings")
    plots: list[str] = Field(default_factory=list)
    usage: dict[str, Usage] = Field(default_factory=dict)
    llm: str = "none"
    ranks: list[dict[str, Any]] = Field(default_factory=list, description="per-rank class, shares and waits")
    representativeness: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    busbw_context: list[dict[str, Any]] = Field(default_factory=list)
