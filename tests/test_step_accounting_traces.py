"""Hand-built kineto traces for the step accounting tests (issue 34), with known answers.

:class:`TraceBuilder` writes the events a PyTorch profiler trace holds (``ProfilerStep#N``
annotations, cpu_ops, user annotations, runtime calls with their correlation ids and ``ac2g``
flows, GPU kernels / memcpys on streams, ``python_function`` frames, ``[memory]`` events), in an
order that is not time order (kineto writes CPU events first, then GPU events). Times are whole
µs so every expected sum is exact in floating point.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path


class TraceBuilder:
    """Collects events; :meth:`write` saves the trace (``.json`` or ``.json.gz``)."""

    def __init__(self, pid: int = 100, device: int = 0) -> None:
        self.cpu: list[dict] = []
        self.gpu: list[dict] = []
        self.pid, self.device = pid, device
        self._corr = 1000

    def step(self, n: int, ts: float, dur: float, tid: int = 1) -> None:
        self.cpu.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": self.pid, "tid": tid,
                         "ts": ts, "dur": dur, "args": {}})

    def op(self, name: str, ts: float, dur: float, tid: int = 1, dims: list | None = None,
           cat: str = "cpu_op") -> None:
        args = {"Input Dims": dims} if dims is not None else {}
        self.cpu.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid, "ts": ts, "dur": dur,
                         "args": args})

    def ann(self, name: str, ts: float, dur: float, tid: int = 1) -> None:
        self.op(name, ts, dur, tid, cat="user_annotation")

    def py(self, name: str, ts: float, dur: float, tid: int = 1) -> None:
        self.cpu.append({"ph": "X", "cat": "python_function", "name": name, "pid": self.pid, "tid": tid, "ts": ts,
                         "dur": dur, "args": {}})

    def runtime(self, name: str, ts: float, dur: float, tid: int = 1, cat: str = "cuda_runtime") -> int:
        """A runtime/driver call; returns its correlation id."""
        self._corr += 1
        self.cpu.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid, "ts": ts, "dur": dur,
                         "args": {"correlation": self._corr}})
        return self._corr

    def gpu_event(self, name: str, ts: float, dur: float, corr: int, stream: int = 7, cat: str = "kernel",
                  nbytes: int | None = None) -> None:
        args = {"device": self.device, "stream": stream, "correlation": corr}
        if nbytes is not None:
            args["bytes"] = nbytes
        self.gpu.append({"ph": "X", "cat": cat, "name": name, "pid": self.device, "tid": stream, "ts": ts, "dur": dur,
                         "args": args})

    def launch(self, ts: float, dur: float, kts: float, kdur: float, tid: int = 1, stream: int = 7,
               api: str = "cudaLaunchKernel", kernel: str = "void k()", cat: str = "kernel",
               nbytes: int | None = None) -> int:
        """A launch call and the GPU event it launched, linked by correlation and an ac2g flow."""
        c = self.runtime(api, ts, dur, tid)
        self.gpu_event(kernel, kts, kdur, c, stream, cat, nbytes)
        self.cpu.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": c, "pid": self.pid, "tid": tid, "ts": ts})
        self.gpu.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": c, "pid": self.device, "tid": stream,
                         "ts": kts, "bp": "e"})
        return c

    def memory(self, ts: float, total_allocated: int, device_type: int = 1) -> None:
        self.cpu.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.pid,
                         "tid": 1, "ts": ts, "args": {"Total Allocated": total_allocated, "Device Type": device_type,
                                                      "Device Id": 0, "Bytes": 0}})

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        doc = {"schemaVersion": 1, "traceEvents": self.cpu + self.gpu}
        raw = json.dumps(doc).encode()
        p.write_bytes(gzip.compress(raw) if p.suffix == ".gz" else raw)
        return p


def every_category(b: TraceBuilder | None = None, t0: float = 0.0) -> TraceBuilder:
    """One 1000 µs step touching every host category (the expected values are in the tests).

    0-100 DataLoader (an aten::stack inside); 100-150 outside; 150-300 aten::linear launching K1
    (cudaLaunchKernel 200-210, K1 215-400); 300-330 aten::empty with cudaMalloc 305-325; 330-350
    outside; 350-420 aten::item with a blocking cudaMemcpyAsync 355-412 (its copy, device-to-host into
    pageable memory, 402-410); 420-600 Optimizer.step# with aten::add_ 450-500 (launch 460-470, K2
    472-520) and cudaEventRecord 530-535; 600-1000 outside."""
    b = b or TraceBuilder()
    b.step(7, t0 + 0, 1000)
    b.ann("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 0, 100)
    b.op("aten::stack", t0 + 20, 30)
    b.op("aten::linear", t0 + 150, 150)
    b.launch(t0 + 200, 10, t0 + 215, 185, kernel="void gemm()")
    b.op("aten::empty", t0 + 300, 30)
    b.runtime("cudaMalloc", t0 + 305, 20)
    b.op("aten::item", t0 + 350, 70)
    b.launch(t0 + 355, 57, t0 + 402, 8, api="cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pageable)",
             cat="gpu_memcpy", nbytes=4)
    b.ann("Optimizer.step#SGD.step", t0 + 420, 180)
    b.op("aten::add_", t0 + 450, 50)
    b.launch(t0 + 460, 10, t0 + 472, 48, kernel="void add()")
    b.runtime("cudaEventRecord", t0 + 530, 5)
    return b
