"""Communication figures of a multi-GPU job (issue 30): per rank and step, what the collectives were
(count and message size per type), how much of their GPU time hid behind computation, when they
ran relative to the backward, FSDP's all-gathers, host syncs that waited for a collective; across
ranks, bus bandwidth against a measured baseline, the NCCL environment, and why the last rank to
arrive at a synchronising collective was late.

Built by :mod:`ai4s_graph.tools.trace.comm_steps` (one rank) and
:mod:`ai4s_graph.tools.trace.comm_ranks` (across ranks); read by the cause modules. These are
figures, never verdicts. Units: times µs (``*_us``), relative to their step's start unless named
``ts_us`` (the trace's clock); sizes bytes (``*_bytes``); bandwidth GB/s = 1e9 B/s (``*_gbps``, as
nccl-tests prints); shares are fractions 0..1.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

#: Phases of a step a collective is issued in (by the host time of its issuing op): before the
#: backward's first autograd op (``forward``), from it to the optimizer's step (``backward``), from the
#: optimizer's step on (``optimizer``); ``step`` when the step has no autograd op.
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "step")

#: Where a host sync sits in its step (its start against the step's windows on the host): before the
#: backward, inside it, between its end and the optimizer step, inside the optimizer step, after it;
#: ``step`` when the step has neither window.
SYNC_POSITIONS: tuple[str, ...] = ("forward", "backward", "before_optimizer", "optimizer", "after_optimizer", "step")


class CollectiveStat(BaseModel):
    """The collectives of one type, dtype and phase in one step of one rank.

    ``count``: collectives issued (host ops; the kernels when no host op was recorded);
    ``total_bytes`` / ``mean_bytes`` / ``min_bytes`` / ``max_bytes``: message size (nccl-tests'
    convention: the all-gather's output, the input otherwise), None when no size was recorded;
    ``nelems``: the summed element count; ``size_source``: ``kernel args``, ``record_param_comms``,
    ``collective op`` (a ``c10d::`` op's Input Dims with the backend annotation's element type) or
    ``""``; ``kernel_us``: summed GPU kernel time; ``exposed_us``: kernel time not overlapped by any
    computation kernel (the union over the type's kernels, TraceLens's exposed-communication rule);
    ``kernels``: kernels seen."""

    collective: str
    dtype: str | None = None
    phase: str = "step"
    count: int = 0
    nelems: float | None = None
    total_bytes: float | None = None
    mean_bytes: float | None = None
    min_bytes: float | None = None
    max_bytes: float | None = None
    size_source: str = ""
    kernels: int = 0
    kernel_us: float = 0.0
    exposed_us: float = 0.0


class Window(BaseModel):
    """An interval of one step (µs from the step's start), None when absent."""

    start_us: float | None = None
    end_us: float | None = None


class GatherRow(BaseModel):
    """One all-gather kernel (FSDP's parameter all-gather): ``index`` in the step, ``phase``,
    ``module`` (from the enclosing ``FSDP::... (<module>)`` annotation, ``""`` when none),
    ``start_us`` / ``dur_us`` on the GPU, ``hidden_us`` (overlapped by computation kernels),
    ``exposed_us`` = ``dur_us - hidden_us``, ``msg_bytes``."""

    index: int
    phase: str
    module: str = ""
    start_us: float
    dur_us: float
    hidden_us: float
    exposed_us: float
    msg_bytes: float | None = None


class SyncOnComm(BaseModel):
    """A host sync (a blocking call: stream/device/event synchronize, a blocking copy) during which a
    collective finished: a communication kernel ends inside the call, so the host was held while it
    completed (the call's wait covers the collective's end).

    ``name`` (API), ``op`` (top-level recorded op), ``site`` (Python call site, ``""`` without
    stacks), ``position`` (one of :data:`SYNC_POSITIONS`), ``start_us`` / ``dur_us`` on the host,
    ``collective`` / ``msg_bytes`` of the last collective ending inside it, ``comm_in_call_us``
    (communication kernel time inside the call), ``awaited``: the chain of GPU events the call awaited
    (the latest GPU event ending inside it, then each one's binding predecessor while it ended inside
    the call: :meth:`ai4s_graph.tools.trace.step_window.GpuColumns.binding`) holds a communication
    kernel, so it waited *for* a collective, not only while one ran beside the work it waited for;
    ``gpu_idle_after_us`` (from the call's return to the next GPU event: the launch gap it leaves; 0
    when the GPU is busy then)."""

    name: str
    op: str = ""
    site: str = ""
    position: str
    start_us: float
    dur_us: float
    collective: str
    msg_bytes: float | None = None
    comm_in_call_us: float
    awaited: bool = False
    gpu_idle_after_us: float


class StepComm(BaseModel):
    """One profiled step of one rank.

    ``comm_us``: union of the step's communication kernels (launched in the step); ``hidden_us``: the
    part overlapped by computation kernels (any stream); ``exposed_us`` = ``comm_us - hidden_us``;
    ``hidden_share`` = hidden / comm (None without communication). ``backward_host`` / ``backward_gpu``:
    first start to last end of the autograd ops (``autograd::engine::evaluate_function:``) and of the
    computation kernels they launched; ``optimizer_host``: the ``Optimizer.step#`` op(s).
    ``first_comm_start_us`` / ``last_comm_end_us``: the step's communication kernels on the GPU;
    ``comm_before_backward_end_share``: the share of their kernel time that runs before the backward's
    last computation kernel ends (0 when every collective starts after it: nothing can overlap);
    ``comm_started_in_backward``: kernels starting before it. ``buckets``: floating-point all-reduces
    issued in the backward (DDP's gradient buckets), ``bucket_mean_bytes`` / ``bucket_min_bytes`` /
    ``bucket_max_bytes`` their sizes, ``bucket_over_default`` = mean / 25 MiB (DDP's default
    ``bucket_cap_mb``). ``gathers``: the all-gather kernels (FSDP). ``syncs_by_position`` /
    ``sync_us_by_position``: host syncs (count, µs) by where they sit; ``syncs_on_comm``: those during
    which a collective finished. ``comm_on_critical_path_us``: communication kernel time on the step's
    critical path (the step accounting's, :mod:`ai4s_graph.state.steps`)."""

    step: int
    ts_us: float
    wall_us: float
    collectives: list[CollectiveStat] = Field(default_factory=list)
    comm_us: float = 0.0
    hidden_us: float = 0.0
    exposed_us: float = 0.0
    hidden_share: float | None = None
    backward_host: Window = Field(default_factory=Window)
    backward_gpu: Window = Field(default_factory=Window)
    optimizer_host: Window = Field(default_factory=Window)
    first_comm_start_us: float | None = None
    last_comm_end_us: float | None = None
    comm_before_backward_end_share: float | None = None
    comm_started_in_backward: int = 0
    comm_kernels: int = 0
    buckets: int = 0
    bucket_mean_bytes: float | None = None
    bucket_min_bytes: float | None = None
    bucket_max_bytes: float | None = None
    bucket_over_default: float | None = None
    gathers: list[GatherRow] = Field(default_factory=list)
    gather_exposed_us: dict[str, float] = Field(default_factory=dict, description="phase -> exposed all-gather µs")
    gather_us: dict[str, float] = Field(default_factory=dict, description="phase -> all-gather kernel µs")
    syncs_by_position: dict[str, int] = Field(default_factory=dict)
    sync_us_by_position: dict[str, float] = Field(default_factory=dict)
    syncs_on_comm: list[SyncOnComm] = Field(default_factory=list)
    comm_on_critical_path_us: float = 0.0


class RankComm(BaseModel):
    """One rank's communication figures: ``steps`` (profiled steps, trace order) and per-step medians
    (``median``: figure -> median over the steps, for the scalar :class:`StepComm` fields);
    ``kernel_names``: collective type -> the communication kernel names seen (NCCL's kernel name
    carries the algorithm and protocol it compiled, ``..._RING_LL``); ``backend``:
    ``distributedInfo.backend``; ``world_size``; ``warnings``."""

    rank: int
    path: str
    backend: str | None = None
    world_size: int | None = None
    n_steps: int = 0
    steps: list[StepComm] = Field(default_factory=list)
    median: dict[str, float] = Field(default_factory=dict)
    kernel_names: dict[str, list[str]] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


class BusbwRow(BaseModel):
    """Bus bandwidth of the matched collectives of one type and message size across ranks
    (nccl-tests ``doc/PERFORMANCE.md``: time = the shortest kernel across ranks, busbw = size / time x
    the type's factor), against a measured baseline at that size: ``baseline_gbps`` interpolated in
    log2(size) between the two measured sizes around it (``baseline_bytes`` those sizes; the nearest
    one outside the measured range, ``extrapolated``), ``ratio`` = busbw / baseline; the same against
    the baseline's P2P-disabled sweep (``p2p_disabled_gbps``, ``ratio_p2p_disabled``) when it has one."""

    collective: str
    msg_bytes: float
    count: int
    busbw_gbps: float | None = None
    busbw_min_gbps: float | None = None
    busbw_max_gbps: float | None = None
    baseline_gbps: float | None = None
    baseline_bytes: list[float] = Field(default_factory=list)
    extrapolated: bool = False
    ratio: float | None = None
    p2p_disabled_gbps: float | None = None
    ratio_p2p_disabled: float | None = None


class EnvVar(BaseModel):
    """One communication-library variable the job set: ``name``, ``value``, ``source`` (``manifest``,
    ``job script``), ``restricts`` (what setting it changes, from the library's documentation;
    ``""`` for a variable the table does not know)."""

    name: str
    value: str
    source: str
    restricts: str = ""


class LateRank(BaseModel):
    """Why one rank arrived last (:mod:`ai4s_graph.tools.trace.comm_ranks`, "Why late").

    ``n_last``: synchronising collectives it arrived last at; ``max_wait_us``: the longest start spread
    at those (the others' wait). Over the steps whose first synchronising collective it arrived last
    at (``n_steps``), against ``first`` (the rank that arrived first there, most often): ``lag_us``, the
    sum of its span minus the first rank's (each span from the end of the previous step's last
    synchronising collective, which every rank leaves together, to its arrival), and ``lag_parts_us``,
    the same difference by what the GPU and host did over the spans (``gpu:computation``,
    ``gpu:communication`` not under computation, ``gpu:memcpy`` the rest of the busy time,
    ``host:<category>`` the GPU-idle time by host state), summed as ``lag_gpu_us`` (the ``gpu:`` parts) and
    ``lag_host_us`` (the ``host:`` parts; they add up to ``lag_us``); ``lag_share``: ``lag_us`` over the wall
    time of those steps on this rank; ``step_diff_us``: over the same steps, its
    whole step's accounting minus the first rank's (``gpu:computation``, ``gpu:exposed_comm``,
    ``gpu:exposed_memcpy``, ``host:<category>`` GPU idle by host state); ``largest``: the key of
    ``lag_parts_us`` (else ``step_diff_us``) with the largest positive difference."""

    rank: int
    n_last: int
    max_wait_us: float = 0.0
    first: int | None = None
    n_steps: int = 0
    lag_us: float = 0.0
    lag_parts_us: dict[str, float] = Field(default_factory=dict)
    lag_gpu_us: float = 0.0
    lag_host_us: float = 0.0
    lag_share: float | None = None
    step_diff_us: dict[str, float] = Field(default_factory=dict)
    largest: str = ""


class CommReport(BaseModel):
    """Communication figures of one job: ``ranks`` (:class:`RankComm` each); ``busbw`` (per type and
    size, against ``baseline_source``); ``env`` (communication-library variables set); ``n_sync``
    (synchronising collectives matched on every rank); ``n_resolved`` (those whose start spread exceeds
    their end spread, so the clocks resolve who came last); ``last_counts`` (rank -> times it arrived
    last, at resolved collectives); ``late``: :class:`LateRank` per rank that arrived last anywhere; ``clock_offsets_us``: the
    offsets used to put ranks on one clock (rank -> µs subtracted from its times); ``notes``."""

    ranks: list[RankComm] = Field(default_factory=list)
    busbw: list[BusbwRow] = Field(default_factory=list)
    baseline_source: str = ""
    env: list[EnvVar] = Field(default_factory=list)
    n_sync: int = 0
    n_resolved: int = 0
    last_counts: dict[int, int] = Field(default_factory=dict)
    late: list[LateRank] = Field(default_factory=list)
    clock_offsets_us: dict[int, float] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
