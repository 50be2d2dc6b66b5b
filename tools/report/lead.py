"""A lead, not a guess (issue 34 point 5): when no cause is named, what the report tells the user to
look at is the largest attribution of the profiled step in the step accounting
(:class:`~ai4s_graph.state.steps.StepBreakdown` as a dict, ``rank["step_accounting"]``), with its
numbers and the measurement that would confirm it.

The step's wall time is partitioned by the accounting into the GPU-busy parts (computation,
exposed communication, exposed memcpy: ``mean_gpu``) and the GPU-idle time by what the host did
meanwhile (``mean_idle_by_host_us``, one entry per ``state/steps.py:HOST_CATEGORIES``); these add
up to the mean step. The lead follows the accounting's own hierarchy (issue 34 point 1: the step is
GPU busy or GPU idle, and the idle time is split by host state): the larger of GPU busy and GPU
idle first, then its largest part (a GPU-busy part, or the host state that takes most of the idle
time), so one busy part is never weighed against one slice of the idle time. A host category takes the accounting's own
:class:`~ai4s_graph.state.steps.Lead` sentence (its largest name, call site and structure figures);
a GPU part names the critical rank's largest kernel. Rendering only: this names where the time is,
never a cause or a class.
"""

from __future__ import annotations

from typing import Any

from ...state.report import ReportLead
from ...state.steps import HOST_CATEGORIES
from ..trace.scan import COMM_RE
from .budget import rank_budget

GPU_PARTS = {"gpu:computation": "computation_us", "gpu:communication": "exposed_comm_us",
             "gpu:memcpy": "exposed_memcpy_us"}
"""Lead category of a GPU-busy part -> its field of ``mean_gpu`` (the critical path's names for them,
``state/steps.py:CriticalPath``)."""
LEAD_CATEGORIES: tuple[str, ...] = (*GPU_PARTS, *HOST_CATEGORIES)
"""Every category a lead can have: the GPU-busy parts, then the host categories of the GPU-idle time."""

_GPU_WORDS = {"gpu:computation": "computing",
              "gpu:communication": "in communication that no computation hid (exposed communication)",
              "gpu:memcpy": "in copies that no computation hid (exposed memcpy)"}

CONFIRM: dict[str, str] = {
    "gpu:computation": "compare the top kernel's achieved FLOP/s and bytes per second with the GPU's peaks "
                       "(the roofline sheets in perf_report_csvs/, or Nsight Compute on that kernel)",
    "gpu:communication": "measure the collectives' bus bandwidth against nccl-tests / rccl-tests on the same "
                         "nodes, and check in the annotated trace whether the all-reduce overlaps the backward",
    "gpu:memcpy": "count the copies' bytes and direction per step in the annotated trace; an A/B run with "
                  "pinned memory and non_blocking=True removes a copy that need not block",
    "launch": "count kernels per step and their mean duration; an A/B run with CUDA graphs "
              "(torch.compile mode='reduce-overhead') removes the launches",
    "allocator": "log torch.cuda.memory_stats() (num_alloc_retries, segment counts) per step; cudaMalloc / "
                 "cudaFree calls per steady step should be 0",
    "sync": "run a step under torch.cuda.set_sync_debug_mode('warn'): it prints the call site of every "
            "synchronizing call",
    "dataloader": "time next(iter(loader)) alone over the same batches; an A/B run with more workers (or "
                  "a deeper prefetch_factor) shortens the wait",
    "optimizer": "time optimizer.step() alone (torch.cuda.synchronize() around it); an A/B run with "
                 "foreach=True or fused=True",
    "runtime_other": "the call's name and count per step in the annotated trace; profile with "
                     "with_stack=True to name its call site",
    "op": "profile one step with record_shapes=True and with_stack=True: the op's input shapes and Python "
          "line; the same op repeated on batch-1 shapes is a per-sample loop",
    "outside_ops": "profile with with_stack=True (python_function events) to name the Python line, or "
                   "py-spy record the training process over a few steps",
}
"""Category -> the measurement that would confirm the lead (what a performance engineer runs next;
the tools named are torch's, NCCL's and py-spy's documented ones)."""


def _mean_parts(acc: dict[str, Any]) -> dict[str, float]:
    """µs per step of every lead category (GPU-busy parts and GPU-idle host categories)."""
    gpu = acc.get("mean_gpu") or {}
    idle = acc.get("mean_idle_by_host_us") or {}
    out = {k: float(gpu.get(f) or 0.0) for k, f in GPU_PARTS.items()}
    out.update({c: float(idle.get(c) or 0.0) for c in HOST_CATEGORIES})
    return out


def step_lead(acc: dict[str, Any] | None, rank: int | None = None,
              top_kernels: list[dict[str, Any]] | None = None) -> ReportLead | None:
    """The lead of one rank's step accounting ``acc`` (a ``StepBreakdown`` dict), or None when it
    holds no step or no time. ``rank``: the rank it is of (the critical rank); ``top_kernels``: the
    report's rows of that rank (``name``, ``total_ms``, ``percent``), named when the lead is a
    GPU-busy part. The side (GPU busy or idle) with more time is chosen first (a tie: GPU busy), then
    its largest part (ties to the earlier of :data:`LEAD_CATEGORIES`). Times in the result are µs per profiled step (means)."""
    if not acc or not acc.get("steps"):
        return None
    parts = _mean_parts(acc)
    step_us = sum(float(s["wall_us"]) for s in acc["steps"]) / len(acc["steps"])
    if step_us <= 0 or max(parts.values()) <= 0:
        return None
    busy = sum(parts[c] for c in GPU_PARTS)
    side = tuple(GPU_PARTS) if busy >= sum(parts[c] for c in HOST_CATEGORIES) else HOST_CATEGORIES
    cat = max(side, key=lambda c: (parts[c], -LEAD_CATEGORIES.index(c)))
    us = parts[cat]
    cp = (rank_budget(acc, rank) or {}).get("critical_path") or {}
    top_op, top_site = (cp.get("top_ops") or [None])[0], (cp.get("top_sites") or [None])[0]
    host = acc.get("lead") or {}
    name, site = "", ""
    if cat in GPU_PARTS:
        text = f"the GPU spent {us / 1e3:.3g} ms of the {step_us / 1e3:.3g} ms step {_GPU_WORDS[cat]}"
        # the largest computation kernel (a communication kernel's time is not computation: TraceLens's classes)
        k = next((x for x in top_kernels or [] if not COMM_RE.search(str(x.get("name") or ""))), None) \
            if cat == "gpu:computation" else None
        if k and k.get("name"):
            name = str(k["name"])
            pct = f", {k['percent']:.0f}% of kernel time" if k.get("percent") is not None else ""
            text += f" (largest kernel: {name}{pct})"
    elif host.get("category") == cat and host.get("text"):
        name, site = str(host.get("name") or host.get("op") or ""), str(host.get("site") or "")
        text = str(host["text"])
    else:  # the accounting's own lead is over GPU-idle time; the categories match whenever it has one
        text = f"the host spent {us / 1e3:.3g} ms of the {step_us / 1e3:.3g} ms step in {cat} while the GPU was idle"
    if top_site and top_site["key"] not in text:
        text += f"; the critical path's largest call site is {top_site['key']} ({100 * top_site['share']:.0f}%)"
    if cat not in GPU_PARTS and not acc.get("has_python_stacks"):
        text += " (no Python stacks in the trace: no call site)"
    return ReportLead(rank=rank, category=cat, name=name, site=site, us=us, step_us=step_us, share=us / step_us,
                      text=text[0].upper() + text[1:], confirm=CONFIRM[cat],
                      critical_path_top_op=top_op, critical_path_top_site=top_site)


def short_text(lead: ReportLead) -> str:
    """The lead in a dozen words for the executive summary: ``host in the CPU side of ops 130 of 225
    ms (aten::linear)``, ``GPU computing 207 of 227 ms``."""
    what = {"gpu:computation": "GPU computing", "gpu:communication": "exposed communication",
            "gpu:memcpy": "exposed memcpy", "outside_ops": "host outside any recorded op",
            "op": "host in ops' CPU side", "launch": "host launching kernels", "sync": "host waiting on the device",
            "allocator": "host in the allocator", "dataloader": "host in the DataLoader",
            "optimizer": "host in the optimizer step", "runtime_other": "host in other runtime calls"}[lead.category]
    s = f"{what}, {lead.us / 1e3:.3g} of {lead.step_us / 1e3:.3g} ms per step"
    if lead.name and len(lead.name) <= 40:
        s += f" ({lead.name})"
    return s


__all__ = ["CONFIRM", "GPU_PARTS", "LEAD_CATEGORIES", "short_text", "step_lead"]
