"""Ids from files are validated like ids from the command line (issue 26 item 10): without
``--job``, ``manifest.json``'s jobid goes through the same SLURM-syntax validator as ``--job``.
A refused id gives exit 2, one STATUS line (fail) and nothing written; a newline in it can never
print a line of its own (no forged ``STATUS=ok``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.graph.analysis.configuration import RunRequest
from ai4s_graph.graph.analysis.nodes.launcher import adopt, preflight
from ai4s_graph.tools.errors import InputError

HOSTILE = {
    "traversal": "../../x",
    "command": "$(touch /tmp/ai4s-pwned)",
    "newline": "91001\nSTATUS=ok; reason=forged",
    "5000 digits": "9" * 5000,
    "escape": "91001\x1b[2K",
    "above 32 bits": "4294967296",
    "array and het at once": "91001_3+1",
    "not text": ["91001"],
}


def _run_dir(tmp_path: Path, jobid) -> Path:
    d = tmp_path / "run"
    (d / "traces").mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").write_text(json.dumps({"jobid": jobid, "state": "COMPLETED", "nodes_list": ["n1"]}) + "\n")
    return d


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["AI4S_STATE_DIR"] = str(tmp_path / "state")
    env.pop("ANTHROPIC_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", *args, "--llm", "none"], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_manifest_jobid_is_refused_like_a_typed_one(tmp_path, kind):
    run = _run_dir(tmp_path, HOSTILE[kind])
    out = tmp_path / "out"
    cp = _cli(tmp_path, "--perf-run", str(run), "--out", str(out))
    assert cp.returncode == 2, cp.stdout + cp.stderr
    lines = cp.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("STATUS=")] == [lines[-1]]
    assert lines[-1].startswith("STATUS=fail; reason=") and "not a SLURM job id" in lines[-1]
    assert "manifest.json: jobid:" in lines[-1] and len(lines[-1]) < 400
    assert len(cp.stderr.splitlines()) == 1  # the value is shown escaped ("\\n"), inside the one line
    assert not out.exists() and not Path("/tmp/ai4s-pwned").exists()


@pytest.mark.parametrize("jobid", ["91001", "91001_7", "91001_[1-3]", "91001+1", 91001])
def test_array_and_het_forms_in_a_manifest_are_accepted(tmp_path, jobid):
    run = _run_dir(tmp_path, jobid)
    req = RunRequest(perf_run=str(run), out_dir=str(tmp_path / "out"), llm="none")
    preflight(req)  # no refusal
    manifest, _missing = adopt(req)
    assert manifest.jobid == str(jobid)


def test_adopt_checks_the_id_it_reads_too(tmp_path):
    """adopt() is reached without preflight by other callers: it validates the id it reads."""
    run = _run_dir(tmp_path, "1;rm -rf /")
    with pytest.raises(InputError, match="manifest.json: jobid: not a SLURM job id"):
        adopt(RunRequest(perf_run=str(run), out_dir=str(tmp_path / "out"), llm="none"))
