"""Hand-built kineto traces for the field-input kinds (tests/test_trace_kinds_*.py): each event as the
PyTorch profiler writes it (a ``cpu_op``, its ``cudaLaunchKernel`` with the correlation id, the
kernel on its GPU row), at times chosen so every figure can be computed by hand. Times in µs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from ai4s_graph.graph.analysis.nodes import trace_analyst as TA
from ai4s_graph.graph.analysis.nodes.trace_verifier import verify_trace_claims


def kernel(name: str, ts: float, dur: float | None, corr: int | None, *, stream: Any = 7, device: Any = 0,
           pid: Any = 0, cat: str = "kernel", ph: str = "X", **extra) -> dict:
    """A GPU event (``cat`` kernel / gpu_memcpy / gpu_memset) on GPU row (pid, stream)."""
    args = {"device": device, "stream": stream, **({"correlation": corr} if corr is not None else {}), **extra}
    if device is None:
        del args["device"]
    if stream is None:
        del args["stream"]
    ev = {"ph": ph, "cat": cat, "name": name, "pid": pid, "tid": stream if isinstance(stream, int) else 7,
          "ts": ts, "args": args}
    if dur is not None:
        ev["dur"] = dur
    return ev


def launch(corr: int, ts: float, *, name: str = "cudaLaunchKernel", dur: float = 4.0, cat: str = "cuda_runtime",
           tid: int = 1) -> dict:
    """The CPU call that launched GPU work with correlation id ``corr``."""
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def op(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def step(num: int, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{num}", "pid": 1, "tid": 1, "ts": ts,
            "dur": dur}


def launched(name: str, ts: float, dur: float, corr: int, *, launch_ts: float | None = None, **kw) -> list[dict]:
    """A kernel with the ``cpu_op`` and launch call that put it on the GPU (launch 50 µs before it)."""
    t = ts - 50.0 if launch_ts is None else launch_ts
    return [op("aten::mm", t - 1.0, 8.0), launch(corr, t), kernel(name, ts, dur, corr, **kw)]


def two_kernels(**kw) -> list[dict]:
    """The base case of several kinds: kernel A [100, 400] and kernel B [500, 600] on stream 7,
    each launched: total 500 µs, busy 400 µs (80 %), idle 100 µs (20 %)."""
    return launched("gemm_A", 100.0, 300.0, 1000, **kw) + launched("elementwise_B", 500.0, 100.0, 1001, **kw)


def doc(events: list[dict], rank: int | None = 0, **top) -> dict:
    d = {"schemaVersion": 1, "traceEvents": events, **top}
    if rank is not None:
        d["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": top.pop("world_size", 1)}
    return d


def write(path: Path, events_or_doc, gz: bool = False) -> Path:
    d = events_or_doc if isinstance(events_or_doc, dict) else doc(events_or_doc)
    text = json.dumps(d).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def both(path: Path) -> tuple[dict, dict]:
    """The one-read rank result (engine, with the verifier's reader's figures under ``rederived``)
    and the verifier's verdicts on the analyst's claims, by metric."""
    res = TA._analyze_one(str(path), 0, str(path.parent / "cache"), "0")
    assert "error" not in res and "rederive_error" not in res, res.get("rederive_error")
    claims = TA.claims_for_rank(res)
    return res, {v.claim.metric: v for v in verify_trace_claims(claims, [res])}


def pct(res: dict, row: str, reader: str = "engine") -> float:
    """A timeline row's percent by the engine (``res["timeline"]``) or the verifier's reader."""
    tl = res["timeline"] if reader == "engine" else res["rederived"]["timeline"]
    return float(tl[row]["percent"])


def all_confirmed(verdicts: dict) -> dict:
    """The claims not confirmed (empty when every claim is), for an assert message."""
    return {m: (v.verdict.value, v.claim.value, v.rederived_value) for m, v in verdicts.items()
            if v.verdict.value != "confirmed"}
