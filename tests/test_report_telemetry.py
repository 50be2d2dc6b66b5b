"""The report's telemetry plot per host and GPU at the raw sample rate, with the board limits drawn
(issue 27 point 3). Hand-built exports (tests/telemetry_builders.py) with known samples; the
end-to-end test loads them into the local VictoriaMetrics through ``ai4s-graph run``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.graph.analysis.nodes.synthesizer import board_lines, telemetry_panels
from ai4s_graph.tools.telemetry import export as E
from ai4s_graph.tools.telemetry.gpu_series import gpu_series, selectors
from telemetry_builders import T0, dcgm_gpu, grid, perf_run, rms

JOB = "96101"


def _export() -> str:
    # 10 s at 4 Hz (41 samples a series): host a runs the job on both its GPUs (rmsjob_info without a
    # card label), host b on its GPU 1 only (card "1"); host c is another job's. Power is 100 W x
    # (host number) + 10 W x GPU index, so each line's value names it.
    ts = grid(T0, T0 + 10, 4.0)
    out = rms("a", JOB, ts) + rms("b", JOB, ts, card="1") + rms("c", "777", ts)
    for h, n in (("a", 1), ("b", 2), ("c", 3)):
        for g in (0, 1):
            out += dcgm_gpu(h, g, ts, util=lambda t: 50.0, power=lambda t, n=n, g=g: 100.0 * n + 10 * g)
    return out


@pytest.fixture()
def series(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text(_export())
    return E.load_export(p)


def test_each_job_gpu_at_the_raw_rate(series):
    got = gpu_series(series, ["power", "hbm_used", "cpu_util"], JOB, (T0, T0 + 10))
    assert set(got) == {"power", "hbm_used"}               # cpu_util is a node metric: not per GPU
    assert list(got["power"]) == ["a gpu 0", "a gpu 1", "b gpu 1"]   # b's GPU 0 and host c are not the job's
    pts = got["power"]["a gpu 1"]
    assert len(pts) == 41 and pts[1][0] - pts[0][0] == pytest.approx(0.25)   # every stored sample
    assert {v for _, v in pts} == {110.0} and {v for _, v in got["power"]["b gpu 1"]} == {210.0}
    assert {v for _, v in got["hbm_used"]["a gpu 0"]} == {20000.0 * 2**20}   # FB used 20000 MiB, in bytes


def test_a_long_series_keeps_every_kth_sample_and_says_so(series):
    got = gpu_series(series, ["power"], JOB, (T0, T0 + 10), max_points=10)
    # 41 samples, at most 10: every ceil(41 / 10) = 5th, i.e. samples 0, 5, ..., 40: 9 points
    (label, pts), *_ = got["power"].items()
    assert label == "a gpu 0 (every 5th sample)" and len(pts) == 9 and pts[1][0] - pts[0][0] == pytest.approx(1.25)


def test_no_rmsjob_info_no_series(series):
    assert gpu_series(series, ["power"], "999", (T0, T0 + 10)) == {}
    assert selectors(["power", "cpu_util"], JOB) == ['rmsjob_info{jobid="96101"}', '{__name__="DCGM_FI_DEV_POWER_USAGE"}',
                                                     '{__name__="rocm_average_socket_power_watts"}']


def test_board_limits_and_panels():
    lim = board_lines("NVIDIA H200", {"power": {}, "sm_clock": {}, "gpu_util": {}})
    # H200 SXM datasheet: 700 W, boost 1980 MHz (tools/perfmodel/datasheet.py)
    assert lim == {"power": (700, "power limit 700 W (datasheet)"), "sm_clock": (1980, "boost clock 1980 MHz (datasheet)"),
                   "gpu_util": (100.0, "100%")}
    assert board_lines("a board nobody knows", {"power": {}}) == {}
    s, u = telemetry_panels({"series": {"power": {"a": [(1.0, 5.0)]}, "hbm_used": {"a": [(1.0, 2.0 ** 31)]},
                                        "cpu_util": {"a": [(1.0, 9.0)]}},
                             "gpu_series": {"power": {"a gpu 0": [(1.0, 6.0)]}},
                             "units": {"power": "W", "hbm_used": "bytes", "cpu_util": "%"}})
    assert s == {"power": {"a gpu 0": [(1.0, 6.0)]}, "hbm_used": {"a (GPU average)": [(1.0, 2.0)]},
                 "cpu_util": {"a": [(1.0, 9.0)]}}
    assert u["hbm_used"] == "GiB"


def test_the_run_plots_every_job_gpu(tmp_path):
    run = perf_run(tmp_path, JOB, _export(), start=T0, end=T0 + 10, nodes=["a", "b"], gpus_per_node=2)
    r = CliRunner().invoke(app, ["run", "--job", JOB, "--perf-run", str(run), "--out", str(tmp_path / "o"), "-q"])
    assert r.exit_code in (0, 1), r.output
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert any(p.endswith("telemetry.png") for p in rep["plots"])
    # every job GPU, every stored sample inside the 10 s SLURM window
    assert rep["telemetry_samples"]["power"] == {"a gpu 0": 41, "a gpu 1": 41, "b gpu 1": 41}
    assert (tmp_path / "o" / "telemetry.png").stat().st_size > 10_000
    assert not [m for m in rep["missing"] if "per-GPU series" in m]
