"""Multi-rank job scripts on the real local SLURM (issue 15): the cpu-toy template launches one
task per rank (2 nodes x 2 tasks), the rendezvous (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK)
comes from the SLURM environment, gloo connects the 4 CPU ranks, each rank writes its own trace,
and ``ai4s-graph run --submit`` goes submit -> wait -> per-rank analysis -> report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.tools.slurm import client as slurm
from ai4s_graph.tools.slurm import jobscript

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SHORT = ["--model", "mlp", "--epochs", "2", "--steps-per-epoch", "10", "--batch-size", "8"]


def test_gpu_job_gets_one_task_per_gpu_and_rank_env():
    cl = slurm.ClusterConfig(shared_dir="/tmp/x")
    text = jobscript.render(jobscript.JobSpec(template="generic", nodes=2, gpus_per_node=4, script_args=["t.py"]), cl)
    assert "#SBATCH --ntasks-per-node=4\n" in text and "#SBATCH --gpus-per-node=4\n" in text
    assert 'srun --ntasks-per-node=4 --kill-on-bad-exit=1 \\\n    "$RANK_ENV" python3 -u t.py' in text
    assert 'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS"' in text
    assert "export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 20000 ))" in text
    cpu = jobscript.render(jobscript.JobSpec(template="cpu-toy", nodes=2), cl)
    assert "#SBATCH --ntasks-per-node=1\n" in cpu  # no GPUs: one task per node unless asked
    two = jobscript.render(jobscript.JobSpec(template="cpu-toy", nodes=2, ntasks_per_node=2), cl)
    assert "#SBATCH --ntasks-per-node=2\n" in two and 'srun --ntasks-per-node=2 --kill-on-bad-exit=1' in two


def test_four_cpu_ranks_over_gloo_submit_wait_analyse_report(local_cluster, tmp_path):
    model = f"mr4{uuid.uuid4().hex[:6]}"
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(f'partition: "debug"\nshared_dir: "{tmp_path / "shared"}"\n')
    argv = [sys.executable, "-m", "ai4s_graph.cli", "run", "--submit", "--workload", "cpu-toy", "--app-model", model,
            "--nodes", "2", "--ntasks-per-node", "2", "--cluster-config", str(cfg), "--env", "OMP_NUM_THREADS=1",
            "--wait-timeout", "240", "--out", str(tmp_path / "out"), "--llm", "none"] + [f"--script-arg={a}" for a in SHORT]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("ANTHROPIC_API_KEY", None)
    cp = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420)
    out = tmp_path / "out"
    assert (out / "report.md").exists(), cp.stdout[-3000:] + cp.stderr[-2000:]
    man = json.loads((out / "manifest.json").read_text())
    jid = man["jobid"]
    assert man["state"] == "COMPLETED" and man["nodes_list"] == ["node1", "node2"] and man["world_size"] == 4
    run = tmp_path / "shared" / "models" / model / "perf-runs" / jid
    assert sorted(p.name for p in (run / "traces").iterdir()) == [f"trace_rank{r}.json.gz" for r in range(4)]
    slurm_out = (run.parent / f"slurm-{jid}.out").read_text()
    assert f"rendezvous MASTER_ADDR=127.0.0.1 MASTER_PORT={20000 + int(jid) % 20000} WORLD_SIZE=4 tasks_per_node=2" \
        in slurm_out
    # per-rank analysis: one trace_rank node per rank, then the report
    for r in range(4):
        assert f"rank {r}:" in cp.stdout
    rep = json.loads((out / "report.json").read_text())
    assert rep["nodes_list"] == ["node1", "node2"]
    # sacct knows the job: the telemetry verifier took its window from sacct, not the manifest
    tel = [c for c in rep["claims"] if c["claim"]["metric"] == "telemetry.cpu_util.avg"]
    assert tel and tel[0]["verdict"] == "confirmed" and f"window from sacct (job {jid}: COMPLETED)" in tel[0]["method"]
    rec = slurm.sacct(jid)
    assert rec.state == "COMPLETED" and rec.steps.get("batch") == "COMPLETED"
    assert sorted(k for k in rec.steps if k.isdigit())  # the probe step and the 4-task training step
