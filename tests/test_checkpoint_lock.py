"""One process per checkpoint thread (issue 26 item 5): ``graph/checkpoint.py:thread_lock``, and
``run`` refusing a second identical command with one line and exit 2. Each test holds the lock
from another real process, so nothing depends on timing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.graph.checkpoint import ThreadBusyError, lock_path, thread_lock

HOLD = """
import sys, time
from ai4s_graph.graph.checkpoint import thread_lock
with thread_lock(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    time.sleep(600)
"""


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), e.get("PYTHONPATH")]))
    e.pop("ANTHROPIC_API_KEY", None)
    return e


class Holder:
    """A real second process holding the lock of (db, thread) until it is killed."""

    def __init__(self, db: str, thread: str):
        self.p = subprocess.Popen([sys.executable, "-c", HOLD, db, thread], stdout=subprocess.PIPE, text=True,
                                  env=_env())
        assert self.p.stdout.readline().strip() == "held"

    def kill(self) -> None:
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(timeout=30)


def test_a_second_holder_is_refused_with_one_line_naming_the_first(tmp_path):
    db = str(tmp_path / "cp.sqlite")
    h = Holder(db, "run:91001:abc")
    try:
        with pytest.raises(ThreadBusyError) as ei:
            with thread_lock(db, "run:91001:abc"):
                pytest.fail("entered a thread another process holds")
        msg = str(ei.value)
        assert f"pid {h.p.pid} on " in msg and "run:91001:abc" in msg and "refused" in msg and "\n" not in msg
        with thread_lock(db, "run:91001:other"):  # another thread of the same database is free
            pass
        with thread_lock(str(tmp_path / "other.sqlite"), "run:91001:abc"):  # the same thread elsewhere too
            pass
    finally:
        h.kill()
    with thread_lock(db, "run:91001:abc") as p:  # SIGKILL released it; no stale lock to clean up
        assert p == lock_path(db, "run:91001:abc") and p.parent == tmp_path / "cp.sqlite.locks"


def test_lock_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("AI4S_STATE_DIR", str(tmp_path / "state"))
    a = lock_path(None, "t")
    assert a.parent == tmp_path / "state" / "checkpoints.sqlite.locks" and a.suffix == ".lock"
    pg = lock_path("postgresql://u@h/db", "t")
    assert pg.parent == tmp_path / "state" / "locks" and pg != a
    assert lock_path(str(tmp_path / "x.sqlite"), "t") != lock_path(str(tmp_path / "x.sqlite"), "u")


def test_a_link_at_the_lock_path_is_refused(tmp_path):
    db = str(tmp_path / "cp.sqlite")
    p = lock_path(db, "t")
    p.parent.mkdir(parents=True)
    target = tmp_path / "victim.txt"
    target.write_text("keep me\n")
    p.symlink_to(target)
    with pytest.raises(Exception, match="cannot open the checkpoint lock"):
        with thread_lock(db, "t"):
            pass
    assert target.read_text() == "keep me\n"


def _perf_run(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    (d / "traces").mkdir(parents=True)
    (d / "manifest.json").write_text('{"jobid": "4242", "state": "COMPLETED", "nodes_list": ["n1"]}\n')
    return d


def test_run_refuses_while_another_run_holds_its_thread(tmp_path):
    """Two identical ``run`` commands with one state dir: the second is refused (exit 2, one
    STATUS line) instead of running every node a second time; it writes no report."""
    from ai4s_graph.cli.run import resolve_out_dir, thread_id
    from ai4s_graph.graph.analysis.configuration import RunRequest

    run = _perf_run(tmp_path)
    out = tmp_path / "out"
    env = _env()
    env["AI4S_STATE_DIR"] = str(tmp_path / "state")
    req = RunRequest(jobid=None, perf_run=str(run.resolve()), out_dir=str(resolve_out_dir(out, run, None)),
                     llm="none")
    h = Holder(str(tmp_path / "state" / "checkpoints.sqlite"), thread_id(req))
    try:
        cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", "--perf-run", str(run), "--out", str(out),
                             "--llm", "none"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    finally:
        h.kill()
    assert cp.returncode == 2, cp.stdout + cp.stderr
    status = [ln for ln in cp.stdout.splitlines() if ln.startswith("STATUS=")]
    assert status == [status[0]] and status[0].startswith("STATUS=fail; reason=checkpoint thread ")
    assert f"pid {h.p.pid}" in status[0] and not (out / "report.md").exists()
