"""A run stopped by a signal and resumed runs no finished node again (README, "Checkpoints and
resume"): the nodes that ended before the signal, beside tasks of their superstep still running,
are taken from the checkpoint and their STATUS lines printed again marked ``checkpointed, not run
again``. Real runs of ``ai4s-graph run`` on the bundled examples, stopped for real (SIGINT) while a
node sleeps (``AI4S_FAULT=sleep-before:<node>:600``: the sleeping node has not started its work);
which nodes ran is read from the node journal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ai4s_graph.cli.run import NOT_RUN_AGAIN, not_run_again
from ai4s_graph.graph.runtime import read_journal
from ai4s_graph.state import StatusLine

pytestmark = pytest.mark.vm


def _stopped_then_resumed(args: list[str], env: dict[str, str], sleeper: str, stop_after: str,
                          tmp_path: Path, out: Path) -> tuple[list[str], subprocess.CompletedProcess, Counter,
                                                              subprocess.CompletedProcess]:
    """Run ``ai4s-graph run args`` (its output folder ``out``) with ``sleeper`` sleeping 600 s
    before it starts, send SIGINT as soon as ``stop_after``'s line is out, then run the same
    command again. Returns the first run's node lines, the first run (its rest), the nodes it
    started (:func:`_starts`) and the resumed run."""
    env = {**env, "AI4S_STATE_DIR": str(tmp_path / "state"), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "ai4s_graph.cli", "run", *args]
    proc = subprocess.Popen(cmd, env={**env, "AI4S_FAULT": f"sleep-before:{sleeper}:600"}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        printed = []
        for line in proc.stdout:
            printed.append(line.rstrip("\n"))
            if line.startswith(stop_after):
                break
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)  # the sleeping node would hold it 600 s
    finally:
        proc.kill()
        proc.wait()
    first = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    started = _starts(out)
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    return printed, first, started, second


def _starts(out: Path) -> Counter:
    return Counter(r["node"] for r in read_journal(out) if r["event"] == "start")


def test_the_telemetry_analyst_beside_more_rank_tasks_than_threads_is_not_run_again(perf_runs, tmp_path):
    """The telemetry analyst ends while the rank tasks of its superstep still run (they sleep):
    with as many rank traces as LangGraph's default pool has threads (``min(32, cores + 4)``), its
    checkpoint write once waited in that pool behind the queued rank task, so a stop then lost its
    result although its line was printed, and the resume ran it again. Now its line is printed
    once the write is in the checkpoint: stopped right after that line, the resume runs the rank
    traces only, and prints the analyst's line again, marked as taken from the checkpoint."""
    n = min(32, (os.cpu_count() or 1) + 4)
    run = shutil.copytree(perf_runs / "93001", tmp_path / "run")
    man = json.loads((run / "manifest.json").read_text())
    for r in range(2, n):  # the two ranks' traces again under new names: more rank tasks, same work
        shutil.copy(run / "traces" / f"trace_rank{r % 2}.json.gz", run / "traces" / f"trace_rank{r}.json.gz")
    man["artifacts"]["traces"] = [f"traces/trace_rank{r}.json.gz" for r in range(n)]
    (run / "manifest.json").write_text(json.dumps(man))
    out = tmp_path / "out"
    printed, first, started, second = _stopped_then_resumed(
        ["--job", "93001", "--perf-run", str(run), "--out", str(out)], dict(os.environ), "trace_rank",
        "telemetry_analyst", tmp_path, out)
    assert first.returncode == 130, first.stdout + first.stderr
    assert first.stdout.splitlines()[-1] == "STATUS=fail; reason=interrupted (SIGINT); re-run the same command to resume"
    assert started == {"launcher": 1, "telemetry_analyst": 1}  # the ranks slept: none started
    assert second.returncode == 0, second.stdout + second.stderr
    lines = second.stdout.splitlines()
    assert lines[0] == "graph                STATUS=ok; reason=resuming at " + ", ".join(["trace_rank"] * n)
    analyst = printed[-1]  # "telemetry_analyst    STATUS=ok; reason=..."
    assert analyst.startswith("telemetry_analyst    STATUS=ok; reason=FOM throughput_realized_samples_per_s=250.4")
    assert lines[1] == f"{analyst}; {NOT_RUN_AGAIN}"
    starts = _starts(out)
    assert starts["telemetry_analyst"] == 1 and starts["launcher"] == 1  # not run again
    assert starts["trace_rank"] == n and starts["synthesizer"] == 1
    assert (out / "report.md").is_file()


def test_the_trace_analyst_finished_beside_a_running_verifier_is_not_run_again(perf_runs, tmp_path):
    """trace_analyst ends while telemetry_verifier (its superstep's other task) runs: stopped then,
    the resume starts at telemetry_verifier and does not run trace_analyst again. Its line comes
    back from the checkpoint marked ``checkpointed, not run again`` (before, it was printed as
    though it had run again)."""
    out = tmp_path / "out"
    printed, first, started, second = _stopped_then_resumed(
        ["--job", "92001", "--perf-run", str(perf_runs / "92001"), "--out", str(out)], dict(os.environ),
        "telemetry_verifier", "trace_analyst", tmp_path, out)
    assert first.returncode == 130, first.stdout + first.stderr
    assert [p.split()[0] for p in printed] == ["launcher", "telemetry_analyst", "trace_rank", "trace_analyst"]
    assert started == {n: 1 for n in ("launcher", "telemetry_analyst", "trace_rank", "trace_analyst")}
    lines = second.stdout.splitlines()
    assert second.returncode == 0, second.stdout + second.stderr
    assert lines[0] == "graph                STATUS=ok; reason=resuming at telemetry_verifier"
    assert lines[1] == ("trace_analyst        STATUS=ok; reason=1 rank trace(s), stream backend: dispatch-bound, "
                        "9 claims; checkpointed, not run again")
    assert lines[1] == f"{printed[-1]}; {NOT_RUN_AGAIN}"
    assert [ln.split()[0] for ln in lines[2:5]] == ["telemetry_verifier", "trace_verifier", "synthesizer"]
    assert _starts(out) == {n: 1 for n in ("launcher", "telemetry_analyst", "trace_rank", "trace_analyst",
                                           "telemetry_verifier", "trace_verifier", "synthesizer")}


def test_a_checkpointed_line_keeps_its_outcome_and_stays_within_160_characters():
    assert not_run_again("STATUS=partial; reason=rank 1: no GPU events") == \
        "STATUS=partial; reason=rank 1: no GPU events; checkpointed, not run again"
    long = not_run_again(StatusLine.make("fail", "x" * 160).format())
    st = StatusLine.parse(long)
    assert st.status.value == "fail" and len(st.reason) == 160 and st.reason.endswith(f"; {NOT_RUN_AGAIN}")
    assert st.reason.startswith("x" * 100)
    assert not_run_again("not a status line") == "not a status line"
