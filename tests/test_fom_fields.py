"""Seed 000 lessons 4 and 24 kept as behaviour in foms.json: the HBM total (so hbm_reserved_pct is
set on the analysis path) and the two MFMA FLOP/s methods from telemetry counters, time-averaged
and burst, in two fields. Inputs are built here, answers computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ai4s_graph.graph.analysis.nodes.telemetry_analyst import analyze_fom
from ai4s_graph.state import Manifest
from ai4s_graph.tools.telemetry import export
from ai4s_graph.tools.trainlog import fom_fields as F

MIB = 1 << 20
T0 = 1_800_000_000.0  # job start (unix s)
RESERVED = 12297699328  # torch.cuda.max_memory_reserved of job 91003 (bytes)


def _line(metric: dict, pts: list[tuple[float, float]]) -> str:
    return json.dumps({"metric": metric, "values": [v for _t, v in pts], "timestamps": [int(t * 1000) for t, _v in pts]})


def _run(tmp: Path, *, telemetry: list[str] | None, duration: float = 100.0) -> tuple[Path, Manifest]:
    run = tmp / "run"
    (run / "telemetry").mkdir(parents=True)
    lines = []
    for e in range(2):
        lines += [f"Batch {i}: loss {3.0 - 0.1 * i - e:.4f} time 0.0500 seconds" for i in range(10)]
        lines.append(f"Epoch {e} completed")
    (run / "train.log").write_text("\n".join(lines) + "\n")
    arts = {"train_log": "train.log", "telemetry": []}
    if telemetry is not None:
        (run / "telemetry" / "export.jsonl").write_text("\n".join(telemetry) + "\n")
        arts["telemetry"] = ["telemetry/export.jsonl"]
    m = Manifest.model_validate({"jobid": "777", "state": "COMPLETED", "nodes_list": ["n1"], "model": "vit", "gpu": "NVIDIA H200",
                                 "gpus_per_node": 1, "start_unix": T0, "end_unix": T0 + duration, "global_batch_size": 64,
                                 "hbm_reserved_bytes": RESERVED, "artifacts": arts})
    return run, m


def _rms(duration: float = 100.0) -> str:
    return _line({"__name__": "rmsjob_info", "instance": "n1:8001", "jobid": "777"},
                 [(T0 + t, 1) for t in range(0, int(duration) + 1, 5)])


def _fb(used: float, free: float, duration: float = 100.0) -> list[str]:
    lab = {"gpu": "0", "Hostname": "n1", "instance": "n1:9400", "modelName": "NVIDIA H200"}
    ts = [T0 + t for t in range(0, int(duration) + 1)]
    return [_line(dict(lab, __name__="DCGM_FI_DEV_FB_USED"), [(t, used) for t in ts]),
            _line(dict(lab, __name__="DCGM_FI_DEV_FB_FREE"), [(t, free) for t in ts])]


def test_lesson24_hbm_reserved_pct_is_set_on_the_analysis_path(tmp_path):
    # the H200 of job 91003: FB_USED 1825.875 MiB + FB_FREE 141945.125 MiB = 143771 MiB of HBM
    run, m = _run(tmp_path, telemetry=[_rms()] + _fb(1825.875, 141945.125))
    out = tmp_path / "out"
    analyze_fom(run, m, out)
    d = json.loads((out / "foms.json").read_text())
    assert d["hbm_total_bytes"] == 143771 * MIB
    assert d["hbm_reserved_pct"] == pytest.approx(100 * RESERVED / (143771 * MIB))  # 8.157 %
    assert d["hbm_reserved_pct"] == pytest.approx(8.1574, abs=1e-4)
    assert d["hbm_total_source"].startswith("telemetry")


def test_lesson24_without_telemetry_the_datasheet_capacity_is_used_and_named(tmp_path):
    run, m = _run(tmp_path, telemetry=None)
    out = tmp_path / "out"
    analyze_fom(run, m, out)
    d = json.loads((out / "foms.json").read_text())
    assert d["hbm_total_bytes"] == 141 * (1 << 30)
    assert d["hbm_reserved_pct"] == pytest.approx(100 * RESERVED / (141 * (1 << 30)))
    assert d["hbm_total_source"].startswith("datasheet: NVIDIA H200")
    # an unknown GPU and no telemetry: not checked, said so, no percentage invented
    total, why = F.hbm_total([], "777", None, "Some Accelerator")
    assert total is None and why.startswith("not checked: needs")


def _mfma_export(duration: float = 100.0) -> list[str]:
    """Two GPUs of host n1, cumulative BF16 MFMA counters sampled at 1 Hz over a 100 s job:
    card 0 idles, then issues 1e9 units/s from t=50 to t=60 s (a burst), then idles;
    card 1 issues 5e7 units/s throughout; its collector restarted at t=69 s, so the counter reads
    5e7 (from zero) at t=70 s."""
    lab = {"__name__": F.COUNTER, "source": "gpu", "instance": "n1:8001", "name": "SQ_INSTS_VALU_MFMA_MOPS_BF16"}
    c0, c1 = [], []
    for t in range(0, int(duration) + 1):
        c0.append((T0 + t, 1e9 * min(max(t - 50, 0), 10)))
        c1.append((T0 + t, 5e7 * t if t < 70 else 5e7 * (t - 69)))
    return [_rms(duration), _line(dict(lab, card="0"), c0), _line(dict(lab, card="1"), c1)]


def test_lesson4_time_averaged_and_burst_mfma_flops_are_two_fields(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text("\n".join(_mfma_export()) + "\n")
    got = F.mfma_tflops(export.load_export(p), "777", (T0, T0 + 100))
    # card 0: 1e10 units x 512 FLOP = 5.12e12 FLOP over the 100 s window = 0.0512 TFLOP/s
    # card 1: 5e7 units/s for 100 s (the drop at 70 s is a reset, counted from zero) = 5e9 units = 0.0256 TFLOP/s
    assert got["mfma_tflops_bf16"] == pytest.approx((0.0512 + 0.0256) / 2)  # 0.0384, the per-GPU mean
    # the burst: card 0's 10 s window 50..60 s, 1e9 units/s x 512 = 0.512 TFLOP/s
    assert got["mfma_tflops_bf16_peak_burst"] == pytest.approx(0.512)
    assert got["mfma_tflops_bf16_peak_burst"] / got["mfma_tflops_bf16"] == pytest.approx(13.333, rel=1e-3)
    assert "time-averaged" in got["mfma_flops_method"] and "never compared" in got["mfma_flops_method"]


def test_lesson4_fields_reach_foms_json_on_the_analysis_path(tmp_path):
    run, m = _run(tmp_path, telemetry=_mfma_export())
    out = tmp_path / "out"
    analyze_fom(run, m, out)
    d = json.loads((out / "foms.json").read_text())
    assert d["mfma_tflops_bf16"] == pytest.approx(0.0384)
    assert d["mfma_tflops_bf16_peak_burst"] == pytest.approx(0.512)
    assert d["hbm_total_source"].startswith("datasheet")  # this export has no FB_* series


def test_no_mfma_counters_no_fields(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text("\n".join([_rms()] + _fb(100, 900)) + "\n")
    assert F.mfma_tflops(export.load_export(p), "777", (T0, T0 + 100)) == {}
