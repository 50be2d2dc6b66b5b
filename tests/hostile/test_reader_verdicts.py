"""Kind: one trace, different verdicts from different readers (the adversarial trial of 2026-12-06).
The same trace must be accepted or refused the same way, with the same one-line error, by every
reader a run uses (the engine's pass, the step accountant's lane, the verifier reader's lane, the
counters' lane, ``trace steps``, ``trace timeline``) and by the one-process ijson read, whatever keys
each decodes. Inputs: a float literal that overflows or bytes that are not UTF-8 in a key no reader
reads (the field-subset decode skipped them unchecked), an event that is not an object (with text
that does not parse further on: the error named was another), byte counts of 2**63 and beyond
(``trace steps``: OverflowError), events of the wrong JSON types (the step accountant and the sheets'
collector raised where the engine reads on), where the error is named (jsonpos: the index of an
element after one that is not an object, a value after a ``null``), a NUL byte in a path. Each
expected index and line comes from how the input was built."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.tools.errors import InputError  # noqa: E402
from ai4s_graph.tools.trace import fastscan, stream  # noqa: E402
from ai4s_graph.tools.trace.scan import KIND_MEMCPY  # noqa: E402


def _write(tmp_path: Path, name: str, text: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text)
    return p


def _refusal(p: Path, monkeypatch, parser: str = "fast", fields="all") -> str:
    monkeypatch.setenv(fastscan.PARSER_ENV, parser)
    with pytest.raises(InputError) as e:
        for _ in stream.iter_events(p, fields=fields):
            pass
    return str(e.value)


# ------------------------------------------------------------------------------ where the error is named


def test_the_index_counts_the_elements_that_are_not_objects(tmp_path, monkeypatch):
    # four elements that are not objects, then an event with a bare NaN: it is traceEvents[4]
    p = _write(tmp_path, "t.json", b'{"traceEvents": [3, "x", null, [1, {"a": 2}], {"ph": "X", "name": "b", "ts": NaN}]}')
    for parser in ("ijson", "fast"):
        msg = _refusal(p, monkeypatch, parser)
        assert msg.startswith("t.json: traceEvents[4] field 'ts' is NaN, not a JSON number"), msg


def test_a_value_after_a_null_is_not_named_null(tmp_path, monkeypatch):
    # -2**63 (ijson: integer overflow) in args after an earlier event's "args": null
    for v in (b"-9223372036854775808", b"-9223372036854775809", b"9223372036854775808"):
        p = _write(tmp_path, "t.json", b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "args": null}, '
                                       b'{"ph": "X", "cat": "kernel", "name": "b", "args": {"x": ' + v + b'}, "ts": 2}]}')
        for parser in ("ijson", "fast"):
            msg = _refusal(p, monkeypatch, parser)
            assert msg == ("t.json: traceEvents[1] field 'args' does not parse: not valid JSON (parse error: integer "
                           "overflow); the event: cat 'kernel', name 'b'; the rank is not analysed"), msg


def test_true_false_null_are_no_bare_words(tmp_path, monkeypatch):
    # the same key held a JSON literal in an earlier event; the failing value is a broken number
    p = _write(tmp_path, "t.json", b'{"traceEvents": [{"name": "a", "dur": null}, {"name": "b", "dur": true}, '
                                   b'{"name": "c", "dur": 1..5}]}')
    msg = _refusal(p, monkeypatch)
    assert msg.startswith("t.json: traceEvents[2] field 'dur' does not parse: not valid JSON ("), msg
    # a real bare word is still named
    p = _write(tmp_path, "u.json", b'{"traceEvents": [{"name": "a", "dur": null}, {"name": "c", "dur": Infinity}]}')
    assert _refusal(p, monkeypatch).startswith("u.json: traceEvents[1] field 'dur' is Infinity, not a JSON number")


# ------------------------------------------------------------------------------ one verdict from every reader


def _ev(i: int, **kw) -> dict:
    e = {"ph": "X", "cat": "kernel" if i % 3 == 0 else "cpu_op", "name": f"k{i}", "pid": 1, "tid": 7,
         "ts": 1000.0 + 10 * i, "dur": 5.0, "args": {"correlation": 100 + i, "stream": 7, "device": 0}}
    e.update(kw)
    return e


def _doc(events: list) -> bytes:
    """Kineto's layout: one event per block, ``},\\n  {`` between."""
    return ('{"schemaVersion": 1, "traceEvents": [\n  ' + ",\n  ".join(json.dumps(e) for e in events) + "\n]}\n").encode()


EVENTS = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 7, "ts": 990.0,
           "dur": 500.0}] + [_ev(i) for i in range(40)]


def _verdicts(p: Path, monkeypatch) -> dict[str, str]:
    """Each reader's outcome on ``p``: ``ok`` or its error line (any other exception fails the test)."""
    from ai4s_graph.graph.rules import registry
    from ai4s_graph.tools.trace import host_timeline, onepass, rank_analysis

    want = registry.event_name_wanted
    readers = {
        "engine's pass": lambda: rank_analysis.analyze_rank(str(p), 0, None, store=False),
        "steps lane": lambda: onepass.steps_part(str(p), None),
        "reader lane": lambda: onepass.reader_part(str(p), None, 0, want),
        "counts lane": lambda: onepass.counts_part(str(p), None, want, {}, None),
        "trace steps": lambda: host_timeline.step_breakdown(p),
        "struct read": lambda: sum(1 for _ in stream.iter_events(p, fields="struct")),
    }
    out = {}
    monkeypatch.setenv(fastscan.PARSER_ENV, "ijson")
    try:
        sum(1 for _ in stream.iter_events(p))
        out["one-process ijson"] = "ok"
    except InputError as e:
        out["one-process ijson"] = str(e)
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    for name, read in readers.items():
        try:
            read()
            out[name] = "ok"
        except InputError as e:
            out[name] = str(e)
    return out


def _with(raw: bytes, in_args: bool = False) -> bytes:
    """The trace of :data:`EVENTS` whose traceEvents[3] holds the key ``zz`` (in its args when
    ``in_args``) written as ``raw``."""
    evs = [dict(e, args=dict(e.get("args") or {})) for e in EVENTS]
    (evs[3]["args"] if in_args else evs[3])["zz"] = "@BAD@"
    return _doc(evs).replace(b'"@BAD@"', raw)


SKIPPED_KEYS = {  # (text, the field the one-process read names)
    "a float beyond the range in a key no reader reads": (_with(b"1e400"), "zz"),
    "a float beyond the range in args": (_with(b"-2.5E+400", in_args=True), "args"),
    "an integer part of 400 digits": (_with(b"1" + b"0" * 400 + b".5"), "zz"),
    "bytes that are not UTF-8 in a value no reader reads": (_with(b'"\xff"'), "zz"),
    "bytes that are not UTF-8 in an args key": (_with(b'{"z\xc0\xafz": 1}', in_args=True), "args"),
}


@pytest.mark.parametrize("piece", [300, 1 << 20], ids=["pieces", "one piece"])
@pytest.mark.parametrize("name", list(SKIPPED_KEYS))
def test_a_bad_value_in_a_key_no_reader_reads_one_verdict(tmp_path, monkeypatch, name, piece):
    monkeypatch.setattr(fastscan, "PIECE_BYTES", piece)
    text, field = SKIPPED_KEYS[name]
    p = _write(tmp_path, "t.json", text)
    got = _verdicts(p, monkeypatch)
    line = got["one-process ijson"]
    assert line.startswith(f"t.json: traceEvents[3] field {field!r} does not parse: not valid JSON ("), line
    assert got == dict.fromkeys(got, line), got


@pytest.mark.parametrize("name", list(SKIPPED_KEYS))
def test_trace_steps_and_timeline_refuse_it_in_the_same_line(tmp_path, monkeypatch, name):
    text, _ = SKIPPED_KEYS[name]
    p = _write(tmp_path, "t.json", text)
    monkeypatch.setenv(fastscan.PARSER_ENV, "ijson")
    with pytest.raises(InputError) as e:
        sum(1 for _ in stream.iter_events(p))
    want = str(e.value)
    monkeypatch.delenv(fastscan.PARSER_ENV)  # the commands' own (fast) parse
    for cmd, env in (("steps", {}), ("timeline", {}), ("timeline", {"AI4S_SCAN_WORKERS": "2"})):  # and the parallel pass
        cp = H.cli("trace", cmd, str(p), state=tmp_path / "st", env=env, mem=H.TRACE_MEMORY_LIMIT_BYTES * 2)
        status = H.assert_refused(cp)
        assert " ".join(want.split())[:60] in status, (cmd, status, want)


@pytest.mark.parametrize("bad", [3, "x", None, [1, {"a": 2}]], ids=["number", "string", "null", "list"])
def test_an_event_that_is_not_an_object_is_read_past_by_every_reader(tmp_path, monkeypatch, bad):
    # the engine counts it ill-typed and reads on; the sheets' collector raised (ev.get), the rank was refused
    from ai4s_graph.tools.trace import engine, rank_analysis

    p = _write(tmp_path, "t.json", _doc(EVENTS[:5] + [bad] + EVENTS[5:]))
    got = _verdicts(p, monkeypatch)
    assert got == dict.fromkeys(got, "ok"), got
    clean = _write(tmp_path, "c.json", _doc(EVENTS))
    a, b = engine.analyze(p), engine.analyze(clean)
    assert a.kernel_count == b.kernel_count == 14 and any(w.startswith("1 event(s) of a shape") for w in a.warnings)
    r = rank_analysis.analyze_rank(str(p), 0, None, store=False)["value"]
    assert r["analysis"]["kernel_count"] == 14
    for parser in ("ijson", "fast"):  # the same value on both parsers
        monkeypatch.setenv(fastscan.PARSER_ENV, parser)
        r2 = rank_analysis.analyze_rank(str(p), 0, None, store=False)["value"]
        assert json.dumps(r2, sort_keys=True, default=str) == json.dumps(r, sort_keys=True, default=str)


@pytest.mark.parametrize("at", [300, 4900], ids=["same batch", "next batch"])
def test_a_non_object_then_text_that_does_not_parse_names_the_text(tmp_path, monkeypatch, at):
    # ijson's fallback reads 4096 events a batch: the error named was the non-object (the collector's
    # refusal of the first batch) where the one-process read names the text that does not parse
    evs = [3] + [_ev(i) for i in range(5000)]
    p = _write(tmp_path, "t.json", _doc(evs).replace(f'"k{at}"'.encode(), f'"k{at}" xx'.encode()))
    got = _verdicts(p, monkeypatch)
    line = (f"t.json: traceEvents[{at + 1}] field 'name' does not parse: not valid JSON (lexical error: invalid char "
            f"in json text.); the event: cat {'kernel' if at % 3 == 0 else 'cpu_op'!r}, name 'k{at}'; "
            "the rank is not analysed")
    assert got == dict.fromkeys(got, line), got


#: Fields of the wrong JSON type the engine reads past (tests/hostile/test_event_types.py): (category of
#: the event changed, field, value); the step accountant and the sheets' collector raised on them.
WRONG_TYPES = [("kernel", "cat", ["kernel"]), ("kernel", "name", 5), ("kernel", "name", {"x": 1}),
               ("kernel", "args", [1, 2]), ("cpu_op", "ts", {"a": 1}), ("cpu_op", "ts", "soon"), ("cpu_op", "cat", {}),
               ("cpu_op", "args", "x"), ("metadata", "args", [1]),
               ("metadata", "pid", [1]), ("memory", "args", 5), ("cuda_runtime", "args", "x")]


@pytest.mark.parametrize("cat,field,value", WRONG_TYPES, ids=[f"{c}.{f}={v!r}" for c, f, v in WRONG_TYPES])
def test_a_field_of_the_wrong_type_is_read_past_by_every_reader(tmp_path, monkeypatch, cat, field, value):
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
           {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 7, "ts": 995.0,
            "args": {"Total Allocated": 1 << 20, "Device Type": 1}},
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": 996.0, "dur": 1.0,
            "args": {"correlation": 100}}] + [dict(e) for e in EVENTS]
    kinds = {"metadata": 0, "memory": 1, "cuda_runtime": 2}
    i = kinds[cat] if cat in kinds else next(j for j, e in enumerate(evs) if e.get("cat") == cat)
    evs[i][field] = value
    p = _write(tmp_path, "t.json", _doc(evs))
    got = _verdicts(p, monkeypatch)
    assert got == dict.fromkeys(got, "ok"), got


def test_byte_counts_of_2_63_and_beyond_are_no_counts(tmp_path, monkeypatch):
    # trace steps raised OverflowError (int64 columns) on these; a run then exited 1 ("OverflowError in a node")
    from ai4s_graph.tools.trace import host_timeline

    def trace(alloc, nbytes) -> Path:
        evs = [dict(e) for e in EVENTS] + [
            {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 7, "ts": 1100.0,
             "args": {"Total Allocated": 4096, "Device Type": 1}},
            {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 7, "ts": 1101.0,
             "args": {"Total Allocated": alloc, "Device Type": 1}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "pid": 0, "tid": 7, "ts": 1200.0, "dur": 5.0,
             "args": {"correlation": 100, "stream": 7, "device": 0, "bytes": nbytes}}]
        return _write(tmp_path, f"m{len(list(tmp_path.iterdir()))}.json", _doc(evs))

    ref = host_timeline.step_breakdown(trace(None, None)).model_dump(mode="json")  # no sample, no count
    for v in ((1 << 63) - 1, 1e19, -1e19, 1e300, "1e30"):
        monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
        p = trace(v, v)
        acc = host_timeline.StepAccountant(p)
        stream.feed_events(p, (acc.feed,), fields=host_timeline.FIELDS)
        # the sample and the memcpy's count left out (-1: no count, as for a kernel)
        assert list(acc.m_alloc) == [4096] and list(acc.g_bytes) == [-1] * 15 and list(acc.g_kind)[-1] == KIND_MEMCPY, v
        got = acc.finish().model_dump(mode="json")
        assert got["steps"] == ref["steps"], v
        assert _verdicts(p, monkeypatch) == dict.fromkeys(_verdicts(p, monkeypatch), "ok")
    cp = H.cli("trace", "steps", str(trace(1e19, 1e19)), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 0 and H.status_lines(cp)[-1].startswith("STATUS=ok"), cp.stdout[-1500:]


def test_a_consumer_that_fails_on_an_event_is_named_in_one_line(tmp_path):
    # trace steps' own read goes through guard.named_malformed_events like the lanes' (a traceback before)
    from ai4s_graph.tools.trace import host_timeline

    evs = [dict(e) for e in EVENTS]
    evs[7]["ts"] = {"us": 1}
    p = _write(tmp_path, "t.json", _doc(evs))
    with pytest.raises(InputError) as e:
        host_timeline.step_breakdown(p, also=(lambda ev: float(ev["ts"]),))
    assert str(e.value) == ("t.json: traceEvents[7] (cat 'kernel', name 'k6') has ts of type dict, not a number: "
                            "not what the PyTorch profiler writes")


def test_a_nul_byte_in_a_path_is_no_long_trace_and_one_line(tmp_path, monkeypatch):
    from ai4s_graph.graph.rules import registry
    from ai4s_graph.tools.report import drawing
    from ai4s_graph.tools.trace import engine, lanes, onepass, rank_analysis, scan_parallel

    for env in (lanes.LANES_ENV, drawing.FIGURE_LANES_ENV, scan_parallel.WORKERS_ENV):
        monkeypatch.delenv(env, raising=False)
    p = str(tmp_path / "a\x00b.json")
    assert lanes.lanes_for(p) is False and drawing.lanes_on(p) is False and scan_parallel.json_bytes(Path(p)) == 0
    assert onepass.prefetch(p, 0, None, "r0", wanted=registry.event_name_wanted, raw_patterns={}) is False
    line = f"a\\x00b.json: not a trace file: the path {ascii(p)[1:-1]} holds a NUL byte (no file can be named so)"
    for read in (lambda: engine.analyze(p), lambda: rank_analysis.analyze_rank(p, 0, None, store=False),
                 lambda: rank_analysis.analyze_rank(p, 0, str(tmp_path / "cache")),
                 lambda: onepass.steps_part(p, None),
                 lambda: onepass.read_rank(p, 0, None, "r0", wanted=registry.event_name_wanted, raw_patterns={})):
        with pytest.raises(InputError) as e:
            read()
        assert str(e.value) == line
