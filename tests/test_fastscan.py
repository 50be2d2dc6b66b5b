"""The fast parse (tools/trace/fastscan.py) against the old one (ijson over the whole file): the same
events (same types: ``1`` stays an int, ``1.0`` a float), the same trailer keys and the same engine
output (timeline rows, kernel tables, warnings) on every trace the repository and ../shared/data
hold, and the same outcome (events or the one-line error) on hand-built odd documents, with the
pieces cut small so that every cut lands somewhere odd."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import msgspec
import pytest

from ai4s_graph.tools.errors import Ai4sError
from ai4s_graph.tools.trace import engine, fastscan, stream

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("AI4S_TEST_DATA", REPO.parent / "shared" / "data")).resolve()
ROOTS = [REPO / "examples", REPO / "bench" / "accuracy" / "cases", REPO / "tests" / "data", SHARED]


def _is_trace(p: Path) -> bool:
    if not p.is_file() or not (p.name.endswith(".json") or p.name.endswith(".json.gz")):
        return False
    try:
        with (gzip.open(p, "rb") if p.read_bytes()[:2] == b"\x1f\x8b" else open(p, "rb")) as fh:
            return b'"traceEvents"' in fh.read()
    except (OSError, EOFError):
        return False


def _traces() -> list[Path]:
    out = []
    for root in ROOTS:
        if root.is_dir():
            out += sorted(p for p in root.rglob("*.json*") if _is_trace(p))
    return out


TRACES = _traces()


def _ids(p: Path) -> str:
    for root in ROOTS:
        if p.is_relative_to(root):
            return f"{root.name}/{p.relative_to(root)}"
    return str(p)


def _outcome(path: Path, parser: str, monkeypatch) -> tuple:
    """(encoded events, trailer) of a parse, or ("error", message)."""
    monkeypatch.setenv(fastscan.PARSER_ENV, parser)
    trailer: dict = {}
    enc = msgspec.json.Encoder()
    try:
        evs = [enc.encode(e) for e in stream.iter_events(path, trailer=trailer)]
    except Ai4sError as e:
        return ("error", str(e))
    return (evs, enc.encode(trailer))


def _both(path: Path, monkeypatch) -> tuple:
    old = _outcome(path, "ijson", monkeypatch)
    new = _outcome(path, "fast", monkeypatch)
    return old, new


def test_the_trace_set_is_there():
    # the repository's own traces at least (examples, accuracy cases, tests/data)
    assert sum(1 for p in TRACES if p.is_relative_to(REPO)) >= 20, [str(p) for p in TRACES]  # 28 on 2026-12-01


@pytest.mark.parametrize("path", TRACES, ids=[_ids(p) for p in TRACES])
def test_every_trace_same_events_and_engine_output(path, monkeypatch):
    old, new = _both(path, monkeypatch)
    assert old[0] != "error"
    assert new == old
    assert fastscan.last_parse["fallback"] is None, fastscan.last_parse  # the fast parse did the work
    assert fastscan.last_parse["pieces"] >= 1
    res = {}
    for parser in ("ijson", "fast"):
        monkeypatch.setenv(fastscan.PARSER_ENV, parser)
        try:
            analysis, tables = engine.analyze_with_tables(path)
        except Ai4sError as e:  # a trace without GPU events: the same refusal
            res[parser] = ("error", str(e))
            continue
        res[parser] = (analysis.model_dump(mode="json"), json.dumps(tables, sort_keys=True, default=str))
    assert res["fast"] == res["ijson"]


# ------------------------------------------------------------------------------ hand-built odd documents


def _ev(i: int, **kw) -> dict:
    e = {"ph": "X", "cat": "kernel" if i % 3 == 0 else "cpu_op", "name": f"k{i}", "pid": 1, "tid": 7,
         "ts": 1000.0 + 10 * i, "dur": 5.0, "args": {"correlation": 100 + i, "stream": 7, "device": 0}}
    e.update(kw)
    return e


def _doc(events: list, head: dict | None = None, tail: dict | None = None, *, layout: str = "kineto") -> bytes:
    """A trace document: ``head`` keys, the list, ``tail`` keys; ``layout`` kineto (one event per
    block, ``},\\n  {`` between), compact (one line) or loose (tabs, CRLF, spaces around commas)."""
    enc = [json.dumps(e) for e in events]
    sep = {"kineto": ",\n  ", "compact": ",", "loose": "\t ,\r\n\t"}[layout]
    h = "".join(f"{json.dumps(k)}: {json.dumps(v)}, " for k, v in (head or {"schemaVersion": 1}).items())
    t = "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in (tail or {}).items())
    return ("{" + h + '"traceEvents": [\n  ' + sep.join(enc) + "\n]" + t + "}\n").encode()


EVENTS = [_ev(i) for i in range(40)]
CASES: dict[str, bytes] = {
    "kineto layout": _doc(EVENTS),
    "compact layout": _doc(EVENTS, layout="compact"),
    "tabs and CRLF between events": _doc(EVENTS, layout="loose"),
    "trailer keys after the list": _doc(EVENTS, tail={"deviceProperties": [{"id": 0, "name": "H200"}],
                                                      "traceName": "x"}),
    "the list first, no head": _doc(EVENTS, head={}),
    "the boundary pattern inside names": _doc([_ev(i, name="a},\n  {b},{" * (i % 4)) for i in range(40)]),
    "objects in lists inside args": _doc([_ev(i, args={"x": [{"a": 1}, {"b": [{"c": 2}, {}]}], "correlation": i})
                                          for i in range(40)]),
    "items that are not objects": _doc([1, "two", None, [3, {"a": 4}], *EVENTS, 5.5, True]),
    "duplicate keys inside an event": (b'{"traceEvents": [{"ph": "X", "ts": 1, "ts": 2.5, "dur": 1, "dur": 3},'
                                       b' {"a": 1, "a": {"b": 1, "b": 2}}]}'),
    "two traceEvents lists": _doc(EVENTS[:10], tail={"traceEvents": EVENTS[10:20]}),
    "a second list under an escaped key": _doc(EVENTS[:10]).replace(b"]}\n", b'], "trace\\u0045vents": [{"x": 1}]}\n'),
    "an escaped list key first": (b'{"trace\\u0045vents": [{"a": 1}], "traceEvents": [{"b": 2}, {"c": 3}]}'),
    "traceEvents inside a header object": (b'{"h": {"traceEvents": [{"a": 1}]}, "traceEvents": [{"b": 2}, {"c": 3}]}'),
    "traceEvents in a header string": (b'{"h": "\\"traceEvents\\": [", "traceEvents": [{"b": 2}, {"c": 3}]}'),
    "traceEvents not a list": b'{"traceEvents": {"a": 1}, "x": [{"b": 2}]}',
    "empty list": _doc([]),
    "no traceEvents": b'{"schemaVersion": 1, "other": [{"a": 1}, {"b": 2}]}',
    "root is a list": json.dumps(EVENTS).encode(),
    "root is a number": b"42",
    "empty object": b"{}",
    "int64 max and min + 1": _doc([_ev(1, id=(1 << 63) - 1), _ev(2, id=-(1 << 63) + 1)]),
    "integer 2**63 (ijson: integer overflow)": _doc([_ev(1), _ev(2, args={"stream": 1 << 63})] + EVENTS),
    "integer -2**63": _doc([_ev(1), _ev(2, id=-(1 << 63))] + EVENTS),
    "a 30-digit integer": _doc(EVENTS + [_ev(2, id=10 ** 30)]),
    "long digit runs that are floats and strings": _doc([_ev(i, dur=float(f"0.{'7' * 25}"), ts=1.5e22,
                                                             name="k" + "9" * 30) for i in range(40)]
                                                        ).replace(b"1.5e+22", b"15000000000000000000000.25"),
    "float overflow 1e400": _doc(EVENTS).replace(b'"dur": 5.0', b'"dur": 1e400', 1),
    "float underflow 1e-400": _doc(EVENTS).replace(b'"dur": 5.0', b'"dur": 1e-400', 3),
    "NaN literal": _doc(EVENTS).replace(b'"dur": 5.0', b'"dur": NaN', 1),
    "a lone surrogate escape": _doc(EVENTS).replace(b'"k1"', b'"k\\ud800"'),
    "a surrogate pair escape": _doc(EVENTS).replace(b'"k1"', b'"k\\ud83d\\ude00"'),
    "an invalid UTF-8 byte": _doc(EVENTS).replace(b'"k5"', b'"k\xff"'),
    "a raw control character in a string": _doc(EVENTS).replace(b'"k5"', b'"k\x01"'),
    "UTF-8 names": _doc([_ev(i, name="ядро—核") for i in range(40)]).decode("unicode_escape").encode(),
    "names with \\u escapes": _doc([_ev(i, name="ядро—核") for i in range(40)]),
    "byte order mark": b"\xef\xbb\xbf" + _doc(EVENTS),
    "trailing garbage after the root": _doc(EVENTS) + b"xyz",
    "a second root after the first": _doc(EVENTS) + _doc(EVENTS),
    "truncated inside an event": _doc(EVENTS)[: len(_doc(EVENTS)) // 2],
    "truncated after a comma between events": _doc(EVENTS)[: _doc(EVENTS).index(b"},\n  {", 2000) + 2],
    "truncated before the root closes": _doc(EVENTS)[:-3],
    "deep nesting in one event": _doc(EVENTS[:5] + [{"a": json.loads("[" * 300 + "]" * 300)}] + EVENTS[5:]),
    # values in keys that no field set but ``all`` reads (msgspec skips them unchecked; ijson refuses them)
    "float overflow in a key no reader reads": _doc(EVENTS).replace(b'"pid": 1,', b'"pid": 1, "zz": 1e400,', 1),
    "float overflow in an args key no reader reads": _doc(EVENTS).replace(b'"device": 0}', b'"device": 0, "zz": -1.5E+400}', 7),
    "float overflow of a long integer part": _doc(EVENTS).replace(b'"pid": 1,', b'"pid": 1, "zz": 1' + b"0" * 400 + b'.5,', 1),
    "invalid UTF-8 in a key no reader reads": _doc(EVENTS).replace(b'"tid": 7,', b'"tid": 7, "z\xffz": 1,', 9),
    "invalid UTF-8 in a value no reader reads": _doc(EVENTS).replace(b'"tid": 7,', b'"tid": 7, "zz": "\xc0\xaf",', 3),
    "an encoded surrogate in an args key": _doc(EVENTS).replace(b'"device": 0}', b'"device": 0, "z\xed\xa0\x80": 1}', 2),
    "exponents of 3 digits that fit, 1e400 in a string": _doc(EVENTS).replace(
        b'"pid": 1,', b'"pid": 1, "zz": [1.5e+300, -2E-400, 1' + b"0" * 40 + b'e-100, "x 1e400", "e+999"],'),
    "an event that is not an object, then text that does not parse": _doc(EVENTS[:20] + [3] + EVENTS[20:]).replace(
        b'"k30"', b'"k30" xx'),
}


def _write(tmp_path: Path, name: str, data: bytes, gz: bool) -> Path:
    p = tmp_path / (f"{abs(hash(name))}.json" + (".gz" if gz else ""))
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


@pytest.mark.parametrize("piece", [16, 300, 1 << 20])
@pytest.mark.parametrize("name", list(CASES))
def test_odd_documents_same_outcome(tmp_path, monkeypatch, name, piece):
    # pieces of 16 B cut at every boundary (retries, cuts inside strings and nested objects); 300 B
    # several events a piece; 1 MiB the whole document in one piece. Blocks of 64 B make every piece
    # span several reads.
    monkeypatch.setattr(fastscan, "PIECE_BYTES", piece)
    monkeypatch.setattr(fastscan, "BLOCK_BYTES", 64)
    p = _write(tmp_path, name, CASES[name], gz=False)
    old, new = _both(p, monkeypatch)
    assert new == old


@pytest.mark.parametrize("name", ["kineto layout", "trailer keys after the list", "two traceEvents lists",
                                  "truncated inside an event", "integer 2**63 (ijson: integer overflow)"])
def test_odd_documents_gzip_same_outcome(tmp_path, monkeypatch, name):
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 300)
    p = _write(tmp_path, name, CASES[name], gz=True)
    old, new = _both(p, monkeypatch)
    assert new == old


def test_truncated_gzip_same_error(tmp_path, monkeypatch):
    data = gzip.compress(_doc([_ev(i) for i in range(3000)]))
    p = tmp_path / "t.json.gz"
    p.write_bytes(data[: len(data) * 2 // 3])
    old, new = _both(p, monkeypatch)
    assert old[0] == "error" and "truncated or not valid JSON" in old[1]
    assert new == old


def test_cases_that_must_fall_back_do_and_the_others_do_not(tmp_path, monkeypatch):
    """Which documents the fast parse hands to ijson: the ones msgspec would read differently or
    cannot read, never a plain trace, whatever its layout."""
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 300)
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    expect_fast = ["kineto layout", "compact layout", "tabs and CRLF between events", "trailer keys after the list",
                   "the list first, no head", "the boundary pattern inside names", "objects in lists inside args",
                   "empty list", "int64 max and min + 1", "long digit runs that are floats and strings",
                   "UTF-8 names", "names with \\u escapes", "float underflow 1e-400", "a surrogate pair escape",
                   "exponents of 3 digits that fit, 1e400 in a string"]
    expect_ijson = ["two traceEvents lists", "a second list under an escaped key", "an escaped list key first",
                    "integer 2**63 (ijson: integer overflow)", "integer -2**63", "a 30-digit integer",
                    "float overflow 1e400", "NaN literal", "an invalid UTF-8 byte", "root is a list",
                    "truncated inside an event", "trailing garbage after the root", "no traceEvents", *SKIPPED_BAD]
    for name in expect_fast + expect_ijson:
        p = _write(tmp_path, name, CASES[name], gz=False)
        try:
            for _ in stream.iter_events(p):
                pass
        except Ai4sError:
            pass
        fell_back = fastscan.last_parse["fallback"] is not None
        assert fell_back == (name in expect_ijson), (name, fastscan.last_parse)


#: The cases whose bad value lies in a key a decode of some fields only skips.
SKIPPED_BAD = ["float overflow in a key no reader reads", "float overflow in an args key no reader reads",
               "float overflow of a long integer part", "invalid UTF-8 in a key no reader reads",
               "invalid UTF-8 in a value no reader reads", "an encoded surrogate in an args key"]


@pytest.mark.parametrize("fields", ["struct", "sheets", "engine", (("ph", "ts"), ("stream",))],
                         ids=["struct", "sheets", "engine", "pair"])
@pytest.mark.parametrize("piece", [300, 1 << 20])
def test_a_bad_value_in_a_skipped_key_is_refused_by_every_field_set(tmp_path, monkeypatch, fields, piece):
    """A float that overflows or bytes that are not UTF-8 in a key the decode skips: ijson's refusal,
    the same line, whatever the field set (msgspec alone would accept them), both in a piece and in
    the last one; a fitting 3-digit exponent and 1e400 inside a string stay on the fast parse."""
    monkeypatch.setattr(fastscan, "PIECE_BYTES", piece)
    for name in SKIPPED_BAD + ["exponents of 3 digits that fit, 1e400 in a string"]:
        p = _write(tmp_path, name, CASES[name], gz=False)
        want = _outcome(p, "ijson", monkeypatch)
        monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
        try:
            got = ("n", sum(1 for _ in stream.iter_events(p, fields=fields)))
        except Ai4sError as e:
            got = ("error", str(e))
        if name in SKIPPED_BAD:
            assert got == want and want[0] == "error", (name, got, want)
            assert "does not parse: not valid JSON" in want[1], want
            assert fastscan.last_parse["fallback"] is not None
        else:
            assert got == ("n", 40) and want[0] != "error" and fastscan.last_parse["fallback"] is None, (name, got)


def test_agrees_names_what_ijson_refuses():
    ok = [b'[{"a": 1e-400}]', b'[{"a": 1e308}]', b'[{"a": 1.7976931348623157e308}]', b'[{"a": 0.00001e310}]',
          b'[{"a": 1' + b"0" * 400 + b'e-100}]', b'[{"a": "x 1e400"}]', b'[{"a": "sample000", "b": "+0000"}]',
          "[{\"a\": \"\u00e9\u6838\"}]".encode(), b'[{"a": 9223372036854775807}]']
    bad = [b'[{"a": 1e400}]', b'[{"a": 1E+400}]', b'[{"a":-1e400}]', b'[{"a": 1.8e308}]', b'[1e400]',
           b'[{"a": 17976931348623159e292}]', b'[{"a": 1' + b"0" * 400 + b'.5}]', b'[{"a": "\xff"}]',
           b'[{"\xc0\xaf": 1}]', b'[{"a": 9223372036854775808}]']
    assert [fastscan.agrees(t) for t in ok] == [True] * len(ok)
    assert [fastscan.agrees(t) for t in bad] == [False] * len(bad)
    import io

    import ijson

    for t in ok + bad:  # the reference: ijson's verdict on each
        try:
            list(ijson.items(io.BytesIO(t), "item", use_float=True))
            accepted = True
        except Exception:  # noqa: BLE001 - ijson's errors
            accepted = False
        assert accepted == fastscan.agrees(t), t


@pytest.mark.parametrize("at", [30, 3000, 6000])
def test_the_events_before_a_parse_error_come_out_before_it(tmp_path, monkeypatch, at):
    # ijson hands its events out in batches on the fallback; those before its error come out first, as on
    # the ijson parse (one at a time), wherever the error lies in a batch
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 300)
    evs = [_ev(i) for i in range(7000)]
    evs[5] = 3  # the piece holding it does not decode as structs: ijson from there on
    data = _doc(evs).replace(f'"k{at}"'.encode(), f'"k{at}" xx'.encode())
    p = _write(tmp_path, str(at), data, gz=False)
    seen = {}
    for parser in ("ijson", "fast"):
        monkeypatch.setenv(fastscan.PARSER_ENV, parser)
        n = 0
        with pytest.raises(Ai4sError) as e:
            for batch in stream.iter_event_batches(p, fields="struct"):
                n += len(batch)
        seen[parser] = (n, str(e.value))
    assert seen["fast"] == seen["ijson"] and seen["fast"][0] == at, seen
    assert f"traceEvents[{at}] field 'name' does not parse" in seen["fast"][1]


def test_the_reader_thread_stops_when_the_pass_stops_early(tmp_path, monkeypatch):
    import threading

    monkeypatch.setattr(fastscan, "BLOCK_BYTES", 64)
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 300)
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    p = _write(tmp_path, "kineto", _doc([_ev(i) for i in range(5000)]), gz=True)
    it = stream.iter_events(p)
    next(it)
    readers = [t for t in threading.enumerate() if t.name == "trace-reader"]
    assert readers  # the file is read in its own thread
    it.close()  # the consumer stops after one event: the reader must not go on (nor block forever)
    for t in readers:
        t.join(timeout=60)
        assert not t.is_alive()


def test_the_engine_fields_cover_what_the_engine_scan_reads():
    """A scan without other consumers decodes only fastscan.ENGINE_EVENT_KEYS / ENGINE_ARG_KEYS: every
    key the scan's source reads from an event or its args must be in them (a key added to the scan
    and not there would read as missing on the fast parse only)."""
    import re

    src = ""
    for name in ("stream.py", "scan_loop.py", "stream_fix.py", "scan.py", "codes.py"):  # the scan, its loop, helpers
        p = REPO / "tools" / "trace" / name
        if p.is_file():
            src += p.read_text()
    read = set(re.findall(r'\b(?:ev|e|a|args|first|nxt)(?:\.get\(|\[)"([^"]+)"', src))
    assert read, "no event key found in the scan's source"
    assert read <= set(fastscan.ENGINE_EVENT_KEYS) | set(fastscan.ENGINE_ARG_KEYS), read
    assert set(stream.COLLECTIVE_ARG_KEYS) <= set(fastscan.ENGINE_ARG_KEYS)


def test_engine_fields_decode_keeps_only_those(tmp_path, monkeypatch):
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    ev = _ev(0, args={"correlation": 5, "External id": 9, "Input Dims": [[1]], "stream": 7}, extra="x")
    p = _write(tmp_path, "one", _doc([ev, _ev(1)]), gz=False)
    full = next(stream.iter_events(p))
    lean = next(stream.iter_events(p, fields="engine"))
    assert full == ev
    assert lean == {k: v for k, v in ev.items() if k != "extra"} | {"args": {"correlation": 5, "stream": 7}}


def _engine_outcome(path: Path, parser: str, monkeypatch):
    monkeypatch.setenv(fastscan.PARSER_ENV, parser)
    try:
        analysis, tables = engine.analyze_with_tables(path)
    except Ai4sError as e:
        return ("error", type(e).__name__, str(e))
    except Exception as e:  # noqa: BLE001 - a crash must at least be the same crash
        return ("crash", type(e).__name__)
    return (analysis.model_dump(mode="json"), json.dumps(tables, sort_keys=True, default=str))


@pytest.mark.parametrize("name", list(CASES))
def test_odd_documents_same_engine_output(tmp_path, monkeypatch, name):
    # the engine's own scan decodes only its fields on the fast parse: same figures or the same refusal
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 300)
    p = _write(tmp_path, name, CASES[name], gz=False)
    assert _engine_outcome(p, "fast", monkeypatch) == _engine_outcome(p, "ijson", monkeypatch)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was(tmp_path, monkeypatch, enabled):
    # the decode pauses the cyclic collector; after the parse (and after one that fails) it is as before
    import gc

    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 300)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        for name in ("kineto layout", "truncated inside an event"):
            p = _write(tmp_path, name, CASES[name], gz=False)
            try:
                sum(1 for _ in stream.iter_events(p))
            except Ai4sError:
                pass
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


# ------------------------------------------------------------------------------ the engine's event objects


def test_the_engine_event_objects_hold_exactly_the_engine_fields():
    assert tuple(f.encode_name for f in msgspec.structs.fields(fastscan.EngineEvent)) == fastscan.ENGINE_EVENT_KEYS
    assert tuple(f.encode_name for f in msgspec.structs.fields(fastscan.EngineArgs)) == fastscan.ENGINE_ARG_KEYS
    assert {fastscan.ARG_ATTRS[k] for k in fastscan.ENGINE_ARG_KEYS} == set(fastscan.EngineArgs.__struct_fields__)


def test_event_objects_read_each_field_as_dict_get_does():
    """Dicts (the ijson parse, the fallback, the run's whole events) become EngineEvent objects whose
    fields are what ``dict.get`` gives: missing or null -> None; args keys absent -> UNSET, a null
    one -> None; args that are not an object kept as written; an item that is not an object kept."""
    d = {"ph": "X", "cat": "kernel", "ts": 1.5, "dur": 2, "pid": "GPU 0", "extra": 1,
         "args": {"Collective name": "allreduce", "stream": None, "correlation": 7, "Input Dims": [[1]]}}
    a, b, c, e = fastscan.engine_events([d, {"ph": "X", "args": [1, 2]}, 5, {"name": None}])
    assert (a.ph, a.cat, a.name, a.pid, a.tid, a.ts, a.dur, a.id, a.id2) == ("X", "kernel", None, "GPU 0", None, 1.5, 2, None, None)
    assert type(a.dur) is int and type(a.ts) is float
    assert (a.args.collective_name, a.args.stream, a.args.correlation, a.args.device) == ("allreduce", None, 7, msgspec.UNSET)
    assert b.args == [1, 2] and c == 5 and e.name is None and e.args is None
    # the decode of the same text gives the same objects as the conversion of ijson's dicts
    text = json.dumps([d, {"ph": "X", "args": {"correlation": None}}]).encode()
    decoded = fastscan._DECODERS["struct"][0](text)
    assert decoded == fastscan.engine_events(json.loads(text))
    assert type(decoded[0]) is fastscan.EngineEvent and decoded[1].args.correlation is None


def test_an_event_object_round_trips_through_its_dict():
    # what DurationPairs joins: the present args keys only (a null one kept), every event field
    ev = fastscan.engine_events([{"ph": "B", "ts": 3.0, "args": {"correlation": None, "stream": 4}}])[0]
    d = fastscan.event_dict(ev)
    assert d["args"] == {"correlation": None, "stream": 4} and d["ph"] == "B" and d["name"] is None
    assert fastscan.engine_events([d])[0] == ev


def _pair_trace(tmp_path: Path, end_args: dict) -> Path:
    evs = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5.0, "dur": 2.0,
            "args": {"correlation": 11}},
           {"ph": "B", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0,
            "args": {"correlation": 11, "stream": 7, "device": 0}},
           {"ph": "E", "cat": "kernel", "pid": 0, "tid": 7, "ts": 14.5, "args": end_args},
           {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 8, "ts": 20.0, "dur": 1.0,
            "args": {"correlation": 11, "stream": 8, "device": 0}}]
    return _write(tmp_path, json.dumps(end_args), _doc(evs), gz=False)


@pytest.mark.parametrize("parser", ["fast", "ijson"])
def test_a_joined_pair_takes_the_end_args_over_the_begin_args(tmp_path, monkeypatch, parser):
    """A B/E kernel pair becomes one 4.5 µs kernel with the begin's args updated by the end's (a null
    correlation in the end's args replaces the begin's 11: the kernel links nothing)."""
    monkeypatch.setenv(fastscan.PARSER_ENV, parser)
    s = stream.scan_trace(_pair_trace(tmp_path, {"stream": 7}))
    assert s.dur.tolist() == [4.5, 1.0] and s.corr.tolist() == [11, 11] and s.ts.tolist() == [10.0, 20.0]
    s = stream.scan_trace(_pair_trace(tmp_path, {"correlation": None}))
    assert s.dur.tolist() == [4.5, 1.0] and s.corr.tolist() == [-1, 11]
    assert s.stream_ids == [7, 8]  # the begin's stream kept, the second kernel's after it


def test_every_calls_on_each_nth_call():
    seen: list[int] = []
    tick = fastscan._every(4, lambda: seen.append(len(seen)))
    for _ in range(10):
        tick()
    assert seen == [0, 1]  # on the 4th and the 8th call
    assert fastscan.TICK_PIECES == 4  # 1 MiB / 256 KiB pieces


def test_progress_once_per_mib_of_document(tmp_path):
    """A 3 MiB document in 256 KiB pieces: ~12 pieces, so ~3 reports from the pieces (each 4th) and
    the closing ``(size, size)``; every report's position within the file and never going back."""
    pad = "x" * 200
    data = _doc([_ev(i, name=f"k{i}-{pad}") for i in range(9000)])
    assert 2.8 * (1 << 20) < len(data) < 3.3 * (1 << 20)
    path = _write(tmp_path, "p.json", data, gz=False)
    got: list[tuple[int, int]] = []
    with open(path, "rb") as raw:
        n = sum(len(b) for b in fastscan.event_lists(raw, raw, len(data), progress=lambda a, b: got.append((a, b))))
    assert n == 9000
    pieces = fastscan.last_parse["pieces"]
    assert got[-1] == (len(data), len(data))
    assert len(got) == pieces // fastscan.TICK_PIECES + 1
    assert [a for a, _ in got] == sorted(a for a, _ in got) and all(0 < a <= len(data) for a, _ in got)
