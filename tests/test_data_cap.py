"""Seed 000 lesson 25: the batch is checked against the staged sample count. At ORBIT-2's
1704-sample staging cap, batch 1024 was the throughput optimum and batch 1704 was 27% slower;
a batch above the staged samples repeats or partially fills its steps."""

from __future__ import annotations

from ai4s_graph.state.loop import FomSpec
from ai4s_graph.tools.levers.data_cap import batch_vs_staged
from ai4s_graph.tools.levers.guards import integrity_guard


def _fom(batch, staged=1704):
    return {"global_batch_size": batch, "staged_samples": staged, "realized_batch": batch, "batches_per_epoch": 2,
            "hbm_reserved_pct": 21.0}


def test_batch_against_the_1704_sample_cap():
    assert batch_vs_staged(_fom(1024)).passed
    assert batch_vs_staged(_fom(1704)).passed  # one full step per epoch: not above the cap
    c = batch_vs_staged(_fom(2048))
    assert not c.passed and c.checked and c.value == 2048 and c.reference == 1704
    assert "repeats or partially fills" in c.why
    n = batch_vs_staged({"global_batch_size": 2048})
    assert n.passed and not n.checked and n.verdict == "not checked" and "staged_samples" in n.why


def test_the_integrity_guard_rejects_a_run_whose_batch_exceeds_the_staged_samples():
    ref = {"fom": _fom(1024)}
    over = {"fom": _fom(2048)}
    g = integrity_guard(over, ref, FomSpec(), changes_batch=True)
    bad = [c for c in g.checks if c.name == "staged_samples"]
    assert not g.passed and bad and not bad[0].passed
    assert integrity_guard({"fom": _fom(1536)}, ref, FomSpec(), changes_batch=True).passed


def test_the_workload_records_its_staged_samples(tmp_path):
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "ai4s_graph.workloads.train", "--model", "mlp", "--device", "cpu", "--epochs", "1",
                        "--steps-per-epoch", "3", "--batch-size", "4", "--out-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["staged_samples"] == 12 and info["global_batch_size"] == 4
