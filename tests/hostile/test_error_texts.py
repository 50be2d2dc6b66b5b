"""Kind: error texts that named the wrong thing (the adversarial trial of main, 2026-12-02): a bare
``NaN`` in one event's ``dur`` was "trace is truncated or not valid JSON" with no event named; a
directory or ``/dev/null`` given as a trace was "trace file not found"; exact duplicate GPU events
were "overlapping GPU events ... clipped". Each input is built here; each expected index, count or
kind comes from how it was built."""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.tools.errors import InputError  # noqa: E402
from ai4s_graph.tools.files import check_input_file  # noqa: E402
from ai4s_graph.tools.trace import engine, kineto  # noqa: E402


@pytest.fixture(scope="module")
def base() -> dict:
    return H.read_trace(H.EXAMPLE)


def test_a_bare_nan_names_the_event_and_the_field(tmp_path, base):
    d = copy.deepcopy(base)
    ks = [i for i, e in enumerate(d["traceEvents"]) if e.get("cat") == "kernel"]
    k = ks[5]
    d["traceEvents"][k]["dur"] = math.nan
    p = tmp_path / "trace_rank0.json.gz"
    p.write_bytes(gzip.compress(json.dumps(d, allow_nan=True).encode(), 1))  # Python writes NaN
    name = d["traceEvents"][k]["name"]
    for read in (engine.analyze, kineto.load_events):  # both readers, the same words
        with pytest.raises(InputError) as e:
            read(p)
        msg = str(e.value)
        assert "\n" not in msg
        assert msg.startswith(f"trace_rank0.json.gz: traceEvents[{k}] field 'dur' is NaN, not a JSON number"), msg
        assert "not valid JSON" in msg and f"name {name[:40]!r}" in msg and "cat 'kernel'" in msg


def test_a_broken_value_without_a_bare_word_still_names_the_event(tmp_path, base):
    d = copy.deepcopy(base)
    k = [i for i, e in enumerate(d["traceEvents"]) if e.get("cat") == "kernel"][2]
    d["traceEvents"][k]["dur"] = 7.123456789
    text = json.dumps(d)
    assert text.count('"dur": 7.123456789') == 1  # a value no other event has (how the input was built)
    text = text.replace('"dur": 7.123456789', '"dur": 7..123456789')
    p = tmp_path / "t.json"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        engine.analyze(p)
    assert str(e.value).startswith(f"t.json: traceEvents[{k}] field 'dur' does not parse: not valid JSON")


def test_a_directory_dev_null_or_a_fifo_is_not_called_missing(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    cases = [(folder, f"traces: not a trace file: {folder} is a directory"),
             (Path("/dev/null"), "null: not a trace file: /dev/null is a character device"),
             (fifo, f"pipe.json: not a trace file: {fifo} is a named pipe (FIFO)"),
             (tmp_path / "nope.json", f"nope.json: trace file not found ({tmp_path / 'nope.json'})")]
    for p, want in cases:
        with pytest.raises(InputError) as e:
            check_input_file(p)
        assert str(e.value) == want
    for p, want in cases[:2]:  # the command says the same, refused in one line
        cp = H.cli("trace", "timeline", str(p), state=tmp_path / "st", mem=H.TRACE_MEMORY_LIMIT_BYTES)
        H.assert_refused(cp, want)
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty.json: trace file is empty"):
        check_input_file(empty)


def test_exact_duplicates_are_counted_as_duplicates_not_overlaps(tmp_path, base):
    d = copy.deepcopy(base)
    ks = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    d["traceEvents"] += [dict(e) for e in ks[:50]]  # 50 exact copies
    p = tmp_path / "dup.json.gz"
    p.write_bytes(gzip.compress(json.dumps(d).encode(), 1))
    a = engine.analyze(p)
    dup = [w for w in a.warnings if "exact duplicate" in w]
    assert len(dup) == 1 and dup[0].startswith("50 exact duplicate GPU event(s)")
    assert not [w for w in a.warnings if "clipped" in w]  # none of them is called an overlap
    # the clean trace has no duplicate (the other side)
    clean = tmp_path / "clean.json.gz"
    clean.write_bytes(gzip.compress(json.dumps(base).encode(), 1))
    assert not [w for w in engine.analyze(clean).warnings if "duplicate" in w]


def test_duplicates_make_the_run_partial(tmp_path, base):
    d = copy.deepcopy(base)
    ks = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    d["traceEvents"] += [dict(e) for e in ks[:7]]
    run = H.copy_run(tmp_path / "run")
    H.write_trace(run, d)
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert H.status_lines(cp)[-1].startswith("STATUS=partial"), cp.stdout[-1500:]
    rep = json.loads((out / "report.json").read_text())
    assert [m for m in rep["missing"] if "7 exact duplicate GPU event(s)" in m]
