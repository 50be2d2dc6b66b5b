"""Checks that could not run say "not checked: needs ..." (issue 28): seed 001 T3 and T8 need CPU
counts and host CPU telemetry; when they are absent nothing fires, and the report used to say
"Every input the graph reads was present". Now it names each check and what it needs, without
lowering STATUS (the user asked for the analysis, not for those checks)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report
from ai4s_graph.graph.rules.causes import data_split, oversubscription

T3, T8 = oversubscription.T3, data_split.T8


def triage_not_checked(num_workers, ranks_per_node, cores, cpu_util_pct, traces):
    """The T3 and T8 lines for these inputs, as the two cause modules say them (``traces``: the
    analysed rank traces)."""
    lines = (oversubscription.not_checked_line(num_workers, ranks_per_node, cores),
             data_split.not_checked_line(cpu_util_pct, bool(traces)))
    return [x for x in lines if x]


def test_t3_and_t8_inputs():
    assert triage_not_checked(8, 4, 32, 55.0, ["t.json"]) == []  # every input: both checks can run
    assert triage_not_checked(0, None, None, 55.0, ["t.json"]) == []  # no workers: nothing to oversubscribe
    t3 = triage_not_checked(8, 4, None, 55.0, ["t.json"])
    assert t3 == [f"not checked: {T3}: needs the cores the job may use (cpus_per_node in the manifest, or --cpus-per-task "
                  "in the job script)"]
    t8 = triage_not_checked(0, 1, None, None, ["t.json"])
    assert len(t8) == 1 and t8[0].startswith(f"not checked: {T8}: needs host CPU busy %")
    both = triage_not_checked(None, None, None, None, [])
    assert [x.split(":")[1].strip()[:2] for x in both] == ["T3", "T8"] and "a rank trace" in both[1]


@pytest.mark.vm
def test_report_says_not_checked_and_status_stays_ok(repo_root, tmp_path):
    # 92002 (data-loader-bound, the project's workload on one H200) has no host CPU telemetry: T8
    # cannot split I/O from CPU transforms. num_workers is 0, so T3 is checked (nothing to oversubscribe).
    out = tmp_path / "92002"
    r = CliRunner().invoke(app, ["run", "--job", "92002", "--perf-run", str(repo_root / "examples/perf-runs/92002"),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    rep = Report.model_validate_json((out / "report.json").read_text())
    nc = json.loads((out / "report.json").read_text())["not_checked"]
    # T8, and the host-side causes that need Python stacks (gc_pause, checkpoint_io): 92002 has none
    assert [x[:60] for x in nc if x.startswith(f"not checked: {T8}"[:20])] == [f"not checked: {T8}"[:60]]
    assert any(x.startswith("not checked: gc pause: needs Python stacks") for x in nc), nc
    md = (out / "report.md").read_text()
    section = md[md.index("## What was missing"):md.index("## Node status")]
    assert "not checked: T8" in section and "host CPU busy %" in section
    assert "Every input the graph reads was present" not in md
    assert rep.statuses["synthesizer"].startswith("STATUS=ok" if not rep.missing else "STATUS=partial")
    assert not any("not checked" in m for m in rep.missing)  # never counted as a missing input
