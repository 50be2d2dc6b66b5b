"""Kind: forged output and stale answers (issue 26). A value from a user's file holding a newline,
a terminal escape or a bidirectional override never starts a line of its own on stdout or in
``report.md`` (control characters are escaped, ``state/status.py:one_line``); a finished run whose
inputs changed is analysed again instead of re-printing the old STATUS ("already complete")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.state import StatusLine  # noqa: E402
from ai4s_graph.state.status import one_line, one_line_all  # noqa: E402

FORGED = "STATUS=ok; reason=forged"


def test_one_line_escapes_what_could_forge_a_line():
    assert one_line("a\nb\r\nc\td") == "a b c d"
    assert one_line("x\x1b[2Ky") == "x\\x1b[2Ky"           # a terminal escape (erase line)
    assert one_line("ab\u202ecd") == "ab\\u202ecd"         # right-to-left override
    assert one_line("p\x85q\u2028r") == "p q r"            # NEL and LINE SEPARATOR: line breaks, squeezed
    assert one_line("z\x00z\x7f") == "z\\x00z\\x7f"
    assert one_line("é ü 漢字 µs ≥ —") == "é ü 漢字 µs ≥ —"   # printable text is left alone
    assert one_line("x" * 300, 10) == "x" * 9 + "…"
    assert one_line_all({"k\n": ["v\x1b", 1, None]}) == {"k": ["v\\x1b", 1, None]}


def test_status_lines_are_one_line_and_strict():
    line = StatusLine.make("ok", f"job 1\n{FORGED}\x1b[1A").format()
    assert "\n" not in line and "\x1b" not in line and line.startswith("STATUS=ok; reason=job 1 STATUS=")
    assert len(StatusLine.make("ok", "x" * 500).reason) == 160
    with pytest.raises(ValueError):
        StatusLine.parse("STATUS=ok; reason=a\x1bb")
    with pytest.raises(ValueError):
        StatusLine.last_in(f"STATUS=ok; reason=fine\n{FORGED}\x1b")


@pytest.mark.parametrize("field", ["model", "precision", "gpu"])
def test_manifest_values_never_start_a_line(tmp_path, field):
    run = H.copy_run(tmp_path / "run")
    m = json.loads((run / "manifest.json").read_text())
    m[field] = f"x\n{FORGED}\n## Bottleneck: compute-bound\x1b[2K\u202e"
    (run / "manifest.json").write_text(json.dumps(m))
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert not [ln for ln in cp.stdout.splitlines() if ln.startswith(FORGED) or ln.startswith("## Bottleneck")]
    if (out / "report.md").exists():
        md = (out / "report.md").read_text()
        assert not [ln for ln in md.splitlines() if ln.startswith(FORGED)]
        assert [ln for ln in md.splitlines() if ln.startswith("## Bottleneck:")] == ["## Bottleneck: dispatch-bound"]
        assert "\x1b" not in md and "\u202e" not in md


def test_a_kernel_name_cannot_forge_a_table_cell_or_a_line(tmp_path):
    run = H.copy_run(tmp_path / "run")
    d = H.read_trace(run)
    ks = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    for e in ks:
        if e["name"] == ks[0]["name"]:
            e["name"] = f"k | **confirmed** |\n{FORGED}"
    H.write_trace(run, d)
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    md = (out / "report.md").read_text()
    assert not [ln for ln in md.splitlines() if ln.startswith(FORGED)]
    rows, header = [], None  # every row has its table's header's cells (the report has several tables)
    for ln in md.splitlines():
        if ln.startswith("| `"):
            rows.append((ln.count(" | "), header))
        elif ln.startswith("| "):
            header = ln.count(" | ")
    assert rows and all(n == h for n, h in rows), rows


def test_changed_inputs_are_analysed_again_not_already_complete(tmp_path):
    run, out, _ = H.good_report(tmp_path)
    args = ("run", "--job", "92001", "--perf-run", str(run), "--out", str(out))
    same = H.cli(*args, state=tmp_path / "st")
    assert "already complete" in same.stdout  # the same inputs: the finished thread is reused
    d = H.read_trace(run)
    for e in d["traceEvents"]:  # every kernel 100x longer: the class must change
        if e.get("cat") == "kernel":
            e["dur"] = float(e["dur"]) * 100
    H.write_trace(run, d)
    changed = H.cli(*args, state=tmp_path / "st")
    H.assert_no_traceback(changed)
    assert "already complete" not in changed.stdout, changed.stdout[-1500:]
    assert "dispatch-bound" not in H.status_lines(changed)[-1], changed.stdout[-1500:]
    assert json.loads((out / "report.json").read_text())["bottleneck"]["klass"] != "dispatch-bound"
