"""Hand-built kineto traces of a step made of top-level ops with known host and kernel times, for
the host-side causes of issue 24 (CPU tensor work, per-sample loops, launch overhead): each step
is a ``ProfilerStep#N`` window of ``wall`` µs on host thread 1 holding the ops of ``items`` back to
back from 10 µs after the step start; everything else of the step is outside every op. Read
through the real one pass (:func:`step_traces.read`), so the analyst's accounting and the
verifier's sampler both run on it."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from step_traces import _x, header, windows, write


class Op(NamedTuple):
    """One top-level op: ``host_us`` on the host; with ``kernel_us`` > 0 one launch call of
    ``launch_us`` inside it at 1 µs and one kernel of ``kernel_us`` starting 2 µs after the launch
    returns (with ``kernel_us`` = 0 the op launches nothing: CPU tensor work); ``dims``: its
    ``Input Dims`` (``record_shapes``); ``sync``: a ``cudaStreamSynchronize`` of ``launch_us`` at 1 µs instead
    of the launch (a host read of a device value, ``aten::item``)."""

    name: str
    host_us: float
    kernel_us: float = 0.0
    launch_us: float = 5.0
    dims: list | None = None
    kernel: str = "ampere_sgemm_128x64_tn"
    sync: bool = False


def host_trace(tmp: Path, items: list[Op], *, steps: int = 3, wall: float = 10000.0, rocm: bool = False,
               py: tuple[str, int, int] | None = None, name: str = "h.json.gz") -> Path:
    """The trace (see the module docstring); ``py``: ``(frame, first, last)`` a user Python frame
    (``file.py(line): function``) spanning ``items[first:last]`` (with_stack)."""
    rt = "hip" if rocm else "cuda"
    ev = header()
    corr = 1
    for s0 in windows(ev, steps, wall):
        t = s0 + 10
        starts = []
        for op in items:
            starts.append(t)
            args = {"External id": corr}
            if op.dims is not None:
                args["Input Dims"] = op.dims
            ev.append(_x("cpu_op", op.name, t, op.host_us, **args))
            if op.sync:
                ev.append(_x("cuda_runtime", f"{rt}StreamSynchronize", t + 1, op.launch_us, correlation=corr))
            elif op.kernel_us > 0:
                ev.append(_x("cuda_runtime", f"{rt}LaunchKernel", t + 1, op.launch_us, correlation=corr))
                ev.append(_x("kernel", op.kernel, t + 1 + op.launch_us + 2, op.kernel_us, tid=7, pid=0,
                             correlation=corr, device=0, stream=7))
            corr += 1
            t += op.host_us
        if py is not None:
            frame, a, b = py
            end = starts[b] if b < len(starts) else t
            ev.append(_x("python_function", frame, starts[a], end - starts[a]))
    return write(tmp / name, ev)
