"""What one pass over a rank trace keeps for the communication figures (issue 30): a per-event
consumer (``feed(event)``, like the step accounting's :class:`~.host_timeline.StepAccountant`, fed
the same events of the same read).

Kept, per event of interest only (never the event dicts):

* **communication kernels** (TraceLens's rule, :data:`.stream.COMM_RE`): their collective metadata,
  which PyTorch (>= 2.1, ``record_shapes``) copies onto the kernel from ``record_param_comms``:
  ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group
  Name`` / ``Ranks`` and the ``External id`` of the ``record_param_comms`` op that issued it; keyed by
  (start, stream) so the accountant's GPU columns find them;
* **issuing ops** on the host: the dispatcher's ``c10d::<collective>_`` ops (one per collective call:
  ``allreduce_``, ``_allgather_base_``, ``_reduce_scatter_base_``, ``broadcast_`` ...), the
  ``record_param_comms`` op inside each (its args as above), and the backend's annotation
  (``nccl:all_reduce``, ``gloo:all_reduce``: its ``Input Dims`` and element ``Input type``);
* **FSDP annotations** (``FSDP::all_gather (<module>)``, ``FSDP::pre_forward (<module>)`` ...): the
  module whose parameters an all-gather brings.

:func:`issue_records` turns the host ops into one record per collective call: its type, element
count, dtype and message size from ``record_param_comms`` when there (NCCL), else from the
``c10d::`` op's ``Input Dims`` and the backend annotation of the same element count (gloo records no
``record_param_comms``: measured on torch 2.13 CPU). Message size follows nccl-tests
(``doc/PERFORMANCE.md``): an all-gather's output, the input otherwise. Memory: O(collectives +
FSDP annotations), a few hundred bytes each.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

from .collective_types import collective_type
from .collectives import DTYPE_BYTES
from .hygiene import as_id
from .stream import COMM_RE

_I32 = 1 << 31
#: Element types as the profiler's ``Input type`` names them (C++ scalar type names) -> c10 names
#: (``dtype`` of ``record_param_comms``; c10/core/ScalarType.h).
_CPP_TYPE = {"float": "Float", "double": "Double", "int": "Int", "long int": "Long", "long": "Long",
             "c10::BFloat16": "BFloat16", "c10::Half": "Half", "bool": "Bool", "unsigned char": "Byte",
             "signed char": "Char", "short int": "Short", "short": "Short"}
_BACKEND_ANN_RE = re.compile(r"^(nccl|rccl|gloo|ucc|mpi|xccl):")
_FSDP_RE = re.compile(r"^FSDP::.*\((?P<module>[^()]+)\)\s*$")
_NO_SIZE = ("barrier", "sendrecv", "unknown")


@dataclass
class KernelArgs:
    """A communication kernel's collective metadata (see the module docstring); ``ext``: the External
    id of the ``record_param_comms`` op that issued it (None when absent)."""

    name: str
    collective: str
    args_name: str | None
    dtype: str | None
    in_nelems: float | None
    out_nelems: float | None
    group_size: int | None
    pg: str | None
    pg_ranks: str | None
    ext: int | None

    @property
    def msg_bytes(self) -> float | None:
        """nccl-tests' message size (bytes): the all-gather's output, the input otherwise; None unknown."""
        return msg_bytes(self.collective, self.dtype, self.in_nelems, self.out_nelems)


@dataclass
class IssueRecord:
    """One collective call on the host: ``ts``/``end`` (µs, the trace's clock), ``thread`` (pid, tid),
    ``collective`` type, ``dtype``, ``nelems`` (the message's element count), ``msg_bytes``,
    ``size_source`` (``record_param_comms``, ``collective op`` or ``""``), ``ext`` (the External id
    of its ``record_param_comms``; kernels carry it), ``module`` (the enclosing FSDP annotation's)."""

    ts: float
    end: float
    thread: tuple
    collective: str
    dtype: str | None = None
    nelems: float | None = None
    msg_bytes: float | None = None
    size_source: str = ""
    ext: int | None = None
    module: str = ""


def msg_bytes(collective: str, dtype: str | None, in_nelems: float | None, out_nelems: float | None) -> float | None:
    """Message size in bytes by nccl-tests' convention (``doc/PERFORMANCE.md``): ``out_nelems`` for an
    all-gather, ``in_nelems`` otherwise, times the dtype's bytes (:data:`.collectives.DTYPE_BYTES`);
    None when either is unknown."""
    b = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    n = out_nelems if collective == "allgather" else in_nelems
    if b is None or n is None:
        return None
    return float(n) * b


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    x = float(v)
    return x if math.isfinite(x) else None


def _nelems(dims: Any) -> float | None:
    """Elements of one ``Input Dims`` entry: a tensor's dims (``[4, 8]``) or a TensorList's
    (``[[4, 8], [16]]``, summed); None for anything else."""
    if not isinstance(dims, list):
        return None
    if dims and all(isinstance(d, list) for d in dims):
        parts = [_nelems(d) for d in dims]
        return None if any(p is None for p in parts) else float(sum(parts))
    n = 1.0
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, float)):
            return None
        n *= d
    return n


class CommCollector:
    """Per-event consumer keeping what the communication figures need (module docstring). ``feed``
    is O(1) per event; call :func:`issue_records` after the pass."""

    def __init__(self) -> None:
        self.kernels: dict[tuple[float, int], KernelArgs] = {}
        self.c10d: list[tuple[float, float, tuple, str, Any]] = []  # ts, end, thread, name, Input Dims
        self.rpc: list[tuple[float, float, tuple, dict]] = []  # record_param_comms: ts, end, thread, args
        self.ann: list[tuple[float, float, tuple, str, Any, Any]] = []  # backend annotations: + dims, types
        self.fsdp: list[tuple[float, float, tuple, str]] = []  # ts, end, thread, module
        self.bad = 0

    @staticmethod
    def _span(ev: dict) -> tuple[float, float] | None:
        t, d = _num(ev.get("ts")), _num(ev.get("dur"))
        if t is None or d is None or d < 0:
            return None
        return t, t + d

    @staticmethod
    def _thread(ev: dict) -> tuple:
        key = (ev.get("pid"), ev.get("tid"))
        try:
            hash(key)
        except TypeError:
            key = (repr(key[0]), repr(key[1]))
        return key

    def feed(self, ev: Any) -> None:
        """Take one trace event (a dict of ``traceEvents``); anything else is skipped."""
        if type(ev) is not dict:
            return
        cat = ev.get("cat")
        name = ev.get("name")
        if type(name) is not str:
            return
        if cat == "kernel":
            if COMM_RE.search(name):
                self._kernel(ev, name)
            return
        if cat == "cpu_op":
            if name.startswith("c10d::") or name == "record_param_comms":
                sp = self._span(ev)
                if sp is None:
                    self.bad += 1
                    return
                args = ev.get("args") if type(ev.get("args")) is dict else {}
                if name == "record_param_comms":
                    self.rpc.append((sp[0], sp[1], self._thread(ev), args))
                else:
                    self.c10d.append((sp[0], sp[1], self._thread(ev), name, args.get("Input Dims")))
            return
        if cat == "user_annotation":
            m = _FSDP_RE.match(name) if name.startswith("FSDP::") else None
            if m is None and not _BACKEND_ANN_RE.match(name):
                return
            sp = self._span(ev)
            if sp is None:
                self.bad += 1
                return
            if m is not None:
                self.fsdp.append((sp[0], sp[1], self._thread(ev), m.group("module").strip()))
            else:
                args = ev.get("args") if type(ev.get("args")) is dict else {}
                self.ann.append((sp[0], sp[1], self._thread(ev), name, args.get("Input Dims"), args.get("Input type")))

    def _kernel(self, ev: dict, name: str) -> None:
        t = _num(ev.get("ts"))
        args = ev.get("args") if type(ev.get("args")) is dict else {}
        s = as_id(args.get("stream"), _I32)
        if t is None:
            self.bad += 1
            return
        an = args.get("Collective name")
        gs = _num(args.get("Group size"))
        pr = args.get("Process Group Ranks")
        pg = args.get("Process Group Name")
        self.kernels[(t, -1 if s is None else s)] = KernelArgs(
            name=name, collective=collective_type(an if isinstance(an, str) else None, name),
            args_name=an if isinstance(an, str) else None,
            dtype=args.get("dtype") if isinstance(args.get("dtype"), str) else None,
            in_nelems=_num(args.get("In msg nelems")), out_nelems=_num(args.get("Out msg nelems")),
            group_size=int(gs) if gs is not None else None, pg=str(pg) if pg is not None else None,
            pg_ranks=str(pr) if pr is not None else None, ext=as_id(args.get("External id")))


def _c10d_size(ctype: str, dims: Any) -> float | None:
    """A ``c10d::`` op's message elements from its ``Input Dims``: the first argument (the tensor or
    TensorList reduced, broadcast or gathered into: ``allreduce_``, ``broadcast_``, ``_allgather_base_``'s
    output), the second for ``_reduce_scatter_base_`` / ``reduce_scatter_`` (its input)."""
    if not isinstance(dims, list) or not dims:
        return None
    k = 1 if ctype == "reducescatter" and len(dims) > 1 else 0
    return _nelems(dims[k])


def _inside(spans: list[tuple[float, float, tuple]], starts: list[float], t: float, end: float, thread: tuple) -> int:
    """Index of the latest-starting span of ``thread`` that holds ``[t, end]`` (-1 when none); ``spans``
    sorted by start, ``starts`` their starts."""
    i = bisect_right(starts, t) - 1
    while i >= 0:
        s, e, th = spans[i][0], spans[i][1], spans[i][2]
        if th == thread and s <= t and end <= e:
            return i
        i -= 1
    return -1


def issue_records(col: CommCollector) -> list[IssueRecord]:
    """One :class:`IssueRecord` per collective call, host start order (module docstring): the
    outermost ``c10d::`` ops (barrier included), else the ``record_param_comms`` ops when no ``c10d::``
    op was recorded, else the backend annotations. O(n log n) in the collectives."""
    rpc = sorted(col.rpc, key=lambda r: (r[0], -r[1]))
    rpc_starts = [r[0] for r in rpc]
    c10d = sorted(col.c10d, key=lambda r: (r[0], -r[1]))
    fsdp = sorted(col.fsdp, key=lambda r: (r[0], -r[1]))
    f_starts = [r[0] for r in fsdp]
    anns = sorted(col.ann, key=lambda r: r[0])
    a_starts = [r[0] for r in anns]
    used = [False] * len(anns)
    out: list[IssueRecord] = []

    def from_rpc(rec: IssueRecord, a: dict) -> None:
        an = a.get("Collective name")
        rec.collective = collective_type(an if isinstance(an, str) else None, rec.collective)
        rec.dtype = a.get("dtype") if isinstance(a.get("dtype"), str) else None
        i_n, o_n = _num(a.get("In msg nelems")), _num(a.get("Out msg nelems"))
        rec.nelems = o_n if rec.collective == "allgather" else i_n
        rec.msg_bytes = msg_bytes(rec.collective, rec.dtype, i_n, o_n)
        rec.size_source = "record_param_comms" if rec.nelems is not None else ""
        rec.ext = as_id(a.get("External id"))

    def from_annotation(rec: IssueRecord) -> None:
        """The backend annotation with the same element count, not yet taken, starting at or after the
        op (gloo runs it on a worker thread): its element type."""
        for j in range(bisect_left(a_starts, rec.ts), len(anns)):
            dims, types = anns[j][4], anns[j][5]
            if used[j]:
                continue
            if rec.nelems is not None and isinstance(dims, list) and dims and _nelems(dims[0]) == rec.nelems:
                used[j] = True
                t0 = types[0] if isinstance(types, list) and types else None
                rec.dtype = _CPP_TYPE.get(t0) if isinstance(t0, str) else None
                if rec.dtype is not None and rec.collective not in _NO_SIZE:
                    rec.msg_bytes = rec.nelems * DTYPE_BYTES[rec.dtype]
                return

    if c10d:
        reach: dict[tuple, float] = {}  # thread -> latest end of its c10d ops so far
        for s, e, th, name, dims in c10d:
            if reach.get(th, -math.inf) >= e:
                continue  # a c10d op called from inside another (a coalesced call): counted once
            reach[th] = e
            rec = IssueRecord(ts=s, end=e, thread=th, collective=collective_type(name[6:].rstrip("_"), name))
            j = bisect_left(rpc_starts, s)
            inner = None
            while j < len(rpc) and rpc[j][0] <= e:
                if rpc[j][1] <= e and rpc[j][2] == th:
                    inner = rpc[j]
                    break
                j += 1
            if inner is not None:
                from_rpc(rec, inner[3])
            elif rec.collective not in _NO_SIZE:
                rec.nelems = _c10d_size(rec.collective, dims)
                rec.size_source = "collective op" if rec.nelems is not None else ""
                from_annotation(rec)
            out.append(rec)
    elif rpc:
        for s, e, th, a in rpc:
            rec = IssueRecord(ts=s, end=e, thread=th, collective="unknown")
            from_rpc(rec, a)
            out.append(rec)
    else:
        for s, e, th, name, dims, types in anns:
            rec = IssueRecord(ts=s, end=e, thread=th, collective=collective_type(name.split(":", 1)[1], name))
            rec.nelems = _nelems(dims[0]) if isinstance(dims, list) and dims else None
            t0 = types[0] if isinstance(types, list) and types else None
            rec.dtype = _CPP_TYPE.get(t0) if isinstance(t0, str) else None
            if rec.nelems is not None and rec.dtype is not None and rec.collective not in _NO_SIZE:
                rec.msg_bytes, rec.size_source = rec.nelems * DTYPE_BYTES[rec.dtype], "collective op"
            out.append(rec)
    for rec in out:
        k = _inside(fsdp, f_starts, rec.ts, rec.end, rec.thread)
        rec.module = fsdp[k][3] if k >= 0 else ""
    return out
