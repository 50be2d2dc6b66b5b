"""Input-hygiene facts shared by the engine (:mod:`.stream`) and the verifier's reader (:mod:`.kineto`):
which CPU calls are graph launches, what to say when their kernels were not recorded, and the rule
that flags a profiled window that is not a steady state. Each reader applies them with its own code.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import NoGpuEventsError

#: Graph launches of the runtime and driver APIs on CUDA and HIP, with their per-thread-stream and
#: versioned variants: cudaGraphLaunch, cudaGraphLaunch_ptsz, cudaGraphLaunch_v10000, cuGraphLaunch,
#: cuGraphLaunch_ptsz, hipGraphLaunch, hipGraphLaunch_spt, hipGraphLaunchExp... (CUDA Runtime / Driver
#: API references, "Graph Management"; HIP API reference, "Graph Management").
GRAPH_LAUNCH_RE = re.compile(r"^(cuda|cu|hip)GraphLaunch")

#: A profiler step annotation: torch.profiler names them ``ProfilerStep#<n>``
#: (torch/profiler/profiler.py, ``record_function("ProfilerStep#" + str(self.step_num))``);
#: spaces around ``#`` are accepted (hand-written and converted traces). At most 18 digits, so that
#: every step number is an int64 (the readers' arrays); a longer one is no step number torch can
#: write (``step_num`` counts steps) and the event is not a step (an OverflowError stopped the run before).
STEP_NAME_RE = re.compile(r"^ProfilerStep\s*#\s*(\d{1,18})(?!\d)")

#: How to record graph-replayed kernels: a CUDA/HIP graph captured before the profiler was first
#: initialised replays without kernel records (pytorch/pytorch PR #100441, which added the workaround).
GRAPH_RECORD_HINT = ("profile with ProfilerActivity.CUDA in `activities` and initialise the profiler before the "
                     "graph is captured: call torch.profiler._utils._init_for_cuda_graphs() (or run "
                     "`with torch.profiler.profile(): pass`) before capture (pytorch/pytorch#100441); or profile "
                     "without graphs (vLLM: --enforce-eager)")


def num(v: Any) -> float | None:
    """A finite float from a JSON number or a numeric string (``"12.5"``); None for anything else
    (bool, list, dict, NaN, inf, an int too large for a float)."""
    t = type(v)
    if t is float or t is int:
        try:
            f = float(v)
        except OverflowError:
            return None
    elif t is str:
        try:
            f = float(v)
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def as_id(v: Any, bound: int = 1 << 63) -> int | None:
    """A correlation / External id / flow id as a non-negative int below ``bound``: ints, integral
    floats and digit strings; None for anything else (bools, NaN, negatives, out of range, lists).
    Kineto writes these ids as positive counters; an id that is not one links nothing. Both readers
    apply this rule with their own code paths around it."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v):
            return None
        v = int(v)
    elif isinstance(v, str):
        if not v.isdigit():
            return None
        v = int(v)
    if isinstance(v, int) and 0 <= v < bound:
        return v
    return None


class GraphKernelsNotRecordedError(NoGpuEventsError):
    """The trace has graph launches (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch...) but no GPU
    event: the graph-replayed kernels were not recorded (the host did launch GPU work)."""


def graph_not_recorded_message(name: str, launches: dict[str, int]) -> str:
    """The one-line message of :class:`GraphKernelsNotRecordedError` for ``{API: calls}``."""
    calls = sum(launches.values())
    apis = ", ".join(f"{k} x{v}" for k, v in sorted(launches.items()))
    return (f"{name}: graph-replayed kernels were not recorded: {calls} graph launches ({apis}) and 0 GPU events "
            f"(the host did launch GPU work). To record them, {GRAPH_RECORD_HINT}")


def window_flags(step_gpu_events: dict[int, int]) -> dict:
    """Flags on the profiled window from ``{ProfilerStep number: GPU events launched in it}``.

    A steady-state window has every profiled step launch GPU work (seed 001 T19: a scheduled profile
    of a few steps after warm-up); a step that launched none while others did means the window mixes
    phases (warm-up, evaluation, a stall), and a GPU timeline over it describes the one busy part
    only. Returns ``{"n_steps", "steps_with_gpu", "steps_without_gpu": [numbers], "degenerate":
    bool, "reason": str}``; ``degenerate`` when at least one step launched GPU work and another none."""
    n = len(step_gpu_events)
    without = sorted(s for s, c in step_gpu_events.items() if c == 0)
    with_gpu = n - len(without)
    degenerate = bool(with_gpu >= 1 and without)
    reason = ""
    if degenerate:
        reason = (f"GPU work was launched in {with_gpu} of {n} profiled steps (none in step(s) "
                  f"{', '.join(map(str, without[:8]))}{' ...' if len(without) > 8 else ''}): not a steady-state "
                  "window, so the GPU timeline describes the busy part only")
    return {"n_steps": n, "steps_with_gpu": with_gpu, "steps_without_gpu": without, "degenerate": degenerate,
            "reason": reason}


def input_notes(*, renamed: list[tuple[str, str, int]] = (), joined: tuple[int, int, int] = (0, 0, 0),
                lone_ends: tuple[int, int] = (0, 0), never_ended: tuple[int, int] = (0, 0), instants: int = 0,
                bad_durations: int = 0, bad_numbers: int = 0, zero_inside: int = 0,
                ill_typed: int = 0, args_not_object: int = 0) -> list[str]:
    """The lines that say what a reader did about a trace's input, from the counts each reader
    takes with its own code: ``renamed`` ``(category as written, kineto's name, events)``;
    ``joined`` ``(B/E pairs, async b/e pairs, of them GPU events)``; ``lone_ends`` / ``never_ended``
    ``(events, of them GPU events)``; ``instants`` on GPU rows; GPU events dropped for a negative
    or non-finite dur (``bad_durations``) or for no numeric ts / dur (``bad_numbers``); zero-length
    GPU events inside another event on their stream (``zero_inside``: they clip nothing); events of a
    shape kineto never writes, left out (``ill_typed``: not a JSON object, or an unhashable category
    such as a list), and GPU events whose ``args`` is not an object, kept without their stream and
    device (``args_not_object``)."""
    out = []
    if renamed:
        out.append("categories normalised to kineto's names: " + ", ".join(f"'{r}' -> {c} ({k} events)"
                                                                         for r, c, k in sorted(renamed)))
    sync, asyn, gpu = joined
    if sync or asyn:
        out.append(f"{sync + asyn} Trace Event Format duration pair(s) joined into complete events "
                   f"({sync} \"ph\": \"B\"/\"E\", {asyn} async \"b\"/\"e\"; {gpu} of them GPU events)")
    if lone_ends[0]:
        out.append(f"{lone_ends[0]} end event(s) (\"ph\": \"E\"/\"e\") close no open begin on their thread or id "
                   f"({lone_ends[1]} of them GPU events): dropped")
    if never_ended[0]:
        out.append(f"{never_ended[0]} begin event(s) (\"ph\": \"B\"/\"b\") never ended ({never_ended[1]} of them GPU "
                   "events): their length is unknown, left out")
    if instants:
        out.append(f"{instants} instant event(s) (\"ph\": \"i\") on GPU rows: a moment, not GPU work: left out")
    if bad_durations:
        out.append(f"{bad_durations} GPU event(s) with a negative or non-finite dur dropped (an export fault): "
                   "the figures leave them out")
    if bad_numbers:
        out.append(f"{bad_numbers} GPU event(s) without a numeric, finite ts or dur dropped: the figures leave them out")
    if ill_typed:
        out.append(f"{ill_typed} event(s) of a shape the PyTorch profiler never writes (not a JSON object, or a "
                   "category that is not a string) left out")
    if args_not_object:
        out.append(f"{args_not_object} GPU event(s) whose args is not a JSON object: kept without their stream "
                   "and device")
    if zero_inside:
        out.append(f"{zero_inside} zero-length GPU event(s) (dur 0) lie inside another event on their stream: "
                   "a point in time, they clip nothing (pytorch/kineto#136)")
    return out
#: Least widening (µs) of :func:`far_outside_bounds`: 1 s, over 6x the largest launch-to-start lag
#: measured on the 26 real traces at hand (159 ms, 93004 rank 1; 91001: 0.03 ms), so that a tiny or
#: hand-built trace's short lag is never taken for a fault.
FAR_FLOOR_US = 1e6


def far_outside_bounds(step_spans: list[tuple[float, float]], launch_lo: float | None, launch_hi: float | None,
                       gpu_work_us: float) -> tuple[float, float, float, float] | None:
    """The span (trace µs) outside which a GPU event cannot belong to the profiled work, or None
    when the trace gives no host-side reference: ``(low, high, reference start, reference end)``.
    The reference is the profiled steps (``(ts, dur)`` of each ProfilerStep), else the launch calls'
    span (``launch_lo`` .. ``launch_hi``); it is widened on each side by the largest of
    ``gpu_work_us`` (the sum of every GPU event's recorded duration: a GPU runs what was launched in
    order, so even with all of it queued behind one stream the last of it starts no later than the
    reference's end plus all that work), the reference's own length and :data:`FAR_FLOOR_US`. An event wholly outside is a
    clock or export fault (one kernel 1000 s away); it is left out and said. TraceLens keeps every
    GPU event: its gpu_timeline ``total_time`` runs from the first GPU event's start to the last one's
    end (``GPUEventAnalyser.compute_metrics_dict``), so on such a trace it reads the idle share near
    100%. Both readers apply this rule with their own code."""
    if step_spans:
        lo = min(t for t, _d in step_spans)
        hi = max(t + d for t, d in step_spans)
    elif launch_lo is not None and launch_hi is not None:
        lo, hi = launch_lo, launch_hi
    else:
        return None
    w = max(float(gpu_work_us), hi - lo, FAR_FLOOR_US)
    return lo - w, hi + w, lo, hi


def far_outside_note(n: int, first_name: str, offset_s: float, bounds_width_us: float) -> str:
    """The input note of :func:`far_outside_bounds`'s events (one line, the same in both readers):
    ``offset_s`` from the reference span (negative: before it), ``bounds_width_us`` the widening."""
    side = "after the end" if offset_s > 0 else "before the start"
    return (f"{n} GPU event(s) far outside the profiled steps (the first '{first_name[:60]}' {abs(offset_s):.3g} s "
            f"{side} of the steps, farther than {bounds_width_us / 1e6:.3g} s, the most all the trace's work could lag): a clock "
            "or export fault, left out of every figure (TraceLens counts it: its total_time runs from the first "
            "GPU event to the last, so it reads GPU idle near 100%)")


def tail_bound(cpu_lo: float | None, cpu_hi: float | None) -> float | None:
    """The latest end (trace µs) a GPU event can have, or None without host-side events: the end
    of the last CPU-side event (cpu_op or runtime call: ``cpu_hi``, their first start ``cpu_lo``)
    plus the larger of the host span (``cpu_hi - cpu_lo``) and :data:`FAR_FLOOR_US`. The profiler's
    host activity ends after the work it profiled: on the 22 real traces at hand (the bundled H200
    runs, HTA's and TraceLens's) the last GPU event ends at most 1.07 ms after the last CPU-side
    event (HTA's sampled rank 1: 0.09% of its host span; every other one before it), so a GPU event
    ending a host span (and at least 1 s) later holds a duration no clock can have given (a kernel
    of 1e12 µs): a corrupt duration, left out of every figure by both readers and said
    (:func:`tail_note`)."""
    if cpu_lo is None or cpu_hi is None:
        return None
    return cpu_hi + max(cpu_hi - cpu_lo, FAR_FLOOR_US)


def tail_note(n: int, first_name: str, past_s: float, allowed_s: float) -> str:
    """The input note of :func:`tail_bound`'s events (one line, the same in both readers)."""
    return (f"{n} GPU event(s) ending far after the profiled host activity (the first '{first_name[:60]}' ends "
            f"{past_s:.3g} s after the last CPU-side event, later than the {allowed_s:.3g} s any recorded work "
            "could run on): a corrupt duration, left out of every figure")


def tail_kept_note(n: int, first_name: str, past_s: float, allowed_s: float) -> str:
    """The input note of :func:`tail_bound`'s events kept because they are every GPU event, or every
    one the figures read (the linked ones): one line, the same in both readers."""
    return (f"{n} GPU event(s) ending far after the profiled host activity (the first '{first_name[:60]}' ends "
            f"{past_s:.3g} s after the last CPU-side event, later than the {allowed_s:.3g} s any recorded work "
            "could run on) are kept: they are every GPU event the figures read, so the GPU timeline's span and "
            "idle time rest on durations or host timestamps that may be wrong")


#: Fewest GPU kernels a GPU timeline share can be measured over: with one, the window (first start
#: to last end) IS that kernel, so it reads 100% busy by construction.
MIN_GPU_KERNELS = 2
#: Least GPU busy time (µs) a bottleneck class may be read from: ten kernel launches' worth at the
#: H200's measured launch latency (6.1 µs, reports/eval-h200-2026-11-29.md; 3.5-3.8 µs on MI355X,
#: seed 000 lesson 18). Below it the whole profile holds less GPU work than the host spends launching
#: a handful of kernels, so neither the busy nor the idle share says where a step's time goes. The
#: smallest real profile at hand holds 309 µs (TraceLens's H100 BERT-small trace, 60 kernels).
MIN_GPU_BUSY_US = 10 * 6.1


def gpu_activity_problem(kernel_count: int, busy_us: float) -> str | None:
    """Why a trace holds too little GPU work for a bottleneck class (one line), or None when it holds
    enough: every GPU event of zero duration, fewer than :data:`MIN_GPU_KERNELS` kernels, or less than
    :data:`MIN_GPU_BUSY_US` of GPU busy time. Both readers apply it to their own figures."""
    if not (busy_us > 0.0):
        return "every GPU event of the trace lasts 0 µs: no GPU time to classify"
    if kernel_count < MIN_GPU_KERNELS:
        return (f"{kernel_count} GPU kernel(s) in the trace: a share of the GPU window needs at least "
                f"{MIN_GPU_KERNELS} (with one, the window is that kernel)")
    if busy_us < MIN_GPU_BUSY_US:
        return (f"GPU busy {busy_us:.3g} µs in the whole trace, under the {MIN_GPU_BUSY_US:.0f} µs minimum (10 kernel "
                "launch latencies): too little GPU work for a class")
    return None
