"""The optimizer loop on the local executor (``--executor local``, or auto without a cluster
config): the README command runs as written on this machine; runs land in the same perf-run
layout with a manifest naming this host; a loop killed while a job runs resumes on that job and
never submits it again. Real workload (CPU, the project's own train.py), no SLURM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ai4s_graph import REPO_ROOT
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.levers import catalog as L
from ai4s_graph.tools.slurm.client import ClusterConfig
from ai4s_graph.tools.slurm.executors import LocalExecutor, local_host
from ai4s_graph.tools.slurm.jobscript import JobSpec

pytestmark = [pytest.mark.slow]

ROOT = Path(REPO_ROOT or Path(__file__).resolve().parent.parent)
CATALOG = ROOT / "tools" / "levers" / "catalogs" / "cpu-toy.yaml"


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    for k in ("AI4S_FAULT", "AI4S_CLUSTER_CONFIG", "AI4S_SHARED_DIR"):
        e.pop(k, None)
    return e


def _journal(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "journal.jsonl").read_text().splitlines()] if (d / "journal.jsonl").is_file() else []


def test_readme_command_runs_on_the_local_executor(tmp_path):
    # the README's command, verbatim (relative catalog path from the repository root, as a user runs it)
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "optimize", "--model", "cpu-toy", "--catalog",
                         "tools/levers/catalogs/cpu-toy.yaml", "--iterations", "3", "--loop-root", str(tmp_path / "loops")],
                        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-2000:]
    assert "executor: local (auto: no cluster config)" in cp.stdout
    d = next((tmp_path / "loops").glob("loop-*"))
    recs = _journal(d)
    assert [r["kind"] for r in recs] == ["baseline", "lever", "lever", "lever"]
    assert all(r["executor"] == "local" for r in recs)
    host = local_host()
    assert all(n == [host] for r in recs for n in r["nodes_list"])
    # the planted lesson-23/31 artifact is rejected by the guard, the data-loader lever is not
    by = {r["lever"]: r for r in recs[1:]}
    assert by["iterable_shards_3w"]["decision"] == "rejected-guard"
    assert by["num_workers_2"]["decision"] in ("accepted", "replicate-disagrees", "reverted")
    # the same perf-run layout as on the cluster, with a manifest naming this host
    base_job = recs[0]["job_ids"][0]
    run = tmp_path / "loops" / "shared" / "models" / "cpu-toy" / "perf-runs" / base_job
    man = json.loads((run / "manifest.json").read_text())
    assert man["nodes_list"] == [host] and man["executor"] == "local" and man["state"] == "COMPLETED"
    assert (run / "train.log").is_file() and (run / "run_info.json").is_file()
    assert (d / "loop_report.md").is_file() and (d / "fom_per_iteration.png").is_file()
    text = (d / "loop_report.md").read_text()
    assert "Executor: local" in text and "rejected-guard" in text
    # pinned to the baseline's node from the second run on
    ledger = [json.loads(x) for x in (d / L.SUBMISSIONS).read_text().splitlines()]
    assert ledger[0]["nodelist"] == [] and all(x["nodelist"] == [host] for x in ledger[1:])


def test_kill_while_a_local_job_runs_then_resume_adopts_it(tmp_path):
    data = yaml.safe_load(CATALOG.read_text())
    data["levers"] = [lv for lv in data["levers"] if lv["name"] in ("threads_2", "compile_blocked_example")]
    cat = tmp_path / "toy.yaml"
    cat.write_text(yaml.safe_dump(data, sort_keys=False))
    argv = [sys.executable, "-m", "ai4s_graph.cli", "optimize", "--model", "cpu-toy", "--catalog", str(cat),
            "--iterations", "1", "--executor", "local", "--loop-root", str(tmp_path / "loops")]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed_job = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            dirs = list((tmp_path / "loops").glob("loop-*"))
            if dirs:
                killed_job = L.find_submission(dirs[0], "iter1-sub0")
                if killed_job:
                    break
            time.sleep(0.1)
        assert killed_job, "the lever's job was never submitted"
        time.sleep(1.0)  # the loop is now in `wait` on that job (or just checkpointing the submit)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    d = next((tmp_path / "loops").glob("loop-*"))
    assert [r["iteration"] for r in _journal(d)] == [0]
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "optimize", "--resume", d.name, "--loop-root",
                         str(tmp_path / "loops")], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-2000:]
    assert f"wait: STATUS=ok; reason=job {killed_job} COMPLETED" in cp.stdout
    assert "submitted job" not in cp.stdout  # nothing new was submitted: the lever had one run
    recs = _journal(d)
    assert [r["iteration"] for r in recs] == [0, 1] and recs[1]["job_ids"] == [killed_job]
    ledger = [json.loads(x) for x in (d / L.SUBMISSIONS).read_text().splitlines()]
    assert len({x["key"] for x in ledger}) == len(ledger) == 3
    runs = sorted(p.name for p in (tmp_path / "loops" / "shared" / "models" / "cpu-toy" / "perf-runs").iterdir()
                  if p.is_dir())
    assert runs == sorted(x["job_id"] for x in ledger)  # one run directory per submission, none twice


def test_local_executor_refuses_what_it_cannot_run(tmp_path):
    ex = LocalExecutor(ClusterConfig(shared_dir=str(tmp_path)))
    with pytest.raises(InputError, match="needs its cluster"):
        ex.submit(JobSpec(template="hydragnn", model="hydragnn", script_args=["x.py"]), tmp_path / "jobs")
    with pytest.raises(InputError, match="pinned to node9"):
        ex.submit(JobSpec(template="cpu-toy", sbatch_options={"nodelist": "node9"}), tmp_path / "jobs")
    with pytest.raises(InputError, match="is excluded"):
        ex.submit(JobSpec(template="cpu-toy", exclude=[local_host()]), tmp_path / "jobs")
    assert not any(tmp_path.glob("models/*/perf-runs/*"))  # nothing started


def test_local_job_failure_is_classified_from_its_log(tmp_path):
    # a generic job that prints a missing-library error and exits 127: infrastructure, not the lever
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('python3: error while loading shared libraries: libfoo.so.1: cannot open "
                      "shared object file: No such file or directory')\nsys.exit(127)\n")
    ex = LocalExecutor(ClusterConfig(shared_dir=str(tmp_path / "shared"), python=sys.executable))
    jid, _ = ex.submit(JobSpec(template="generic", model="toy", script_args=[str(script)], profile=False), tmp_path / "jobs")
    from ai4s_graph.tools.slurm import jobs

    end = jobs.finish(ex, jid, ex.run_dir("toy", jid), 120, poll_s=0.2)
    assert end.record.base_state == "FAILED" and end.record.exit_code == "127:0"
    assert end.verdict == "infra" and end.failure.kind == "missing-library" and end.bad_nodes == [local_host()]
    assert end.record.nodelist == [local_host()]
