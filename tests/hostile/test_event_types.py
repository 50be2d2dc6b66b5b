"""Kind: trace events of the wrong JSON types (issue 26: ``args`` a list, ``ts`` a dict... crashed
the run with an AttributeError "in a node; re-run to resume", which a re-run cannot help). Each is
one line naming the event (``tools/trace/guard.py``) from both readers; ``run`` reports the rank
as not analysed and goes on. Durations that are numbers but impossible (negative, NaN) are dropped
and reported (``STATUS=partial``)."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.tools.errors import InputError  # noqa: E402
from ai4s_graph.tools.trace import engine, kineto  # noqa: E402


def _set(key, value):
    return lambda e: e.__setitem__(key, value)


#: (category of the events changed, mutation, what the one line says)
MUTATIONS = [
    ("kernel", _set("args", [1, 2]), "has args of type list, not an object"),
    ("kernel", _set("args", "stream 7"), "has args of type str, not an object"),
    ("kernel", _set("ts", {"us": 1}), "has ts of type dict, not a number"),
    ("kernel", _set("ts", "soon"), "has ts 'soon', not a number"),
    ("kernel", _set("dur", [1]), "has dur of type list, not a number"),
    ("kernel", _set("name", {"x": 1}), "has name of type dict, not a string"),
    ("kernel", _set("name", 5), "has name of type int, not a string"),
    ("kernel", _set("cat", ["kernel"]), "has cat of type list, not a string"),
    ("cuda_runtime", _set("args", [1]), "has args of type list, not an object"),
    ("cpu_op", _set("ts", {"a": 1}), "has ts of type dict, not a number"),
    ("user_annotation", _set("name", 7), "has name of type int, not a string"),
]


@pytest.fixture(scope="module")
def base() -> dict:
    return H.read_trace(H.EXAMPLE)


def _mutated(tmp_path: Path, base: dict, cat: str, fn) -> Path:
    d = copy.deepcopy(base)
    hit = [e for e in d["traceEvents"] if e.get("cat") == cat]
    for e in hit[:3]:
        fn(e)
    run = tmp_path / "run"
    if not run.exists():
        H.copy_run(run)
    return H.write_trace(run, d)


@pytest.mark.parametrize("cat,fn,words", MUTATIONS, ids=[f"{c}-{w.split(' ')[1]}-{i}" for i, (c, _, w) in enumerate(MUTATIONS)])
def test_both_readers_name_the_malformed_event(tmp_path, base, cat, fn, words):
    tp = _mutated(tmp_path, base, cat, fn)
    with pytest.raises(InputError, match="traceEvents\\[\\d+\\]") as e:
        engine.analyze(tp)
    msg = str(e.value)
    assert words in msg and "\n" not in msg and "not what the PyTorch profiler writes" in msg, msg
    # the verifier's own reader: a one-line error of its own, or a reading that skips what it ignores
    try:
        kineto.load_events(tp)
    except InputError as err:
        assert "\n" not in str(err) and "trace_rank0.json.gz" in str(err)


@pytest.mark.parametrize("bad", [[1, 2], 7, "event", None])
def test_an_event_that_is_not_an_object(tmp_path, base, bad):
    d = copy.deepcopy(base)
    d["traceEvents"].insert(5, bad)
    H.copy_run(tmp_path / "run")
    tp = H.write_trace(tmp_path / "run", d)
    with pytest.raises(InputError, match=r"traceEvents\[5\] is a JSON \w+, not an object"):
        engine.analyze(tp)


def test_trace_timeline_prints_one_line(tmp_path, base):
    tp = _mutated(tmp_path, base, "kernel", _set("args", [1, 2]))
    cp = H.cli("trace", "timeline", str(tp), "--json", state=tmp_path / "st", mem=H.TRACE_MEMORY_LIMIT_BYTES)
    H.assert_no_traceback(cp)
    err = [ln for ln in cp.stderr.splitlines() if ln.startswith("error:")]
    assert cp.returncode == 1 and len(err) == 1 and "has args of type list" in err[0], cp.stderr[-1500:]


def test_run_reports_the_rank_and_goes_on(tmp_path, base):
    _mutated(tmp_path, base, "kernel", _set("ts", {"us": 1}))
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(tmp_path / "run"), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 0 and H.status_lines(cp)[-1].startswith("STATUS=partial"), cp.stdout[-2000:]
    assert "in a node" not in cp.stdout
    md = (out / "report.md").read_text()
    assert "has ts of type dict, not a number" in md.split("## What was missing")[1]


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
