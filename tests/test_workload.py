"""The workload (python -m ai4s_graph.workloads.train) on CPU: its log parses back with the FOM
parser, the profiler writes a real trace, run_info.json and the telemetry export are right, and
the telemetry sampler pushes rmsjob_info to a real VictoriaMetrics."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time

import pytest
import requests

from ai4s_graph.tools.trainlog import fom

BATCH = re.compile(r"^Batch (\d+): loss ([0-9.eE+-]+) time ([0-9.]+) seconds samples (\d+)$")


def _run(tmp_path, *args, env=None):
    e = {**os.environ, "AI4S_TELEMETRY_INTERVAL": "0.2", **(env or {})}
    e.pop("AI4S_TSDB_URL", None)
    e.pop("SLURM_JOB_ID", None)
    e.pop("SLURMD_NODENAME", None)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(__import__("ai4s_graph").REPO_ROOT), e.get("PYTHONPATH")]))
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.workloads.train", "--out-dir", str(tmp_path), *args],
                        capture_output=True, text=True, env=e, timeout=240)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return cp


def test_gnn_cpu_profiled_run(tmp_path):
    cp = _run(tmp_path, "--model", "gnn", "--epochs", "2", "--steps-per-epoch", "6", "--batch-size", "2",
              "--jobid", "5150", "--write-manifest", "--threads", "1", env={"AI4S_PROFILE": "1"})
    lines = cp.stdout.splitlines()
    batches = [BATCH.match(ln) for ln in lines if ln.startswith("Batch ")]
    assert len(batches) == 12 and all(batches)
    assert [int(m.group(4)) for m in batches] == [2] * 12
    assert lines.count("Epoch 0 completed") == 1 and lines.count("Epoch 1 completed") == 1
    (tmp_path / "train.log").write_text(cp.stdout)
    res = fom.parse_log(tmp_path / "train.log", global_batch_size=2)
    assert res.n_steps == 12 and res.n_epochs == 2 and res.batches_per_epoch == 6
    assert res.steady_step_time_s and res.steady_step_time_s > 0
    # the profiler: 3 steady-state steps in a real kineto trace
    trace = json.loads(gzip.decompress((tmp_path / "traces" / "trace_rank0.json.gz").read_bytes()))
    steps = {e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    assert len(steps) == 3 and min(int(s.split("#")[1]) for s in steps) >= 3  # warm-up skipped
    assert any(e.get("name") == "aten::index_add_" for e in trace["traceEvents"])  # message passing
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["model"] == "gnn" and info["precision"] == "fp32" and info["global_batch_size"] == 2
    assert info["steps"] == 12 and info["num_workers"] == 0 and info["device"] == "cpu"
    assert info["hbm_reserved_bytes"] is None and info["peak_rss_bytes"] > 50_000_000
    assert info["torch"].startswith("2.") and info["checkpoint_saved"] is False
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["jobid"] == "5150" and man["state"] == "COMPLETED" and man["nodes_list"]
    assert man["artifacts"]["traces"] == ["traces/trace_rank0.json.gz"]
    # telemetry: node_exporter names from /proc plus rmsjob_info for the job window
    series = [json.loads(ln) for ln in (tmp_path / "telemetry" / "export.jsonl").read_text().splitlines()]
    names = {s["metric"]["__name__"] for s in series}
    assert {"node_cpu_seconds_total", "node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes",
            "node_load1", "rmsjob_info"} <= names
    rms = next(s for s in series if s["metric"]["__name__"] == "rmsjob_info")
    assert rms["metric"]["jobid"] == "5150" and set(rms["values"]) == {1.0} and len(rms["values"]) >= 3
    ts = rms["timestamps"]
    assert ts == sorted(ts) and ts[0] / 1000 <= info["start_unix"] + 5 and ts[-1] / 1000 >= info["end_unix"] - 1
    idle = next(s for s in series if s["metric"]["__name__"] == "node_cpu_seconds_total"
                and s["metric"]["mode"] == "idle")
    assert idle["values"] == sorted(idle["values"])  # a counter


def test_iterable_dataset_with_workers_realizes_partial_batches_edm_log(tmp_path):
    """lesson 23/31: more workers -> each worker ends on a partial batch."""
    cp = _run(tmp_path, "--model", "mlp", "--epochs", "2", "--steps-per-epoch", "5", "--batch-size", "8",
              "--num-workers", "3", "--dataset", "iterable", "--log-format", "edm", "--no-telemetry")
    steps = re.findall(r"^epoch: (\d+) batch_idx (\d+) world_size 1 loss tensor\(([0-9.]+), device='cpu'\)$",
                       cp.stdout, re.M)
    tics = re.findall(r"^my rank 0\. tic4-tic1 in ([0-9.]+) seconds$", cp.stdout, re.M)
    # 40 samples / 3 workers = 13 each -> batches 8 + 5 per worker -> 6 steps an epoch
    assert len(steps) == 12 and len(tics) == 12
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["steps"] == 12 and info["max_batches_per_epoch"] == 6
    assert info["realized_batch_mean"] == pytest.approx(6.5) and info["partial_step_fraction"] == pytest.approx(0.5)
    (tmp_path / "train.log").write_text(cp.stdout)
    assert fom.parse_log(tmp_path / "train.log", global_batch_size=8).n_steps == 12


@pytest.mark.vm
def test_sampler_pushes_rmsjob_info_to_victoriametrics(vm_server, tmp_path, monkeypatch):
    from ai4s_graph.workloads.telemetry import Sampler

    monkeypatch.setenv("SLURMD_NODENAME", "node7")
    s = Sampler(tmp_path, "777", interval_s=0.1, tsdb_url=vm_server.url, flush_every_s=0.3)
    s.start()
    time.sleep(1.0)
    path = s.stop()
    assert s.push_errors == 0 and s.pushed_samples > 0
    vm_server.flush()
    # /api/v1/export without `end` misses the newest second of samples on VictoriaMetrics 1.79
    r = requests.get(vm_server.url + "/api/v1/export",
                     params={"match[]": 'rmsjob_info{jobid="777"}', "end": time.time() + 3600}, timeout=10)
    got = [json.loads(ln) for ln in r.text.splitlines() if ln.strip()]
    assert len(got) == 1 and got[0]["metric"]["instance"] == "node7"
    local = next(json.loads(ln) for ln in path.read_text().splitlines() if '"rmsjob_info"' in ln)
    assert set(got[0]["timestamps"]) <= set(local["timestamps"]) and len(got[0]["timestamps"]) >= 5
    total = sum(len(json.loads(ln)["values"]) for ln in path.read_text().splitlines())
    assert s.pushed_samples == total  # every sample pushed exactly once
