"""Pydantic models of the perf-optimizer loop: the lever catalog (``levers/<model>.yaml``), one
journal record per loop iteration (``loop-<uuid>/journal.jsonl``) and the loop request.

Where the rules come from (seed 000, "perf-optimizer loop" lessons):

- lever ``status`` ``candidate | experimental | blocked | accepted-baked-in`` and its evidence
  (job ids, FOM deltas, the verbatim error of a blocked lever): lessons 6, 8, 14, 15, 17, 27-29;
- ``variance: high`` levers must replicate within +-5 % before they are accepted: lesson 9;
- the primary FOM per model: ``epoch_time_s`` for latency-bound GNN work (lesson 5), and
  ``throughput_samples_per_s`` for throughput-bound work (lesson 31, seed ORBIT-2 loop recipe);
- a lever value is typed and every string is matched against a safe pattern, so nothing that
  reaches ``sbatch`` can carry a shell metacharacter (the house rule on bad input).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .claims import BottleneckClass
from .fom import FOM_DEFINITIONS, FOM_DIRECTIONS

# --------------------------------------------------------------------------------------------
# safe values

SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:/=@+%-]*$")
"""A lever's string value: letters, digits and ``_ . , : / = @ + % -`` only. No blank, quote,
``$``, backtick, ``;``, ``&``, ``|``, ``<``, ``>``, ``*``, ``?``, parenthesis, brace or newline."""

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SCRIPT_FLAG = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_-]*$")
SBATCH_OPTION = re.compile(r"^[a-z][a-z0-9-]*$")
LEVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

Scalar = Union[bool, int, float, str]


def check_value(where: str, value: Any) -> Scalar:
    """Validate one lever value: a bool, a finite int/float, or a string matching
    :data:`SAFE_VALUE`. Returns the value unchanged.

    Raises ``ValueError`` (a one-line message naming ``where``) otherwise; the catalog loader
    turns it into :class:`~ai4s_graph.tools.errors.InputError`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: value {value!r} is not finite")
        return value
    if isinstance(value, str):
        if not SAFE_VALUE.fullmatch(value):
            bad = next(c for c in value if not SAFE_VALUE.fullmatch(c))
            raise ValueError(f"{where}: value {value!r} refused: character {bad!r} is not in [A-Za-z0-9_.,:/=@+%-]")
        return value
    raise ValueError(f"{where}: value {value!r} must be a bool, number or string")


def _check_map(kind: str, pattern: re.Pattern[str], d: dict[str, Any]) -> dict[str, Any]:
    for k, v in d.items():
        if not pattern.fullmatch(str(k)):
            raise ValueError(f"{kind} name {k!r} is not allowed (must match {pattern.pattern})")
        check_value(f"{kind} {k}", v)
    return d


class LeverChange(BaseModel):
    """What a lever (or the baseline) sets.

    - ``env``: environment variables exported into the job (``TORCH_NCCL_HIGH_PRIORITY: 1``);
    - ``script_args``: workload flags, ``--flag: value`` (``true`` = the bare flag, ``false`` =
      flag removed);
    - ``sbatch_options``: ``#SBATCH --<name>=<value>`` lines (``cpus-per-task: 2``)."""

    model_config = ConfigDict(extra="forbid")

    env: dict[str, Scalar] = Field(default_factory=dict)
    script_args: dict[str, Scalar] = Field(default_factory=dict)
    sbatch_options: dict[str, Scalar] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_map("env", ENV_NAME, v)

    @field_validator("script_args")
    @classmethod
    def _args(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_map("script arg", SCRIPT_FLAG, v)

    @field_validator("sbatch_options")
    @classmethod
    def _sbatch(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_map("sbatch option", SBATCH_OPTION, v)

    def is_empty(self) -> bool:
        return not (self.env or self.script_args or self.sbatch_options)

    def merged(self, other: "LeverChange") -> "LeverChange":
        """This change with ``other`` applied on top (``other`` wins key by key)."""
        return LeverChange(
            env={**self.env, **other.env},
            script_args={**self.script_args, **other.script_args},
            sbatch_options={**self.sbatch_options, **other.sbatch_options},
        )


# --------------------------------------------------------------------------------------------
# catalog


class LeverStatus(str, Enum):
    """A lever's standing (seed 000 lessons 6, 8, 15, 17, 27).

    ``candidate``: may be tried; ``experimental``: may be tried, not yet validated end to end;
    ``blocked``: never tried (a verbatim error says why); ``accepted-baked-in``: already part of
    the baseline contract, never tried again."""

    candidate = "candidate"
    experimental = "experimental"
    blocked = "blocked"
    accepted_baked_in = "accepted-baked-in"


class VarianceClass(str, Enum):
    """``high``: the lever's payoff has been seen to flip sign run to run (num_workers, lesson 9);
    it is accepted only when a replicate agrees within +-5 %."""

    normal = "normal"
    high = "high"


class EvidenceItem(BaseModel):
    """One piece of evidence behind a lever's status: job ids, the FOM delta in percent
    (positive = better), the verbatim error of a failed run, the seed lesson numbers, a note;
    ``loop_id``/``decision`` when a loop wrote it."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[str] = Field(default_factory=list)
    fom: str | None = None
    fom_delta_pct: float | None = None
    error: str | None = None
    lessons: list[int] = Field(default_factory=list)
    note: str | None = None
    loop_id: str | None = None
    decision: str | None = None


class MemoryEffect(str, Enum):
    """Which way a lever is expected to move the run's peak device memory (the integrity guard's
    direction, :func:`ai4s_graph.tools.levers.guards.integrity_guard`).

    ``same``: the lever should not move memory; a move beyond ``FomSpec.memory_tolerance_pct``
    either way means the run did different work (seed 000 lesson 23: HBM 236 -> 98 GB when
    ``num_workers`` shrank the real batch). ``saves``: saving memory is what the lever does (a
    fused attention kernel never materializes the attention matrix: measured on sdpa-math, 93106,
    reserved HBM 19.2 -> 3.8 GB, reports/optimizer-2026-12-02), so any fall passes and only a rise
    beyond the tolerance fails. ``grows``: the lever spends memory on purpose (no activation
    recompute, seed 001 T17), so a rise passes as long as it stays within the board's capacity and
    a fall beyond the tolerance fails."""

    same = "same"
    saves = "saves"
    grows = "grows"


class Lever(BaseModel):
    """One lever of the catalog.

    ``targets`` are the bottleneck classes the lever addresses (the picker prefers levers whose
    target matches the analysis report's ``bottleneck.klass``); ``changes_batch`` declares that the
    lever changes the nominal batch on purpose, so the integrity guard does not require the
    realized batch to equal the baseline's (it still requires realized == nominal).

    ``implies``: the mechanisms the lever turns on (ids of
    :data:`ai4s_graph.tools.levers.rules.MECHANISMS`, e.g. ``[torch_compile, cuda_graphs]`` for
    ``torch.compile(mode="reduce-overhead")``): a ``blocked`` lever blocks every mechanism it
    implies, and with it every other lever that implies one of them (seed 000 lesson 6: every
    torch.compile mode goes through AOT Autograd). ``requires``: the evidence families (ids of
    :data:`ai4s_graph.tools.levers.rules.EVIDENCE`) the trace must show for the lever to apply
    (e.g. ``[sdpa_math]``). ``memory``: which way the lever moves peak memory
    (:class:`MemoryEffect`)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    change: LeverChange = Field(default_factory=LeverChange)
    status: LeverStatus = LeverStatus.candidate
    variance: VarianceClass = VarianceClass.normal
    targets: list[BottleneckClass] = Field(default_factory=list)
    changes_batch: bool = False
    implies: list[str] = Field(default_factory=list)
    requires: list[str] = Field(default_factory=list)
    memory: MemoryEffect = MemoryEffect.same
    evidence: list[EvidenceItem] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not LEVER_NAME.fullmatch(v):
            raise ValueError(f"lever name {v!r} must match {LEVER_NAME.pattern}")
        return v

    @model_validator(mode="after")
    def _blocked_has_error(self) -> "Lever":
        if self.status == LeverStatus.blocked and not any(e.error for e in self.evidence):
            raise ValueError(f"lever {self.name}: a blocked lever needs the verbatim error as evidence")
        if self.status not in (LeverStatus.blocked, LeverStatus.accepted_baked_in) and self.change.is_empty():
            raise ValueError(f"lever {self.name}: a lever that can be tried must change something")
        return self


class FomSpec(BaseModel):
    """How a run is scored.

    ``primary``: one of :data:`~ai4s_graph.state.fom.FOM_DEFINITIONS` (the one FOM definition the
    loop shares with ``ai4s-graph diff`` and the log parser): ``epoch_time_s`` (latency-bound GNN
    work, lesson 5) or ``throughput_samples_per_s`` (throughput-bound work, lesson 31);
    ``min_noise_pct``: floor
    under the measured baseline spread (percent; the seed's noise-level deltas are +-1-3 %,
    lessons 22 and 24); ``replicate_tolerance_pct``: the +-5 % replicate rule (lesson 9);
    ``memory_tolerance_pct``: how far HBM reserved % / peak memory may move (relative percent)
    before a comparison is rejected (lesson 23); ``loss_tolerance_pct``: how far the mean epoch
    loss may move (relative percent) before the run is taken to compute something else (15 %:
    between the 5.9 % a numerics-only lever moved it on the bundled pairs -- sdpa-math 136.56 vs
    its fused control 128.90; tf32-off, nchw-conv, anomaly-mode < 0.1 % -- and the 22 % of seed 000
    lesson 23, epoch loss 2.86 -> 3.50 when the real batch shrank; lesson 29's wrong kernel moved
    it 6.3x); ``batch_tolerance_pct``: the same for the realized
    per-step batch (lessons 23, 31)."""

    model_config = ConfigDict(extra="forbid")

    primary: str = "epoch_time_s"
    min_noise_pct: float = Field(default=2.0, ge=0.0)
    replicate_tolerance_pct: float = Field(default=5.0, gt=0.0)
    memory_tolerance_pct: float = Field(default=25.0, gt=0.0)
    loss_tolerance_pct: float = Field(default=15.0, gt=0.0)
    batch_tolerance_pct: float = Field(default=2.0, ge=0.0)
    partial_step_tolerance: float = Field(default=0.05, ge=0.0)

    @field_validator("primary")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in FOM_DEFINITIONS:
            raise ValueError(f"primary FOM {v!r} is not one of {sorted(FOM_DEFINITIONS)}")
        return v

    @property
    def direction(self) -> Literal["lower", "higher"]:
        return FOM_DIRECTIONS[self.primary]


class Baseline(BaseModel):
    """The job a lever is applied to: the sbatch template, its shape, and the baseline change.
    ``global_batch_size`` is the nominal batch the FOM parser needs for throughput."""

    model_config = ConfigDict(extra="forbid")

    template: str
    job_name: str = "ai4s-loop"
    nodes: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    ntasks_per_node: int = Field(default=1, ge=1)
    cpus_per_task: int = Field(default=1, ge=1)
    time_limit: str = "00:10:00"
    profile: bool = False
    global_batch_size: int | None = Field(default=None, ge=1)
    change: LeverChange = Field(default_factory=LeverChange)

    @field_validator("template", "job_name", "time_limit")
    @classmethod
    def _safe(cls, v: str) -> str:
        check_value("baseline", v)
        return v

    @field_validator("nodes", "gpus_per_node", "ntasks_per_node", "cpus_per_task", "global_batch_size", mode="before")
    @classmethod
    def _count(cls, v: Any) -> Any:
        """A count is a number, not a YAML ``true`` / ``false`` (pydantic would take them as 1 / 0)."""
        if isinstance(v, bool):
            raise ValueError(f"got {v!r}, not a count")
        return v


class Catalog(BaseModel):
    """A lever catalog (``levers/<model>.yaml``): the model, its primary FOM, the baseline job and
    the levers with their status and evidence."""

    model_config = ConfigDict(extra="forbid")

    model: str
    description: str = ""
    fom: FomSpec = Field(default_factory=FomSpec)
    baseline: Baseline
    levers: list[Lever] = Field(default_factory=list)

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        if not LEVER_NAME.fullmatch(v):
            raise ValueError(f"model name {v!r} must match {LEVER_NAME.pattern}")
        return v

    @model_validator(mode="after")
    def _unique(self) -> "Catalog":
        seen: set[str] = set()
        for lv in self.levers:
            if lv.name in seen:
                raise ValueError(f"lever {lv.name} appears twice")
            seen.add(lv.name)
        return self

    def lever(self, name: str) -> Lever:
        """The lever called ``name``; ``KeyError`` when there is none."""
        for lv in self.levers:
            if lv.name == name:
                return lv
        raise KeyError(name)


# --------------------------------------------------------------------------------------------
# loop records


class Decision(str, Enum):
    """What the loop decided for one iteration."""

    baseline = "baseline"
    accepted = "accepted"
    reverted = "reverted"  # ran fine, not better than the current best by more than the noise
    rejected_guard = "rejected-guard"  # an integrity guard refused the comparison
    replicate_disagrees = "replicate-disagrees"  # high-variance lever, replicate off by > 5 %
    failed = "failed"  # the lever's job crashed (its error is recorded)
    infra_failed = "infra-failed"  # bad nodes / scheduler trouble; the lever is not penalized


class RunResult(BaseModel):
    """One finished SLURM job of an iteration (a baseline run, a lever run, or its replicate)."""

    job_id: str
    state: str
    exit_code: str = "0:0"
    nodes_list: list[str] = Field(default_factory=list)
    elapsed_s: float | None = None
    node_hours: float = 0.0
    fom: dict[str, Any] = Field(default_factory=dict)
    primary: float | None = None
    perf_run: str | None = None
    error: str | None = None


class GuardCheck(BaseModel):
    """One integrity check: the quantity, the reference (current best) value, this run's value,
    and whether it passed. ``checked`` is False when neither run measured the quantity: the
    check is "not checked" (it does not block, and is never reported as a pass)."""

    name: str
    reference: Any = None
    value: Any = None
    passed: bool
    checked: bool = True
    why: str = ""

    @property
    def verdict(self) -> str:
        """``pass``, ``FAIL`` or ``not checked``."""
        return "not checked" if not self.checked else ("pass" if self.passed else "FAIL")


class GuardResult(BaseModel):
    """All integrity checks of one comparison (lessons 23 and 31)."""

    passed: bool
    checks: list[GuardCheck] = Field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        return [c.why for c in self.checks if not c.passed]

    @property
    def not_checked(self) -> list[str]:
        """Names of the checks no run had data for."""
        return [c.name for c in self.checks if not c.checked]

    def summary(self) -> str:
        """``pass`` / ``FAIL`` plus ``(n not checked: a, b)``."""
        head = "pass" if self.passed else "FAIL"
        nc = self.not_checked
        return head + (f" ({len(nc)} not checked: {', '.join(nc)})" if nc else "")


class IterationRecord(BaseModel):
    """One line of ``journal.jsonl``: one loop iteration, with every number its decision used."""

    loop_id: str
    iteration: int
    kind: Literal["baseline", "lever"]
    lever: str | None = None
    change: LeverChange = Field(default_factory=LeverChange)
    job_ids: list[str] = Field(default_factory=list)
    infra_retries: list[dict[str, Any]] = Field(default_factory=list)
    nodes_list: list[list[str]] = Field(default_factory=list)
    same_nodes_as_baseline: bool | None = None
    fom_name: str
    fom_values: list[float] = Field(default_factory=list)
    fom_value: float | None = None
    best_before: float | None = None
    best_after: float | None = None
    delta_pct: float | None = None
    noise_pct: float | None = None
    replicate_spread_pct: float | None = None
    guard: GuardResult | None = None
    decision: Decision
    why: str
    node_hours: float = 0.0
    runs: list[RunResult] = Field(default_factory=list)
    bottleneck: str | None = None  # the verified class the pick followed (lessons 13, 16)
    predicted_saving_pct: float | None = None  # the report's impact estimate for this lever, if any
    predicted_source: str | None = None
    skipped: list[dict[str, str]] = Field(default_factory=list)  # levers skipped at this pick, with why
    executor: str = "slurm"


class LoopRequest(BaseModel):
    """What the user asked for with ``ai4s-graph optimize`` (saved as ``loop-<uuid>/loop.json``
    so ``--resume`` needs nothing else)."""

    loop_id: str
    loop_dir: str
    model: str
    catalog_path: str
    iterations: int = Field(default=3, ge=0)
    node_hours: float | None = Field(default=None, gt=0)
    baseline_runs: int = Field(default=2, ge=2)
    cluster_config: str | None = None
    report: str | None = None
    bottleneck: str | None = None
    recommended: list[str] = Field(default_factory=list)
    wait_timeout_s: float = Field(default=900.0, gt=0)
    max_infra_retries: int = Field(default=2, ge=0)
    extra_env: dict[str, Scalar] = Field(default_factory=dict)
    executor: Literal["slurm", "local"] = "slurm"
    shared_dir: str | None = None  # the local executor's run root (slurm: the cluster config's)
    analyze: bool = False  # run the analysis on the baseline (and on each new best) for the class
    pin_placement: bool = True  # replicates and levers on the baseline's nodes (-w/--nodelist)

    @field_validator("extra_env")
    @classmethod
    def _env(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_map("env", ENV_NAME, v)
