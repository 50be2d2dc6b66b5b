"""Kind: wrong successes from traces with (almost) no GPU work (issue 26: all-zero durations were
called dispatch-bound, "could save 0.00-0.00 ms"; a single 1 µs kernel compute-bound over
telemetry's 11 %). Such a trace gets no class, says why, and the run ends ``STATUS=partial``.
Minimums (``tools/trace/hygiene.py``): 2 kernels (with one, the GPU window is that kernel) and
61 µs of GPU busy time (10 H200 launch latencies of 6.1 µs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.graph.rules.diagnosis import classify_trace  # noqa: E402
from ai4s_graph.state import BottleneckClass  # noqa: E402
from ai4s_graph.tools.trace import engine, kineto  # noqa: E402
from ai4s_graph.tools.trace.hygiene import MIN_GPU_BUSY_US, MIN_GPU_KERNELS, gpu_activity_problem  # noqa: E402

GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _zero(run: Path) -> None:
    d = H.read_trace(run)
    for e in d["traceEvents"]:
        if e.get("cat") in GPU:
            e["dur"] = 0
    H.write_trace(run, d)


def _kernels(run: Path, durs_us: list[float]) -> None:
    """Keep only the first len(durs) GPU events, as kernels with the given durations, 10 µs apart."""
    d = H.read_trace(run)
    gpu = [e for e in d["traceEvents"] if e.get("cat") in GPU][: len(durs_us)]
    t0 = gpu[0]["ts"]
    for i, (e, dur) in enumerate(zip(gpu, durs_us)):
        e["cat"], e["dur"], e["ts"] = "kernel", dur, t0 + (max(durs_us) + 10.0) * i
    d["traceEvents"] = [e for e in d["traceEvents"] if e.get("cat") not in GPU] + gpu
    H.write_trace(run, d)


def test_minimums_on_both_sides():
    assert MIN_GPU_KERNELS == 2 and MIN_GPU_BUSY_US == pytest.approx(61.0)
    assert "lasts 0 µs" in gpu_activity_problem(2133, 0.0)
    assert "1 GPU kernel(s)" in gpu_activity_problem(1, 5000.0)
    assert gpu_activity_problem(2, 61.0) is None
    assert "under the 61 µs minimum" in gpu_activity_problem(2, 60.9)
    assert gpu_activity_problem(60, 309.4) is None  # the smallest real profile at hand (TraceLens BERT-small)


@pytest.mark.parametrize("case,reason", [("zero", "every GPU event of the trace lasts 0 µs"),
                                         ("one-1us", "1 GPU kernel(s) in the trace"),
                                         ("two-20us", "under the 61 µs minimum")])
def test_both_readers_flag_the_trace_and_the_rules_give_no_class(tmp_path, case, reason):
    run = H.copy_run(tmp_path / "run")
    _zero(run) if case == "zero" else _kernels(run, [1.0] if case == "one-1us" else [20.0, 20.0])
    tp = run / "traces" / "trace_rank0.json.gz"
    a = engine.analyze(tp)
    assert reason in (a.insufficient_gpu_activity or "")
    f = kineto.figures_of(kineto.load_events(tp))  # the verifier's own reader, its own figures
    assert reason in (f["insufficient_gpu_activity"] or "")
    d = classify_trace(a.model_dump())
    assert d.klass is BottleneckClass.unknown and reason in d.rule


def test_just_enough_gpu_work_gets_a_class(tmp_path):
    run = H.copy_run(tmp_path / "run")
    _kernels(run, [31.0, 31.0])  # 62 µs busy in a 72 µs window: computing 86 %
    a = engine.analyze(run / "traces" / "trace_rank0.json.gz")
    assert a.insufficient_gpu_activity is None
    assert classify_trace(a.model_dump()).klass is not BottleneckClass.unknown


@pytest.mark.parametrize("case,reason", [("zero", "lasts 0 µs"), ("one-1us", "1 GPU kernel(s)")])
def test_run_gives_no_class_and_says_why(tmp_path, case, reason):
    run = H.copy_run(tmp_path / "run")
    _zero(run) if case == "zero" else _kernels(run, [1.0])
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    last = H.status_lines(cp)[-1]
    assert cp.returncode == 0 and last.startswith("STATUS=partial; reason=unknown;"), cp.stdout[-2000:]
    md = (out / "report.md").read_text()
    assert "## Bottleneck: unknown" in md and reason in md
    assert "could save 0.00" not in md and "compute-bound" not in md.split("## Appendix: claims")[0]
