"""Kind: hostile job ids (issue 26). On the command line an id that is not SLURM's syntax is
refused (exit 2, nothing written); from ``manifest.json`` (no ``--job``) a path, a shell
substitution, a newline or 5000 digits never leave the output directory, run anything or forge a
line. (Refusing such an id from the file like one from the command line is the SLURM engineer's
part of issue 26; these tests hold whichever way it is decided: refused, or analysed with the id
made harmless.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402


@pytest.mark.parametrize("job", ["", "../../x", "$(touch PWNED)", "92001;id", "92001\nSTATUS=ok", "9" * 5000, "-1"])
def test_command_line_ids_outside_slurm_syntax_are_refused(tmp_path, job):
    out = tmp_path / "out"
    cp = H.cli("run", "--job", job, "--perf-run", str(H.EXAMPLE), "--out", str(out), state=tmp_path / "st",
               cwd=tmp_path)
    H.assert_refused(cp)
    assert not out.exists() and not (tmp_path / "PWNED").exists()


def test_a_refused_id_leaves_the_earlier_report(tmp_path):
    """(Moved from tests/test_adversarial_inputs.py.)"""
    run, out, files = H.good_report(tmp_path)
    cp = H.cli("run", "--job", "", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_refused(cp)
    assert H.snapshot(out) == files


@pytest.mark.parametrize("jobid", ["../../escaped", "$(touch PWNED)", "92001\nSTATUS=ok; reason=forged", "9" * 5000])
def test_hostile_ids_from_the_manifest_stay_harmless(tmp_path, jobid):
    run = H.copy_run(tmp_path / "run")
    m = json.loads((run / "manifest.json").read_text())
    m["jobid"] = jobid
    (run / "manifest.json").write_text(json.dumps(m))
    os.chmod(run, 0o555)  # a read-only run: the report goes under ./ai4s-reports/ of the working directory
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    try:
        cp = H.cli("run", "--perf-run", str(run), state=tmp_path / "st", cwd=cwd)
    finally:
        os.chmod(run, 0o755)
    H.assert_no_traceback(cp)
    assert cp.returncode in (0, 1, 2), cp.stderr[-1500:]
    assert not (cwd / "PWNED").exists() and not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "escaped").exists() and not (cwd / "escaped").exists()
    assert not [ln for ln in cp.stdout.splitlines() if ln.startswith("STATUS=ok; reason=forged")]
    written = [p for p in cwd.rglob("*") if p.is_file()]
    assert all(cwd / "ai4s-reports" in p.parents for p in written), written
    for md in cwd.rglob("report.md"):
        assert not [ln for ln in md.read_text().splitlines() if ln.startswith("STATUS=ok; reason=forged")]


def test_a_missing_baseline_file_is_a_usage_error(tmp_path):
    """(Moved from tests/test_adversarial_inputs.py.)"""
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(H.EXAMPLE), "--out", str(out), "--baseline",
               str(tmp_path / "nope.json"), state=tmp_path / "st")
    assert cp.returncode == 2 and "STATUS=fail" in cp.stdout and not (out / "report.md").exists()
