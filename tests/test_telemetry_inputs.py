"""Telemetry inputs you can trust (issue 14): the handed cases (an off-grid power spike, a job
shorter than the rmsjob_info scrape, a compressed SLURM hostlist) and other members of their
kinds, built here as JSON-lines exports with known answers (the bundled run 92001 lends its
train.log, trace and real export), through the real CLI and a real VictoriaMetrics (started on
loopback by the analyst)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report
from ai4s_graph.tools.telemetry import export as E, rawstats as R

pytestmark = pytest.mark.vm
runner = CliRunner()
T0 = 1796000000.0  # hand-built jobs start here (unix s)


def _run(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["run", *args])
    return r.exit_code, r.output


def _report(out: Path) -> Report:
    return Report.model_validate_json((out / "report.json").read_text())


def _claim(rep: Report, metric: str):
    return next((v for v in rep.claims if v.claim.metric == metric), None)


def _log(perf_runs: Path) -> Path:
    """92001's train.log (``Batch N: loss L time T seconds samples 16``, 100 epochs of 25 steps)."""
    return perf_runs / "92001" / "train.log"


def _trace(perf_runs: Path) -> Path:
    """92001's profiler trace (3 steady steps of the GNN on one H200)."""
    return perf_runs / "92001" / "traces" / "trace_rank0.json.gz"


def _series(name: str, labels: dict[str, str], points: list[tuple[float, float]]) -> str:
    return json.dumps({"metric": {"__name__": name, **labels}, "values": [v for _, v in points],
                       "timestamps": [int(round(t * 1000)) for t, _ in points]}) + "\n"


def _gpu_run(tmp: Path, jobid: str, *, start: float, end: float, gpu_inst: str, rms_inst: str,
             util, power, t_from: float, t_to: float, rms_from: float, rms_to: float, hz: float = 4.0,
             rms_every: float = 1.0, nodes: str = "node1", log: Path | None = None,
             trace: Path | None = None) -> Path:
    """A perf-run directory with a manifest (SLURM start/end) and a DCGM-style export sampled at
    ``hz`` from ``t_from`` to ``t_to``; ``util(t)``/``power(t)`` give the values; ``rmsjob_info``
    is scraped every ``rms_every`` s from ``rms_from`` to ``rms_to`` on ``rms_inst``; ``log`` and
    ``trace`` are copied in as ``train.log`` and ``traces/trace_rank0.json.gz``."""
    run = tmp / f"run-{jobid}"
    (run / "telemetry").mkdir(parents=True)
    n = int(round((t_to - t_from) * hz)) + 1
    ts = [t_from + i / hz for i in range(n)]
    gl = {"gpu": "0", "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": gpu_inst.split(":")[0],
          "instance": gpu_inst}
    text = _series("DCGM_FI_DEV_GPU_UTIL", gl, [(t, util(t)) for t in ts])
    text += _series("DCGM_FI_DEV_POWER_USAGE", gl, [(t, power(t)) for t in ts])
    text += _series("DCGM_FI_DEV_SM_CLOCK", gl, [(t, 1980.0) for t in ts])
    text += _series("DCGM_FI_DEV_FB_USED", gl, [(t, 20000.0) for t in ts])
    m = int(round((rms_to - rms_from) / rms_every)) + 1
    text += _series("rmsjob_info", {"instance": rms_inst, "jobid": jobid, "nodes": nodes, "type": "slurm"},
                    [(rms_from + i * rms_every, 1.0) for i in range(m)])
    (run / "telemetry" / "export.jsonl").write_text(text)
    if log is not None:
        shutil.copy(log, run / "train.log")
    if trace is not None:
        (run / "traces").mkdir()
        shutil.copy(trace, run / "traces" / "trace_rank0.json.gz")
    (run / "manifest.json").write_text(json.dumps({
        "jobid": jobid, "state": "COMPLETED", "nodes_list": nodes, "num_nodes": 1, "gpus_per_node": 1,
        "gpu": "NVIDIA H200", "model": "mlip-gnn", "start_unix": start, "end_unix": end}))
    return run


# ------------------------------------------------------------------------------- handed cases


def _offgrid_power_spike(perf_runs: Path, tmp: Path) -> Path:
    """Job 94005: 30 s, DCGM at 4 Hz from its start to its end (121 samples), util 50 %, power
    300 W except ONE 690 W sample at +10.5 s (between the 1 s points of an evaluation grid),
    rmsjob_info at every sample; 92001's train.log and trace."""
    return _gpu_run(tmp, "94005", start=T0, end=T0 + 30, gpu_inst="node1", rms_inst="node1",
                    util=lambda t: 50.0, power=lambda t: 690.0 if t == T0 + 10.5 else 300.0,
                    t_from=T0, t_to=T0 + 30, rms_from=T0, rms_to=T0 + 30, rms_every=0.25,
                    log=_log(perf_runs), trace=_trace(perf_runs))


def _short_job_one_rms_sample(perf_runs: Path, tmp: Path) -> Path:
    """Job 94006: 10 s (SLURM start/end), DCGM at 4 Hz from 20 s before to 20 s after it; util
    100 % for the job's first 5 s, then 20 % to its end, 0 % (80 W) outside it; rmsjob_info
    scraped every 15 s, so its one sample in the job is at +5 s."""
    def util(t):
        return 0.0 if not T0 <= t <= T0 + 10 else (100.0 if t < T0 + 5 else 20.0)
    return _gpu_run(tmp, "94006", start=T0, end=T0 + 10, gpu_inst="node1", rms_inst="node1", util=util,
                    power=lambda t: 500.0 if T0 <= t <= T0 + 10 else 80.0, t_from=T0 - 20, t_to=T0 + 30,
                    rms_from=T0 + 5, rms_to=T0 + 5, rms_every=15, log=_log(perf_runs), trace=_trace(perf_runs))


def test_offgrid_power_spike_is_the_max(perf_runs, tmp_path):
    run = _offgrid_power_spike(perf_runs, tmp_path)
    code, out = _run("--job", "94005", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    pmax = _claim(rep, "telemetry.power.max")
    assert pmax.claim.value == 690.0 and pmax.verdict.value == "confirmed"  # one 4 Hz sample at +10.5 s
    assert "from 121 samples" in pmax.claim.statement  # 30 s at 4 Hz, both ends included
    # the job's 30 s plus 1 ms (the sample at the start counts); no [..:1s] grid
    assert 'max_over_time(DCGM_FI_DEV_POWER_USAGE[30001ms])' in pmax.claim.evidence[0].query


def test_short_job_uses_its_slurm_window_and_draws_the_plot(perf_runs, tmp_path):
    run = _short_job_one_rms_sample(perf_runs, tmp_path)
    code, out = _run("--job", "94006", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    util = _claim(rep, "telemetry.gpu_util.avg")
    # 100 % for 5 s then 20 %, 4 Hz: 20 samples at 100 and 21 at 20 in [start, end]. Their plain mean
    # is 59.02: it counts the sample AT the end (which describes the time after the job) as a full
    # interval. Time-weighted over the SLURM window (each sample holds until the next): 60 exactly.
    assert util.claim.value == 60.0 and util.verdict.value == "confirmed"
    assert "time-weighted average gpu util is 60 % from 41 samples" in util.claim.statement
    assert "10.0 s SLURM window" in util.claim.statement
    assert (tmp_path / "o" / "telemetry.png").stat().st_size > 1000
    assert not [m for m in rep.missing if "telemetry plot" in m]


def test_compressed_nodelist_is_expanded_in_manifest_and_report(perf_runs, tmp_path):
    """The bundled run 92001 (its real export: DCGM and rmsjob_info on instance ``vm``) with the
    manifest's nodes given as SLURM's compressed hostlist ``gpu[01-03,07]``."""
    run = tmp_path / "nodelist-compressed"
    shutil.copytree(perf_runs / "92001", run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(nodes_list="gpu[01-03,07]", num_nodes=4)
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1))
    code, out = _run("--job", "92001", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    want = ["gpu01", "gpu02", "gpu03", "gpu07"]
    assert rep.nodes_list == want
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["nodes_list"] == want
    assert "gpu[01-03" not in (tmp_path / "o" / "report.md").read_text()
    # the telemetry join runs through rmsjob_info (instance "vm"), not the SLURM names; that none of
    # the job's four nodes has GPU series is said, not hidden
    assert _claim(rep, "telemetry.gpu_util.avg").verdict.value == "confirmed"
    assert [m for m in rep.missing if "telemetry:" in m] == [
        "telemetry_analyst: telemetry: none of the job's SLURM node(s) gpu01, gpu02, gpu03, gpu07 has GPU series "
        'joined to the job: rmsjob_info{jobid="92001"} names host(s) vm instead, so the statistics are of those hosts']
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")


# ------------------------------------------------------------------------------- other members


def test_stale_rmsjob_info_does_not_stretch_the_window(tmp_path):
    """The job runs 60 s at 90 % and 600 W; rmsjob_info outlives it by 120 s while the GPU idles at
    0 % and 80 W (Omnistat's stale-series fault). The rmsjob_info span would give 30 % and 253 W."""
    def busy(t):
        return T0 <= t <= T0 + 60
    run = _gpu_run(tmp_path, "96001", start=T0, end=T0 + 60, gpu_inst="node1", rms_inst="node1",
                   util=lambda t: 90.0 if busy(t) else 0.0, power=lambda t: 600.0 if busy(t) else 80.0,
                   t_from=T0 - 30, t_to=T0 + 180, rms_from=T0, rms_to=T0 + 180)
    series = E.load_export(run / "telemetry" / "export.jsonl")
    assert R.raw_job_stat(series, "gpu_util", "96001") == pytest.approx(30.0, abs=0.2)  # the wrong clock
    code, out = _run("--job", "96001", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    util, power = _claim(rep, "telemetry.gpu_util.avg"), _claim(rep, "telemetry.power.avg")
    assert util.claim.value == pytest.approx(90.0) and power.claim.value == pytest.approx(600.0)
    assert util.verdict.value == "confirmed" and power.verdict.value == "confirmed"
    # the verifier says where its window came from, and that rmsjob_info outlives the job
    assert "the same source as the analyst's" in util.method
    assert "rmsjob_info continues 120 s after the job's SLURM end" in util.note


def test_exporters_on_different_ports_join_by_host(perf_runs, tmp_path):
    run = _gpu_run(tmp_path, "96002", start=T0, end=T0 + 20, gpu_inst="node1:9400", rms_inst="node1:8001",
                   util=lambda t: 75.0, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, log=_log(perf_runs))
    code, out = _run("--job", "96002", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    util = _claim(rep, "telemetry.gpu_util.avg")
    assert util.claim.value == pytest.approx(75.0) and util.verdict.value == "confirmed"
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=ok")
    assert not [m for m in rep.missing if "telemetry" in m]


def test_gpu_series_matching_no_job_host_is_reported_missing(perf_runs, tmp_path):
    run = _gpu_run(tmp_path, "96003", start=T0, end=T0 + 20, gpu_inst="node9:9400", rms_inst="node1:8001",
                   util=lambda t: 75.0, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, log=_log(perf_runs))
    code, out = _run("--job", "96003", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")
    miss = [m for m in rep.missing if "no GPU series matches" in m]
    assert miss == ["telemetry_analyst: telemetry: no GPU series matches the job's host(s) node1 "
                    "(GPU series in the window come from node9)"]
    assert _claim(rep, "telemetry.gpu_util.avg") is None


def test_a_slurm_node_without_rmsjob_info_is_reported_missing(perf_runs, tmp_path):
    run = _gpu_run(tmp_path, "96005", start=T0, end=T0 + 20, gpu_inst="node1", rms_inst="node1",
                   util=lambda t: 75.0, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, nodes="node[1-2]", log=_log(perf_runs))
    code, out = _run("--job", "96005", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    assert rep.nodes_list == ["node1", "node2"]
    assert _claim(rep, "telemetry.gpu_util.avg").claim.value == pytest.approx(75.0)  # node1's GPU
    assert [m for m in rep.missing if "telemetry" in m] == [
        "telemetry_analyst: telemetry: no rmsjob_info for SLURM node(s) node2: their telemetry is not in the statistics"]
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")


def test_a_job_with_one_scrape_says_how_many_samples(tmp_path):
    # a 10 s job on a 15 s scrape: one GPU sample (at T0) inside the SLURM window, rmsjob_info after it
    run = _gpu_run(tmp_path, "96004", start=T0 - 3, end=T0 + 7, gpu_inst="node1", rms_inst="node1",
                   util=lambda t: 40.0, power=lambda t: 300.0, t_from=T0 - 15, t_to=T0 + 30, hz=1 / 15,
                   rms_from=T0 + 15, rms_to=T0 + 15, rms_every=15)
    code, out = _run("--job", "96004", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    util = _claim(rep, "telemetry.gpu_util.avg")
    assert util.claim.value == 40.0
    assert "only 1 sample(s) in the window, too few for a trend" in util.claim.statement


def test_slurm_nodes_matching_no_telemetry_host_are_named(perf_runs, tmp_path):
    """The manifest says gpu01; rmsjob_info and the GPU series say node1: the statistics are of node1,
    and the report says that none of the job's nodes has GPU series (never STATUS=ok)."""
    run = _gpu_run(tmp_path, "96006", start=T0, end=T0 + 20, gpu_inst="node1:9400", rms_inst="node1:8001",
                   util=lambda t: 75.0, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, nodes="gpu01", log=_log(perf_runs))
    code, out = _run("--job", "96006", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    assert [m for m in rep.missing if "telemetry:" in m] == [
        "telemetry_analyst: telemetry: none of the job's SLURM node(s) gpu01 has GPU series joined to the job: "
        'rmsjob_info{jobid="96006"} names host(s) node1 instead, so the statistics are of those hosts']
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")
    assert _claim(rep, "telemetry.gpu_util.avg").claim.value == pytest.approx(75.0)


def test_a_slurm_node_with_rmsjob_info_but_no_gpu_series_is_named(perf_runs, tmp_path):
    run = _gpu_run(tmp_path, "96007", start=T0, end=T0 + 20, gpu_inst="node1:9400", rms_inst="node1:8001",
                   util=lambda t: 75.0, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, nodes="node[1-2]", log=_log(perf_runs))
    export = run / "telemetry" / "export.jsonl"
    export.write_text(export.read_text() + _series("rmsjob_info", {"instance": "node2:8001", "jobid": "96007"},
                                                   [(T0 + i, 1.0) for i in range(21)]))
    code, out = _run("--job", "96007", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    assert [m for m in rep.missing if "telemetry:" in m] == [
        "telemetry_analyst: telemetry: no GPU series for job host(s) node2: statistics cover node1 only"]
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")


def test_fqdn_exporters_match_short_slurm_names(perf_runs, tmp_path):
    run = _gpu_run(tmp_path, "96008", start=T0, end=T0 + 20, gpu_inst="node1.cluster.local:9400",
                   rms_inst="node1.cluster.local:8001", util=lambda t: 75.0, power=lambda t: 450.0,
                   t_from=T0 - 5, t_to=T0 + 25, rms_from=T0, rms_to=T0 + 20, nodes="node1", log=_log(perf_runs))
    code, out = _run("--job", "96008", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    assert not [m for m in rep.missing if "telemetry:" in m]
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=ok")


def test_all_nan_series_is_described_as_nan_not_absent(perf_runs, tmp_path):
    nan = float("nan")
    run = _gpu_run(tmp_path, "96009", start=T0, end=T0 + 20, gpu_inst="node1", rms_inst="node1",
                   util=lambda t: nan, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, log=_log(perf_runs))
    code, out = _run("--job", "96009", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    # 4 Hz over [T0, T0 + 20]: 81 samples, every one NaN
    assert [m for m in rep.missing if "telemetry:" in m] == [
        "telemetry_analyst: telemetry: gpu_util: 81 sample(s) in the job window, all NaN: no statistic"]
    assert _claim(rep, "telemetry.gpu_util.avg") is None
    assert _claim(rep, "telemetry.power.avg").claim.value == pytest.approx(450.0)
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")


def test_some_nan_samples_are_left_out_and_counted(perf_runs, tmp_path):
    nan = float("nan")

    def util(t):  # every other 4 Hz sample NaN; 80 % for the first 10 s, 40 % after
        k = int(round((t - T0) * 4))
        return nan if k % 2 else (80.0 if t < T0 + 10 else 40.0)
    run = _gpu_run(tmp_path, "96010", start=T0, end=T0 + 20, gpu_inst="node1", rms_inst="node1",
                   util=util, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, log=_log(perf_runs))
    code, out = _run("--job", "96010", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    u = _claim(rep, "telemetry.gpu_util.avg")
    # the finite samples (41 of 81) each hold until the next finite one: 80 for 10 s, 40 for 10 s
    assert u.claim.value == pytest.approx(60.0) and u.verdict.value == "confirmed"
    assert "from 41 samples; 40 NaN sample(s) left out" in u.claim.statement
    assert "telemetry_analyst: telemetry: gpu_util: 40 of 81 sample(s) in the job window are NaN: statistics over " \
           "the 41 finite one(s)" in rep.missing


@pytest.mark.parametrize("start, end, rel", [(T0 + 20, T0, "is before"), (T0, T0, "equals")])
def test_a_window_ending_before_it_starts_is_a_named_input_error(perf_runs, tmp_path, start, end, rel):
    run = _gpu_run(tmp_path, "96011", start=start, end=end, gpu_inst="node1", rms_inst="node1",
                   util=lambda t: 75.0, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, log=_log(perf_runs))
    code, out = _run("--job", "96011", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    tel = [m for m in rep.missing if "telemetry" in m]
    assert tel == [f"telemetry_analyst: telemetry: job window end 2026-11-30T00:53:{'20' if end == T0 else '40'}.000Z "
                   f"{rel} its start 2026-11-30T00:53:{'40' if start > T0 else '20'}.000Z (manifest.json "
                   f"end_unix={end}, start_unix={start}): no telemetry window"]
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")
    assert _claim(rep, "telemetry.gpu_util.avg") is None
    assert _claim(rep, "fom.steady_step_time_s").verdict.value == "confirmed"  # the rest of the run went on


def _nan_loss_log(perf_runs: Path, tmp_path: Path, from_step: int, word: str) -> Path:
    lines = _log(perf_runs).read_text().splitlines()
    out, k = [], 0  # k counts step lines over the whole log (Batch N restarts every 25-step epoch)
    for ln in lines:
        m = re.match(r"Batch (\d+): loss \S+ (.*)", ln)
        out.append(f"Batch {m.group(1)}: loss {word} {m.group(2)}" if m and k >= from_step else ln)
        k += bool(m)
    p = tmp_path / f"train-{word}-{from_step}.log"
    p.write_text("\n".join(out) + "\n")
    return p


@pytest.mark.parametrize("from_step, word, first", [(0, "nan", "step 0 of epoch 0"), (1250, "inf", "step 0 of epoch 50")])
def test_nan_loss_is_a_diverged_run(perf_runs, tmp_path, from_step, word, first):
    """All losses NaN, or inf from step 1250 on (of 2500: 100 epochs of 25, so the first is step 0 of
    epoch 50): either way the run diverged."""
    log = _nan_loss_log(perf_runs, tmp_path, from_step, word)
    run = _gpu_run(tmp_path, "96012", start=T0, end=T0 + 20, gpu_inst="node1", rms_inst="node1",
                   util=lambda t: 75.0, power=lambda t: 450.0, t_from=T0 - 5, t_to=T0 + 25,
                   rms_from=T0, rms_to=T0 + 20, log=log)
    code, out = _run("--job", "96012", "--perf-run", str(run), "--out", str(tmp_path / "o"))
    rep = _report(tmp_path / "o")
    div = _claim(rep, "fom.loss_diverged")
    n_bad = sum(1 for ln in log.read_text().splitlines() if f"loss {word}" in ln)
    n_all = sum(1 for ln in log.read_text().splitlines() if ln.startswith("Batch "))
    assert div.claim.value is True and div.verdict.value == "confirmed"
    assert f"{n_bad} of {n_all} logged loss values are NaN/inf" in div.claim.statement
    assert f"(the first at {first})" in div.claim.statement
    assert [m for m in rep.missing if "diverged" in m]
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")


# ------------------------------------------------------------------------------- refused runs


def _digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def test_refused_runs_leave_a_good_report_byte_identical(perf_runs, tmp_path):
    run = _offgrid_power_spike(perf_runs, tmp_path)
    code, _ = _run("--job", "94005", "--perf-run", str(run))
    assert code == 0 and (run / "report.md").exists() and (run / "report.json").exists()
    before = _digest(run)
    for args, why in [
        (("--job", "92001", "--perf-run", str(run)), "does not match manifest.json jobid 94005"),
        (("--job", "92001; rm -rf /", "--perf-run", str(run)), "not a SLURM job id"),
        (("--job", "92003", "--perf-run", str(perf_runs / "92003"), "--out", str(run)),
         "is job 94005's run directory"),
    ]:
        code, out = _run(*args)
        assert code == 2, out
        status = [ln for ln in out.splitlines() if ln.startswith("STATUS=")]
        assert len(status) == 1 and status[0].startswith("STATUS=fail; reason=") and why in status[0]
        assert _digest(run) == before  # nothing written, nothing replaced
    orphan = tmp_path / "orphan"
    shutil.copytree(run / "telemetry", orphan / "telemetry")
    code, out = _run("--perf-run", str(orphan))
    assert code == 2 and "no manifest.json and no --job" in out and sorted(p.name for p in orphan.iterdir()) == ["telemetry"]
