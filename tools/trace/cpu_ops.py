"""CPU tensor work in the step (issue 24, ``cpu-preprocess-in-step``): the GPU-idle time the host
spent inside top-level recorded ops that launched no GPU work (``aten::sort`` / ``aten::randn`` /
``aten::std`` on CPU tensors between steps), by op name, for the step accounting
(:mod:`.host_timeline`).

A top-level op (a ``cpu_op`` or annotation with no recorded op around it, ``StepView.top_ops``)
*launched GPU work* when some runtime call on its thread within its interval is the launching call
of a linked GPU event (``GpuColumns.launch``: kernels, memcpys, memsets, wherever they ran). The
time counted is the GPU-idle time of the step's host-timeline cells whose state is the CPU side of
an op (category ``op``) and which lie inside such a kernel-less top-level op on their own thread: a
launch, sync or allocator call inside it keeps its own category and is not counted. The tools
measure; the rule (``graph/rules/causes/cpu_preprocess.py``) decides.
"""

from __future__ import annotations

import numpy as np

from .step_window import GpuColumns, HostColumns, StepView


def launching_calls(host: HostColumns, gpu: GpuColumns) -> np.ndarray:
    """Boolean mask over ``host`` (len = number of host events): True for the runtime calls that
    launched at least one linked GPU event (``gpu.launch``)."""
    mask = np.zeros(host.ts.size, dtype=bool)
    ln = gpu.launch[gpu.launch >= 0]
    if ln.size:
        mask[ln] = True
    return mask


def cpu_only_op_idle(view: StepView, host: HostColumns, launching: np.ndarray, state_cat: np.ndarray,
                     op_code: int) -> dict[str, float]:
    """Top-level op name -> GPU-idle µs of the step spent in the CPU side (category code ``op_code``
    of ``state_cat``, the category per host state id) of top-level ops of that name that launched
    no GPU work (see the module docstring). ``launching``: :func:`launching_calls`. {} when none."""
    out: dict[str, float] = {}
    if view.c_t0.size == 0:
        return out
    idle = view.idle_before(view.c_t1) - view.idle_before(view.c_t0)
    is_op = state_cat[view.c_sid] == op_code
    for thr, tops in view.top_ops.items():
        if not tops:
            continue
        tp = np.asarray(tops, dtype=np.int64)
        tp = tp[np.argsort(host.ts[tp], kind="stable")]
        t0, t1 = host.ts[tp], host.end[tp]
        calls = view.host[(host.thr[view.host] == thr) & launching[view.host]]
        has = np.zeros(tp.size, dtype=bool)
        if calls.size:
            j = np.searchsorted(t0, host.ts[calls], "right") - 1
            ok = (j >= 0) & (t1[np.maximum(j, 0)] >= host.ts[calls])
            has[j[ok]] = True
        cells = np.flatnonzero(is_op & (view.c_thr == thr))
        if cells.size == 0:
            continue
        mid = (view.c_t0[cells] + view.c_t1[cells]) / 2.0
        j = np.searchsorted(t0, mid, "right") - 1
        jj = np.maximum(j, 0)
        keep = (j >= 0) & (t1[jj] > mid) & ~has[jj]
        for k, us in zip(tp[jj[keep]].tolist(), idle[cells[keep]].tolist()):
            if us > 0:
                nm = host.names[int(host.name[k])]
                out[nm] = out.get(nm, 0.0) + float(us)
    return out
