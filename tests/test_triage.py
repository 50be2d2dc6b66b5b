"""Triage checks (seed 001 T2, T3, T8, T12, T14, T16): each fires on a hand-built input with a known
answer, stays silent on the other side of its threshold and on the real traces, and its verifier
path (raw text, job script) re-derives the same number."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ai4s_graph.graph.analysis import triage as T
from ai4s_graph.state.claims import Claim


def _trace(tmp_path: Path, names: dict[str, int], name: str = "t.json.gz") -> Path:
    ev, ts = [], 0.0
    for n, k in names.items():
        for _ in range(k):
            ev.append({"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": 1.0, "args": {}})
            ts += 2.0
    ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0.0, "dur": 1.0, "args": {}})
    p = tmp_path / name
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": ev}, f)
    return p


def _valid(f: T.TriageFinding) -> None:
    assert isinstance(f.claim, Claim) and f.lever and f.claim.evidence


# ---- T3 ---------------------------------------------------------------------------------------

LESSON22 = "#SBATCH --ntasks-per-node=8\n#SBATCH --cpus-per-task=7\nsrun python train.py --num-workers 8\n"


def test_t3_lesson22_64_workers_on_56_cpus():
    p = T.parse_job_script(LESSON22)
    assert p == {"ntasks_per_node": 8, "cpus_per_task": 7, "num_workers": 8}
    f = T.check_oversubscription(8, 8, 56, cpu_util_pct=97.0)
    _valid(f)
    assert f.claim.value == pytest.approx(64 / 56, abs=1e-3) and f.lever == "num_workers"
    assert T.rederive_oversubscription(LESSON22) == f.claim.value  # from the job script alone


def test_t3_fits_below_threshold():
    assert T.check_oversubscription(4, 8, 56) is None       # lesson 22's fix: 32 workers on 56 CPUs
    assert T.check_oversubscription(7, 8, 56) is None       # exactly the cores: not over
    assert T.check_oversubscription(None, 8, 56) is None    # missing input: no claim
    assert T.rederive_oversubscription("python train.py") is None


# ---- T8 ---------------------------------------------------------------------------------------


def test_t8_split_both_sides():
    f = T.check_data_split(0.45, 96.0)
    _valid(f)
    assert f.claim.id == "triage.t8.transform_bound" and f.lever == "gpu_transforms"
    g = T.check_data_split(0.45, 20.0)
    assert g.claim.id == "triage.t8.io_bound" and g.lever == "stage_to_local_nvme"
    assert T.check_data_split(0.45, 70.0) is None   # between idle and busy: not separable
    assert T.check_data_split(0.45, T.CPU_BUSY_PCT).claim.id == "triage.t8.transform_bound"
    assert T.check_data_split(0.45, T.CPU_IDLE_PCT + 0.1) is None


# ---- T14 --------------------------------------------------------------------------------------


def test_t14_math_fallback(tmp_path):
    p = _trace(tmp_path, {"aten::scaled_dot_product_attention": 12, "aten::_scaled_dot_product_attention_math": 12,
                          "aten::_scaled_dot_product_efficient_attention": 0})
    fs = T.triage_trace(p)
    f = next(x for x in fs if x.claim.id == "triage.t14.sdpa_math")
    _valid(f)
    assert f.claim.value == 12 and f.lever == "sdpa_efficient"
    assert T.rederive_sdpa_fallback(p) == 12


def test_t14_fused_backend_is_silent(tmp_path):
    p = _trace(tmp_path, {"aten::scaled_dot_product_attention": 12, "aten::_scaled_dot_product_flash_attention": 12})
    assert T.triage_trace(p) == [] and T.rederive_sdpa_fallback(p) == 0


# ---- T16 --------------------------------------------------------------------------------------


def test_t16_recompiles_in_trace_and_log(tmp_path):
    p = _trace(tmp_path, {"Torch-Compiled Region: 0/0": 5, "Torch-Compiled Region: 0/1": 2, "Torch-Compiled Region: 0/2": 1,
                          "torch/_dynamo/convert_frame.py(1234): _compile": 1})
    log = "W1130 torch/_dynamo/convert_frame.py] Recompiling function forward in model.py:42\n" * 3
    f = next(x for x in T.triage_trace(p, log_text=log) if x.claim.id == "triage.t16.recompiles")
    _valid(f)
    assert f.claim.value == 2 + 1 + 1 + 3
    assert T.rederive_recompilations(p, log) == 7


def test_t16_first_compile_only_is_silent(tmp_path):
    # compile id 0/0 is the first (warm-up) compile of the frame: no recompilation
    p = _trace(tmp_path, {"Torch-Compiled Region: 0/0": 20, "Torch-Compiled Region: 1/0": 20})
    assert T.triage_trace(p, log_text="step 10 loss 1.2\n") == []
    assert T.rederive_recompilations(p) == 0


# ---- T12 --------------------------------------------------------------------------------------


def test_t12_anomaly_mode_and_launch_blocking(tmp_path):
    p = _trace(tmp_path, {"autograd::engine::evaluate_function: AddmmBackward0": 40, "aten::isnan": 40})
    f = next(x for x in T.triage_trace(p) if x.claim.id == "triage.t12.debug_apis")
    _valid(f)
    assert "anomaly detection" in f.claim.statement
    assert T.rederive_anomaly(p) == (40, 40)
    g = T.check_debug_apis({}, {"CUDA_LAUNCH_BLOCKING": "1"})
    assert g.lever == "disable_debug_apis" and "CUDA_LAUNCH_BLOCKING=1" in g.claim.statement


def test_t12_silent_below_threshold(tmp_path):
    # a few isnan calls from user code (a loss guard) against 40 backward nodes: not anomaly mode
    p = _trace(tmp_path, {"autograd::engine::evaluate_function: AddmmBackward0": 40, "aten::isnan": 3})
    assert T.triage_trace(p, env={"CUDA_LAUNCH_BLOCKING": "0"}) == []


# ---- T2 ---------------------------------------------------------------------------------------


def test_t2_power_capped_vs_starved_vs_healthy():
    # H200 datasheet TDP 700 W; the device's measured boost 1980 MHz (reports/raw-2026-11-29)
    f = T.check_clocks_power("NVIDIA H200", 98.0, 1400.0, 690.0, boost_mhz=1980.0)
    _valid(f)
    assert f.claim.id == "triage.t2.power_capped" and f.claim.value == pytest.approx(1400 / 1980, abs=1e-3)
    g = T.check_clocks_power("NVIDIA H200", 98.0, 900.0, 150.0, boost_mhz=1980.0)
    assert g.claim.id == "triage.t2.util_lies"
    assert T.check_clocks_power("NVIDIA H200", 98.0, 1700.0, 650.0, boost_mhz=1980.0) is None  # clock >= 80% of boost
    assert T.check_clocks_power("NVIDIA H200", 50.0, 900.0, 150.0, boost_mhz=1980.0) is None   # not busy: T2 silent
    assert T.check_clocks_power("Unknown GPU", 98.0, 900.0, 150.0, boost_mhz=1980.0) is None


# ---- real traces: no false positive ---------------------------------------------------------


def test_real_traces_raise_nothing(shared_data, repo_root):
    paths = sorted((shared_data / "traces" / "tracelens-h100").glob("*.json.gz"))
    paths += sorted((repo_root / "examples" / "perf-runs").glob("*/traces/*.json.gz"))
    assert len(paths) >= 5
    for p in paths:
        assert T.triage_trace(p) == [], p.name


# ---- wiring: analyst -> verifier -> synthesizer ----------------------------------------------


def test_trace_wiring_claim_verified_and_lever_recommended(tmp_path):
    from ai4s_graph.graph.analysis.claimkit import verdict
    from ai4s_graph.state.report import LeverRecommendation

    p = _trace(tmp_path, {"aten::scaled_dot_product_attention": 6, "aten::_scaled_dot_product_attention_math": 6})
    (tmp_path / "train.log").write_text("Recompiling function forward\n")
    tf: dict = {"ranks": [{"path": str(p), "rank": 0, "step_time_ms": 10.0, "n_steps": 1,
                           "timeline": {"busy_time": {"time_ms": 9.0}}}]}
    claims = T.attach_trace_triage(tf, tf["ranks"], {"gpu": "NVIDIA H200", "artifacts": {"train_log": "train.log"}},
                                   str(tmp_path))
    ids = sorted(c.id for c in claims)
    assert ids == ["triage.t14.sdpa_math", "triage.t16.recompiles"]
    vs = [verdict(c, "trace_verifier", *T.verify_claim(c)) for c in claims]
    assert [v.verdict.value for v in vs] == ["confirmed", "confirmed"]
    out = T.recommend([LeverRecommendation(name="precision_bf16", why="x")], {"trace": tf}, vs)
    assert {lv.name for lv in out} == {"precision_bf16", "sdpa_efficient", "torch_compile_dynamic"}
    # the trace the verifier re-reads holds 2 math calls, not the 6 claimed: refuted, and no lever
    _trace(tmp_path, {"aten::_scaled_dot_product_attention_math": 2})
    bad = verdict(claims[0], "trace_verifier", *T.verify_claim(claims[0]))
    assert claims[0].id == "triage.t14.sdpa_math" and bad.verdict.value == "refuted"
    assert [lv.name for lv in T.recommend([], {"trace": tf}, [bad])] == []


def test_telemetry_wiring_t3_from_job_script(tmp_path):
    from ai4s_graph.graph.analysis.claimkit import verdict

    (tmp_path / "job.sh").write_text(LESSON22)
    man = {"gpu": "AMD Instinct MI355X", "num_workers": 8, "gpus_per_node": 8,
           "artifacts": {"job_script": "job.sh", "traces": []}}
    findings: dict = {}
    claims = T.attach_telemetry_triage(findings, man, tmp_path)
    assert [c.id for c in claims] == ["triage.t3.oversubscription"]
    assert findings["telemetry"]["triage"][0]["lever"] == "num_workers"
    state = {"manifest": man, "request": {"perf_run": str(tmp_path)}, "findings": findings}
    assert verdict(claims[0], "telemetry_verifier", *T.verify_claim(claims[0], state)).verdict.value == "confirmed"


def test_memory_bound_from_roofline(shared_data):
    from ai4s_graph.tools.perfmodel.roofline import roofline

    assert T.memory_bound_from_roofline(None)[0] is None
    # BERT-small's GEMMs (105 FLOP/B) sit below the H100 ridge: the whole step is memory-bound
    assert T.memory_bound_from_roofline(roofline(shared_data / "traces" / "tracelens-h100"
                                                 / "gaunernst_bert-small-uncased__1016001.json.gz"))[0] is True
    # Qwen 0.5B: its GEMMs are compute-bound, and outweigh... (check against the measured times)
    q = roofline(shared_data / "traces" / "tracelens-h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    mem = sum(a["kernel_us"] for a in q["categories"].values() if a["bound"] == "memory")
    comp = sum(a["kernel_us"] for a in q["categories"].values() if a["bound"] == "compute")
    assert T.memory_bound_from_roofline(q)[0] is (mem > comp)
