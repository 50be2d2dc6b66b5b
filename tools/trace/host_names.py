"""What a host event's name says the host was doing: the host categories of the step accounting
(issue 34), shared as data by the engine's consumer (:mod:`.host_timeline`) and the verifier's
sampler (:mod:`.host_sampling`), each applying them with its own code.

Categories (``state.steps.HOST_CATEGORIES``), finest first:

- ``launch``: a kernel, graph or copy/fill being enqueued (the launch APIs of CUDA runtime and
  driver and of HIP, graph launches, ``cudaMemcpyAsync``/``cudaMemsetAsync`` that return at once);
- ``sync``: the host waiting on the device: stream/device/event synchronize, synchronous copies
  (``cudaMemcpy``; ``cudaMemcpyAsync`` whose copy is device-to-host into pageable memory, which
  "will return once the copy has completed": CUDA Runtime API, "API synchronization behavior",
  Memcpy); an op that reads a device scalar (``aten::item`` -> ``aten::_local_scalar_dense``) waits in
  the copy and stream synchronize it encloses, so its wait is ``sync`` by those calls (an ``.item()``
  of a CPU tensor encloses none and stays an op's CPU side);
- ``allocator``: device and pinned-host allocation and release (``cudaMalloc``, ``cudaFree``,
  ``cudaHostAlloc``, ``cudaMallocHost``, the driver's ``cuMem*`` virtual-memory calls behind
  expandable segments, ``hipMalloc``, ``hipFree`` ...);
- ``dataloader``: inside ``enumerate(DataLoader)#...__next__`` (any name holding ``DataLoader``, the
  engine's rule);
- ``optimizer``: inside ``Optimizer.step#...`` (torch.optim's ``record_function`` name);
- ``runtime_other``: any other runtime/driver call (``cudaEventRecord``, ``cudaGetDevice`` ...);
- ``op``: an op's CPU side, named by its top-level recorded op;
- ``outside_ops``: no recorded op open (Python, I/O, logging; the user frame names it when the trace
  holds Python stacks).

The innermost classified frame names an instant (a launch inside ``Optimizer.step`` is ``launch``;
the optimizer's own Python between its launches is ``optimizer``); an unclassified op inherits its
parent's state, and a top-level one is ``op`` under its own name. When several threads are in
recorded ops at one instant, the thread whose category comes first in :data:`PRECEDENCE` names it
(driver-level calls say exactly what the host did; regions next; a generic op last); a thread
outside every op names an instant only when no thread is in one.
"""

from __future__ import annotations

import re

from ...state.steps import HOST_CATEGORIES
from .hygiene import GRAPH_LAUNCH_RE

LAUNCH, ALLOCATOR, SYNC, DATALOADER, OPTIMIZER, RUNTIME, OP, OUTSIDE = HOST_CATEGORIES
#: category -> rank (lower wins when several threads are in recorded ops at one instant)
PRECEDENCE: dict[str, int] = {c: i for i, c in enumerate(HOST_CATEGORIES)}

#: Kernel launch APIs (CUDA Runtime/Driver API "Execution Control"; HIP "Execution Control"/"Module
#: Management"), with the per-thread-stream ``_ptsz`` variants kineto keeps in the name.
LAUNCH_APIS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice",
    "cudaLaunchHostFunc", "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuLaunchHostFunc",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel", "hipHccModuleLaunchKernel", "hipLaunchHostFunc",
    # copies and fills that return once enqueued
    "cudaMemsetAsync", "cudaMemset2DAsync", "cudaMemset3DAsync", "cuMemsetD8Async", "cuMemsetD32Async",
    "hipMemsetAsync", "hipMemsetD32Async", "hipMemsetD8Async",
    "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemcpyPeerAsync", "cuMemcpyAsync",
    "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync", "hipMemcpyAsync", "hipMemcpyHtoDAsync",
    "hipMemcpyDtoHAsync", "hipMemcpyDtoDAsync",
})
#: The asynchronous copy APIs whose call blocks when the copy is device-to-host into pageable memory
#: (CUDA Runtime API, "API synchronization behavior": such a copy returns once it has completed).
ASYNC_COPY_APIS = frozenset(n for n in LAUNCH_APIS if "Memcpy" in n)
#: Blocking calls: the host waits for the device (CUDA Runtime API "Stream/Event/Device Management";
#: cudaMemcpy and its synchronous variants, "API synchronization behavior"; HIP likewise).
SYNC_APIS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyPeer", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipCtxSynchronize",
    "hipMemcpy", "hipMemcpy2D", "hipMemcpyDtoH", "hipMemcpyHtoD", "hipMemcpyDtoD", "hipMemcpyFromSymbol",
    "hipMemcpyToSymbol",
    # PyTorch's memcpy_and_sync (ATen/cuda, c10/cuda/CUDAFunctions.h) calls it on ROCm in place of
    # cudaMemcpyAsync + cudaStreamSynchronize: a copy that returns when done
    "hipMemcpyWithStream",
})
#: Ops that copy a device scalar to the host and wait for it (``Tensor.item()``, ``.tolist()``,
#: ``bool(tensor)``: ``aten::item`` -> ``aten::_local_scalar_dense`` -> a copy and a stream sync).
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
#: Allocation APIs (CUDA Runtime "Memory Management", Driver "Virtual Memory Management" behind
#: PyTorch's expandable segments, HIP "Memory Management").
ALLOCATOR_APIS = frozenset({
    "cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc", "cudaHostRegister",
    "cudaHostUnregister", "cudaMallocManaged", "cudaMallocAsync", "cudaFreeAsync", "cudaMallocPitch",
    "cudaMallocFromPoolAsync", "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree", "cuMemFree_v2", "cuMemAllocHost",
    "cuMemFreeHost", "cuMemHostAlloc", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
    "cuMemAddressReserve", "cuMemAddressFree", "cuMemSetAccess", "cuMemAllocAsync", "cuMemFreeAsync",
    "hipMalloc", "hipFree", "hipHostMalloc", "hipHostFree", "hipMallocManaged", "hipMallocAsync", "hipFreeAsync",
    "hipExtMallocWithFlags", "hipHostRegister", "hipHostUnregister", "hipMemCreate", "hipMemRelease", "hipMemMap",
    "hipMemUnmap", "hipMemAddressReserve", "hipMemAddressFree", "hipMemSetAccess",
})
_PTSZ_RE = re.compile(r"_(ptsz|ptds|spt|v\d+)$")
_DATALOADER_RE = re.compile(r"DataLoader", re.IGNORECASE)  # the engine's rule (.stream)
OPTIMIZER_PREFIX = "Optimizer.step#"


def base_api(name: str) -> str:
    """A runtime/driver call's name without its ``_ptsz``/``_ptds``/``_spt``/``_v2``-style suffix."""
    return _PTSZ_RE.sub("", name)


def runtime_category(name: str, copy_blocks: bool = False) -> str:
    """The host category of a runtime/driver call named ``name``; ``copy_blocks``: the call is an
    asynchronous copy whose GPU copy is device-to-host into pageable memory (then it blocks)."""
    if name in ALLOCATOR_APIS or base_api(name) in ALLOCATOR_APIS:
        return ALLOCATOR
    b = name if name in SYNC_APIS or name in LAUNCH_APIS else base_api(name)
    if b in SYNC_APIS:
        return SYNC
    if b in ASYNC_COPY_APIS and copy_blocks:
        return SYNC
    if b in LAUNCH_APIS or GRAPH_LAUNCH_RE.match(name):
        return LAUNCH
    return RUNTIME


def op_category(name: str) -> str | None:
    """The category a recorded op or annotation itself names (``dataloader``, ``optimizer``), or None
    for an op that inherits its parent's."""
    if name.startswith(OPTIMIZER_PREFIX):
        return OPTIMIZER
    if _DATALOADER_RE.search(name):
        return DATALOADER
    return None


def copy_blocks(memcpy_name: str) -> bool:
    """True for a GPU memcpy event that makes its asynchronous API call block: device-to-host into
    pageable memory (kineto names it ``Memcpy DtoH (Device -> Pageable)``)."""
    return "DtoH" in memcpy_name and "Pageable" in memcpy_name


def copy_direction(memcpy_name: str) -> str:
    """``d2h``, ``h2d``, ``d2d``, ``p2p`` or ``""`` for a GPU memcpy event's name (kineto's ``Memcpy
    DtoH (...)``; ROCm's ``MEMORY_COPY_DEVICE_TO_HOST`` / ``CopyDeviceToHost``)."""
    n = memcpy_name.upper()
    if "DTOH" in n or "DEVICE_TO_HOST" in n or "DEVICETOHOST" in n:
        return "d2h"
    if "HTOD" in n or "HOST_TO_DEVICE" in n or "HOSTTODEVICE" in n:
        return "h2d"
    if "DTOD" in n or "DEVICE_TO_DEVICE" in n or "DEVICETODEVICE" in n:
        return "d2d"
    if "PTOP" in n or "PEER" in n:
        return "p2p"
    return ""
