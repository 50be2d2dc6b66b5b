"""Kind: trace events of the wrong JSON types (issue 26: ``args`` a list, ``ts`` a dict... crashed
the run with an AttributeError "in a node; re-run to resume", which a re-run cannot help). Since the
merge with main's readers (a kernel without a numeric ts is dropped and said, not the whole rank),
both readers read on: what they leave out or read without is one input note of the rank
(``tools/trace/hygiene.input_notes``), and ``run`` ends ``STATUS=partial`` with it under "What was
missing". A name that is not a string is read as its text (nothing lost, no note). When a reader
still fails on an event, ``tools/trace/guard.py`` names the event in one line. Durations that are
numbers but impossible (negative, NaN) are dropped and reported (``STATUS=partial``)."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.tools.trace import engine, kineto  # noqa: E402


def _set(key, value):
    return lambda e: e.__setitem__(key, value)


DROPPED_NUM = "3 GPU event(s) without a numeric, finite ts or dur dropped"
ILL = "event(s) of a shape the PyTorch profiler never writes"
ARGS = "3 GPU event(s) whose args is not a JSON object: kept without their stream and device"

#: (category of the 3 events changed, mutation, the engine's note or None, kernels lost of the 3)
MUTATIONS = [
    ("kernel", _set("args", [1, 2]), ARGS, 0),
    ("kernel", _set("args", "stream 7"), ARGS, 0),
    ("kernel", _set("ts", {"us": 1}), DROPPED_NUM, 3),
    ("kernel", _set("ts", "soon"), DROPPED_NUM, 3),
    ("kernel", _set("dur", [1]), DROPPED_NUM, 3),
    ("kernel", _set("name", {"x": 1}), None, 0),
    ("kernel", _set("name", 5), None, 0),
    ("kernel", _set("cat", ["kernel"]), "3 " + ILL, 3),
    ("cuda_runtime", _set("args", [1]), None, 0),
    ("cpu_op", _set("ts", {"a": 1}), None, 0),
    ("user_annotation", _set("name", 7), None, 0),
]


@pytest.fixture(scope="module")
def base() -> dict:
    return H.read_trace(H.EXAMPLE)


@pytest.fixture(scope="module")
def base_kernels(base, tmp_path_factory) -> int:
    run = tmp_path_factory.mktemp("clean") / "run"
    H.copy_run(run)
    return engine.analyze(H.write_trace(run, base)).kernel_count


def _mutated(tmp_path: Path, base: dict, cat: str, fn) -> Path:
    d = copy.deepcopy(base)
    hit = [e for e in d["traceEvents"] if e.get("cat") == cat]
    assert len(hit) >= 3
    for e in hit[:3]:
        fn(e)
    run = tmp_path / "run"
    if not run.exists():
        H.copy_run(run)
    return H.write_trace(run, d)


@pytest.mark.parametrize("cat,fn,note,lost", MUTATIONS,
                         ids=[f"{c}-{i}" for i, (c, _, _, _) in enumerate(MUTATIONS)])
def test_both_readers_read_on_and_say_what_they_left_out(tmp_path, base, base_kernels, cat, fn, note, lost):
    tp = _mutated(tmp_path, base, cat, fn)
    a = engine.analyze(tp)
    assert a.kernel_count == base_kernels - lost
    assert all("\n" not in w for w in a.warnings)
    if note is None:
        assert not any(ILL in w or "args is not" in w or "numeric" in w for w in a.warnings), a.warnings
    else:
        assert any(w.startswith(note) for w in a.warnings), a.warnings
    # the verifier's own reader reads the same file without failing and says the same drops
    tr = kineto.load_events(tp)
    if note in (DROPPED_NUM, "3 " + ILL):
        assert any(n.startswith(note) for n in tr.notes), tr.notes


@pytest.mark.parametrize("bad", [[1, 2], 7, "event", None])
def test_an_event_that_is_not_an_object(tmp_path, base, base_kernels, bad):
    d = copy.deepcopy(base)
    d["traceEvents"].insert(5, bad)
    H.copy_run(tmp_path / "run")
    tp = H.write_trace(tmp_path / "run", d)
    a = engine.analyze(tp)
    assert a.kernel_count == base_kernels and any(w.startswith("1 " + ILL) for w in a.warnings), a.warnings
    assert any(n.startswith("1 " + ILL) for n in kineto.load_events(tp).notes)


def test_trace_timeline_says_it_in_one_line(tmp_path, base):
    tp = _mutated(tmp_path, base, "kernel", _set("args", [1, 2]))
    cp = H.cli("trace", "timeline", str(tp), "--json", state=tmp_path / "st", mem=H.TRACE_MEMORY_LIMIT_BYTES)
    H.assert_no_traceback(cp)
    assert cp.returncode == 0 and ARGS in cp.stdout, cp.stderr[-1500:]


def test_run_reports_the_rank_and_goes_on(tmp_path, base):
    _mutated(tmp_path, base, "kernel", _set("ts", {"us": 1}))
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(tmp_path / "run"), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 0 and H.status_lines(cp)[-1].startswith("STATUS=partial"), cp.stdout[-2000:]
    assert "in a node" not in cp.stdout
    md = (out / "report.md").read_text()
    assert DROPPED_NUM in md.split("## What was missing")[1]


@pytest.mark.parametrize("dur,words", [(-5000.0, "negative or non-finite dur dropped"),
                                       (math.nan, "not valid JSON"), (math.inf, "not valid JSON")])
def test_impossible_durations(tmp_path, base, dur, words):
    """A negative ``dur`` is dropped and reported (moved from tests/test_adversarial_inputs.py); a
    bare ``NaN``/``Infinity`` is not JSON (RFC 8259 has no such number; kineto never writes one): the
    rank is refused in one line. Both end ``STATUS=partial``."""
    import json

    d = copy.deepcopy(base)
    ks = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    ks[100]["dur"] = dur
    H.copy_run(tmp_path / "run")
    H.write_trace(tmp_path / "run", json.dumps(d, allow_nan=True).encode())
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(tmp_path / "run"), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 0, cp.stderr[-2000:]
    rep = (out / "report.md").read_text()
    assert words in rep and "mean kernel -" not in rep
    assert H.status_lines(cp)[-1].startswith("STATUS=partial")
