"""Inputs an adversarial tester built: each must end with a clear line and a STATUS, never a silent
wrong figure (hand-built from the bundled 92001 run)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _run(*args: str, env_dir: Path) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, AI4S_STATE_DIR=str(env_dir))
    return subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_negative_kernel_duration_is_dropped_and_reported(tmp_path):
    run = tmp_path / "92001"
    shutil.copytree(REPO / "examples" / "perf-runs" / "92001", run)
    tp = run / "traces" / "trace_rank0.json.gz"
    data = json.loads(gzip.decompress(tp.read_bytes()))
    ks = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    ks[100]["dur"] = -5000
    tp.write_bytes(gzip.compress(json.dumps(data).encode()))
    cp = _run("--job", "92001", "--perf-run", str(run), "--out", str(tmp_path / "out"), env_dir=tmp_path / "st")
    assert cp.returncode == 0, cp.stderr[-2000:]
    rep = (tmp_path / "out" / "report.md").read_text()
    assert "negative or non-finite dur dropped" in rep
    assert "mean kernel -" not in rep
    assert cp.stdout.strip().splitlines()[-1].startswith("STATUS=partial")


def test_empty_job_id_is_refused_and_the_report_survives(tmp_path):
    out = tmp_path / "out"
    cp = _run("--job", "92001", "--perf-run", str(REPO / "examples" / "perf-runs" / "92001"), "--out", str(out),
              env_dir=tmp_path / "st")
    assert cp.returncode == 0
    before = (out / "report.md").read_bytes()
    cp = _run("--job", "", "--perf-run", str(REPO / "examples" / "perf-runs" / "92001"), "--out", str(out),
              env_dir=tmp_path / "st")
    assert cp.returncode == 2 and cp.stdout.strip().splitlines()[-1].startswith("STATUS=fail")
    assert (out / "report.md").read_bytes() == before


def test_missing_baseline_file_is_a_usage_error(tmp_path):
    cp = _run("--job", "92001", "--perf-run", str(REPO / "examples" / "perf-runs" / "92001"), "--out",
              str(tmp_path / "out"), "--baseline", str(tmp_path / "nope.json"), env_dir=tmp_path / "st")
    assert cp.returncode == 2 and "STATUS=fail" in cp.stdout
    assert not (tmp_path / "out" / "report.md").exists()
