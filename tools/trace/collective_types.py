"""Canonical collective names (allreduce, allgather, reducescatter, ...) from PyTorch's
``Collective name`` kernel arg or from the NCCL/RCCL kernel name."""

from __future__ import annotations

import re

_NAME_TO_TYPE = {
    "allreduce": "allreduce", "allreduce_coalesced": "allreduce", "all_reduce": "allreduce",
    "reducescatter": "reducescatter", "_reduce_scatter_base": "reducescatter",
    "reduce_scatter_tensor_coalesced": "reducescatter", "reduce_scatter": "reducescatter",
    "allgather": "allgather", "all_gather": "allgather", "_allgather_base": "allgather",
    "all_gather_into_tensor_coalesced": "allgather", "allgather_into_tensor_coalesced": "allgather",
    "_all_gather_base": "allgather",
    "all_to_all": "alltoall", "alltoall": "alltoall", "all_to_allv": "alltoallv", "alltoallv": "alltoallv",
    "broadcast": "broadcast", "reduce": "reduce", "send": "sendrecv", "recv": "sendrecv",
    "barrier": "barrier", "gather": "gather", "scatter": "scatter",
}
_KERNEL_TYPE_RE = [
    (re.compile(r"AllReduce|cross_device_reduce", re.I), "allreduce"),
    (re.compile(r"ReduceScatter", re.I), "reducescatter"),
    (re.compile(r"AllGather", re.I), "allgather"),
    (re.compile(r"AllToAll", re.I), "alltoall"),
    (re.compile(r"Broadcast", re.I), "broadcast"),
    (re.compile(r"SendRecv|_Send|_Recv", re.I), "sendrecv"),
    (re.compile(r"Reduce", re.I), "reduce"),
]
def collective_type(args_name: str | None, kernel_name: str) -> str:
    """Canonical collective (``allreduce``, ``allgather``, ``reducescatter``, ``alltoall``,
    ``broadcast``, ``reduce``, ``sendrecv``...) from the ``Collective name`` arg, else from the
    kernel name (``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``allreduce``); ``unknown``."""
    if args_name:
        t = _NAME_TO_TYPE.get(str(args_name).lower())
        if t:
            return t
    for rx, t in _KERNEL_TYPE_RE:
        if rx.search(kernel_name):
            return t
    return str(args_name).lower() if args_name else "unknown"
