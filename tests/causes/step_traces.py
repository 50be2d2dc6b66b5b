"""Hand-built kineto traces with a known time budget per step, for the host-side causes (issue 34):
each step is a ``ProfilerStep#N`` window of ``wall`` µs on host thread 1 holding one GEMM (a
``aten::mm`` op launching one 1000 µs kernel) and the host states a test injects, each with a
duration chosen by the test; read through the real one pass (:func:`onepass.read_rank`), so the
analyst's accounting and the verifier's sampler both run on it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.tools.trace import onepass

KERNEL = "ampere_sgemm_128x64_tn"


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, pid: int = 1, **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def step_trace(tmp: Path, *, steps: int = 3, wall: float = 10000.0, alloc: int = 0, alloc_us: float = 50.0,
               outside_us: float = 0.0, py: list[tuple[str, float]] | None = None, d2h: int = 0,
               d2h_bytes: int = 0, d2h_us: float = 100.0, kernel: str = KERNEL, rocm: bool = False,
               name: str = "t.json.gz") -> Path:
    """A trace of ``steps`` steps of ``wall`` µs each: at the step's start one ``aten::mm`` (200 µs
    host, one launch, kernel of 1000 µs); then ``alloc`` allocator calls of ``alloc_us`` each
    (``cudaFree``/``hipFree``); then ``d2h`` device-to-host copies (``aten::to`` → ``cudaMemcpyAsync``
    blocking for ``d2h_us``, a ``Memcpy DtoH`` GPU event of ``d2h_bytes / d2h`` bytes each); then
    ``outside_us`` of host time in no op, covered by the python functions ``py`` (name, µs; the k-th
    starts k µs after the first: give each a duration at least 1 µs shorter than its parent) when given. Everything else of the step is outside ops too."""
    rt = "hip" if rocm else "cuda"
    ev = header()
    corr = 1
    for s0 in windows(ev, steps, wall):
        t = s0 + 10
        ev.append(_x("cpu_op", "aten::mm", t, 200.0, **{"External id": corr}))
        ev.append(_x(f"cuda_runtime", f"{rt}LaunchKernel", t + 50, 20.0, correlation=corr))
        ev.append(_x("kernel", kernel, t + 80, 1000.0, tid=7, pid=0, correlation=corr, device=0, stream=7))
        corr += 1
        t += 1100
        for _ in range(alloc):
            ev.append(_x("cuda_runtime", f"{rt}Free", t, alloc_us, correlation=corr))
            corr += 1
            t += alloc_us + 5
        for _ in range(d2h):
            ev.append(_x("cpu_op", "aten::to", t, d2h_us + 20, **{"External id": corr}))
            ev.append(_x("cuda_runtime", f"{rt}MemcpyAsync", t + 10, d2h_us, correlation=corr))
            ev.append(_x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", t + 15, d2h_us - 10, tid=8, pid=0,
                         correlation=corr, device=0, stream=8, bytes=d2h_bytes // max(d2h, 1)))
            corr += 1
            t += d2h_us + 30
        if outside_us:
            nest = py or []
            for k, (fn, us) in enumerate(nest):
                ev.append(_x("python_function", fn, t + k, us))
            t += outside_us
    return write(tmp / name, ev)


def header() -> list[dict]:
    """A trace's first events: the GPU's process name."""
    return [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]


def windows(ev: list[dict], steps: int, wall: float) -> list[float]:
    """Append ``steps`` ``ProfilerStep#N`` windows of ``wall`` µs (100 µs apart) on thread 1 to ``ev``;
    their start times."""
    starts = [1000.0 + i * (wall + 100.0) for i in range(steps)]
    ev.extend(_x("user_annotation", f"ProfilerStep#{i + 5}", s0, wall) for i, s0 in enumerate(starts))
    return starts


def write(p: Path, ev: list[dict]) -> Path:
    """``ev`` as a gzipped kineto trace of an H200 at ``p``."""
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}, f)
    return p


def read(path: Path) -> tuple[Inputs, Reader]:
    """The analyst's and the verifier's inputs of one trace, from ONE real pass (:func:`onepass.read_rank`)."""
    got = onepass.read_rank(str(path), 0, None, "0", wanted=registry.event_name_wanted,
                            raw_patterns=registry.raw_patterns())
    rank = {"path": str(path), "rank": 0, "step_accounting": got.get("step_accounting"),
            "name_dur_us": got["name_dur_us"]}
    x = Inputs(rank=rank, event_names=got["names"])
    r = Reader(rank={"raw_counts": got["raw_counts"], "steps_sampled": got.get("steps_sampled")})
    return x, r


def confirmed(f, r: Reader) -> str:
    """The verifier's verdict on a finding's claim (re-derived by its cause, judged by the registry)."""
    rd = registry.rederive(f.claim, r)
    return registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value


def bundled(name: str, work: Path) -> dict[str, Any]:
    """The accuracy benchmark's row of one bundled case (``bench/accuracy/cases/<name>``), run through
    the CLI by :func:`bench.accuracy.score.run_case` (``named_cause``, ``first_lever``, ``cause_ok``)."""
    from bench.accuracy import score
    case = score.CASES_DIR / name
    truth = json.loads((case / "truth.json").read_text())
    return score.run_case(case, truth, work)
