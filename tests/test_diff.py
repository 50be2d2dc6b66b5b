"""``ai4s-graph diff`` on real analysed runs of the project's CPU workload, kept as fixed inputs
(tests/data/diff/README.md says how they were made), so no verdict depends on machine load:

- the accepted lever's before/after pair (num_workers 0 -> 2 hides the 60 ms per-batch data
  latency: the epoch is faster beyond noise, exit 0);
- the same pair the other way round is a regression (exit 1);
- the planted lesson-23/31 artifact (an IterableDataset over 3 workers: 12 instead of 10 batches per
  epoch) is refused as unlike: its faster epoch is never called an improvement or a regression
  (exit 1, verdict not-comparable);
- a hand-built pair of different models is refused too; a directory with no report is bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT

ROOT = Path(REPO_ROOT or Path(__file__).resolve().parent.parent)
DATA = Path(__file__).resolve().parent / "data" / "diff"


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    e.pop("AI4S_FAULT", None)
    return e


@pytest.fixture(scope="module")
def analysed() -> dict[str, Path]:
    return {k: DATA / k for k in ("before", "after", "artifact")}


def _diff(a: Path, b: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", str(a), str(b), "--out", str(out)],
                        env=_env(), capture_output=True, text=True, timeout=300)
    return cp, (json.loads((out / "diff.json").read_text()) if (out / "diff.json").is_file() else {})


def test_accepted_lever_pair_is_an_improvement(analysed, tmp_path):
    cp, d = _diff(analysed["before"], analysed["after"], tmp_path / "d")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert d["comparable"] and d["verdict"] == "improvement" and d["fom"]["name"] == "epoch_time_s"
    # 60 ms per batch no longer serialized with the step: 0.7258 -> 0.5464 s per epoch
    assert d["fom"]["a"] == pytest.approx(0.7258) and d["fom"]["b"] == pytest.approx(0.5464)
    assert d["fom"]["improvement_pct"] == pytest.approx(100 * (0.7258 - 0.5464) / 0.7258)
    assert d["fom"]["improvement_pct"] > d["fom"]["noise_pct"] >= 2.0
    assert any(r["id"] == "om.fom.epoch_time_s" for r in d["claims_moved"])
    assert d["placement"]["same"] and d["exit_code"] == 0
    assert {g["name"]: g["verdict"] for g in d["guards"]}["batches_per_epoch"] == "pass"
    md = (tmp_path / "d" / "diff.md").read_text()
    assert "**Verdict: improvement** (exit 0)" in md and "Claims that moved beyond noise" in md
    assert cp.stdout.strip().splitlines()[-1].startswith("STATUS=ok; reason=improvement")


def test_reversed_pair_is_a_regression(analysed, tmp_path):
    cp, d = _diff(analysed["after"], analysed["before"], tmp_path / "d")
    assert cp.returncode == 1 and d["verdict"] == "regression" and d["comparable"]
    assert d["fom"]["improvement_pct"] < -d["fom"]["noise_pct"]
    assert cp.stdout.strip().splitlines()[-1].startswith("STATUS=fail; reason=regression")


def test_planted_artifact_pair_is_refused(analysed, tmp_path):
    cp, d = _diff(analysed["before"], analysed["artifact"], tmp_path / "d")
    assert cp.returncode == 1 and d["verdict"] == "not-comparable" and not d["comparable"]
    assert any("batches per epoch 12 vs reference 10" in r for r in d["refused"])
    md = (tmp_path / "d" / "diff.md").read_text()
    assert "no difference between them is called a regression" in md
    assert "not comparable, no regression claimed" in cp.stdout


def test_different_models_refused_and_missing_report_is_bad_input(tmp_path):
    def side(name: str, model: str, epoch: float) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "report.json").write_text(json.dumps({"jobid": name, "model": model, "bottleneck": {"klass": "unknown"},
                                                   "claims": []}))
        (d / "foms.json").write_text(json.dumps({"epoch_time_s": epoch, "global_batch_size": 16, "batches_per_epoch": 25}))
        (d / "manifest.json").write_text(json.dumps({"jobid": name, "model": model, "nodes_list": ["n1"]}))
        return d

    cp, d = _diff(side("1", "mlip-gnn", 1.0), side("2", "vit", 2.0), tmp_path / "d")
    assert cp.returncode == 1 and d["verdict"] == "not-comparable"
    # foms.json without step or epoch counts: no figure is known to be free of warm-up
    assert d["refused"][0] == "different models (mlip-gnn vs vit)"
    assert d["refused"][1].startswith("no steady-state figure of merit in both runs (") and "no n_epochs" in d["refused"][1]
    cp2 = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", str(tmp_path / "1"), str(tmp_path / "nope")],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert cp2.returncode == 1 and "not an analysed run" in cp2.stdout
