"""An independent reader of PyTorch profiler (kineto) traces and TraceLens's GPU-timeline arithmetic.

This is the verifier's second path: it re-derives the figures :mod:`ai4s_graph.tools.trace.backends`
reports without HolisticTraceAnalysis, TraceLens or pandas. It reads the Chrome-trace JSON
(``*.json`` or ``*.json.gz``) with ``orjson``, keeps only the few fields each figure needs
(intervals as tuples, names interned; never whole event dicts), and does interval-union
arithmetic in plain Python.

Definitions follow TraceLens (AMD-AGI/TraceLens, ``TraceLens/TreePerf/gpu_event_analyser.py``
``GPUEventAnalyser.get_gpu_event_lists`` / ``compute_metrics_dict`` and
``TraceLens/Trace2Tree/trace_to_tree.py`` for CPU-GPU linking), read there and re-written here:

- GPU events are ``cat`` in {kernel, gpu_memcpy, gpu_memset}. By default only events *linked*
  to a CPU launch are counted (TraceLens's ``include_unlinked_kernels=False``): a runtime/driver
  event whose correlation id has an ``ac2g`` flow start and end, the end pointing at the GPU
  event's (pid, tid); graph launches (``cudaGraphLaunch``/``hipGraphLaunch``) link every GPU
  event with their correlation id. In a trace with no ``ac2g`` flows at all (older kineto;
  TraceLens reports "No GPU events" there) a GPU event links to the runtime call with its
  correlation id, and a trace where nothing links counts every GPU event.
- communication = kernels/memsets whose name matches ``nccl``, ``rccl`` or
  ``cross_device_reduce`` (case-insensitive); memcpy = ``gpu_memcpy`` plus ROCm 7.1 rocclr copy
  kernels; computation = every other kernel and ``gpu_memset`` (TraceLens files memsets
  under computation, not memcpy).
- computation_time = |union(computation)|; exposed_comm_time = |union(comm) − union(comp)|;
  exposed_memcpy_time = |union(memcpy) − union(comp) − union(comm)|; busy_time = |union(all)|;
  total_time = last GPU end − first GPU start; idle_time = total − busy;
  total_comm_time = |union(comm)|; total_memcpy_time = |union(memcpy)|.
  Percentages are of total_time.

Times in the trace are microseconds (floats with ns fractions); results are in ms and %.
"""

from __future__ import annotations

import gzip
import re
import statistics
import sys
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import BaseModel

from ..errors import InputError, NoGpuEventsError

# --------------------------------------------------------------------------------------
# Models and constants
# --------------------------------------------------------------------------------------


class TimelineRow(BaseModel):
    """One row of TraceLens's ``gpu_timeline`` sheet: time in milliseconds and percent of
    ``total_time``."""

    time_ms: float
    percent: float


TIMELINE_ROWS: tuple[str, ...] = (
    "computation_time",
    "exposed_comm_time",
    "exposed_memcpy_time",
    "busy_time",
    "idle_time",
    "total_time",
    "total_comm_time",
    "total_memcpy_time",
)
"""Row names of TraceLens's gpu_timeline.csv, in its order."""

MAIN_TIMELINE_ROWS: tuple[str, ...] = TIMELINE_ROWS[:6]

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "hipGraphLaunch"})
LAUNCH_KERNEL_NAMES = frozenset(
    {"cudaLaunchKernel", "hipLaunchKernel", "cudaLaunchKernelExC", "hipExtLaunchKernel",
     "hipModuleLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "hipExtModuleLaunchKernel"}
)

# Communication kernels: TraceLens util.COMMUNICATION_KEYS + DEFAULT_CUSTOM_COLLECTIVE_PATTERNS.
_COMM_RE = re.compile(r"nccl|rccl|cross_device_reduce", re.IGNORECASE)
# ROCm 7.1 rocclr copy kernels count as memcpy (TraceLens util._ROCM_LEGACY_MEMCPY_NAMES).
_ROCM_LEGACY_MEMCPY_RE = re.compile(
    r"^(MEMORY_COPY_(HOST_TO_DEVICE|DEVICE_TO_HOST|DEVICE_TO_DEVICE)"
    r"|__amd_rocclr_copyBuffer(Rect)?(Aligned)?)(\.kd)?$"
)
_DATALOADER_RE = re.compile(r"DataLoader", re.IGNORECASE)
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

COMPUTE, COMM, MEMCPY = 0, 1, 2


def classify_gpu_event(cat: str, name: str) -> int:
    """TraceLens's bucket for one GPU event: ``COMPUTE`` (0), ``COMM`` (1) or ``MEMCPY`` (2)."""
    if cat == "gpu_memcpy":
        return MEMCPY
    if cat == "kernel" and _ROCM_LEGACY_MEMCPY_RE.match(name or ""):
        return MEMCPY
    if name and _COMM_RE.search(name):
        return COMM
    return COMPUTE


def is_communication_kernel(name: str) -> bool:
    """True for NCCL/RCCL collectives and custom all-reduce kernels (TraceLens's rule)."""
    return bool(name and _COMM_RE.search(name))


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class GpuEvent:
    """One GPU activity, reduced to what the figures need (times in µs)."""

    ts: float
    end: float
    dur: float
    cat: str
    name: str
    kind: int  # COMPUTE / COMM / MEMCPY
    corr: int | None
    pid: object
    tid: object
    stream: object
    device: object
    external_id: int | None
    linked: bool = False
    launcher: int = -1  # index into KinetoTrace.cpu_ops of the nearest cpu_op, or -1


@dataclass(slots=True)
class KinetoTrace:
    """The parts of one kineto trace the analyses use. Times are µs on the trace's clock.

    ``cpu_ops``: (ts, end, name, pid, tid); ``runtime``: (ts, end, name, corr, pid, tid);
    ``steps``: (ts, dur, step number) of ``ProfilerStep#N`` annotations;
    ``dataloader``: (ts, dur, name) of CPU events whose name mentions DataLoader."""

    path: Path
    rank: int | None
    gpu: list[GpuEvent]
    cpu_ops: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    steps: list[tuple] = field(default_factory=list)
    dataloader: list[tuple] = field(default_factory=list)
    has_flows: bool = False
    linked_only: bool = True


def read_trace_json(path: str | Path) -> dict:
    """Read and parse a kineto trace file (``.json`` or ``.json.gz``) into a dict.

    Raises :class:`InputError` (one line: file name + what is wrong) for a missing, empty,
    truncated/corrupt gzip, non-JSON file, or JSON without a ``traceEvents`` list."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p.name}: trace file not found ({p})")
    if p.stat().st_size == 0:
        raise InputError(f"{p.name}: trace file is empty")
    try:
        with open(p, "rb") as fh:
            magic = fh.read(2)
        if magic == b"\x1f\x8b":
            with gzip.open(p, "rb") as fh:
                raw = fh.read()
        else:
            raw = p.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
        raise InputError(f"{p.name}: truncated or corrupt gzip ({type(e).__name__}: {e})") from e
    if not raw.strip():
        raise InputError(f"{p.name}: trace file is empty")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InputError(f"{p.name}: not valid JSON ({e})") from e
    del raw
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(f"{p.name}: JSON has no traceEvents list (not a PyTorch profiler trace)")
    return data


def _rank_of(data: dict) -> int | None:
    info = data.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    return None


def load_events(path: str | Path, *, include_unlinked: bool = False) -> KinetoTrace:
    """Load the GPU, runtime, cpu_op, ProfilerStep and DataLoader intervals of one trace.

    GPU events are marked ``linked`` by TraceLens's CPU→GPU linking rule (see module
    docstring); each kernel's ``launcher`` is the innermost ``cpu_op`` enclosing its launch
    call on the same thread (TraceLens's host call-stack rule, incl. the <1 µs "bleed" rule).

    Raises :class:`InputError` for unreadable input and :class:`NoGpuEventsError` when the
    trace holds no kernel/memcpy/memset event (a CPU-only run)."""
    p = Path(path)
    data = read_trace_json(p)
    rank = _rank_of(data)
    events = data.pop("traceEvents")
    del data

    intern = sys.intern
    gpu: list[GpuEvent] = []
    cpu_ops: list[tuple] = []
    runtime: list[tuple] = []
    steps: list[tuple] = []
    dataloader: list[tuple] = []
    flow_start: set = set()
    flow_end: dict = {}
    launch_key = None  # "correlation" or "External id" (TraceLens _set_linking_key)
    stack_items: list[tuple] = []  # (ts, order, end, kind 0=cpu_op 1=runtime, index, pid, tid)

    for order, ev in enumerate(events):
        if not isinstance(ev, dict):
            continue
        cat = ev.get("cat")
        ph = ev.get("ph")
        if cat == "ac2g":
            if ph == "s":
                flow_start.add(ev.get("id"))
            elif ph == "f":
                flow_end[ev.get("id")] = (ev.get("pid"), ev.get("tid"))
            continue
        if ph != "X":
            continue
        try:
            ts = float(ev["ts"])
            dur = float(ev.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        name = ev.get("name") or ""
        args = ev.get("args") or {}
        if cat in GPU_CATS:
            g = GpuEvent(
                ts=ts, end=ts + dur, dur=dur, cat=intern(cat), name=intern(name),
                kind=classify_gpu_event(cat, name), corr=args.get("correlation"),
                pid=ev.get("pid"), tid=ev.get("tid"), stream=args.get("stream"),
                device=args.get("device"), external_id=args.get("External id"),
            )
            gpu.append(g)
        elif cat in RUNTIME_CATS:
            if launch_key is None and "launch" in name.lower():
                launch_key = "correlation" if "correlation" in args else "External id"
            runtime.append((ts, ts + dur, intern(name), args, ev.get("pid"), ev.get("tid")))
            stack_items.append((ts, order, ts + dur, 1, len(runtime) - 1, ev.get("pid"), ev.get("tid")))
        elif cat == "cpu_op":
            cpu_ops.append((ts, ts + dur, intern(name), ev.get("pid"), ev.get("tid")))
            stack_items.append((ts, order, ts + dur, 0, len(cpu_ops) - 1, ev.get("pid"), ev.get("tid")))
            m = _STEP_RE.match(name)
            if m:
                steps.append((ts, dur, int(m.group(1))))
            elif _DATALOADER_RE.search(name):
                dataloader.append((ts, dur, name))
        elif cat in ("user_annotation", "python_function") or cat is None:
            m = _STEP_RE.match(name)
            if m and cat != "python_function":
                steps.append((ts, dur, int(m.group(1))))
            elif cat == "user_annotation" and _DATALOADER_RE.search(name):
                dataloader.append((ts, dur, name))
    del events

    if not gpu:
        raise NoGpuEventsError(f"{p.name}: no GPU kernel, memcpy or memset events (CPU-only trace?)")

    # Keep only the link id per runtime event, not its args.
    key = launch_key or "correlation"
    runtime = [(ts, end, name, a.get(key), pid, tid) for ts, end, name, a, pid, tid in runtime]

    # --- CPU -> GPU linking (TraceToTree.add_gpu_ops_to_tree) -------------------------
    by_link: dict = defaultdict(list)
    by_pid_tid_link: dict = {}
    for i, g in enumerate(gpu):
        link = g.corr if key == "correlation" else g.external_id
        if link is not None:
            by_link[link].append(i)
            by_pid_tid_link[(g.pid, g.tid, link)] = i
    gpu_parent: dict[int, int] = {}  # gpu index -> runtime index
    for ri, (_ts, _end, rname, link, _pid, _tid) in enumerate(runtime):
        if link is None:
            continue
        if rname in GRAPH_LAUNCH_NAMES or not flow_start:
            # graph launches link every GPU event of their correlation id; so does every
            # launch in an older trace without ac2g flows (HTA's rule, correlation only)
            targets = by_link.get(link, [])
        else:
            if link not in flow_start or link not in flow_end:
                continue
            fpid, ftid = flow_end[link]
            t = by_pid_tid_link.get((fpid, ftid, link))
            targets = [] if t is None else [t]
        for gi in targets:
            gpu[gi].linked = True
            gpu_parent[gi] = ri
    has_flows = bool(flow_start)
    # A trace where nothing links (no runtime events) counts every GPU event.
    linked_only = any(g.linked for g in gpu)

    # --- host call stacks: innermost cpu_op around each runtime event -----------------
    runtime_cpu_op = _runtime_parents(stack_items, cpu_ops)
    for gi, ri in gpu_parent.items():
        gpu[gi].launcher = runtime_cpu_op.get(ri, -1)

    return KinetoTrace(
        path=p, rank=rank, gpu=gpu, cpu_ops=cpu_ops, runtime=runtime, steps=sorted(steps),
        dataloader=dataloader, has_flows=has_flows,
        linked_only=linked_only and not include_unlinked,
    )


def _runtime_parents(stack_items: list[tuple], cpu_ops: list[tuple]) -> dict[int, int]:
    """Map runtime-event index -> index of the innermost enclosing cpu_op (skipping
    pass-through ``execute`` ops), following TraceLens's per-thread stack build
    (``BaseTraceToTree.build_host_call_stack_tree``)."""
    stack_items.sort(key=lambda x: (x[0], x[1]))
    stacks: dict = defaultdict(list)
    parent: dict[tuple[int, int], tuple[int, int] | None] = {}
    result: dict[int, int] = {}
    for ts, _order, end, kind, idx, pid, tid in stack_items:
        stack = stacks[(pid, tid)]
        while stack and ts >= stack[-1][0]:
            stack.pop()
        if stack and end > stack[-1][0]:
            if stack[-1][0] - ts < 1.0 and len(stack) >= 2:
                stack.pop()
            else:
                continue  # a large bleed: TraceLens leaves the event out of the tree
        par = stack[-1][1] if stack else None
        node = (kind, idx)
        parent[node] = par
        stack.append((end, node))
        if kind == 1:
            cur = par
            while cur is not None:
                if cur[0] == 0:
                    if cpu_ops[cur[1]][2] == "execute":
                        cur = parent.get(cur)
                        continue
                    result[idx] = cur[1]
                    break
                cur = parent.get(cur)
    return result


# --------------------------------------------------------------------------------------
# Interval arithmetic
# --------------------------------------------------------------------------------------


def merge_intervals(intervals) -> list[tuple[float, float]]:
    """Union of (start, end) intervals as sorted, non-overlapping intervals (touching ones
    merge)."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def subtract_intervals(b: list[tuple[float, float]], a: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``b − a`` for sorted, non-overlapping interval lists (the parts of b not covered by a)."""
    result = []
    j = 0
    n = len(a)
    for bs, be in b:
        cur = bs
        while j < n and a[j][1] <= bs:
            j += 1
        k = j
        while k < n and a[k][0] < be:
            s, e = a[k]
            if s > cur:
                result.append((cur, min(be, s)))
            cur = max(cur, e)
            if cur >= be:
                break
            k += 1
        if cur < be:
            result.append((cur, be))
    return result


def total_length(intervals) -> float:
    """Sum of interval lengths (µs in, µs out)."""
    return sum(e - s for s, e in intervals)


def timeline_from_intervals(comp, comm, memcpy) -> dict[str, TimelineRow]:
    """TraceLens's gpu_timeline rows from three lists of (start, end) µs intervals.

    Raises :class:`NoGpuEventsError` when all three are empty."""
    comp_u, comm_u, mem_u = merge_intervals(comp), merge_intervals(comm), merge_intervals(memcpy)
    all_u = merge_intervals(list(comp) + list(comm) + list(memcpy))
    if not all_u:
        raise NoGpuEventsError("no GPU events to build a timeline from")
    total = all_u[-1][1] - all_u[0][0]
    comp_t = total_length(comp_u)
    exposed_comm = total_length(subtract_intervals(comm_u, comp_u))
    exposed_mem = total_length(subtract_intervals(subtract_intervals(mem_u, comp_u), comm_u))
    busy = total_length(all_u)
    values = {
        "computation_time": comp_t,
        "exposed_comm_time": exposed_comm,
        "exposed_memcpy_time": exposed_mem,
        "busy_time": busy,
        "idle_time": total - busy,
        "total_time": total,
        "total_comm_time": total_length(comm_u),
        "total_memcpy_time": total_length(mem_u),
    }
    return {
        k: TimelineRow(time_ms=v / 1e3, percent=(v / total * 100.0) if total > 0 else 0.0)
        for k, v in values.items()
    }


def timeline_of(trace: KinetoTrace) -> dict[str, TimelineRow]:
    """gpu_timeline rows of a loaded trace (linked GPU events only, unless the trace has no
    link or was loaded with ``include_unlinked=True``)."""
    buckets: tuple[list, list, list] = ([], [], [])
    for g in trace.gpu:
        if trace.linked_only and not g.linked:
            continue
        buckets[g.kind].append((g.ts, g.end))
    if not any(buckets):
        raise NoGpuEventsError(f"{trace.path.name}: no GPU events linked to a CPU launch")
    return timeline_from_intervals(*buckets)


def rederive_timeline(path: str | Path, *, include_unlinked: bool = False) -> dict[str, TimelineRow]:
    """Re-derive TraceLens's gpu_timeline from the raw trace JSON.

    Returns ``{row_name: TimelineRow(time_ms, percent)}`` for the eight rows of
    :data:`TIMELINE_ROWS`. Raises :class:`InputError` / :class:`NoGpuEventsError`."""
    return timeline_of(load_events(path, include_unlinked=include_unlinked))


# --------------------------------------------------------------------------------------
# Kernel counts, op categories, steps, launch statistics
# --------------------------------------------------------------------------------------

# Op-name -> category, following the categories TraceLens assigns through its perf-model
# registry (TraceLens/PerfModel/torch_op_mapping.py); written out here for the common ops.
_GEMM = ("aten::mm", "aten::addmm", "aten::_scaled_mm", "aten::bmm", "aten::baddbmm",
         "tex_ts::te_gemm_ts", "trtllm::cublas_scaled_mm", "bitsandbytes::int8_linear_matmul",
         "vllm::gemm_with_dynamic_quant")
_SDPA_FWD = ("FlashAttnFunc", "flash_attn::_flash_attn_forward", "flash_attn::_flash_attn_varlen_forward",
             "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_efficient_attention",
             "aten::_scaled_dot_product_flash_attention", "aiter::_flash_attn_forward",
             "aiter::wrapper_fmha_v3_fwd", "aiter::mha_fwd", "aiter::fmha_v3_fwd", "flash_attn_3::fwd",
             "EvoformerAttention", "aten::_efficient_attention_forward")
_SDPA_BWD = ("flash_attn::_flash_attn_backward", "flash_attn::_flash_attn_varlen_backward",
             "aiter::_flash_attn_backward", "aiter::wrapper_fmha_v3_bwd", "aiter::mha_bwd",
             "FlashAttnFuncBackward", "FusedAttnFuncBackward",
             "aten::_scaled_dot_product_cudnn_attention_backward",
             "aten::_scaled_dot_product_efficient_attention_backward",
             "aten::_scaled_dot_product_flash_attention_backward", "aten::_efficient_attention_backward")
_CONV_FWD = ("aten::convolution", "aten::miopen_convolution", "aten::cudnn_convolution", "ConvBias_", "ConvBiasReLU_")
_CONV_BWD = ("aten::convolution_backward", "ConvBias_Backward", "ConvBiasReLU_Backward")
_NORM_KINDS = ("batch", "layer", "group", "instance")
_NORM_FWD = tuple(f"aten::{v}{k}_norm" for k in _NORM_KINDS for v in ("", "native_", "miopen_", "cudnn_")) + (
    "aten::_fused_rms_norm", "primus::fused_ln_modulate")
_NORM_BWD = tuple(f"aten::{v}{k}_norm_backward" for k in _NORM_KINDS + ("rms",)
                  for v in ("", "native_", "miopen_", "cudnn_")) + (
    "aten::_fused_rms_norm_backward", "primus::fused_ln_modulate_backward")
_ELEMENTWISE = ("aten::copy", "aten::copy_", "aten::clamp_min", "aten::clamp_min_", "aten::clamp_max",
                "aten::clamp_max_", "aten::sigmoid", "aten::rsqrt", "aten::silu", "aten::neg", "aten::pow",
                "aten::div", "aten::div_", "aten::mul", "aten::mul_", "aten::add", "aten::add_",
                "aten::sigmoid_backward", "aten::threshold_backward", "aten::replication_pad1d",
                "aten::replication_pad2d", "aten::replication_pad3d", "aten::upsample_nearest1d",
                "aten::upsample_nearest2d", "aten::upsample_nearest3d", "LigerSiLUMulFunction")
_REDUCE = ("aten::sum", "aten::mean", "aten::max", "aten::min", "aten::norm", "aten::linalg_norm", "aten::std",
           "aten::var", "aten::logsumexp", "aten::cumsum", "aten::cumprod", "aten::amin", "aten::amax")

OP_CATEGORIES: dict[str, str] = {}
for _names, _cat in ((_GEMM, "GEMM"), (_SDPA_FWD, "SDPA_fwd"), (_SDPA_BWD, "SDPA_bwd"), (_CONV_FWD, "CONV_fwd"),
                     (_CONV_BWD, "CONV_bwd"), (_NORM_FWD, "NORM_fwd"), (_NORM_BWD, "NORM_bwd"),
                     (_ELEMENTWISE, "elementwise"), (_REDUCE, "reduce")):
    for _n in _names:
        OP_CATEGORIES[_n] = _cat


def categorize_op(name: str, first_kernel_name: str = "") -> str:
    """TraceLens-style op category (GEMM, CONV_fwd/bwd, NORM_fwd/bwd, SDPA_fwd/bwd, elementwise,
    reduce, triton, record_param_comms, multi_tensor_apply, other) of a kernel-launching op.

    Unknown ops fall back on the first kernel's name when it is an ATen native kernel
    (``void at::native...`` containing elementwise / reduce / multi_tensor_apply)."""
    cat = OP_CATEGORIES.get(name)
    if cat:
        return cat
    if name.startswith("triton"):
        return "triton"
    if name.startswith("record_param_comms"):
        return "record_param_comms"
    if first_kernel_name.startswith("void at::native"):
        for needle in ("elementwise", "reduce", "multi_tensor_apply"):
            if needle in first_kernel_name:
                return needle
    return "other"


def ops_by_category(trace: KinetoTrace) -> list[dict]:
    """TraceLens's ops_summary_by_category from the raw trace: kernel launchers (innermost
    cpu_op of a linked kernel's launch, or the runtime call when none) grouped by category.

    Returns rows ``{category, count, kernel_time_ms, percent}`` sorted by time, where count is
    the number of launchers and kernel time is the busy time (union) of each launcher's
    direct kernels, summed. Communication kernels are left out, as in TraceLens."""
    launchers: dict[tuple, list[GpuEvent]] = defaultdict(list)
    for g in trace.gpu:
        if not g.linked or g.kind == COMM:
            continue
        key = ("op", g.launcher) if g.launcher >= 0 else ("rt", id(g))
        launchers[key].append(g)
    agg: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for (kind, idx), ks in launchers.items():
        ks.sort(key=lambda k: k.ts)
        name = trace.cpu_ops[idx][2] if kind == "op" else ""
        cat = categorize_op(name, ks[0].name) if kind == "op" else "other"
        agg[cat][0] += 1
        agg[cat][1] += total_length(merge_intervals((k.ts, k.end) for k in ks))
    total = sum(v[1] for v in agg.values())
    rows = [
        {"category": c, "count": int(v[0]), "kernel_time_ms": v[1] / 1e3,
         "percent": (v[1] / total * 100.0) if total else 0.0}
        for c, v in agg.items()
    ]
    rows.sort(key=lambda r: -r["kernel_time_ms"])
    return rows


def kernel_stats(trace: KinetoTrace, *, short_kernel_us: float = 10.0, top: int = 20) -> dict:
    """Kernel figures over every ``cat == kernel`` event (linked or not, as TraceLens's
    kernel_summary): ``kernel_count``, ``kernel_time_us``, ``top_kernels`` (name, count,
    total_us, mean_us, percent of kernel time), ``short_kernels`` (dur < ``short_kernel_us``:
    count, time_us, percent of kernel time, percent of total GPU time; count/time of those
    launched under a cpu_op, the figures TraceLens's short_kernels_summary sums to) and the per-launcher
    ``kernels_by_category``. ``short_kernel_us`` default 10 µs is TraceLens's
    ``short_kernel_threshold_us``."""
    kernels = [g for g in trace.gpu if g.cat == "kernel"]
    durs = [g.dur for g in kernels]
    ktime = sum(durs)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    by_cat: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for g, d in zip(kernels, durs):
        by_name[g.name][0] += 1
        by_name[g.name][1] += d
        cat = categorize_op(trace.cpu_ops[g.launcher][2], g.name) if g.launcher >= 0 else "unlinked"
        by_cat[cat][0] += 1
        by_cat[cat][1] += d
    tops = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]
    short = [d for d in durs if d < short_kernel_us]
    short_op = [g.dur for g in kernels if g.dur < short_kernel_us and g.launcher >= 0]
    total_us = timeline_of(trace)["total_time"].time_ms * 1e3
    return {
        "kernel_count": len(kernels),
        "kernel_time_us": ktime,
        "top_kernels": [
            {"name": n, "count": int(c), "total_us": t, "mean_us": t / c,
             "percent": (t / ktime * 100.0) if ktime else 0.0}
            for n, (c, t) in tops
        ],
        "kernels_by_category": sorted(
            ({"category": c, "count": int(v[0]), "kernel_time_ms": v[1] / 1e3,
              "percent": (v[1] / ktime * 100.0) if ktime else 0.0} for c, v in by_cat.items()),
            key=lambda r: -r["kernel_time_ms"]),
        "short_kernels": {
            "threshold_us": short_kernel_us,
            "count": len(short),
            "time_us": sum(short),
            "percent_of_kernel_time": (sum(short) / ktime * 100.0) if ktime else 0.0,
            "percent_of_total_time": (sum(short) / total_us * 100.0) if total_us else 0.0,
            # TraceLens's short_kernels_summary groups by parent cpu_op and drops kernels
            # without one; these two are the figures comparable to its sums.
            "count_with_cpu_op": len(short_op),
            "time_us_with_cpu_op": sum(short_op),
        },
    }


def count_kernels(path: str | Path, short_kernel_us: float = 10.0) -> dict:
    """Kernel count and short-kernel figures of one trace; see :func:`kernel_stats`."""
    return kernel_stats(load_events(path), short_kernel_us=short_kernel_us)


def step_stats(trace: KinetoTrace) -> dict:
    """``n_steps`` (ProfilerStep#N annotations), ``step_time_ms`` (mean duration),
    ``dataloader_ms_per_step`` (CPU ms in DataLoader ops, e.g. ``enumerate(DataLoader)#...
    __next__``, divided by the step count, or the total when there are no steps)."""
    n = len(trace.steps)
    dl_ms = sum(d for _ts, d, _n in trace.dataloader) / 1e3
    return {
        "n_steps": n,
        "step_time_ms": (sum(d for _ts, d, _n in trace.steps) / n / 1e3) if n else None,
        "dataloader_ms_per_step": dl_ms / n if n else dl_ms,
    }


def launch_stats(trace: KinetoTrace) -> dict:
    """Figures for a launch/dispatch-bound diagnosis: ``mean_kernel_us``, ``median_gap_us``
    (start of a kernel minus end of the previous one on the GPU, negative overlaps clipped to
    0), ``launch_calls`` (cudaLaunchKernel/hipLaunchKernel and their variants) and
    ``mean_launch_cpu_us`` (their mean CPU duration)."""
    ks = sorted((g.ts, g.end, g.dur) for g in trace.gpu if g.cat == "kernel")
    gaps = [max(0.0, ks[i][0] - ks[i - 1][1]) for i in range(1, len(ks))]
    launches = [end - ts for ts, end, name, *_ in trace.runtime if name in LAUNCH_KERNEL_NAMES]
    return {
        "mean_kernel_us": (sum(k[2] for k in ks) / len(ks)) if ks else 0.0,
        "median_gap_us": statistics.median(gaps) if gaps else 0.0,
        "launch_calls": len(launches),
        "mean_launch_cpu_us": (sum(launches) / len(launches)) if launches else 0.0,
    }


def gpu_ids(trace: KinetoTrace) -> list[int]:
    """Device ids seen on GPU events (``args.device``, else the GPU pid)."""
    ids = set()
    for g in trace.gpu:
        d = g.device if g.device is not None else g.pid
        if isinstance(d, int):
            ids.add(d)
    return sorted(ids)
