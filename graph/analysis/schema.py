"""The analysis graph's state: one TypedDict whose values are typed.

The values are the pydantic models of :mod:`ai4s_graph.state` (:class:`Manifest`, :class:`Claim`,
:class:`VerifiedClaim`, :class:`Report`, :class:`Usage`), the read-only request and the launcher's
resolution (:mod:`.configuration`), and the submission record :class:`SubmittedJob`. Nodes read and
return those objects; LangGraph's checkpoint serializer stores them (msgpack, pydantic v2 extension)
and rebuilds them on resume (:func:`ai4s_graph.graph.checkpoint.open_checkpointer` allows exactly the
project's model classes). The raw figures of the analysts (``findings``, ``rank_results``) stay
JSON-shaped dicts, typed here as TypedDicts: they are the tools' output records, which the trace and
telemetry tools own.

Keys written by both parallel branches merge through reducers: lists concatenate, dicts merge
(right wins). ``request`` has no reducer and no node returns it: it is the user's request, as given.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, NotRequired, TypedDict

from pydantic import BaseModel, Field

from .configuration import ResolvedRun, RunRequest
from ..runtime import merge_dicts
from ...state import Claim, Manifest, Report, Usage, VerifiedClaim


class SubmittedJob(BaseModel):
    """The launcher's submission record in submit mode (``--submit``), checkpointed before any wait
    so a resumed run never submits twice. ``attempt`` counts from 1; ``exclude`` are the nodes given
    to ``sbatch --exclude``; ``resubmit`` asks the launcher for the one re-submission after exit 42;
    ``done`` marks a terminal sacct state, ``state`` is that state."""

    jobid: str | None = None
    attempt: int = 0
    exclude: list[str] = Field(default_factory=list)
    script: str | None = None
    submitted_at: float | None = None
    model: str | None = None
    run_dir: str | None = None
    previous: list[str] = Field(default_factory=list)
    resubmit: bool = False
    done: bool = False
    state: str | None = None
    failed_probe_nodes: list[str] = Field(default_factory=list)
    known_bad_nodes: list[str] = Field(default_factory=list)


class RankResult(TypedDict, total=False):
    """One rank trace's analysis (``trace_rank``): the ``TraceAnalysis`` fields of
    :mod:`ai4s_graph.tools.trace.backends` (``timeline``, ``launch``, ``short_kernels``,
    ``kernel_count``, ``n_steps``, ``step_time_ms``, ``dataloader_ms_per_step``, ``ops_by_category``,
    ``backend``, ...) at the top level, the streaming record under ``stream``; or ``error`` (one line)
    and ``no_gpu_events`` when the rank could not be analysed."""

    rank: int
    path: str
    backend: str
    timeline: dict[str, Any]
    stream: dict[str, Any]
    from_cache: bool
    error: str
    no_gpu_events: bool
    label: str  # unique among the run's traces ("0", "0-dup1": tools/trace/ranks.py)
    event_names: dict[str, int]  # event-name counts the causes read (tools/trace/onepass.NameCounter)
    roofline_totals: dict[str, Any] | None  # RooflineCollector.totals("external_id")
    name_dur_us: dict[str, float]  # summed dur (µs) of the counted events by name (onepass.NameCounter)
    step_accounting: dict[str, Any]  # the time budget per profiled step (state/steps.StepBreakdown, issue 34)
    step_accounting_error: str  # why the step accounting could not be made
    device_name: str  # deviceProperties[0].name of the trace ("" when absent)
    run_step: dict[str, Any]  # the run's steady step outside the profiler, from the log (rules/context.with_run_step)
    # the verifier's side, fed by the same read (never read by the analyst):
    reader: dict[str, Any]  # the full-load reader's tables (kineto.figures_of, comm kernels)
    reader_error: str  # why that reader could not read the trace (the verifier says inconclusive)
    raw_counts: dict[str, int]  # raw-text counts of the causes' patterns (tools/trace/onepass.RawCounter)
    roofline_correlation: dict[str, Any] | None  # RooflineCollector.totals("correlation")
    steps_sampled: list[dict[str, Any]]  # the verifier's host sampler per step (tools/trace/host_sampling)
    csv_dir: str | None  # the rank's TraceLens-layout CSVs, relative to the out dir (written by its worker)


class RankTask(TypedDict):
    """The payload of one ``Send("trace_rank", ...)``: the request, the rank and its trace path."""

    request: RunRequest
    rank: int
    path: str
    label: NotRequired[str]  # unique among the run's traces ("0", "0-dup1": tools/trace/ranks.py)
    n_ranks: NotRequired[int]  # trace files in the run (1: analysed in-process, no worker pool)


class Findings(TypedDict, total=False):
    """Raw figures by source, each key written by one analyst: ``trace`` (``ranks``, ``errors``,
    ``multi_rank``, ``triage``, ``roofline``, ``prose``), ``telemetry`` (``url``, ``window``,
    ``vendor``, ``stats``, ``series``, ``triage``), ``fom`` (``FomResult`` fields), ``log`` (the facts
    of the one read of the training log: ``path``, ``counts``, ``last_step_unix``,
    ``step_times_s``), ``compare`` (the precision discriminator), ``omnistat_prose``."""

    trace: dict[str, Any] | None
    telemetry: dict[str, Any]
    fom: dict[str, Any]
    log: dict[str, Any]
    compare: dict[str, Any]
    omnistat_prose: str


class AnalysisState(TypedDict, total=False):
    """Keys of the ``ai4s-graph run`` state.

    - ``request``: the user's :class:`RunRequest` (read-only).
    - ``run``: :class:`ResolvedRun`, what the launcher resolved (perf-run directory, job id).
    - ``manifest``: the job's :class:`Manifest`.
    - ``job``: :class:`SubmittedJob`, the launcher's submission record in submit mode.
    - ``stop``: set by the launcher when the graph must stop (``TIMEOUT_WAITING``, ``BAD_NODE``).
    - ``findings``: :class:`Findings`, raw figures by source; each analyst writes its own key.
    - ``rank_results``: one :class:`RankResult` per rank trace (the ``trace_rank`` fan-out).
    - ``claims``: :class:`Claim` from both analysts.
    - ``verdicts``: :class:`VerifiedClaim` from both verifiers.
    - ``statuses``: node name -> its STATUS line.
    - ``missing``: one line per missing or bad input.
    - ``not_checked``: one ``not checked: needs ...`` line per check that could not run (issue 28).
    - ``input_notes``: what was done to the inputs (the ranks' clocks aligned on their collectives):
      informational, never lowers STATUS (``state/report.py:NOTE_KINDS``).
    - ``usage``: node name -> :class:`Usage` (LLM token use).
    - ``report``: the synthesizer's :class:`Report`.
    """

    request: RunRequest
    run: ResolvedRun
    manifest: Manifest
    job: SubmittedJob
    stop: str | None
    findings: Annotated[Findings, merge_dicts]
    rank_results: Annotated[list[RankResult], operator.add]
    claims: Annotated[list[Claim], operator.add]
    verdicts: Annotated[list[VerifiedClaim], operator.add]
    statuses: Annotated[dict[str, str], merge_dicts]
    missing: Annotated[list[str], operator.add]
    not_checked: Annotated[list[str], operator.add]
    input_notes: Annotated[list[str], operator.add]
    usage: Annotated[dict[str, Usage], merge_dicts]
    report: Report


#: The classes a checkpoint of this graph holds (the checkpointer's deserialization allow-list).
CHECKPOINT_TYPES: tuple[type, ...] = (RunRequest, ResolvedRun, SubmittedJob, Manifest, Claim, VerifiedClaim,
                                      Report, Usage)
