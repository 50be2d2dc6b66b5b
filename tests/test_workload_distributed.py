"""The workload on CPU with 2 ranks (torchrun, gloo): every rank writes its own trace with its
``distributedInfo``, rank 0 the log and the manifest; DDP and FSDP; the injected faults record
themselves (the same code path the GPU cases of bench/accuracy ran)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

import ai4s_graph

TRAIN = str(ai4s_graph.REPO_ROOT / "workloads" / "train.py")


def _env(**extra):
    e = {**os.environ, "AI4S_PROFILE": "1", "AI4S_TELEMETRY_INTERVAL": "0.2", "OMP_NUM_THREADS": "1", **extra}
    for k in ("AI4S_TSDB_URL", "SLURM_JOB_ID", "SLURMD_NODENAME", "RANK", "WORLD_SIZE", "MASTER_ADDR"):
        e.pop(k, None)
    return e


def _torchrun(tmp_path, *args):
    # --standalone: the rendezvous takes a free port itself, so two suites side by side never collide
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", TRAIN,
           "--out-dir", str(tmp_path), "--epochs", "1", "--steps-per-epoch", "8", "--batch-size", "2",
           "--write-manifest", *args]
    cp = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return cp


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_write_their_own_traces(tmp_path, parallel):
    truth = {"cause": "straggler", "class": None, "rank": 1, "notes": "test"}
    cp = _torchrun(tmp_path, "--model", "vit", "--parallel", parallel, "--jobid", "777", "--fault", "straggler",
                   "--straggler-matmuls", "2", "--straggler-dim", "64", "--truth", json.dumps(truth))
    batches = [ln for ln in cp.stdout.splitlines() if ln.startswith("Batch ")]
    assert len(batches) == 8 and all(ln.endswith("samples 4") for ln in batches)  # rank 0 only, 2 x 2 samples
    for r in (0, 1):
        t = json.loads(gzip.decompress((tmp_path / "traces" / f"trace_rank{r}.json.gz").read_bytes()))
        assert t["distributedInfo"]["rank"] == r and t["distributedInfo"]["world_size"] == 2
        steps = {e["name"] for e in t["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
        assert len(steps) == 3
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["ranks"] == 2 and man["parallel"] == parallel and man["fault"] == "straggler"
    assert man["global_batch_size"] == 4 and man["batch_size_per_rank"] == 2
    assert man["artifacts"]["traces"] == ["traces/trace_rank0.json.gz", "traces/trace_rank1.json.gz"]
    assert json.loads((tmp_path / "truth.json").read_text()) == truth
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["straggler"] == {"rank": 1, "matmuls": 2, "dim": 64} and info["world_size"] == 2


def test_host_sync_fault_counts_its_syncs(tmp_path):
    cmd = [sys.executable, TRAIN, "--model", "wide", "--hidden", "16", "--depth", "2", "--batch-size", "2",
           "--epochs", "1", "--steps-per-epoch", "3", "--fault", "host-sync", "--out-dir", str(tmp_path),
           "--no-telemetry"]
    cp = subprocess.run(cmd, capture_output=True, text=True, env=_env(AI4S_PROFILE="0"), timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    info = json.loads((tmp_path / "run_info.json").read_text())
    # wide, depth 2: 4 Linear layers -> 4 forward .item() + 8 parameters -> 8 grad-norm .item() per step
    assert info["fault"] == "host-sync" and info["host_syncs"] == 3 * (4 + 8)
