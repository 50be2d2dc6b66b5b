"""DCGM's profiling counters only (issue 33; NVIDIA/dcgm-exporter#430, PR#634): without
``DCGM_FI_DEV_GPU_UTIL`` the utilization comes from ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a 0-1
ratio, read as percent and labelled with its source); SM active and DRAM active are claimed when
present; MIG instances (``GPU_I_ID``); Omnistat without ``rocm_utilization_percentage``; a
statistic missing while its vendor's other series are there is said. Values computed by hand."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report

from telemetry_builders import T0, dcgm_gpu, grid, line, perf_run, rms

pytestmark = pytest.mark.vm
runner = CliRunner()
BASE = T0 + 200000


def _report(tmp_path, jobid, text, t0, nodes=("pf1",), gpu="NVIDIA H200") -> Report:
    run = perf_run(tmp_path, jobid, text, start=t0, end=t0 + 20, nodes=list(nodes), gpu=gpu)
    out = tmp_path / "o"
    r = runner.invoke(app, ["run", "--job", jobid, "--perf-run", str(run), "--out", str(out)])
    assert "Traceback" not in r.output, r.output
    return Report.model_validate_json((out / "report.json").read_text())


def _claims(rep: Report) -> dict:
    return {v.claim.metric: v for v in rep.claims}


PROF = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda t: 0.75, "DCGM_FI_PROF_SM_ACTIVE": lambda t: 0.6,
        "DCGM_FI_PROF_DRAM_ACTIVE": lambda t: 0.3}


def test_prof_counters_only_give_utilization_sm_and_dram_active(tmp_path):
    t0 = BASE
    ts = grid(t0, t0 + 20)
    text = dcgm_gpu("pf1", 0, ts, None, power=lambda t: 600.0, extra=PROF) + rms("pf1", "98101", ts)
    rep = _report(tmp_path, "98101", text, t0)
    c = _claims(rep)
    util = c["telemetry.gpu_util.avg"]
    assert util.claim.value == pytest.approx(75.0) and util.verdict.value == "confirmed"  # 0.75 x 100
    assert "(from DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100 (DCGM profiling counter))" in util.claim.statement
    assert util.claim.evidence[0].args["source"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100 (DCGM profiling counter)"
    assert c["telemetry.sm_active.avg"].claim.value == pytest.approx(60.0)
    assert c["telemetry.dram_active.avg"].claim.value == pytest.approx(30.0)
    assert c["telemetry.sm_active.avg"].verdict.value == "confirmed" == c["telemetry.dram_active.avg"].verdict.value
    assert not [m for m in rep.missing if "telemetry:" in m]


def test_mig_instances_are_separate_series(tmp_path):
    """Two MIG instances of GPU 0 (GPU_I_ID 1 and 2) at 0.8 and 0.4 engine activity; power is the
    physical GPU's (no GPU_I_ID). Per-series means averaged: (80 + 40) / 2 = 60 %."""
    t0 = BASE + 1000
    ts = grid(t0, t0 + 20)
    lab = {"gpu": "0", "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": "pf1", "instance": "pf1"}
    text = dcgm_gpu("pf1", 0, ts, None, power=lambda t: 400.0)
    for gi, r in ((1, 0.8), (2, 0.4)):
        mig = {**lab, "GPU_I_ID": str(gi), "GPU_I_PROFILE": "3g.71gb"}
        text += line("DCGM_FI_PROF_GR_ENGINE_ACTIVE", mig, [(t, r) for t in ts])
        text += line("DCGM_FI_PROF_SM_ACTIVE", mig, [(t, r / 2) for t in ts])
    text += rms("pf1", "98102", ts)
    c = _claims(_report(tmp_path, "98102", text, t0))
    assert c["telemetry.gpu_util.avg"].claim.value == pytest.approx(60.0)
    assert c["telemetry.sm_active.avg"].claim.value == pytest.approx(30.0)  # (40 + 20) / 2
    assert c["telemetry.power.avg"].claim.value == pytest.approx(400.0)
    assert all(v.verdict.value == "confirmed" for k, v in c.items() if k.startswith("telemetry.") and k != "telemetry.supports_compute")


def test_legacy_and_prof_counters_together_use_the_legacy_utilization(tmp_path):
    t0 = BASE + 2000
    ts = grid(t0, t0 + 20)
    text = dcgm_gpu("pf1", 0, ts, lambda t: 95.0, extra=PROF) + rms("pf1", "98103", ts)
    c = _claims(_report(tmp_path, "98103", text, t0))
    assert c["telemetry.gpu_util.avg"].claim.value == pytest.approx(95.0)
    assert "PROF" not in c["telemetry.gpu_util.avg"].claim.statement
    assert c["telemetry.sm_active.avg"].claim.value == pytest.approx(60.0)


def test_no_utilization_at_all_is_said_while_power_is_there(tmp_path):
    t0 = BASE + 3000
    ts = grid(t0, t0 + 20)
    text = dcgm_gpu("pf1", 0, ts, None, power=lambda t: 350.0) + rms("pf1", "98104", ts)
    rep = _report(tmp_path, "98104", text, t0)
    assert "telemetry.gpu_util.avg" not in _claims(rep)
    assert ("telemetry_analyst: telemetry: gpu_util: no DCGM_FI_DEV_GPU_UTIL or DCGM_FI_PROF_GR_ENGINE_ACTIVE samples "
            "on the job's GPUs in the window (other nvidia series are there): no gpu_util statistic") in rep.missing
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")


def test_omnistat_without_rocm_utilization(tmp_path):
    """Omnistat with the occupancy collector but no rocm_utilization_percentage: CU occupancy
    76 of 304 CUs = 25 % is claimed as sm_active, UMC activity 35 % as dram_active, and the
    missing utilization is said."""
    t0 = BASE + 4000
    ts = grid(t0, t0 + 20)
    lab = {"card": "0", "instance": "pf1"}
    text = (line("rocm_average_socket_power_watts", lab, [(t, 500.0) for t in ts])
            + line("rocm_sclk_clock_mhz", lab, [(t, 2000.0) for t in ts])
            + line("rocm_compute_unit_occupancy", lab, [(t, 76.0) for t in ts])
            + line("rocm_num_compute_units", lab, [(t, 304.0) for t in ts])
            + line("rocm_vram_busy_percentage", lab, [(t, 35.0) for t in ts]) + rms("pf1", "98105", ts))
    rep = _report(tmp_path, "98105", text, t0, gpu="AMD Instinct MI300X")
    c = _claims(rep)
    assert c["telemetry.sm_active.avg"].claim.value == pytest.approx(25.0)
    assert c["telemetry.dram_active.avg"].claim.value == pytest.approx(35.0)
    assert c["telemetry.sm_active.avg"].verdict.value == "confirmed"
    assert ("telemetry_analyst: telemetry: gpu_util: no rocm_utilization_percentage samples on the job's GPUs in the "
            "window (other amd series are there): no gpu_util statistic") in rep.missing
