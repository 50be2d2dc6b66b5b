"""``ai4s-graph trace comm`` end to end (the CLI module, typer's runner): a hand-built 2-rank pair and
a perf-run folder (93002), JSON and table output, the STATUS line, bad input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ai4s_graph.cli import app
from test_comm_traces import baseline_json, straggler_pair

REPO = Path(__file__).resolve().parents[1]


def test_trace_comm_json_on_a_hand_built_pair(tmp_path):
    r0, r1 = straggler_pair("gpu")
    p0, p1 = r0.write(tmp_path / "trace_rank0.json"), r1.write(tmp_path / "trace_rank1.json")
    res = CliRunner().invoke(app, ["trace", "comm", str(p1), str(p0), "--json",
                                   "--baseline", str(baseline_json(tmp_path / "eval.json"))])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    # ranks from distributedInfo, whatever the argument order; the figures of test_comm_steps
    assert [r["rank"] for r in rep["ranks"]] == [0, 1]
    assert rep["late"][0]["rank"] == 1 and rep["late"][0]["lag_us"] == 180
    assert rep["busbw"][0]["ratio"] == 0.8


def test_trace_comm_table_on_a_perf_run_folder():
    res = CliRunner().invoke(app, ["trace", "comm", str(REPO / "examples" / "perf-runs" / "93002"),
                                   "--baseline", str(REPO / "reports" / "raw-2026-11-30-2gpu" / "eval-2gpu.json")])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "env NCCL_P2P_DISABLE=1 (manifest)" in out
    assert "busbw allreduce 64.016 MiB x 48:" in out and "ratio 0.10" in out
    assert out.strip().splitlines()[-1].startswith("STATUS=ok; reason=2 rank(s), 6 step(s); 51 synchronising")


def test_trace_comm_bad_input_fails_with_one_line(tmp_path):
    bad = tmp_path / "trace_rank0.json"
    bad.write_text('{"traceEvents": [')
    res = CliRunner().invoke(app, ["trace", "comm", str(bad)])
    assert res.exit_code == 2  # a refused input (the trace commands' convention)
    assert res.stdout.strip().startswith("STATUS=fail; reason=") and len(res.stdout.strip().splitlines()) == 1
    res = CliRunner().invoke(app, ["trace", "comm", str(tmp_path / "none.json")])
    assert res.exit_code == 2 and "not found" in res.stdout


def test_trace_comm_with_an_unreadable_baseline_is_partial(tmp_path):
    r0, r1 = straggler_pair("host")
    bad = tmp_path / "eval.json"
    bad.write_text("{}")
    res = CliRunner().invoke(app, ["trace", "comm", str(r0.write(tmp_path / "a.json")), str(r1.write(tmp_path / "b.json")),
                                   "--baseline", str(bad)])
    assert res.exit_code == 0, res.output
    assert "note: baseline" in res.stdout and "busbw not compared" in res.stdout
    assert res.stdout.strip().splitlines()[-1].startswith("STATUS=partial;") and "baseline unreadable" in res.stdout


def test_trace_comm_quiet_prints_only_the_status_line():
    res = CliRunner().invoke(app, ["-q", "trace", "comm", str(REPO / "examples" / "perf-runs" / "93001")])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip().splitlines() == ["STATUS=ok; reason=2 rank(s), 6 step(s); 51 synchronising collectives matched"]
