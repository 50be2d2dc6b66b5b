"""``report.html`` (issue 27 point 4): one self-contained file, rendered from report.md's text, every
picture embedded as a data URI, nothing to fetch; a user's string cannot inject markup."""

from __future__ import annotations

import base64
import json
import re

from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.tools.report.html import report_html

import verdict_traces as vt

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


def _refs(page: str) -> list[str]:
    return re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', page)


def test_pictures_embedded_tables_kept_markup_escaped():
    md = ("# ai4s-graph report — job 7\n\n| a | b |\n|---|---:|\n| x | 1.5 |\n\n![plot](plot.png)\n\n"
          "![gone](missing.png)\n\nA model named <script>alert(1)</script>.\n")
    page = report_html(md, {"plot.png": PNG}, "job <7>")
    assert "<title>job &lt;7&gt;</title>" in page
    assert "<table>" in page and "<td style=\"text-align:right\">1.5</td>" in page
    assert _refs(page) == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert "[picture missing.png not embedded]" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "default-src 'none'; img-src data:" in page   # the page may load nothing else


def test_the_run_writes_one_self_contained_page(tmp_path):
    run = vt.write_run(tmp_path / "run", "95104", vt.straggler_steps(), 10.0)
    r = CliRunner().invoke(app, ["run", "--job", "95104", "--perf-run", str(run), "--out", str(tmp_path / "o"), "-q"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "o"
    page = (out / "report.html").read_text()
    rep = json.loads((out / "report.json").read_text())
    refs = _refs(page)
    assert len(refs) == len(rep["plots"]) >= 2 and all(x.startswith("data:image/png;base64,") for x in refs)
    # the embedded pictures are the files written beside it, byte for byte
    got = {base64.b64decode(x.split(",", 1)[1]) for x in refs}
    assert got == {(out / p.split("/")[-1]).read_bytes() for p in rep["plots"]}
    # the same text as report.md: its section headings, in order
    md = (out / "report.md").read_text()
    assert re.findall(r"^## (.+)$", md, re.M) == re.findall(r"<h2>(.+?)</h2>", page)
