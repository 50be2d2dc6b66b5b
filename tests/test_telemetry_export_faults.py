"""Broken exports (issues 26, 33): staleness markers (``null`` values) and gaps in every series,
lines that are not series, values that are not numbers, and implausible samples. A null is a
missing sample; every dropped line and excluded sample is counted and named; every series the
export holds arrives in the store (counted after the import). Right values computed by hand."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report
from ai4s_graph.tools.telemetry import bounds as B, export as E, promql as P, rawstats as R

from telemetry_builders import T0, dcgm_gpu, grid, line, perf_run, rms

pytestmark = pytest.mark.vm
runner = CliRunner()
BASE = T0 + 100000


def _run(tmp_path, jobid, text, start, end, **kw) -> Report:
    run = perf_run(tmp_path, jobid, text, start=start, end=end, nodes=["sm1"], **kw)
    out = tmp_path / "o"
    r = runner.invoke(app, ["run", "--job", jobid, "--perf-run", str(run), "--out", str(out)])
    assert "Traceback" not in r.output and "TypeError" not in r.output, r.output
    return Report.model_validate_json((out / "report.json").read_text())


def _claim(rep: Report, metric: str):
    return next((v for v in rep.claims if v.claim.metric == metric), None)


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_null_values_are_missing_samples_in_every_series(tmp_path, where):
    """A 20 s job at 4 Hz, util 80 % for the first 10 s then 40 %; one staleness marker in every
    series (rmsjob_info too) at the start, the middle or the end. A null is a missing sample: the
    sample before it holds until the next one (time-weighted): at the start (t0 + 0.25 s, 80 %) and
    the end (t0 + 19.75 s, 40 %) the mean stays (80 * 10 + 40 * 10) / 20 = 60; in the middle the
    null is the first 40 % sample (t0 + 10 s), so 80 % holds 0.25 s longer:
    (80 * 10.25 + 40 * 9.75) / 20 = 60.5."""
    t0 = BASE + {"start": 0, "middle": 1000, "end": 2000}[where]
    ts = grid(t0, t0 + 20)
    k = {"start": 1, "middle": 40, "end": len(ts) - 2}[where]  # an inner sample: the window's edges stay

    def nulled(f):
        return lambda t: None if abs(t - ts[k]) < 1e-9 else f(t)
    text = dcgm_gpu("sm1", 0, ts, nulled(lambda t: 80.0 if t < t0 + 10 else 40.0), power=nulled(lambda t: 500.0))
    text += rms("sm1", f"9800{len(where)}", ts, values=nulled(lambda t: 1.0))
    # the marker at the very end of rmsjob_info (VictoriaMetrics#5334: the import used to lose the series)
    text += rms("sm1", f"9800{len(where)}", [t0 + 20.25], values=lambda t: None)
    rep = _run(tmp_path, f"9800{len(where)}", text, t0, t0 + 20)
    util = _claim(rep, "telemetry.gpu_util.avg")
    want = 60.5 if where == "middle" else 60.0
    assert util.claim.value == pytest.approx(want, abs=1e-6) and util.verdict.value == "confirmed"
    assert _claim(rep, "telemetry.power.avg").claim.value == pytest.approx(500.0)
    # markers in util, power and rmsjob_info (one inside, one at its end): 1 + 1 + 2
    assert ("telemetry_analyst: telemetry: export.jsonl: 4 stale marker(s) (null values, an exporter restart) skipped as "
            "missing samples (DCGM_FI_DEV_GPU_UTIL 1, DCGM_FI_DEV_POWER_USAGE 1, rmsjob_info 2)") in rep.missing
    assert not [m for m in rep.missing if "cannot be joined" in m]
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")


def test_an_all_null_series_is_named_and_the_rest_is_analysed(tmp_path):
    t0 = BASE + 3000
    ts = grid(t0, t0 + 20)
    text = dcgm_gpu("sm1", 0, ts, lambda t: None, power=lambda t: 450.0) + rms("sm1", "98011", ts)
    rep = _run(tmp_path, "98011", text, t0, t0 + 20)
    assert _claim(rep, "telemetry.gpu_util.avg") is None
    assert _claim(rep, "telemetry.power.avg").claim.value == pytest.approx(450.0)
    miss = [m for m in rep.missing if "telemetry" in m]
    assert any("81 stale marker(s)" in m and "DCGM_FI_DEV_GPU_UTIL 81" in m for m in miss)
    assert any("1 series with no usable sample (DCGM_FI_DEV_GPU_UTIL{" in m for m in miss)
    assert ("telemetry_analyst: telemetry: gpu_util: no DCGM_FI_DEV_GPU_UTIL or DCGM_FI_PROF_GR_ENGINE_ACTIVE samples "
            "on the job's GPUs in the window (other nvidia series are there): no gpu_util statistic") in miss


def test_an_all_null_rmsjob_info_says_so(tmp_path):
    t0 = BASE + 4000
    ts = grid(t0, t0 + 20)
    text = dcgm_gpu("sm1", 0, ts, lambda t: 70.0) + rms("sm1", "98012", ts, values=lambda t: None)
    rep = _run(tmp_path, "98012", text, t0, t0 + 20)
    miss = [m for m in rep.missing if "telemetry" in m]
    assert any("rmsjob_info 81" in m for m in miss) and any("series with no usable sample (rmsjob_info{" in m for m in miss)
    assert any("no rmsjob_info" in m for m in miss)  # now true: it holds no sample


def test_every_dropped_line_is_counted_and_named(tmp_path):
    t0 = BASE + 5000
    ts = grid(t0, t0 + 20)
    good = dcgm_gpu("sm1", 0, ts, lambda t: 70.0) + rms("sm1", "98013", ts)
    bad = [
        json.dumps({"metric": ["DCGM_FI_DEV_GPU_UTIL"], "values": [1], "timestamps": [1]}),   # non-object metric
        json.dumps({"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "1", "instance": "sm1"},
                    "values": [1, 2], "timestamps": [1]}),                                   # 2 values, 1 timestamp
        json.dumps({"metric": {"gpu": "2"}, "values": [1], "timestamps": [1]}),              # no __name__
        "{not json",
    ]
    text = "\ufeff" + good + "\n".join(bad) + "\n"
    text += line("DCGM_FI_DEV_POWER_USAGE", {"gpu": "0", "instance": "sm1", "modelName": "NVIDIA H200"},
                 [(t0 + 1, "high"), (t0 + 2, True)])  # values that are not numbers
    n_good = good.count("\n")
    rep = _run(tmp_path, "98013", text, t0, t0 + 20)
    assert _claim(rep, "telemetry.gpu_util.avg").claim.value == pytest.approx(70.0)  # the BOM line is read
    want = (f"telemetry_analyst: telemetry: export.jsonl: 4 line(s) dropped (line {n_good + 1}: 'metric' is a list, "
            f"not an object; line {n_good + 2}: 2 values but 1 timestamps; line {n_good + 3}: no __name__ label; 1 more)")
    assert want in rep.missing
    assert ("telemetry_analyst: telemetry: export.jsonl: 2 non-numeric value(s) skipped (DCGM_FI_DEV_POWER_USAGE 2)"
            in rep.missing)


@pytest.mark.parametrize("bad, metric", [(1e300, "gpu_util"), (-12.0, "gpu_util"), (1051.0, "power"), (2500.0, "sm_clock")])
def test_implausible_samples_are_excluded_counted_and_never_ok(tmp_path, bad, metric):
    """Every 10th of 81 samples implausible (9 of them): excluded; the rest (util 70 %, power
    500 W, SM clock 1500 MHz) gives the statistic. Bounds: 0-100 %, 0-700 W x 1.5 = 1050 W on the
    H200, clock <= its 1980 MHz."""
    t0 = BASE + 6000 + hash((bad, metric)) % 500
    ts = grid(t0, t0 + 20)
    name = {"gpu_util": "DCGM_FI_DEV_GPU_UTIL", "power": "DCGM_FI_DEV_POWER_USAGE", "sm_clock": "DCGM_FI_DEV_SM_CLOCK"}[metric]
    normal = {"gpu_util": 70.0, "power": 500.0, "sm_clock": 1500.0}
    lab = {"gpu": "0", "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": "sm1", "instance": "sm1"}
    text = "".join(line(n, lab, [(t, (bad if n == name and i % 10 == 0 else normal[m])) for i, t in enumerate(ts)])
                   for m, n in [("gpu_util", "DCGM_FI_DEV_GPU_UTIL"), ("power", "DCGM_FI_DEV_POWER_USAGE"),
                                ("sm_clock", "DCGM_FI_DEV_SM_CLOCK")])
    text += line("DCGM_FI_DEV_FB_USED", lab, [(t, 20000.0) for t in ts]) + rms("sm1", "98014", ts)
    rep = _run(tmp_path, "98014", text, t0, t0 + 20)
    c = _claim(rep, f"telemetry.{metric}.max") or _claim(rep, f"telemetry.{metric}.avg")
    assert c.claim.value == pytest.approx(normal[metric]) and c.verdict.value == "confirmed"
    assert any(f"9 {name} sample(s) out of range excluded" in m for m in rep.missing)
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")
    assert not rep.statuses["synthesizer"].startswith("STATUS=ok")


def test_bounds_by_metric():
    h200 = B.bound_for("DCGM_FI_DEV_POWER_USAGE", {"modelName": "NVIDIA H200"})
    assert (h200.lo, h200.hi) == (0.0, 1050.0)  # 700 W x 1.5
    assert B.bound_for("rocm_average_socket_power_watts", gpu_name="AMD Instinct MI300X").hi == 1125.0  # 750 x 1.5
    assert B.bound_for("DCGM_FI_DEV_POWER_USAGE").hi is None  # board unknown: only >= 0
    assert B.bound_for("DCGM_FI_DEV_SM_CLOCK", gpu_name="NVIDIA H200").hi == 1980.0
    assert B.bound_for("DCGM_FI_DEV_FB_USED", gpu_name="NVIDIA H200").hi == 141 * 1024  # MiB
    assert B.bound_for("DCGM_FI_PROF_SM_ACTIVE").hi == 1.0
    assert (B.bound_for("DCGM_FI_DEV_GPU_TEMP").lo, B.bound_for("DCGM_FI_DEV_GPU_TEMP").hi) == (0.0, 150.0)
    assert B.bound_for("rmsjob_info") is None and B.bound_for("node_load1") is None


def test_every_series_is_counted_in_the_store_after_the_import(vm_server, tmp_path):
    """A series whose samples lie 30 days in the future is dropped by VictoriaMetrics at import
    (it answers 204): the count after the import names it; the others arrived."""
    t0 = BASE + 7000
    ts = grid(t0, t0 + 5)
    text = dcgm_gpu("cnt1", 0, ts, lambda t: 50.0) + rms("cnt1", "98015", ts)
    text += line("DCGM_FI_DEV_GPU_UTIL", {"gpu": "1", "instance": "cnt1"}, [(t + 30 * 86400 + 3e6, 5.0) for t in ts])
    p = tmp_path / "e.jsonl"
    p.write_text(text)
    res = vm_server.import_export(p)
    assert res.expected == 6 and res.reimported == 1
    assert res.lost == ["DCGM_FI_DEV_GPU_UTIL{gpu='1',instance='cnt1'}"]
    assert res.problems() == ["e.jsonl: 1 of 6 series did not arrive in VictoriaMetrics after a re-import "
                              "(DCGM_FI_DEV_GPU_UTIL{gpu='1',instance='cnt1'})"]
    assert P.PromQL(vm_server.url).job_stat("gpu_util", "98015", (t0, t0 + 5)).value == pytest.approx(50.0)


def test_raw_reader_skips_nulls_and_keeps_nan(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","instance":"a"},"values":[10,null,NaN,30],'
                 '"timestamps":[1000,2000,3000,4000]}\n')
    series, rep = E.read_export(p)
    assert series[0].timestamps == (1.0, 3.0, 4.0) and series[0].values[0] == 10.0 and series[0].values[2] == 30.0
    assert rep.nulls == {"DCGM_FI_DEV_GPU_UTIL": 1}
    assert R.raw_job_hosts(series, "1") == {}
