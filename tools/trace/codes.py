"""The codes the engine's one pass keeps a trace's events under (GPU kinds, timeline classes, "no
stream"), the name rules it applies while reading, and the event phases it reads specially: kept
apart from :mod:`.scan` (which re-exports them) so that the parallel pass's worker processes
(:mod:`.scan_parallel`) import no numpy (11 MiB of RSS and 0.1 s per worker, measured on the
project's 2-core machine, 2026-12-02)."""

from __future__ import annotations

import re

from .categories import _COMM_RE

#: GPU event categories of kineto traces, as TraceLens and HTA read them.
GPU_CATS: dict[str, int] = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2}
KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET = 0, 1, 2

#: Class codes of the gpu_timeline (TraceLens semantics).
CLS_COMP, CLS_COMM, CLS_MEMCPY = 0, 1, 2

#: Communication kernels: TraceLens ``COMMUNICATION_KEYS`` (``nccl``, ``rccl``, substring, any case)
#: plus its default custom collective ``cross_device_reduce`` (vLLM).
COMM_RE = _COMM_RE  # the same rule as the single-trace path
#: ROCm 7.1 legacy copy / fill kernels that TraceLens re-routes (memcpy / computation).
ROCM_LEGACY_MEMCPY_RE = re.compile(
    r"^(MEMORY_COPY_(HOST_TO_DEVICE|DEVICE_TO_HOST|DEVICE_TO_DEVICE)"
    r"|__amd_rocclr_copyBuffer(Rect)?(Aligned)?)(\.kd)?$"
)

#: The ``args`` keys of a ``cpu_op`` that TraceLens's sheets group the ops by (its ``Input Dims``,
#: ``Input type``, ``Input Strides``, ``Concrete Inputs`` columns; :mod:`.tracelens_sheets`).
OP_ARG_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
#: The ``args`` keys of the metadata events (``ph`` M) that name processes and threads
#: (``process_name`` / ``thread_name``: ``name``; ``process_labels``: ``labels``), kineto's layout.
METADATA_ARG_KEYS = ("name", "labels")

#: Kernel args that carry collective metadata (PyTorch >= 2.1 record_param_comms on the kernel).
COLLECTIVE_ARG_KEYS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "In split size",
    "Out split size",
)

#: "No stream" in :attr:`.scan.TraceScan.stream` (the event carries no usable ``args.stream``).
NO_STREAM = -1

#: Trace Event Format duration pairs (joined by :class:`.stream_fix.DurationPairs`) and instants.
PAIR_PHASES = frozenset({"B", "E", "b", "e", "S", "F"})
INSTANT_PHASES = frozenset({"i", "I", "n"})
