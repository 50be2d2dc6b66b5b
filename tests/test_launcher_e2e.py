"""End to end through the CLI against the real local SLURM (issue 4's "Done when"):

- ``ai4s-graph run --submit`` on 2 nodes -> COMPLETED, and the report lists node1, node2 from SLURM;
- a mount-health probe failing on node1 -> known_bad_nodes.txt, ONE re-submission with
  ``--exclude=node1``, the second job completes on node2;
- ``ai4s-graph`` killed while the job runs -> the same command adopts the same job id, submits nothing;
- a job that outlives ``--wait-timeout`` -> ``state=TIMEOUT_WAITING`` in manifest.json, a
  ``STATUS=fail`` line, and the graph stops there;
- one sbatch per submission (issue 26 item 5): three identical commands at once, and a kill
  during sbatch followed by a resume, each give ONE job; an intent record that cannot be written
  gives none;
- a transient sacct failure during the wait is retried and said (issue 25).

Every submission's job is named ``ai4s-<model>-<token>`` (tools/slurm/submission.py); the tests
count jobs by that ``ai4s-<model>-`` prefix.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.tools.slurm import health, client as slurm

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _config(tmp_path: Path, **extra) -> Path:
    cfg = {"partition": "debug", "shared_dir": str(tmp_path / "shared"), "victoria_metrics_url": "http://127.0.0.1:18428",
           **extra}
    p = tmp_path / "cluster.yaml"
    p.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()))
    return p


def _cmd(tmp_path: Path, model: str, nodes: int, workload_args: list[str], wait_timeout: float = 240,
         **cfg) -> list[str]:
    argv = [sys.executable, "-m", "ai4s_graph.cli", "run", "--submit", "--workload", "cpu-toy", "--app-model", model,
            "--nodes", str(nodes), "--cluster-config", str(_config(tmp_path, **cfg)), "--env", "OMP_NUM_THREADS=1",
            "--wait-timeout", str(wait_timeout), "--out", str(tmp_path / "out"), "--llm", "none"]
    for a in workload_args:
        argv.append(f"--script-arg={a}")
    return argv


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), e.get("PYTHONPATH")]))
    e.pop("ANTHROPIC_API_KEY", None)
    return e


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _jobs_named(prefix: str, settle_s: float = 10.0) -> list[str]:
    """Ids of this user's jobs whose name starts with ``prefix`` + ``-`` (a submission's unique
    name): sacct's rows plus squeue's (accounting of a just-submitted job is asynchronous: sacct
    names it ``allocation`` for its first second), polled
    until one shows up or ``settle_s`` passes."""
    deadline = time.monotonic() + settle_s
    while True:
        cp = subprocess.run(["sacct", "-X", "-n", "-P", "-S", "now-1days", "-o", "JobID,JobName"],
                            capture_output=True, text=True)
        sq = subprocess.run(["squeue", "-h", "--me", "--states=all", "-o", "%i|%j"], capture_output=True, text=True)
        rows = [ln.split("|", 1) for ln in (cp.stdout + sq.stdout).splitlines() if "|" in ln]
        ids = sorted({j for j, n in rows if n.startswith(prefix + "-")}, key=int)
        if ids or time.monotonic() >= deadline:
            return ids
        time.sleep(0.5)


SHORT = ["--model", "mlp", "--epochs", "2", "--steps-per-epoch", "10", "--batch-size", "8"]


def test_submit_two_nodes_completes_and_report_lists_slurm_nodes(local_cluster, tmp_path):
    model = f"e2e2n{uuid.uuid4().hex[:6]}"
    cp = _run(_cmd(tmp_path, model, 2, SHORT), tmp_path)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert "wait_for_job" in cp.stdout and "COMPLETED" in cp.stdout
    last = cp.stdout.strip().splitlines()[-1]
    assert last.startswith("STATUS=partial")  # CPU-only trace: no GPU events -> partial, report still written
    out = tmp_path / "out"
    man = json.loads((out / "manifest.json").read_text())
    assert man["state"] == "COMPLETED" and man["nodes_list"] == ["node1", "node2"] and man["exit_code"] == "0:0"
    assert list(man)[:3] == ["jobid", "state", "nodes_list"]
    jid = man["jobid"]
    rec = slurm.sacct(jid)
    assert rec is not None and rec.state == "COMPLETED" and rec.nodelist == ["node1", "node2"]
    run_dir = tmp_path / "shared" / "models" / model / "perf-runs" / jid
    assert json.loads((run_dir / "manifest.json").read_text())["nodes_list"] == ["node1", "node2"]
    assert sorted(p.name for p in (run_dir / "traces").iterdir()) == ["trace_rank0.json.gz", "trace_rank1.json.gz"]
    report = (out / "report.md").read_text()
    assert "node1" in report and "node2" in report
    rep = json.loads((out / "report.json").read_text())
    assert "node1" in json.dumps(rep) and "node2" in json.dumps(rep)
    assert "no GPU" in report  # the trace analyst said so, and the FOM is still there
    assert "throughput" in report.lower()


def _hold_node2_until_the_first_attempt_runs(name: str, tmp_path: Path) -> threading.Thread:
    """On a shared, loaded cluster SLURM may place the first attempt on node2 (node1 busy), where
    the probe passes. A blocker job holds node2 until the first attempt has a node, so it lands on
    node1 whatever else runs; the blocker is then cancelled so the retry can use node2."""
    blocker = slurm.sbatch(_blocker_script(tmp_path), extra_args=["--nodelist=node2", "--exclusive"])

    def release() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ids = _jobs_named(name, settle_s=0)
            rec = slurm.sacct(ids[0]) if ids else None
            if rec is not None and rec.nodelist:
                break
            time.sleep(0.3)
        slurm.scancel(blocker)

    t = threading.Thread(target=release, daemon=True)
    t.start()
    return t


def _blocker_script(tmp_path: Path) -> Path:
    p = tmp_path / "blocker.sh"
    p.write_text(f"#!/bin/bash\n#SBATCH --time=00:05:00\n#SBATCH --output={tmp_path}/blocker-%j.out\nsleep 240\n")
    return p


def test_probe_failure_resubmits_once_with_exclude(local_cluster, tmp_path):
    model = f"e2eprobe{uuid.uuid4().hex[:6]}"
    (tmp_path / "scratch" / "node2").mkdir(parents=True)  # node1's per-node mount is missing
    argv = _cmd(tmp_path, model, 1, SHORT, probe_paths=[str(tmp_path / "scratch" / "{node}")])
    releaser = _hold_node2_until_the_first_attempt_runs(f"ai4s-{model}", tmp_path)
    cp = _run(argv, tmp_path)
    releaser.join(timeout=5)
    out = tmp_path / "out"
    jobs = _jobs_named(f"ai4s-{model}")
    assert len(jobs) == 2, (jobs, cp.stdout[-3000:])
    first, second = jobs
    r1, r2 = slurm.sacct(first), slurm.sacct(second)
    if r1.nodelist != ["node1"]:
        pytest.fail(f"SLURM placed the first job on {r1.nodelist}, not node1; the probe could not fail there")
    assert r1.state == "FAILED" and r1.exit_code == "42:0"
    assert r2.state == "COMPLETED" and r2.nodelist == ["node2"]
    assert health.read_known_bad(out / "known_bad_nodes.txt") == ["node1"]
    probe1 = health.parse_probe_file(tmp_path / "shared" / "models" / model / "perf-runs" / first / health.PROBE_FILE)
    assert probe1.bad_nodes == ["node1"]
    script2 = next((out / "jobs" / "attempt2").glob("*.sbatch")).read_text()
    assert "#SBATCH --exclude=node1\n" in script2
    assert "#SBATCH --exclude" not in next((out / "jobs" / "attempt1").glob("*.sbatch")).read_text()
    man = json.loads((out / "manifest.json").read_text())
    assert man["jobid"] == second and man["nodes_list"] == ["node2"] and man["state"] == "COMPLETED"
    assert man["excluded_nodes"] == ["node1"] and man["previous_jobids"] == [first]
    assert "re-submitting with --exclude=node1" in cp.stdout.replace("\n", " ").replace("  ", " ") or \
        "--exclude=node1" in cp.stdout
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]


def test_killed_run_adopts_the_same_job(local_cluster, tmp_path):
    model = f"e2ekill{uuid.uuid4().hex[:6]}"
    args = ["--model", "mlp", "--epochs", "1", "--steps-per-epoch", "40", "--batch-size", "8",
            "--data-latency-ms", "200"]
    argv = _cmd(tmp_path, model, 1, args)
    marker = tmp_path / "out" / ".ai4s-graph" / "intent-attempt1.json"  # written before sbatch, job id after
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        jid = None
        while time.monotonic() < deadline:
            if marker.is_file() and json.loads(marker.read_text())["jobid"]:
                jid = json.loads(marker.read_text())["jobid"]
                rec = slurm.sacct(jid)
                if rec is not None and rec.state == "RUNNING":
                    break
            time.sleep(0.3)
        assert jid is not None, "the job was never submitted"
        assert proc.poll() is None, "ai4s-graph ended before it could be killed"
        proc.send_signal(signal.SIGKILL)  # no cleanup, no goodbye
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert slurm.sacct(jid).state == "RUNNING"  # the job outlives its launcher
    cp = _run(argv, tmp_path)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert "resuming at wait_for_job" in cp.stdout
    assert _jobs_named(f"ai4s-{model}") == [jid]  # nothing new submitted
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert man["jobid"] == jid and man["state"] == "COMPLETED"
    assert [p.name for p in (tmp_path / "out" / "jobs").iterdir()] == ["attempt1"]


def test_wait_bound_gives_timeout_waiting_and_stops(local_cluster, tmp_path):
    model = f"e2ewait{uuid.uuid4().hex[:6]}"
    args = ["--model", "mlp", "--epochs", "1", "--steps-per-epoch", "400", "--data-latency-ms", "500"]
    cp = _run(_cmd(tmp_path, model, 1, args, wait_timeout=3), tmp_path)
    jobs = _jobs_named(f"ai4s-{model}")
    try:
        assert cp.returncode == 1
        lines = cp.stdout.strip().splitlines()
        assert lines[-1].startswith("STATUS=fail") and "TIMEOUT_WAITING" in lines[-1]
        assert any("wait_for_job" in ln and "STATUS=fail" in ln for ln in lines)
        out = tmp_path / "out"
        man = json.loads((out / "manifest.json").read_text())
        assert man["state"] == "TIMEOUT_WAITING" and man["jobid"] == jobs[0]
        assert man["slurm_state"] in ("PENDING", "RUNNING")
        assert f"JobId={jobs[0]}" in (out / "scontrol_show_job.txt").read_text()
        run_dir = tmp_path / "shared" / "models" / model / "perf-runs" / jobs[0]
        assert json.loads((run_dir / "manifest.json").read_text())["state"] == "TIMEOUT_WAITING"
        assert not (out / "report.md").exists()  # the graph stopped at the launcher
        assert len(jobs) == 1
    finally:
        for j in jobs:
            slurm.scancel(j)


def test_two_submits_without_out_keep_each_report(local_cluster, tmp_path):
    """``--submit`` without ``--out``: each distinct submission gets its own report directory under
    ./ai4s-reports/ (issue 14: an earlier report always survives); before, both went to
    ./ai4s-reports/job/ and the second replaced the first job's report."""
    model = f"e2eout{uuid.uuid4().hex[:6]}"

    def argv(epochs: str) -> list[str]:
        a = _cmd(tmp_path, model, 1, [*SHORT[:2], "--epochs", epochs, *SHORT[4:]])
        i = a.index("--out")
        return a[:i] + a[i + 2:]

    cp = _run(argv("2"), tmp_path)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    (first,) = sorted((tmp_path / "ai4s-reports").iterdir())
    assert first.name.startswith(f"submit-{model}-")
    before = {p.name: p.read_bytes() for p in first.iterdir() if p.is_file()}
    job1 = json.loads(before["manifest.json"])["jobid"]
    cp = _run(argv("3"), tmp_path)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    dirs = sorted((tmp_path / "ai4s-reports").iterdir())
    assert len(dirs) == 2 and first in dirs
    (second,) = [d for d in dirs if d != first]
    assert json.loads((second / "manifest.json").read_text())["jobid"] != job1
    assert (second / "report.md").exists()
    assert {p.name: p.read_bytes() for p in first.iterdir() if p.is_file()} == before


# ---------------------------------------------------------------- one sbatch per submission
def test_three_concurrent_identical_submits_give_one_job(local_cluster, tmp_path):
    """Three identical ``run --submit`` commands started together (one out dir, one state dir):
    one job. The others are refused by the checkpoint thread's lock (exit 2, one line) or, when
    they start after it finished, find the run complete."""
    model = f"e2etri{uuid.uuid4().hex[:6]}"
    argv = _cmd(tmp_path, model, 1, SHORT)
    env = _env()
    env["AI4S_STATE_DIR"] = str(tmp_path / "state")
    procs = [subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert _jobs_named(f"ai4s-{model}") and len(_jobs_named(f"ai4s-{model}")) == 1, outs
    assert sorted(codes)[0] == 0 and set(codes) <= {0, 2}, (codes, outs)
    for (stdout, _), code in zip(outs, codes):
        last = stdout.strip().splitlines()[-1]
        if code == 2:
            assert last.startswith("STATUS=fail; reason=checkpoint thread ") and "is in use by pid " in last
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [man["jobid"]] == _jobs_named(f"ai4s-{model}") and man["state"] == "COMPLETED"


def _slow_answer_sbatch(bin_dir: Path, flag: Path) -> None:
    """``sbatch`` first on PATH: runs the REAL sbatch (slurmctld accepts the job), records its
    answer in ``flag``, then does not return -- a submission whose answer never reaches us."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    w = bin_dir / "sbatch"
    w.write_text(f'#!/bin/bash\nout=$("{shutil.which("sbatch")}" "$@")\n'
                 f'echo "$out" > "{flag}.tmp" && mv "{flag}.tmp" "{flag}"\nexec sleep 600\n')
    w.chmod(0o755)


def test_kill_during_sbatch_then_resume_gives_one_job(local_cluster, tmp_path):
    model = f"e2eksb{uuid.uuid4().hex[:6]}"
    argv = _cmd(tmp_path, model, 1, SHORT)
    flag = tmp_path / "sbatch-answered"
    _slow_answer_sbatch(tmp_path / "bin", flag)
    env = _env()
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        ended = proc.poll() is not None
        assert flag.is_file(), f"sbatch never answered (ended={ended}): {proc.stdout.read() if ended else ''}"
        os.killpg(proc.pid, signal.SIGKILL)  # ai4s-graph and the sbatch it waits on, mid-submission
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    accepted = flag.read_text().split(";")[0].strip()
    assert _jobs_named(f"ai4s-{model}") == [accepted]  # SLURM has it; we never read the answer
    intent = json.loads((tmp_path / "out" / ".ai4s-graph" / "intent-attempt1.json").read_text())
    assert intent["jobid"] is None and intent["job_name"].startswith(f"ai4s-{model}-")
    cp = _run(argv, tmp_path)  # the resume, with the real sbatch on PATH
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert f"found job {accepted} named {intent['job_name']}" in cp.stdout and "nothing submitted" in cp.stdout
    assert _jobs_named(f"ai4s-{model}") == [accepted]
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert man["jobid"] == accepted and man["state"] == "COMPLETED"


def test_an_intent_record_that_cannot_be_written_submits_nothing(local_cluster, tmp_path):
    """Before: when the submission marker could not be written, every re-run submitted again.
    Now the intent record comes first: when it cannot be written, sbatch never runs."""
    model = f"e2enoi{uuid.uuid4().hex[:6]}"
    (tmp_path / "out" / ".ai4s-graph" / "intent-attempt1.json").mkdir(parents=True)  # its path is a folder
    argv = _cmd(tmp_path, model, 1, SHORT)
    for _ in range(2):
        cp = _run(argv, tmp_path)
        assert cp.returncode == 1, cp.stdout[-3000:] + cp.stderr[-2000:]
        assert "cannot write the intent record" in cp.stdout or "already complete" in cp.stdout
    assert _jobs_named(f"ai4s-{model}", settle_s=3) == []


# ---------------------------------------------------------------- a transient sacct failure
def test_transient_sacct_failure_during_the_wait_is_retried_and_reported(local_cluster, tmp_path):
    """Omnistat PR#142's kind: sacct fails (slurmdbd unreachable: sacct's own error, from a
    slurm.conf copy pointing at a closed port) for the wait's first 2 calls. Before, the wait
    ended with ToolUnavailableError after submitting; now it is retried, the job is analysed, and
    the wait's STATUS line, report.md and manifest.json say 'retried sacct 2 times'."""
    from slurm_faults import broken_conf, calls, failing_first, free_port

    model = f"e2etra{uuid.uuid4().hex[:6]}"
    failing_first(tmp_path / "bin", "sacct", 2, conf=broken_conf(tmp_path / "conf", dbd_port=free_port()))
    env = _env()
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    cp = subprocess.run(_cmd(tmp_path, model, 1, SHORT), cwd=tmp_path, env=env, capture_output=True, text=True,
                        timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    (wait,) = [ln for ln in cp.stdout.splitlines() if ln.startswith("wait_for_job")]
    assert "COMPLETED" in wait and "retried sacct 2 times" in wait and "Connection refused" in wait
    assert calls(tmp_path / "bin", "sacct") > 2
    out = tmp_path / "out"
    assert "retried sacct 2 times" in (out / "report.md").read_text()
    man = json.loads((out / "manifest.json").read_text())
    assert man["state"] == "COMPLETED" and man["slurm_retries"] == {"sacct": 2}
    assert man["jobid_forms"] == [man["jobid"]]  # a plain job: its raw id is itself
