"""Rank traces analysed as a SLURM job array on the real local cluster (issue 6)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report

pytestmark = pytest.mark.slurm


def _two_rank_run(perf_runs, root):
    """93001's two rank traces (DDP, exposed all-reduce) under a trace-only run of job 5150."""
    run = root / "run"
    (run / "traces").mkdir(parents=True)
    for r in (0, 1):
        shutil.copy(perf_runs / f"93001/traces/trace_rank{r}.json.gz", run / f"traces/trace_rank{r}.json.gz")
    (run / "manifest.json").write_text(json.dumps({"jobid": "5150", "state": "COMPLETED",
                                                   "nodes_list": ["n1", "n2"], "model": "wide"}))
    return run


def test_slurm_array_gives_the_same_rank_figures_as_local_workers(local_cluster, perf_runs, tracelens_refs,
                                                                  tmp_path):
    run = _two_rank_run(perf_runs, tmp_path)
    r1 = CliRunner().invoke(app, ["run", "--job", "5150", "--perf-run", str(run), "--out", str(tmp_path / "local")])
    r2 = CliRunner().invoke(app, ["run", "--job", "5150", "--perf-run", str(run), "--out", str(tmp_path / "array"),
                                  "--slurm-array", "--wait-timeout", "120"])
    assert "trace_array" in r2.output and "trace_rank" not in r2.output, r2.output
    local = Report.model_validate_json((tmp_path / "local/report.json").read_text())
    array = Report.model_validate_json((tmp_path / "array/report.json").read_text())
    assert array.statuses["trace_array"].startswith("STATUS=ok; reason=array job")
    submitted = json.loads((tmp_path / "array/.ai4s-graph/rank-array/submitted.json").read_text())
    assert submitted["jobid"].isdigit()
    lv = {v.claim.id: v.claim.value for v in local.claims}
    av = {v.claim.id: v.claim.value for v in array.claims}
    assert set(av) == set(lv) and {"tl.r0.idle_time", "tl.r1.idle_time"} <= set(av)
    for cid in ("tl.r0.idle_time", "tl.r1.idle_time", "tl.r0.computation_time", "tl.r1.exposed_comm_time"):
        assert av[cid] == pytest.approx(lv[cid], abs=1e-6)
    assert array.bottleneck.klass == local.bottleneck.klass
    # and both are the ranks' own figures: idle % as TraceLens's gpu_timeline of each rank's file
    for r in (0, 1):
        with open(tracelens_refs / f"93001_rank{r}_perf_report_csvs" / "gpu_timeline.csv") as fh:
            idle = next(float(row["percent"]) for row in csv.DictReader(fh) if row["type"] == "idle_time")
        assert av[f"tl.r{r}.idle_time"] == pytest.approx(idle, abs=0.01)
