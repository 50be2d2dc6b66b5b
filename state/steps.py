"""The step accounting of one rank trace (issue 34): every microsecond of each profiled step, split
into GPU busy (computation, exposed communication, exposed memcpy) and GPU idle, each GPU-idle
microsecond attributed to what the host was doing, the step's critical path, the structure the
trace shows, and the largest attribution as a lead.

Built by :mod:`ai4s_graph.tools.trace.host_timeline` (``StepAccountant.finish``); read by the cause
modules and the report. Times are µs (``*_us``) relative to nothing but their own step unless
named ``ts_us`` (the trace's clock); shares are fractions of the step's wall time (0..1).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

#: Host categories, in the order of precedence used when several host threads are in recorded ops
#: at one instant (see ``tools/trace/host_names.py``).
HOST_CATEGORIES: tuple[str, ...] = ("launch", "allocator", "sync", "dataloader", "optimizer", "runtime_other",
                                    "op", "outside_ops")


class GpuSplit(BaseModel):
    """The step's wall time on the GPU (µs), with the engine's (TraceLens's) definitions clipped to
    the step's window: ``computation_us + exposed_comm_us + exposed_memcpy_us = busy_us`` and
    ``busy_us + idle_us`` = the step's wall time."""

    computation_us: float = 0.0
    exposed_comm_us: float = 0.0
    exposed_memcpy_us: float = 0.0
    busy_us: float = 0.0
    idle_us: float = 0.0


class Attribution(BaseModel):
    """Time of one host state: ``category`` (one of :data:`HOST_CATEGORIES`), ``name`` (the API call,
    region, top-level op, or ``""`` outside ops), ``op`` (the top-level recorded op it ran under, ``""``
    when none), ``us`` (µs per step, or in the step)."""

    category: str
    name: str = ""
    op: str = ""
    us: float


class SiteShare(BaseModel):
    """Time attributed to one Python call site: ``site`` is the innermost user frame as the
    profiler names it (``file(line): function``; torch, stdlib and site-packages frames skipped)."""

    site: str
    category: str = ""
    us: float


class PathSegment(BaseModel):
    """One link of a step's critical path. ``kind``: ``host`` (a host state), ``gpu`` (a GPU event),
    ``launch`` (a launch call up to its kernel's start: kernel launch overhead), ``gpu_gap`` (between
    two events on one stream), ``gpu_wait`` (a wait for an event on another stream), ``sync`` (a blocking call's return after the awaited GPU event).
    ``start_us``/``end_us`` relative to the step's start."""

    kind: str
    category: str
    name: str
    op: str = ""
    site: str = ""
    start_us: float
    end_us: float


class PathShare(BaseModel):
    """One key's time on the critical path (µs) and its share of the path."""

    key: str
    category: str = ""
    us: float
    share: float


class CriticalPath(BaseModel):
    """A step's critical path: ``length_us`` equals the step's wall time (the path covers it end to
    end); ``by_category``: µs per path category (host categories, ``gpu:computation``,
    ``gpu:communication``, ``gpu:memcpy``, ``launch_delay``, ``gpu_gap``, ``gpu_wait``,
    ``sync_return``);
    ``top_ops``/``top_sites``: the largest shares by top-level op and by Python call site;
    ``segments``: the path itself, oldest first, when kept."""

    length_us: float
    by_category: dict[str, float] = Field(default_factory=dict)
    top_ops: list[PathShare] = Field(default_factory=list)
    top_sites: list[PathShare] = Field(default_factory=list)
    n_segments: int = 0
    segments: list[PathSegment] | None = None


class Repetition(BaseModel):
    """The same op sequence repeated ``k`` times in one step on batch-1 shapes (first input's leading
    dim 1, from ``record_shapes``): ``period`` ops per repetition on thread ``thread``, its first ops'
    names and the first one's ``Input Dims``; ``us``: host time of those ops in the step; ``top_ops``: the
    thread's top-level ops in the step (the run's share of them is ``k * period / top_ops``); ``site``:
    the Python call site most of the run's ops start under (``file:line (function)``, ``""`` without stacks)."""

    k: int
    period: int
    thread: int
    ops: list[str] = Field(default_factory=list)
    shape: str = ""
    us: float = 0.0
    top_ops: int = 0
    site: str = ""


class StepStructure(BaseModel):
    """Counts one step shows: host calls (launches, allocator calls, blocking syncs, ``aten::item``-
    class ops, optimizer steps), GPU events, device-to-host / host-to-device copies and bytes (GPU
    memcpy events' ``bytes`` by direction; ``sync_ops``: blocking calls made inside ``aten::item``-class
    ops, one per device scalar read), the repeated batch-1 sequence, and the smallest device
    ``Total Allocated`` seen in the step's memory events (``profile_memory``; an upper bound on the
    parameter bytes held there)."""

    launches: int = 0
    gpu_events: int = 0
    allocator_calls: int = 0
    sync_calls: int = 0
    sync_ops: int = 0
    optimizer_steps: int = 0
    d2h_copies: int = 0
    d2h_bytes: int = 0
    h2d_copies: int = 0
    h2d_bytes: int = 0
    repeated: Repetition | None = None
    device_min_allocated_bytes: int | None = None


class StepAccount(BaseModel):
    """One profiled step. ``host_us``: the whole step by host state (sums to ``wall_us``);
    ``idle_by_host_us``: the GPU-idle time by host state (sums to ``gpu.idle_us``); ``idle_top`` /
    ``idle_sites``: the largest GPU-idle attributions by (category, name) and by Python call site;
    ``idle_cpu_only_ops_us``: the GPU-idle time in kernel-less top-level ops by name."""

    step: int
    ts_us: float
    wall_us: float
    gpu: GpuSplit
    host_us: dict[str, float] = Field(default_factory=dict)
    idle_by_host_us: dict[str, float] = Field(default_factory=dict)
    idle_top: list[Attribution] = Field(default_factory=list)
    idle_sites: list[SiteShare] = Field(default_factory=list)
    idle_cpu_only_ops_us: dict[str, float] = Field(default_factory=dict)
    """GPU-idle µs in the CPU side of top-level ops that launched no GPU work, by op name
    (``tools/trace/cpu_ops.py``: CPU tensor work in the step)."""
    critical_path: CriticalPath
    structure: StepStructure = Field(default_factory=StepStructure)


class StepDistribution(BaseModel):
    """Wall time of the profiled steps (ms)."""

    n: int = 0
    median_ms: float | None = None
    mean_ms: float | None = None
    max_ms: float | None = None
    min_ms: float | None = None


class Lead(BaseModel):
    """The largest attribution of the GPU-idle time, with the numbers a sentence needs (per step
    means over the profiled steps): ``category``/``name``/``op``/``site`` of the attribution,
    ``us`` of GPU-idle time it takes (``name_us`` of it under ``name``/``op``), ``step_us`` (mean wall), ``idle_us`` (mean GPU idle), ``share``
    (us / step_us), ``on_critical_path_us`` (the same attribution's time on the critical path),
    ``preceded_by`` (the host state that most often comes right before its longest interval),
    ``context`` (structure figures per step: copies, bytes, allocator calls, syncs, repetitions),
    ``text`` (one sentence; a lead to look at, not a verdict)."""

    category: str
    name: str = ""
    op: str = ""
    site: str = ""
    us: float
    name_us: float = 0.0
    step_us: float
    idle_us: float
    share: float
    on_critical_path_us: float = 0.0
    preceded_by: str = ""
    context: dict[str, float | int | str] = Field(default_factory=dict)
    text: str = ""


class StepBreakdown(BaseModel):
    """The step accounting of one trace: ``steps`` (profiled steps, trace order), ``mean_host_us`` /
    ``mean_idle_by_host_us`` / ``mean_gpu`` (per-step means), ``distribution``, ``lead``;
    ``has_python_stacks`` False (with ``python_stack_note``) when the trace holds no
    ``python_function`` events; ``has_shapes`` / ``has_memory_events``: ``record_shapes`` /
    ``profile_memory`` were on; ``threads``: host threads with recorded ops; ``median_counts``: the per-step
    median of each :class:`StepStructure` count (the steady state of the profiled steps);
    ``param_bytes`` with ``param_bytes_source``: the model's parameter bytes as given (``manifest``), else
    the smallest device ``Total Allocated`` of any step (``memory events``: an upper bound), else None;
    ``d2h_over_param``: median device-to-host bytes per step over ``param_bytes``; ``warnings``."""

    path: str
    n_steps: int
    steps: list[StepAccount] = Field(default_factory=list)
    mean_host_us: dict[str, float] = Field(default_factory=dict)
    mean_idle_by_host_us: dict[str, float] = Field(default_factory=dict)
    mean_gpu: GpuSplit = Field(default_factory=GpuSplit)
    distribution: StepDistribution = Field(default_factory=StepDistribution)
    lead: Lead | None = None
    has_python_stacks: bool = False
    python_stack_note: str = ""
    has_shapes: bool = False
    has_memory_events: bool = False
    threads: int = 0
    median_counts: dict[str, float] = Field(default_factory=dict)
    param_bytes: int | None = None
    param_bytes_source: str = ""
    d2h_over_param: float | None = None
    warnings: list[str] = Field(default_factory=list)


class Saving(BaseModel):
    """What removing ``removed`` (host categories or names; with ``with_gpu_work`` the GPU events they
    launched too) saves from one step's critical path: within ``[replay_us, upper_us]`` (µs; see
    ``tools/trace/critical_path.py``), of the step's ``step_us``."""

    step: int
    step_us: float
    replay_us: float
    upper_us: float
    removed: list[str] = Field(default_factory=list)
    with_gpu_work: bool = False
