"""Hand-built multi-rank kineto traces for the communication figures (issue 30), with known answers.

:class:`CommTrace` extends the step accounting's :class:`TraceBuilder` with what a data-parallel
PyTorch job records: the ``c10d::`` dispatcher op of each collective call, the ``record_param_comms``
op inside it (collective name, message elements, dtype, group size, its External id), the backend's
``nccl:*`` annotation, the NCCL kernel on its own stream carrying the same metadata (PyTorch >= 2.1
with ``record_shapes``), the autograd engine's ``autograd::engine::evaluate_function:`` ops on their
own thread, ``Optimizer.step#`` and FSDP's ``FSDP::all_gather (<module>)`` annotations, and
``distributedInfo``. Times are whole µs so every expected figure is exact; each scenario's docstring
lays out its timeline and the tests work the expected numbers out from it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from test_step_accounting_traces import TraceBuilder

KERNELS = {"allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
           "allgather": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
           "reducescatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"}
C10D = {"allreduce": "c10d::allreduce_", "allgather": "c10d::_allgather_base_",
        "reducescatter": "c10d::_reduce_scatter_base_"}
ARGS_NAME = {"allreduce": "allreduce", "allgather": "_allgather_base", "reducescatter": "_reduce_scatter_base"}
BWD = "autograd::engine::evaluate_function: MmBackward0"
AUTOGRAD_TID = 2


class CommTrace(TraceBuilder):
    """A rank's trace: :class:`TraceBuilder` plus collectives, autograd ops and ``distributedInfo``."""

    def __init__(self, rank: int = 0, world: int = 2) -> None:
        super().__init__(pid=100 + rank, device=rank)
        self.rank, self.world = rank, world
        self._ext = 5000

    def collective(self, ts: float, kts: float, kdur: float, nelems: int, *, coll: str = "allreduce",
                   dtype: str = "Float", tid: int = 1, stream: int = 20, out_nelems: int | None = None,
                   kernel_args: bool = True) -> int:
        """One collective call issued at host ``ts``: ``c10d::`` op [ts, ts+8], ``record_param_comms``
        [ts+1, ts+7], ``nccl:`` annotation [ts+2, ts+6], its launch [ts+3, ts+5] and the NCCL kernel
        [kts, kts+kdur] on ``stream``. ``nelems``: input elements (``out_nelems`` defaults to it; an
        all-gather's output is ``nelems x world``). Returns the External id."""
        self._ext += 1
        ext = self._ext
        out = out_nelems if out_nelems is not None else (nelems * self.world if coll == "allgather" else nelems)
        if coll == "reducescatter" and out_nelems is None:
            out = nelems // self.world
        meta = {"Collective name": ARGS_NAME[coll], "In msg nelems": nelems, "Out msg nelems": out, "Group size": self.world,
                "dtype": dtype, "Process Group Name": "0", "Process Group Description": "default_pg",
                "Process Group Ranks": str(list(range(self.world)))}
        self.op(C10D[coll], ts, 8, tid, dims=[[[nelems]], [], []])
        self.cpu.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": self.pid, "tid": tid,
                         "ts": ts + 1, "dur": 6, "args": dict(meta, **{"External id": ext, "Rank": self.rank})})
        self.ann(f"nccl:{ARGS_NAME[coll].strip('_')}", ts + 2, 4, tid)
        c = self.runtime("cudaLaunchKernel", ts + 3, 2, tid)
        args = {"device": self.device, "stream": stream, "correlation": c, "External id": ext}
        if kernel_args:
            args.update(meta)
        self.gpu.append({"ph": "X", "cat": "kernel", "name": KERNELS[coll], "pid": self.device, "tid": stream,
                         "ts": kts, "dur": kdur, "args": args})
        self.cpu.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": c, "pid": self.pid, "tid": tid, "ts": ts + 3})
        self.gpu.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": c, "pid": self.device, "tid": stream,
                         "ts": kts, "bp": "e"})
        return ext

    def compute(self, op: str, ts: float, dur: float, kts: float, kdur: float, tid: int = 1, stream: int = 7,
                kernel: str = "void gemm()") -> None:
        """An op [ts, ts+dur] launching one computation kernel [kts, kts+kdur] (launch [ts+1, ts+3])."""
        self.op(op, ts, dur, tid)
        self.launch(ts + 1, 2, kts, kdur, tid=tid, stream=stream, kernel=kernel)

    def backward(self, ts: float, dur: float, kts: float, kdur: float) -> None:
        """An autograd node [ts, ts+dur] on the autograd thread launching one kernel [kts, kts+kdur]."""
        self.compute(BWD, ts, dur, kts, kdur, tid=AUTOGRAD_TID, kernel="void gemm_bwd()")

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.world},
               "traceEvents": self.cpu + self.gpu}
        raw = json.dumps(doc).encode()
        p.write_bytes(gzip.compress(raw) if p.suffix == ".gz" else raw)
        return p


def ddp_step(overlap: bool, *, extra_int: int = 0) -> CommTrace:
    """One 1000 µs DDP step (rank 0), both buckets (1 M floats each) issued from inside the backward.

    0-30 aten::linear (forward kernel 40-100); the backward on the autograd thread: node 1 200-300
    (kernel B1 400-500), node 2 300-400 (kernel B2 500-600). Bucket k is issued at host 210 + 100k
    (inside node k+1). ``overlap``: bucket kernels run 510-560 then 600-700 (the first under B2); else
    (all after the backward, as with nothing to overlap) 600-650 then 650-750. ``extra_int``: an Int
    all-reduce of that many elements issued at 380 (DDP's used-parameter map under
    ``find_unused_parameters=True``), kernel 760-770. Optimizer.step# 800-850 launches kernel O 860-880.
    """
    b = CommTrace(0)
    b.step(3, 0, 1000)
    b.compute("aten::linear", 0, 30, 40, 60)
    b.backward(200, 100, 400, 100)
    b.backward(300, 100, 500, 100)
    for k, (kts, kdur) in enumerate([(510, 50), (600, 100)] if overlap else [(600, 50), (650, 100)]):
        b.collective(210 + 100 * k, kts, kdur, 1_000_000, tid=AUTOGRAD_TID)
    if extra_int:
        b.collective(380, 760, 10, extra_int, dtype="Int", tid=AUTOGRAD_TID)
    b.ann("Optimizer.step#SGD.step", 800, 50)
    b.compute("aten::add_", 810, 20, 860, 20)
    return b


def small_buckets(n: int = 8, nelems: int = 1024) -> CommTrace:
    """:func:`ddp_step`'s backward with ``n`` buckets of ``nelems`` floats (a tiny ``bucket_cap_mb``):
    bucket k issued at 205 + 20k, its kernel 600 + 12k .. 610 + 12k."""
    b = CommTrace(0)
    b.step(3, 0, 1000)
    b.compute("aten::linear", 0, 30, 40, 60)
    b.backward(200, 100, 400, 100)
    b.backward(300, 100, 500, 100)
    for k in range(n):
        b.collective(205 + 20 * k, 600 + 12 * k, 10, nelems, tid=AUTOGRAD_TID)
    b.ann("Optimizer.step#SGD.step", 800, 50)
    b.compute("aten::add_", 810, 20, 860, 20)
    return b


def sync_after_backward(before_optimizer: bool) -> CommTrace:
    """One 1000 µs step (rank 0) whose host reads a device scalar while the last bucket's all-reduce runs.

    Backward: node 200-300 (kernel B 300-600); the bucket issued at 250 runs 600-900 on stream 20.
    ``before_optimizer``: aten::item 520-930 with cudaMemcpyAsync 521-524 (its copy, DtoH into pinned
    memory, 905-908 on the compute stream: it waited for the all-reduce, which ended at 900) and
    cudaStreamSynchronize 525-910; then Optimizer.step# 940-990 launches kernel O 950-970 (the GPU is
    idle 910-950 after the sync returns). Else the optimizer comes first (Optimizer.step# 520-560,
    kernel O 905-925, after the all-reduce) and aten::item 570-940 holds the copy (930-933) and the
    sync 575-935."""
    b = CommTrace(0)
    b.step(1, 0, 1000)
    b.backward(200, 100, 300, 300)
    b.collective(250, 600, 300, 4_000_000, tid=AUTOGRAD_TID)
    if before_optimizer:
        b.op("aten::item", 520, 410)
        b.launch(521, 3, 905, 3, api="cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pinned)", cat="gpu_memcpy",
                 nbytes=4)
        b.runtime("cudaStreamSynchronize", 525, 385)
        b.ann("Optimizer.step#SGD.step", 940, 50)
        b.compute("aten::add_", 945, 10, 950, 20)
    else:
        b.ann("Optimizer.step#SGD.step", 520, 40)
        b.compute("aten::add_", 525, 10, 905, 20)
        b.op("aten::item", 570, 370)
        b.launch(571, 3, 930, 3, api="cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pinned)", cat="gpu_memcpy",
                 nbytes=4)
        b.runtime("cudaStreamSynchronize", 575, 360)
    return b


def fsdp_step(prefetch: bool) -> CommTrace:
    """One 2000 µs FSDP step (rank 0) of three layers, each all-gathered (4 M elements per rank -> 8 M
    out, 32 MB) before it runs, forward and backward, all-gathers 50 µs on stream 20.

    Forward compute kernels L0, L1, L2 of 100 µs on stream 7, backward ones B2, B1, B0 of 200 µs.
    With ``prefetch`` each next layer's all-gather runs under the current layer's compute: forward
    AG0 0-50 (exposed: nothing runs yet), L0 50-150, AG1 60-110 (under L0), L1 150-250, AG2 160-210,
    L2 250-350; backward B2 400-600, AG1 410-460 (under B2), B1 600-800, AG0 610-660, B0 800-1000.
    Without it each all-gather starts when the layer before it ends and its layer waits for it:
    forward AG0 0-50, L0 50-150, AG1 150-200, L1 200-300, AG2 300-350, L2 350-450; backward B2
    500-700, AG1 700-750, B1 750-950, AG0 950-1000, B0 1000-1200. Host: forward all-gathers issued
    at 0, 10, 20 inside ``FSDP::all_gather (layers.i)`` annotations; the backward's nodes start at
    380 (and issue AG1 at 390, AG0 at 400 inside their annotations)."""
    b = CommTrace(0)
    b.step(5, 0, 2000)
    fwd_ag = [(0, 50), (60, 110), (160, 210)] if prefetch else [(0, 50), (150, 200), (300, 350)]
    fwd_l = [50, 150, 250] if prefetch else [50, 200, 350]
    bwd_l = [400, 600, 800] if prefetch else [500, 750, 1000]
    bwd_ag = [(410, 460), (610, 660)] if prefetch else [(700, 750), (950, 1000)]
    for i, (s, e) in enumerate(fwd_ag):
        b.ann(f"FSDP::all_gather (layers.{i})", 10 * i, 9)
        b.collective(10 * i, s, e - s, 4_000_000, coll="allgather")
    for i, s in enumerate(fwd_l):
        b.compute("aten::linear", 40 + 10 * i, 9, s, 100)
    b.ann("FSDP::all_gather (layers.1)", 389, 10, tid=AUTOGRAD_TID)
    b.ann("FSDP::all_gather (layers.0)", 399, 10, tid=AUTOGRAD_TID)
    b.op(BWD, 380, 30, tid=AUTOGRAD_TID)
    b.launch(381, 2, bwd_l[0], 200, tid=AUTOGRAD_TID, kernel="void gemm_bwd()")
    b.collective(390, bwd_ag[0][0], 50, 4_000_000, coll="allgather", tid=AUTOGRAD_TID)
    for k, s in enumerate(bwd_l[1:]):
        b.launch(384 + 3 * k, 2, s, 200, tid=AUTOGRAD_TID, kernel="void gemm_bwd()")
    b.collective(400, bwd_ag[1][0], 50, 4_000_000, coll="allgather", tid=AUTOGRAD_TID)
    return b


def straggler_pair(kind: str, d: int = 200) -> tuple[CommTrace, CommTrace]:
    """Two ranks, two 1000 µs steps each (step k starts at t0 = 1000k), rank 1 slowed by ``d`` µs:
    ``kind="gpu"``: an extra kernel X of ``d`` µs on the compute stream before its backward; ``"host"``:
    ``d`` µs of host work outside any recorded op before its backward; ``"none"``: nothing.

    Per rank and step: aten::mm t0+0..t0+30 launches FW t0+20..t0+40; (gpu) aten::mm t0+30..t0+40
    launches X t0+40..t0+40+d; the backward node t0+50+h..t0+80+h (h = d for host, else 0) launches BW
    (100 µs) at t0+60+h when its stream is free (rank 0: t0+60; gpu straggler: t0+40+d; host straggler:
    t0+60+d) and issues the all-reduce (1 M floats) at t0+70+h; its kernel starts at BW's end (the
    rank's arrival) and every rank's ends together, 50 µs after the last one starts; aten::item
    with cudaStreamSynchronize t0+90+h..E+5; Optimizer.step# E+10..E+40 launching O at E+20..E+30."""
    def bw_start(rank: int) -> int:
        if rank == 0 or kind == "none":
            return 60
        return 40 + d if kind == "gpu" else 60 + d

    traces = []
    for rank in (0, 1):
        b = CommTrace(rank)
        h = d if kind == "host" and rank == 1 else 0
        for k in (0, 1):
            t0 = 1000 * k
            arrive = {r: bw_start(r) + 100 for r in (0, 1)}
            e = t0 + max(arrive.values()) + 50
            b.step(k, t0, 1000)
            b.compute("aten::mm", t0, 30, t0 + 20, 20)
            if kind == "gpu" and rank == 1:
                b.compute("aten::mm", t0 + 30, 10, t0 + 40, d)
            b.op(BWD, t0 + 50 + h, 30, tid=AUTOGRAD_TID)
            b.launch(t0 + 51 + h, 2, t0 + bw_start(rank), 100, tid=AUTOGRAD_TID, kernel="void gemm_bwd()")
            a = t0 + arrive[rank]
            b.collective(t0 + 70 + h, a, e - a, 1_000_000, tid=AUTOGRAD_TID)
            b.op("aten::item", t0 + 90 + h, e + 5 - (t0 + 90 + h))
            b.runtime("cudaStreamSynchronize", t0 + 91 + h, e + 3 - (t0 + 91 + h))
            b.ann("Optimizer.step#SGD.step", e + 10, 30)
            b.compute("aten::add_", e + 15, 10, e + 20, 10)
        traces.append(b)
    return traces[0], traces[1]


def baseline_json(path: Path) -> Path:
    """An eval-cluster raw JSON: all-reduce busbw 40 GB/s at 1 MB and 160 GB/s at 16 MB; with P2P
    disabled 10 and 20 GB/s."""
    rows = [{"op": "all_reduce", "bytes": 1_000_000, "busbw_gbps": 40.0, "correct": True},
            {"op": "all_reduce", "bytes": 16_000_000, "busbw_gbps": 160.0, "correct": True}]
    off = [{"op": "all_reduce", "bytes": 1_000_000, "busbw_gbps": 10.0, "correct": True},
           {"op": "all_reduce", "bytes": 16_000_000, "busbw_gbps": 20.0, "correct": True}]
    path.write_text(json.dumps({"network": {"collectives": {"p2p": {"rows": rows}, "p2p_disabled": {"rows": off}}}}))
    return path
