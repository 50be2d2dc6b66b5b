"""Kind: memory and depth blow-ups (issue 26, "bounded readers"). Nested arrays, a 300 MB event
name, a 20 MB event, deep ``manifest.json`` / ``report.json`` / ``loop.json`` / telemetry lines:
each is refused in one line by the JSON bounds (``tools/jsonguard.py``) at the parse entry of every
reader, within the harness's memory limit (``RLIMIT_AS``) and timeout. Before the fix a 400 KB
nested trace took ~24 GB, a 40 KB one 1 GB, a 300 MB name 12 minutes."""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.tools import jsonguard as G  # noqa: E402
from ai4s_graph.tools.errors import InputError  # noqa: E402


def _gz(path: Path, *parts: bytes | tuple[bytes, int]) -> Path:
    """A gzip file of the concatenated ``parts`` (``(chunk, n)``: ``chunk`` repeated ``n`` times),
    written in a stream: the test never holds the whole text."""
    with gzip.open(path, "wb", compresslevel=1) as f:
        for p in parts:
            if isinstance(p, tuple):
                for _ in range(p[1]):
                    f.write(p[0])
            else:
                f.write(p)
    return path


def _timeline(tmp_path: Path, trace: Path):
    return H.cli("trace", "timeline", str(trace), "--json", state=tmp_path / "st", mem=H.TRACE_MEMORY_LIMIT_BYTES)


def _refused_in_one_line(cp, needle: str) -> None:
    H.assert_no_traceback(cp)
    assert cp.returncode != 0
    err = [ln for ln in cp.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and needle in err[0], cp.stderr[-1500:]


@pytest.mark.parametrize("size", [40_000, 400_000])
def test_nested_arrays_as_events(tmp_path, size):
    n = size // 2
    t = _gz(tmp_path / "t.json.gz", b'{"traceEvents": [', (b"[", n), (b"]", n), b"]}")
    _refused_in_one_line(_timeline(tmp_path, t), "nested deeper than 64 levels")


def test_nested_arrays_inside_an_events_args_and_in_the_header(tmp_path):
    n = 200_000
    ev = _gz(tmp_path / "ev.json.gz", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, '
                                      b'"args": {"Input Dims": ', (b"[", n), (b"]", n), b"}}]}")
    _refused_in_one_line(_timeline(tmp_path, ev), "nested deeper than 64 levels")
    head = _gz(tmp_path / "head.json.gz", b'{"deviceProperties": ', (b"[", n), (b"]", n), b', "traceEvents": []}')
    _refused_in_one_line(_timeline(tmp_path, head), "nested deeper than 64 levels")


def test_a_300_mb_event_name(tmp_path):
    t = _gz(tmp_path / "name.json.gz", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "',
            (b"a" * (1 << 20), 300), b'", "ts": 1, "dur": 1}]}')
    _refused_in_one_line(_timeline(tmp_path, t), f"a string longer than {G.MAX_STRING_BYTES} bytes")


def test_a_20_mb_event(tmp_path):
    keys = b"".join(b'"k%07d": 0, ' % i for i in range(10_000))  # 140 KB of small keys, repeated
    t = _gz(tmp_path / "big.json.gz", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "args": {',
            (keys, 150), b'"end": 0}, "ts": 1, "dur": 1}]}')
    _refused_in_one_line(_timeline(tmp_path, t), f"one JSON element longer than {G.MAX_ELEMENT_BYTES} bytes")


def test_both_readers_and_the_whole_file_reader_refuse(tmp_path):
    """The verifier's reader (kineto_reader.load_events) and the whole-file reader in front of
    TraceLens/HTA (kineto.read_trace_json) apply the same bounds as the engine."""
    from ai4s_graph.tools.trace import kineto

    n = 100_000
    t = _gz(tmp_path / "t.json.gz", b'{"traceEvents": [', (b"[", n), (b"]", n), b"]}")
    for read in (kineto.load_events, kineto.read_trace_json):
        with pytest.raises(G.JsonLimitError, match="nested deeper than 64 levels"):
            read(t)


def test_deep_manifest_refused_before_anything_runs(tmp_path):
    run = H.copy_run(tmp_path / "run")
    doc = b'{"jobid": "92001", "x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    (run / "manifest.json").write_bytes(doc)
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(tmp_path / "out"), state=tmp_path / "st")
    H.assert_refused(cp, "manifest.json", "nested deeper than 64 levels")
    assert not (tmp_path / "out").exists()


def test_deep_report_json_in_diff(tmp_path):
    _, a, _ = H.good_report(tmp_path / "a")
    (a / "report.json").write_bytes(b'{"jobid": "1", "claims": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")
    cp = H.cli("diff", str(a), str(a), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 3 and "nested deeper than 64 levels" in H.status_lines(cp)[-1]  # bad input


def test_deep_loop_json_on_resume(tmp_path):
    from ai4s_graph.graph.optimize import graph as O
    from ai4s_graph.tools.levers.catalog import bundled_catalog

    req = O.new_loop(model="cpu-toy", catalog_path=bundled_catalog("cpu-toy"), loop_root=tmp_path / "loops",
                     executor="local", shared_dir=tmp_path / "shared")
    (Path(req.loop_dir) / O.REQUEST_FILE).write_bytes(b'{"loop_id": ' + b"[" * 30_000 + b"]" * 30_000 + b"}")
    cp = H.cli("optimize", "--resume", f"loop-{req.loop_id}", "--loop-root", str(tmp_path / "loops"),
               state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 1 and "nested deeper than 64 levels" in H.status_lines(cp)[-1]


def test_deep_telemetry_line(tmp_path):
    from ai4s_graph.tools.telemetry.export import load_export

    p = tmp_path / "export.jsonl"
    p.write_bytes(b'{"metric": {"__name__": "x"}, "values": ' + b"[" * 5000 + b"]" * 5000 + b', "timestamps": []}\n')
    with pytest.raises(InputError, match="line 1") as e:
        load_export(p)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------- the scanner itself


def _reference(doc) -> tuple[int, int]:
    """(max nesting depth, longest string in bytes as written) of a parsed document."""
    depth = longest = 0

    def walk(v, d):
        nonlocal depth, longest
        if isinstance(v, (list, dict)):
            depth = max(depth, d + 1)
            for k, x in (v.items() if isinstance(v, dict) else enumerate(v)):
                if isinstance(v, dict):
                    longest = max(longest, len(json.dumps(k, ensure_ascii=False).encode()) - 2)
                walk(x, d + 1)
        elif isinstance(v, str):
            longest = max(longest, len(json.dumps(v, ensure_ascii=False).encode()) - 2)

    walk(doc, 0)
    return depth, longest


def _random_doc(rng: random.Random, d: int = 0):
    r = rng.random()
    if d < 12 and r < 0.3:
        return [_random_doc(rng, d + 1) for _ in range(rng.randint(0, 4))]
    if d < 12 and r < 0.6:
        return {_random_str(rng): _random_doc(rng, d + 1) for _ in range(rng.randint(0, 4))}
    return _random_str(rng) if r < 0.8 else rng.random()


def _random_str(rng: random.Random) -> str:
    return "".join(rng.choice('ab[]{}"\\\n\u00e9') for _ in range(rng.randint(0, 8)))


def _feed(s: G.JsonScanner, text: bytes, rng: random.Random) -> bool:
    i = 0
    try:
        while i < len(text):
            k = rng.randint(1, 7)
            s.feed(text[i:i + k])
            i += k
    except G.JsonLimitError:
        return False
    return True


def test_scanner_is_exact_against_a_parser(tmp_path):
    """2000 random documents (brackets, quotes and backslashes inside strings), fed in random
    chunks of 1-7 bytes: the scanner refuses exactly the documents deeper than the limit (at the
    measured depth and one below it), and, for strings, exactly those longer than the limit."""
    rng = random.Random(26)
    for _ in range(2000):
        doc = _random_doc(rng)
        text = json.dumps(doc, ensure_ascii=False).encode()
        depth, longest = _reference(doc)
        for lim in ((depth, depth - 1) if depth >= 1 else ()):
            assert _feed(G.JsonScanner("x", max_depth=lim, max_string=1 << 30), text, rng) == (lim >= depth), text
        if b"\\" in text:
            continue  # escapes count one byte less in the scanner (documented); the depth cases above hold
        for lim in (longest, longest - 1):
            if lim >= 1:
                assert _feed(G.JsonScanner("x", max_depth=100, max_string=lim), text, rng) == (lim >= longest), text


def test_scanner_accepts_every_real_trace():
    """The other side: the real traces in the repository (the bundled runs of examples/perf-runs and
    the traces under tests/data) pass the bounds, and a full parse here finds them within the limits
    (on 2026-12-02, 23 files: deepest 7 levels, longest string 5050 bytes, a templated CUDA kernel
    name, largest event 5429 bytes as json.dumps writes it), far below MAX_DEPTH / MAX_STRING_BYTES /
    MAX_ELEMENT_BYTES."""
    files = sorted((H.REPO / "examples").rglob("*.json.gz")) + sorted((H.REPO / "tests" / "data").rglob("*.json.gz"))
    assert len(files) >= 20
    deepest = longest = largest = 0
    for f in files:
        raw = gzip.decompress(f.read_bytes())
        G.check_bytes(raw, f.name)
        doc = json.loads(raw)
        d, s = _reference(doc)
        deepest, longest = max(deepest, d), max(longest, s)
        largest = max([largest] + [len(json.dumps(e, ensure_ascii=False).encode()) for e in doc.get("traceEvents", [])])
    assert deepest < G.MAX_DEPTH and longest < G.MAX_STRING_BYTES and largest < G.MAX_ELEMENT_BYTES
