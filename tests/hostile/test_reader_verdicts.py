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
