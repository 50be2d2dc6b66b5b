"""Kind: output directories and "nothing good lost" (issue 26). An empty ``--out``, ``--out`` inside
the run's ``traces/``, a file as ``--out``, a mistyped or file ``--perf-run``, another job's report
in the output directory, a run that analyses nothing, a full disk during the synthesizer: the
earlier good report always survives byte for byte; a refusal exits 2 in one line; a run that
could not publish says where its own report went."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402


def _run(tmp_path: Path, run: Path | str, out: Path | str, *extra: str, job: str = "92001", **kw):
    return H.cli("run", "--job", job, "--perf-run", str(run), "--out", str(out), *extra, state=tmp_path / "st", **kw)


@pytest.fixture
def good(tmp_path):
    run, out, files = H.good_report(tmp_path)
    return {"run": run, "out": out, "files": files}


def test_empty_out_and_empty_perf_run_are_refused(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    H.assert_refused(_run(tmp_path, H.EXAMPLE, "", cwd=cwd), "--out is empty")
    H.assert_refused(_run(tmp_path, "", tmp_path / "out", cwd=cwd), "--perf-run is empty")
    H.assert_refused(H.cli("run", "--job", "92001", "--perf-run", str(H.EXAMPLE), "--out", "  ", state=tmp_path / "st",
                           cwd=cwd), "--out is empty")
    assert os.listdir(cwd) == [] and not (tmp_path / "out").exists()


def test_out_inside_the_runs_traces_or_telemetry_is_refused(tmp_path):
    run = H.copy_run(tmp_path / "run")
    for sub in ("traces", "traces/deeper", "telemetry"):
        H.assert_refused(_run(tmp_path, run, run / sub), f"inside the run's {sub.split('/')[0]}/")
    assert sorted(os.listdir(run / "traces")) == ["trace_rank0.json.gz"]


def test_trace_discovery_takes_only_trace_like_names(tmp_path):
    """A report left inside traces/ (by an older version, or by hand) is never read as a rank trace."""
    from ai4s_graph.tools.slurm.jobs import discover_artifacts
    from ai4s_graph.tools.trace.ranks import find_rank_traces

    run = H.copy_run(tmp_path / "run")
    for name in ("report.json", "manifest.json", "foms.json", "diff.json", ".report.json.1a2b.tmp"):
        (run / "traces" / name).write_text("{}")
    assert discover_artifacts(run).traces == ["traces/trace_rank0.json.gz"]
    assert [p.name for p in find_rank_traces(run)] == ["trace_rank0.json.gz"]
    cp = _run(tmp_path, run, tmp_path / "out")
    assert cp.returncode == 0 and H.status_lines(cp)[-1].startswith("STATUS=ok"), cp.stdout[-1500:]


def test_a_file_as_out_is_refused(tmp_path):
    f = tmp_path / "notadir"
    f.write_text("keep")
    H.assert_refused(_run(tmp_path, H.EXAMPLE, f), "is a file, not a directory")
    assert f.read_text() == "keep"


@pytest.mark.parametrize("bad", ["missing", "file"])
def test_a_mistyped_perf_run_leaves_the_good_report(tmp_path, good, bad):
    target = good["run"].parent / "92001-typo" if bad == "missing" else good["run"] / "train.log"
    cp = _run(tmp_path, target, good["out"], "--fresh")
    H.assert_refused(cp, "no such directory" if bad == "missing" else "is a file, not a run directory")
    assert H.snapshot(good["out"]) == good["files"]


def test_another_jobs_report_is_refused_unless_force(tmp_path, good):
    rep = json.loads((good["out"] / "report.json").read_text())
    rep["jobid"] = "93001"
    (good["out"] / "report.json").write_text(json.dumps(rep))
    (good["out"] / "manifest.json").unlink()  # only the report says whose directory this is
    before = H.snapshot(good["out"])
    H.assert_refused(_run(tmp_path, good["run"], good["out"]), "holds job 93001's report", "--force")
    assert H.snapshot(good["out"]) == before
    cp = _run(tmp_path, good["run"], good["out"], "--force")
    assert cp.returncode == 0 and H.status_lines(cp)[-1].startswith("STATUS=ok"), cp.stdout[-1500:]
    assert json.loads((good["out"] / "report.json").read_text())["jobid"] == "92001"


def test_another_jobs_whole_report_folder_is_replaced_with_force(tmp_path, good):
    """Another job's report folder as this tool writes it (its manifest.json the adoption's copy,
    beside the report): refused without --force as another job's report, replaced with it; a run
    directory of another job (its own traces) stays refused with --force."""
    other = tmp_path / "other-run"
    shutil.copytree(good["run"], other)
    man = json.loads((other / "manifest.json").read_text())
    man["jobid"] = "93001"
    (other / "manifest.json").write_text(json.dumps(man))
    rep_dir = tmp_path / "other-report"
    cp = _run(tmp_path, other, rep_dir, job="93001")
    assert cp.returncode == 0, cp.stdout[-1500:]
    assert json.loads((rep_dir / "manifest.json").read_text())["jobid"] == "93001"  # the folder says whose it is
    before = H.snapshot(rep_dir)
    H.assert_refused(_run(tmp_path, good["run"], rep_dir), "holds job 93001's report", "--force")
    assert H.snapshot(rep_dir) == before
    cp = _run(tmp_path, good["run"], rep_dir, "--force")
    assert cp.returncode == 0 and H.status_lines(cp)[-1].startswith("STATUS=ok"), cp.stdout[-1500:]
    assert json.loads((rep_dir / "report.json").read_text())["jobid"] == "92001"
    # a run directory is never a report folder to replace
    H.assert_refused(_run(tmp_path, good["run"], other, "--force"), "is job 93001's run directory")
    assert json.loads((other / "manifest.json").read_text())["jobid"] == "93001"


def test_a_run_that_analyses_nothing_keeps_the_good_report(tmp_path, good):
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(good["run"] / "manifest.json", empty / "manifest.json")  # the same job, none of its inputs
    cp = _run(tmp_path, empty, good["out"])
    H.assert_no_traceback(cp)
    aside = good["out"] / ".ai4s-graph" / "not-published" / "report.md"
    assert f"report: {aside}" in cp.stdout
    last = H.status_lines(cp)[-1]
    assert cp.returncode == 1 and last.startswith("STATUS=fail") and "earlier report" in last, cp.stdout[-1500:]
    assert H.snapshot(good["out"]) == good["files"]
    assert "Nothing was analysed" in aside.read_text()


def _disk_full_resume(tmp_path: Path, good: dict, *, preexec=None, env=None) -> subprocess.CompletedProcess:
    """Stop the same run before the synthesizer (a real kill, AI4S_FAULT), then resume it so that
    only the synthesizer runs, under the given write limit."""
    cp = _run(tmp_path, good["run"], good["out"], "--fresh", env={"AI4S_FAULT": "exit-before:synthesizer"})
    assert cp.returncode == 137, cp.stdout[-800:] + cp.stderr[-800:]
    e = dict(os.environ, AI4S_STATE_DIR=str(tmp_path / "st"), PYTHONPATH=str(H.REPO), **(env or {}))
    e.pop("ANTHROPIC_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", "--job", "92001", "--perf-run",
                           str(good["run"]), "--out", str(good["out"])], capture_output=True, text=True, env=e,
                          timeout=H.TIME_LIMIT_S, preexec_fn=preexec)


def _assert_nothing_lost(cp: subprocess.CompletedProcess, good: dict, why: str) -> None:
    H.assert_no_traceback(cp)
    assert cp.returncode == 1, cp.stdout[-1500:] + cp.stderr[-1500:]
    last = H.status_lines(cp)[-1]
    assert last.startswith("STATUS=fail") and why in last and "earlier report kept" in last, last
    assert H.snapshot(good["out"]) == good["files"]  # every file as it was: no 0-byte report
    assert not [p for p in good["out"].rglob("*.tmp")]


def test_file_size_limit_during_the_report_write_keeps_the_good_report(tmp_path, good):
    """EFBIG from a real limit (RLIMIT_FSIZE in a child process: the whole ``run`` cannot take it,
    SQLite's own writes fail first) while the synthesizer's write path publishes a report pair: the
    earlier pair survives byte for byte, no temporary or 0-byte file is left."""
    out = good["out"]
    got = H.under_file_limit("from ai4s_graph.tools.report.write import write_report; "
                             f"write_report({str(out)!r}, {str(out)!r}, '{{}}' + ' ' * 100, '#' * 100000)", 8192)
    assert got.startswith("OSError 27"), got  # EFBIG
    assert H.snapshot(out) == good["files"] and not list(out.rglob("*.tmp"))


def test_disk_full_during_the_synthesizer_keeps_the_good_report(tmp_path):
    """ENOSPC from a real full filesystem (a small tmpfs, root only; the RLIMIT_FSIZE test above
    covers machines that may not mount): the synthesizer's report pair is staged and renamed only
    when both are complete, so the earlier report.json/report.md survive as they were."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    cp = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if cp.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({cp.stderr.strip()[:80]}); the RLIMIT_FSIZE test covers the kind")
    try:
        run = H.copy_run(tmp_path / "run")
        shutil.rmtree(run / "telemetry")  # no telemetry plot: the GPU plot and the report pair are the writes
        out = mnt / "out"
        cp = _run(tmp_path, run, out)
        assert cp.returncode == 0, cp.stdout[-1500:]
        page = 4096

        def pages(p: Path) -> int:
            return -(-p.stat().st_size // page) * page

        # free space for a new plot (the old one removed first) and a new report.json (the old pair
        # stays until the renames) plus a page for the node journal's append, not for report.md too
        png = pages(out / "gpu_time_breakdown.png")
        (out / "gpu_time_breakdown.png").unlink()
        good = {"run": run, "out": out, "files": H.snapshot(out)}
        assert pages(out / "report.md") >= 2 * page
        st = os.statvfs(mnt)
        with open(mnt / "filler", "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - (png + pages(out / "report.json") + page)))
        _assert_nothing_lost(_disk_full_resume(tmp_path, good), good, "No space left on device")
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
