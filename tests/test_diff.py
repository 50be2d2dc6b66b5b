"""``ai4s-graph diff``: real runs of the project's CPU workload, analysed by ``ai4s-graph run``:

- the accepted lever's before/after pair (num_workers 0 -> 2 hides the 60 ms per-batch data
  latency: the epoch gets faster beyond noise, exit 0);
- the same pair the other way round is a regression (exit 1);
- the planted lesson-23/31 artifact (an IterableDataset over 3 workers: partial batches, 12 instead
  of 10 batches per epoch) is refused as unlike: its faster epoch is never called an improvement or
  a regression (exit 1, verdict not-comparable);
- a hand-built pair of different models is refused too; a directory with no report is bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT

pytestmark = [pytest.mark.slow]

ROOT = Path(REPO_ROOT or Path(__file__).resolve().parent.parent)
BASE = ["--model", "mlp", "--device", "cpu", "--batch-size", "64", "--steps-per-epoch", "10", "--epochs", "5",
        "--threads", "1", "--data-latency-ms", "60", "--log-format", "batch"]
VARIANTS = {
    "before": ["--num-workers", "0", "--dataset", "map"],
    "after": ["--num-workers", "2", "--dataset", "map"],
    "artifact": ["--num-workers", "3", "--dataset", "iterable"],
}


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    e.pop("AI4S_FAULT", None)
    return e


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    runs = {}
    for i, (k, args) in enumerate(VARIANTS.items()):
        d = root / "perf-runs" / str(900 + i)
        d.mkdir(parents=True)
        with (d / "train.log").open("w") as log:
            runs[k] = (d, subprocess.Popen([sys.executable, "-u", "-m", "ai4s_graph.workloads.train", "--out-dir", str(d),
                                            "--jobid", str(900 + i), "--write-manifest", *BASE, *args],
                                           stdout=log, stderr=subprocess.DEVNULL, env=_env(), cwd=root))
    for k, (d, p) in runs.items():
        assert p.wait(timeout=300) == 0, k
    procs = {}
    for k, (d, _) in runs.items():
        procs[k] = subprocess.Popen([sys.executable, "-m", "ai4s_graph.cli", "run", "--job", d.name, "--perf-run", str(d),
                                     "--out", str(root / "an" / k), "--llm", "none"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=root,
                                    )
    for k, p in procs.items():
        p.wait(timeout=600)
        assert (root / "an" / k / "report.json").is_file(), k
    return {k: root / "an" / k for k in VARIANTS}


def _diff(a: Path, b: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", str(a), str(b), "--out", str(out)],
                        env=_env(), capture_output=True, text=True, timeout=300)
    return cp, (json.loads((out / "diff.json").read_text()) if (out / "diff.json").is_file() else {})


def test_accepted_lever_pair_is_an_improvement(analysed, tmp_path):
    cp, d = _diff(analysed["before"], analysed["after"], tmp_path / "d")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert d["comparable"] and d["verdict"] == "improvement" and d["fom"]["name"] == "epoch_time_s"
    # 60 ms per batch no longer serialized with the step: far beyond the noise band
    assert d["fom"]["improvement_pct"] > d["fom"]["noise_pct"] > 0
    assert d["fom"]["b"] < d["fom"]["a"]
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
    assert d["refused"] == ["different models (mlip-gnn vs vit)"]
    cp2 = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", str(tmp_path / "1"), str(tmp_path / "nope")],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert cp2.returncode == 1 and "not an analysed run" in cp2.stdout
