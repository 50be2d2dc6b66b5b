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
    assert cp2.returncode == 3 and "not an analysed run" in cp2.stdout  # bad input: its own exit code


# ---- issue 27 report 5 points 8 and 9: bad input has its own exit code; a mixed folder is bad input

def test_help_and_readme_give_the_exit_codes():
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", "--help"], env=_env(), capture_output=True,
                        text=True, timeout=120)
    text = " ".join(cp.stdout.replace("│", " ").split())
    assert cp.returncode == 0 and "Exit codes: 0 = comparable" in text and "3 = bad input" in text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "3 = bad input" in readme and "1 = a regression beyond noise or a refused pair" in readme


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("as_json", [False, True])
def test_malformed_or_inconsistent_input_exits_3(analysed, tmp_path, as_json):
    flag = ["--json"] if as_json else []

    def diff(a: Path, b: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", str(a), str(b), "--out",
                               str(tmp_path / "d"), *flag], env=_env(), capture_output=True, text=True, timeout=300)

    bad = _copy(analysed["after"], tmp_path / "bad")
    (bad / "report.json").write_text('{"jobid": "902", "claims": [')  # truncated
    mixed = _copy(analysed["after"], tmp_path / "mixed")
    man = json.loads((mixed / "manifest.json").read_text())
    (mixed / "manifest.json").write_text(json.dumps({**man, "jobid": "777"}))  # another run's manifest beside it
    for b, needle in ((bad, "report.json"), (mixed, "report.json is job 902's, manifest.json job 777's")):
        cp = diff(analysed["before"], b)
        assert cp.returncode == 3, cp.stdout + cp.stderr
        out = json.loads(cp.stdout)["status"] if as_json else cp.stdout.strip().splitlines()[-1]
        assert out.startswith("STATUS=fail; reason=") and needle in out, out
        if as_json:
            assert json.loads(cp.stdout)["exit_code"] == 3
    assert not (tmp_path / "d").exists()
    # a regression is still 1 (the accepted pair the other way round), distinct from bad input
    assert diff(analysed["after"], analysed["before"]).returncode == 1


@pytest.mark.parametrize("field, value, where", [
    ("claims", [1, 2], "claims.0"),                      # a list of numbers where claims go
    ("bottleneck", "dispatch", "bottleneck"),             # a string where an object goes
    ("levers", {"x": 1}, "levers"),                       # an object where a list goes
    ("figures", [1], "figures"),
    ("jobid", None, "jobid"),
    ("statuses", {"trace_analyst": 3}, "statuses.trace_analyst"),
])
def test_a_report_json_not_shaped_as_a_report_exits_3(analysed, tmp_path, field, value, where):
    """Valid JSON that is not a report (each field of another type): one STATUS=fail line naming
    the field, exit 3, no traceback, nothing written."""
    b = _copy(analysed["after"], tmp_path / "b")
    rep = json.loads((b / "report.json").read_text())
    (b / "report.json").write_text(json.dumps({**rep, field: value}))
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", str(analysed["before"]), str(b), "--out",
                         str(tmp_path / "d")], env=_env(), capture_output=True, text=True, timeout=300)
    last = cp.stdout.strip().splitlines()[-1]
    assert cp.returncode == 3 and "Traceback" not in cp.stderr, cp.stdout + cp.stderr
    assert last.startswith("STATUS=fail; reason=") and f"is not an ai4s-graph report: {where}" in last, last
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("name, field, value", [
    ("foms.json", "epoch_times_s", 5),            # a number where a list goes
    ("manifest.json", "nodes_list", [1, "a"]),    # names of two types
    ("manifest.json", "nodes_list", 5),
])
def test_foms_or_manifest_of_another_shape_exits_3(analysed, tmp_path, name, field, value):
    """foms.json / manifest.json values of a type ``run`` never writes: one STATUS=fail line, exit 3,
    no traceback, nothing written (they were TypeErrors)."""
    b = _copy(analysed["after"], tmp_path / "b")
    d = json.loads((b / name).read_text())
    (b / name).write_text(json.dumps({**d, field: value}))
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", str(analysed["before"]), str(b), "--out",
                         str(tmp_path / "d")], env=_env(), capture_output=True, text=True, timeout=300)
    last = cp.stdout.strip().splitlines()[-1]
    assert cp.returncode == 3 and "Traceback" not in cp.stderr, cp.stdout + cp.stderr
    assert last.startswith("STATUS=fail; reason=the runs' files hold a value") and not (tmp_path / "d").exists()


def test_a_number_beyond_the_float_range_is_no_number():
    from ai4s_graph.tools.report import diff as D

    assert D._num(10 ** 400) is None and D._num(float("inf")) is None and D._num(True) is None
    assert D._num(3) == 3.0 and D._num(2.5) == 2.5


@pytest.mark.vm
def test_a_run_that_stops_midway_leaves_a_folder_diff_refuses(tmp_path):
    """Run 92001 into a folder, run it again (--fresh) with a node raising before the synthesizer: the
    folder now holds the new manifest.json/foms.json beside the old report, marked; diff refuses it with
    its reason (exit 3) until the resumed run publishes its report."""
    env = {**_env(), "AI4S_STATE_DIR": str(tmp_path / "state")}
    out = tmp_path / "out"
    args = [sys.executable, "-m", "ai4s_graph.cli", "run", "--job", "92001", "--perf-run",
            str(ROOT / "examples/perf-runs/92001"), "--out", str(out)]
    marker = out / ".ai4s-graph" / "run-in-progress.json"
    assert subprocess.run(args, env=env, capture_output=True, text=True, timeout=600).returncode == 0
    assert not marker.exists()
    before = (out / "report.json").stat().st_mtime_ns
    cp = subprocess.run([*args, "--fresh"], env={**env, "AI4S_FAULT": "raise-before:synthesizer"},
                        capture_output=True, text=True, timeout=600)
    assert cp.returncode == 1 and "marked stale" in cp.stderr
    assert (out / "report.json").stat().st_mtime_ns == before  # the old report kept ...
    assert (out / "manifest.json").stat().st_mtime_ns > before  # ... beside this run's manifest
    assert json.loads(marker.read_text())["jobid"] == "92001"

    def diff() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "diff", str(out), str(out), "--out",
                               str(tmp_path / "d")], env=env, capture_output=True, text=True, timeout=300)

    d = diff()
    assert d.returncode == 3 and "did not finish" in d.stdout.strip().splitlines()[-1], d.stdout + d.stderr
    assert not (tmp_path / "d").exists()
    resumed = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0 and "resuming at synthesizer" in resumed.stdout
    assert not marker.exists() and (out / "report.json").stat().st_mtime_ns > before
    assert diff().returncode == 0  # a run compared with itself: comparable, no regression
