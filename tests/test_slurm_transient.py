"""Transient SLURM failures are retried with backoff and said; only a persistent one ends a wait
(issue 25, Omnistat PR#142: one failed query used to abort the wait with ToolUnavailableError).

Every failure is SLURM's own: the real ``sacct``/``squeue`` run under a copy of the cluster's
slurm.conf whose slurmdbd/slurmctld port is down or hung (tests/slurm_faults.py), through a
wrapper first on PATH that does so for its first k calls and then runs the real client. The
shared cluster's daemons are never stopped."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from ai4s_graph.tools.errors import ToolUnavailableError
from ai4s_graph.tools.slurm import client as slurm
from ai4s_graph.tools.slurm.query import RetryLog, RetryPolicy, run_query

from slurm_faults import HungListener, broken_conf, calls, failing_first, free_port

needs_sacct = pytest.mark.skipif(shutil.which("sacct") is None or shutil.which("squeue") is None,
                                 reason="SLURM's client commands are not installed")
FAST = RetryPolicy(outage_s=60.0, first_wait_s=0.05, max_wait_s=0.2)  # same rule, short waits for the test


def _on_path(monkeypatch, bin_dir: Path) -> None:
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _controller_down_for(tmp_path: Path, monkeypatch, tool: str, k: int) -> RetryLog:
    """``tool``'s first ``k`` calls meet a slurmctld that is down (a closed port); a fresh log."""
    failing_first(tmp_path / "bin", tool, k, conf=broken_conf(tmp_path, ctl_port=free_port(), message_timeout=1))
    _on_path(monkeypatch, tmp_path / "bin")
    return RetryLog()


@pytest.fixture(scope="module")
def done_job(local_cluster, tmp_path_factory) -> str:
    """One real finished job (COMPLETED on one node) to ask about."""
    d = tmp_path_factory.mktemp("transient")
    script = d / "ok.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --time=00:02:00\n#SBATCH --output={d}/ok-%j.out\ntrue\n")
    jid = slurm.sbatch(script)
    assert slurm.wait_for_terminal(jid, timeout_s=300, poll_s=0.3).state == "COMPLETED"
    return jid


# ---------------------------------------------------------------- each transient kind, retried
@pytest.mark.slurm
def test_slurmdbd_unreachable_is_retried_then_answered(done_job, tmp_path, monkeypatch):
    conf = broken_conf(tmp_path, dbd_port=free_port())
    failing_first(tmp_path / "bin", "sacct", 2, conf=conf)
    _on_path(monkeypatch, tmp_path / "bin")
    log = RetryLog()
    rec = slurm.sacct(done_job, policy=FAST, log=log)
    assert rec is not None and rec.state == "COMPLETED"
    assert log.retries == {"sacct": 2} and calls(tmp_path / "bin", "sacct") == 3
    assert "Connection refused" in log.last_error["sacct"]  # sacct's own words for a slurmdbd that is down
    assert log.summary().startswith("retried sacct 2 times (last sacct error: ")


@pytest.mark.slurm
def test_controller_unreachable_is_retried_then_answered(done_job, tmp_path, monkeypatch):
    log = _controller_down_for(tmp_path, monkeypatch, "squeue", 2)
    assert slurm.in_queue(done_job, policy=FAST, log=log) is False  # it ended: the real answer
    assert log.retries == {"squeue": 2}
    assert "Unable to contact slurm controller" in log.last_error["squeue"]


@pytest.mark.slurm
def test_socket_timed_out_is_retried(done_job, tmp_path, monkeypatch):
    hung = HungListener()
    try:
        conf = broken_conf(tmp_path, ctl_port=hung.port, message_timeout=1)
        failing_first(tmp_path / "bin", "squeue", 1, conf=conf)
        _on_path(monkeypatch, tmp_path / "bin")
        log = RetryLog()
        row = slurm.queue_job(done_job, policy=FAST, log=log)
    finally:
        hung.close()
    assert row is not None and row["State"] == "COMPLETED"
    assert log.retries == {"squeue": 1} and "Socket timed out on send/recv operation" in log.last_error["squeue"]


@pytest.mark.slurm
def test_a_query_that_does_not_answer_in_time_is_retried(done_job, tmp_path, monkeypatch):
    failing_first(tmp_path / "bin", "sacct", 1, how="sleep", delay_s=30)
    _on_path(monkeypatch, tmp_path / "bin")
    log = RetryLog()
    cp = run_query(["sacct", "-X", "-n", "-P", "-j", done_job, "-o", "State"], policy=FAST, log=log, timeout=1)
    assert cp.stdout.strip() == "COMPLETED"
    assert log.retries == {"sacct": 1} and log.last_error["sacct"] == "no answer within 1s"


@pytest.mark.slurm
def test_death_by_signal_and_a_bare_exit_status_are_retried(done_job, tmp_path, monkeypatch):
    failing_first(tmp_path / "a", "sacct", 1, how="signal")
    failing_first(tmp_path / "b", "squeue", 2, how="silent")
    _on_path(monkeypatch, tmp_path / "a")
    monkeypatch.setenv("PATH", f"{tmp_path / 'b'}{os.pathsep}{os.environ['PATH']}")
    log = RetryLog()
    assert slurm.sacct(done_job, policy=FAST, log=log).state == "COMPLETED"
    assert slurm.queue_job(done_job, policy=FAST, log=log)["State"] == "COMPLETED"
    assert log.retries == {"sacct": 1, "squeue": 2}
    assert "rc=-9" in log.last_error["sacct"] and "exit status 1, no output" in log.last_error["squeue"]


@pytest.mark.slurm
def test_the_wait_rides_out_an_outage_and_says_so(local_cluster, tmp_path, monkeypatch):
    """A real job; slurmdbd 'down' for the wait's first three sacct calls: the wait still ends with
    the job's real terminal state, and the log says how many retries it took."""
    script = tmp_path / "s.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --time=00:02:00\n#SBATCH --output={tmp_path}/s-%j.out\nsleep 1\n")
    jid = slurm.sbatch(script)
    failing_first(tmp_path / "bin", "sacct", 3, conf=broken_conf(tmp_path, dbd_port=free_port()))
    _on_path(monkeypatch, tmp_path / "bin")
    log = RetryLog()
    rec = slurm.wait_for_terminal(jid, timeout_s=300, poll_s=0.3, log=log, policy=FAST)
    assert rec.state == "COMPLETED" and rec.exit_code == "0:0"
    assert log.retries["sacct"] == 3 and "retried sacct 3 times" in log.summary()


# ---------------------------------------------------------------- what is NOT transient
@needs_sacct
def test_a_persistent_failure_ends_with_one_line(tmp_path, monkeypatch):
    conf = broken_conf(tmp_path, dbd_port=free_port())
    monkeypatch.setenv("SLURM_CONF", str(conf))  # every call: slurmdbd down
    log = RetryLog()
    with pytest.raises(ToolUnavailableError) as ei:
        slurm.sacct("12345", policy=RetryPolicy(outage_s=1.0, first_wait_s=0.05, max_wait_s=0.2), log=log)
    msg = str(ei.value)
    assert msg.startswith("sacct kept failing for ") and "Connection refused" in msg and "\n" not in msg
    assert log.retries["sacct"] >= 2  # it was retried before it was called persistent


@needs_sacct
def test_a_deadline_during_an_outage_is_a_wait_timeout_that_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(broken_conf(tmp_path, dbd_port=free_port(), ctl_port=free_port())))
    t0 = time.monotonic()
    with pytest.raises(slurm.WaitTimeout) as ei:
        slurm.wait_for_terminal("12345", timeout_s=1.0, poll_s=0.2,
                                policy=RetryPolicy(outage_s=120.0, first_wait_s=0.05, max_wait_s=0.2))
    assert time.monotonic() - t0 < 30  # bounded by the wait, not by the 120 s outage window
    assert ei.value.last is None and "retried sacct" in str(ei.value) and "Connection refused" in str(ei.value)


@needs_sacct
def test_final_answers_are_not_retried():
    log = RetryLog()
    with pytest.raises(ToolUnavailableError, match="unrecognized option") as ei:
        run_query(["sacct", "--no-such-option"], policy=FAST, log=log)
    assert not isinstance(ei.value, slurm.TransientSlurmError) and log.total == 0


@pytest.mark.slurm
def test_an_unknown_id_is_an_answer_not_a_failure(local_cluster):
    log = RetryLog()
    assert slurm.queue_rows("987654321", policy=FAST, log=log) == []  # squeue: "Invalid job id specified"
    assert slurm.sacct("987654321", policy=FAST, log=log) is None
    assert log.total == 0


@pytest.mark.slurm
def test_scontrol_with_controller_unreachable_is_retried(done_job, tmp_path, monkeypatch):
    log = _controller_down_for(tmp_path, monkeypatch, "scontrol", 1)
    text = slurm.scontrol_show_job_text(done_job, policy=FAST, log=log)
    assert f"JobId={done_job} " in text and log.retries == {"scontrol": 1}
    assert "Unable to contact slurm controller" in log.last_error["scontrol"]
