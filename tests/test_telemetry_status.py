"""The telemetry analyst's STATUS line names what its statistics were read from (the GPU vendor,
``cpu only``, or neither): a CPU job's line once said ``telemetry (none) 1 claims`` although its
CPU telemetry was read (the ``--submit`` path's ``cpu-toy``). Hand-built perf runs
(tests/telemetry_builders.py) through the real CLI and a real VictoriaMetrics."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import telemetry_builders as tb
from ai4s_graph.cli import app
from ai4s_graph.state import Report

pytestmark = pytest.mark.vm


def _node_cpu(host: str, ts: list[float], busy: float) -> str:
    """node_exporter's ``node_cpu_seconds_total`` of two CPUs on ``host``: each CPU counts ``busy``
    of every second as ``user`` and the rest as ``idle`` (busy percent ``100 * busy``)."""
    return "".join(tb.line("node_cpu_seconds_total", {"instance": host, "cpu": str(c), "mode": mode},
                           [(t, round(share * (t - ts[0]), 6)) for t in ts])
                   for c in (0, 1) for mode, share in (("user", busy), ("idle", 1.0 - busy)))


def _telemetry_line(output: str) -> str:
    return next(ln for ln in output.splitlines() if ln.startswith("telemetry_analyst "))


def test_a_cpu_job_with_cpu_telemetry_only_says_cpu_only(tmp_path):
    start, end = tb.T0, tb.T0 + 20.0
    ts = tb.grid(start - 2, end + 2)
    run = tb.perf_run(tmp_path, "96001", tb.rms("node1", "96001", ts) + _node_cpu("node1", ts, 0.25),
                      start=start, end=end, nodes=["node1"], gpus_per_node=0, gpu=None)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["run", "--job", "96001", "--perf-run", str(run), "--out", str(out)])
    line = _telemetry_line(r.output)
    # the log: one epoch of 20 steps of 0.5 s (the mlip-gnn model's FOM is the epoch time, 10 s);
    # one statistic, the CPU's
    assert line.split(None, 1)[1] == "STATUS=ok; reason=FOM epoch_time_s=10; telemetry (cpu only) 1 claims"
    rep = Report.model_validate_json((out / "report.json").read_text())
    cpu = next(v for v in rep.claims if v.claim.metric == "telemetry.cpu_util.avg")
    assert cpu.claim.value == pytest.approx(25.0)


def test_a_job_without_any_telemetry_series_says_so(tmp_path):
    start, end = tb.T0, tb.T0 + 20.0
    run = tb.perf_run(tmp_path, "96002", tb.rms("node1", "96002", tb.grid(start - 2, end + 2)),
                      start=start, end=end, nodes=["node1"], gpus_per_node=0, gpu=None)
    r = CliRunner().invoke(app, ["run", "--job", "96002", "--perf-run", str(run), "--out", str(tmp_path / "out")])
    assert "; telemetry (no GPU or CPU series) 0 claims" in _telemetry_line(r.output)
