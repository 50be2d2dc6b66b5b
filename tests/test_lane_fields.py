"""Reads that decode only the keys their consumers read (tools/trace/fastscan.py ``decoders``,
``SheetsEvent``): the step accountant's lane (host_timeline.FIELDS), the verifier reader's lane
(onepass.READER_FIELDS) and the engine's pass with
TraceLens's sheets' collector (the ``sheets`` fields) give what whole event dicts give, on every
trace the repository and ../shared/data hold and on the hand-built odd documents of
tests/test_fastscan.py (pieces cut small, so that some go to ijson part-way), and the field lists
hold every key their consumers' source reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from msgspec import UNSET
from test_fastscan import CASES, REPO, TRACES, _ids, _write

from ai4s_graph.tools.errors import Ai4sError
from ai4s_graph.tools.trace import fastscan, host_timeline, rank_analysis, stream
from ai4s_graph.tools.trace.tracelens_sheets import OpArgsCollector


def _keys_read(src: str, names: str) -> set[str]:
    """The string keys ``src`` reads as ``X.get("k"`` / ``X["k"]`` for a variable X of ``names``."""
    return set(re.findall(rf'\b(?:{names})(?:\.get\(|\[)"([^"]+)"', src))


def test_the_step_fields_cover_what_the_accountant_reads():
    src = (REPO / "tools" / "trace" / "step_feed.py").read_text()
    read = _keys_read(src, "ev|args|a")
    assert {"ph", "cat", "Input Dims", "device", "pid"} <= read  # the pattern finds the feed's keys
    ev_keys, arg_keys = host_timeline.FIELDS
    assert read <= set(ev_keys) | set(arg_keys), read - set(ev_keys) - set(arg_keys)
    assert "args" in ev_keys


def test_the_reader_fields_cover_what_the_reader_reads():
    import inspect

    from ai4s_graph.tools.trace import host_sampling, kineto_reader, onepass

    src = inspect.getsource(kineto_reader.KinetoLoader) + (REPO / "tools" / "trace" / "kineto_pairs.py").read_text()
    read = _keys_read(src, "ev|args|begin|id2|a")
    assert {"cat", "ph", "External id", "stream", "id2", "global"} <= read
    ev_keys, arg_keys = onepass.READER_FIELDS
    nested = {"global", "local"}  # id2's keys: id2 is kept whole
    assert read - nested <= set(ev_keys) | set(arg_keys), read - nested - set(ev_keys) - set(arg_keys)
    ann = _keys_read(inspect.getsource(host_sampling.Annotations), "ev|args|a")
    assert {"cat", "ph", "ts"} <= ann and ann <= set(host_sampling.ANNOTATION_FIELDS[0]), ann
    assert onepass.READER_FIELDS == fastscan.union_fields(kineto_reader.FIELDS, host_sampling.ANNOTATION_FIELDS)
    assert fastscan.union_fields((("a", "b"), ("x",)), (("b", "c"), ())) == (("a", "b", "c"), ("x",))


def test_the_sheets_fields_cover_what_the_collector_reads():
    import inspect

    src = inspect.getsource(OpArgsCollector)
    read = _keys_read(src, "ev|args|a")
    assert {"cat", "ph", "correlation", "name", "labels"} <= read
    from ai4s_graph.tools.trace.tracelens_sheets import ARG_KEYS

    have = set(fastscan.ENGINE_EVENT_KEYS) | set(fastscan.ENGINE_ARG_KEYS) | set(fastscan.SHEETS_ARG_KEYS)
    assert read | set(ARG_KEYS) <= have, (read | set(ARG_KEYS)) - have
    assert [f.encode_name for f in __import__("msgspec").structs.fields(fastscan.SheetsArgs)] == \
        list(fastscan.ENGINE_ARG_KEYS) + list(fastscan.SHEETS_ARG_KEYS)


def test_a_field_pair_keeps_only_its_keys(tmp_path, monkeypatch):
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    doc = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.5, "dur": 2, "x": [1], "args": {"stream": 7, "External id": 3}},
        {"ph": "i", "name": "[memory]", "args": None},
        {"ph": "X", "args": {}},
    ], "after": 1}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    got = list(stream.iter_events(p, fields=(("ph", "ts", "args"), ("stream",))))
    assert got == [{"ph": "X", "ts": 1.5, "args": {"stream": 7}}, {"ph": "i", "args": None}, {"ph": "X", "args": {}}]
    assert type(got[0]["ts"]) is float and type(got[0]["args"]["stream"]) is int
    assert list(stream.iter_events(p, fields=(("name",), ()))) == [{"name": "k"}, {"name": "[memory]"}, {}]
    assert fastscan.decoders((("ph",), ("stream",))) is fastscan.decoders((("ph",), ("stream",)))  # made once
    with pytest.raises(ValueError, match="fields must be"):
        fastscan.decoders((["ph"], ()))
    with pytest.raises(KeyError):
        fastscan.decoders("no such set")


def test_struct_and_dict_feeds_keep_the_same(tmp_path):
    # every branch of OpArgsCollector.feed, against feed_struct of the same events decoded as SheetsEvent
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": None},
        {"ph": "M", "name": "process_name", "pid": 9},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10, "dur": 5,
         "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "External id": 4}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 2, "ts": 11.5, "dur": 1,
         "args": {"Input Dims": None, "Concrete Inputs": ["", "1"], "Input Strides": [[1]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 3, "ts": 12},
        {"ph": "X", "cat": "cpu_op", "name": "aten::zeros", "pid": 1, "tid": 3, "ts": 13, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 14, "args": {"correlation": 8}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": 1, "tid": 2, "ts": 15, "args": {"correlation": None}},
        {"ph": "X", "cat": "user_annotation", "name": "fwd", "pid": 1, "tid": 2, "ts": 16, "args": {"correlation": 9}},
        {"cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 17, "dur": 3, "args": {"correlation": 0}},
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 1, "tid": 2, "ts": None},
        {"ph": "i", "cat": "cpu_op", "name": "instant", "pid": 1, "tid": 2, "ts": 18},
    ]
    text = json.dumps(events).encode()
    structs = fastscan.decoders("sheets")[0](text)
    assert all(type(e) is fastscan.SheetsEvent for e in structs)
    a, b = OpArgsCollector(), OpArgsCollector()
    a.feed_batch(events)  # dicts: feed
    b.feed_batch(structs)  # SheetsEvent: feed_struct
    assert vars(a).keys() == vars(b).keys()
    for k, v in vars(a).items():
        assert vars(b)[k] == v, k
    assert a.n == 15 and len(a.op_ord) == 4 and list(a.l_ord) == [10, 13]
    assert a.sigs[0] == ("((2, 3), (3, 4))", "('float', 'float')", None, None)  # TraceLens's list_to_tuple
    assert a.sigs[1] == ("None", None, "((1,),)", "('', '1')") and a.sigs[2] == (None,) * 4
    assert a.process_names == {1: "python3", 9: "None"} and a.thread_names[(1, 3)] == "None"
    assert structs[7].args is None and structs[8].args.input_dims is UNSET


def _steps(path: Path, parser: str, fields, monkeypatch):
    monkeypatch.setenv(fastscan.PARSER_ENV, parser)
    acc = host_timeline.StepAccountant(path)
    try:
        stream.feed_events(path, (acc.feed,), fields=fields)
        return acc.finish().model_dump(mode="json")
    except Ai4sError as e:
        return ("error", type(e).__name__, str(e))
    except Exception as e:  # noqa: BLE001 - a crash must at least be the same crash
        return ("crash", type(e).__name__)


def _reader(path: Path, parser: str, fields, monkeypatch):
    from ai4s_graph.graph.rules import registry
    from ai4s_graph.tools.trace import onepass

    monkeypatch.setenv(fastscan.PARSER_ENV, parser)
    monkeypatch.setattr(onepass, "READER_FIELDS", fields)
    try:
        got = onepass.reader_part(str(path), None, 0, registry.event_name_wanted)
    except Ai4sError as e:
        return ("error", type(e).__name__, str(e))
    return json.dumps(got, sort_keys=True, default=str)


def _rank(path: Path, parser: str, cache: Path, monkeypatch):
    monkeypatch.setenv(fastscan.PARSER_ENV, parser)
    try:
        got = rank_analysis.analyze_rank(str(path), 0, str(cache), store=False)
    except Ai4sError as e:
        return ("error", type(e).__name__, str(e))
    assert got["from_cache"] is False
    return json.dumps(got["value"], sort_keys=True, default=str)


@pytest.mark.parametrize("path", TRACES, ids=[_ids(p) for p in TRACES])
def test_every_trace_same_steps_and_sheets(path, tmp_path, monkeypatch):
    whole = _steps(path, "ijson", "all", monkeypatch)
    assert _steps(path, "fast", host_timeline.FIELDS, monkeypatch) == whole
    from ai4s_graph.tools.trace import onepass

    fields = onepass.READER_FIELDS
    assert _reader(path, "fast", fields, monkeypatch) == _reader(path, "ijson", "all", monkeypatch)
    # the engine's pass: SheetsEvent objects on the fast parse, event dicts on ijson's
    assert _rank(path, "fast", tmp_path / "a", monkeypatch) == _rank(path, "ijson", tmp_path / "b", monkeypatch)


@pytest.mark.parametrize("name", list(CASES))
def test_odd_documents_same_steps_and_sheets(tmp_path, monkeypatch, name):
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 300)
    p = _write(tmp_path, name, CASES[name], gz=False)
    assert _steps(p, "fast", host_timeline.FIELDS, monkeypatch) == _steps(p, "ijson", "all", monkeypatch)
    from ai4s_graph.tools.trace import onepass

    fields = onepass.READER_FIELDS
    assert _reader(p, "fast", fields, monkeypatch) == _reader(p, "ijson", "all", monkeypatch)
    assert _rank(p, "fast", tmp_path / "a", monkeypatch) == _rank(p, "ijson", tmp_path / "b", monkeypatch)


def test_a_duration_pair_read_with_the_sheets_fields(tmp_path, monkeypatch):
    # a kernel written as a B/E pair is joined into an EngineEvent inside a batch of SheetsEvent
    # objects: its args (correlation, stream) are read as any kernel's, as on the ijson parse
    evs = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 10,
         "args": {"Input Dims": [[2, 2], [2, 2]], "External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 3,
         "args": {"correlation": 7, "External id": 1}},
        {"ph": "B", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20,
         "args": {"correlation": 7, "stream": 7, "device": 0}},
        {"ph": "E", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 50},
        {"ph": "X", "cat": "kernel", "name": "add", "pid": 0, "tid": 7, "ts": 60, "dur": 5,
         "args": {"correlation": 8, "stream": 7, "device": 0}},
    ]
    p = tmp_path / "pair.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    col = OpArgsCollector()
    scan = stream.scan_trace(p, sheets=col)
    assert fastscan.last_parse["fallback"] is None  # decoded as SheetsEvent objects
    assert sorted(scan.corr.tolist()) == [7, 8] and sorted(scan.stream.tolist()) == [scan.stream[0]] * 2
    assert sorted(scan.dur.tolist()) == [5.0, 30.0]
    assert not any("args" in n for n in scan.notes), scan.notes
    assert col.sigs == [("((2, 2), (2, 2))", None, None, None)] and list(col.l_ord) == [3, 6]  # the B half is no launch
    assert _rank(p, "fast", tmp_path / "a", monkeypatch) == _rank(p, "ijson", tmp_path / "b", monkeypatch)
