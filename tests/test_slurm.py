"""tools/slurm against the real local SLURM (scripts/local-cluster.sh): real jobs, real sacct."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ai4s_graph.tools.slurm import client as slurm
from ai4s_graph.tools.errors import InputError, ToolUnavailableError


def _script(tmp_path: Path, name: str, body: str, nodes: int = 1) -> Path:
    p = tmp_path / name
    p.write_text(f"#!/bin/bash\n#SBATCH --nodes={nodes}\n#SBATCH --time=00:02:00\n"
                 f"#SBATCH --output={tmp_path}/{name}-%j.out\n{body}\n")
    return p


# ---------------------------------------------------------------- no daemons needed
def test_parse_parsable_plain_and_cluster_suffix():
    assert slurm.parse_parsable("123\n") == "123"
    assert slurm.parse_parsable("4567;testcluster\n") == "4567"
    with pytest.raises(ToolUnavailableError, match="no job id"):
        slurm.parse_parsable("sbatch: error: Batch job submission failed\n")


def test_bad_job_ids_are_refused_before_any_command():
    for bad in ("1;rm -rf /", "$(id)", "", "12 13"):
        with pytest.raises(InputError, match="not a SLURM job id"):
            slurm.sacct(bad)


def test_tools_missing_raise_tool_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no sbatch, no sacct
    script = _script(tmp_path, "x.sh", "true")
    with pytest.raises(ToolUnavailableError, match="sbatch is not installed"):
        slurm.sbatch(script)
    with pytest.raises(ToolUnavailableError, match="sacct is not installed"):
        slurm.sacct("1")


def test_cluster_config_yaml(tmp_path):
    good = tmp_path / "c.yaml"
    good.write_text("partition: gpu\naccount: proj42\nshared_dir: /lustre/x\nomnistat: true\n")
    cfg = slurm.load_cluster_config(good)
    assert (cfg.partition, cfg.account, cfg.shared_dir, cfg.omnistat) == ("gpu", "proj42", "/lustre/x", True)
    bad = tmp_path / "bad.yaml"
    bad.write_text("partition: 'gpu;rm'\nshared_dir: /x\n")
    with pytest.raises(InputError, match="partition"):
        slurm.load_cluster_config(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("partition: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        slurm.load_cluster_config(broken)
    with pytest.raises(InputError, match="does not exist"):
        slurm.load_cluster_config(tmp_path / "nope.yaml")


# ---------------------------------------------------------------- the real cluster
@pytest.mark.slurm
def test_two_node_job_completes_and_nodelist_is_expanded(local_cluster, tmp_path):
    jid = slurm.sbatch(_script(tmp_path, "two.sh", 'srun bash -c \'echo "on $SLURMD_NODENAME"\'', nodes=2))
    assert jid.isdigit()
    rec = slurm.wait_for_terminal(jid, timeout_s=60, poll_s=0.3)
    assert rec.state == "COMPLETED" and rec.exit_code == "0:0"
    assert rec.nodelist == ["node1", "node2"]
    assert rec.start is not None and rec.end is not None and rec.end >= rec.start
    out = (tmp_path / f"two.sh-{jid}.out").read_text()
    assert "on node1" in out and "on node2" in out
    info = slurm.scontrol_show_job(jid)
    assert info["JobId"] == jid and info["JobState"] == "COMPLETED" and info["NumNodes"] == "2"


@pytest.mark.slurm
def test_exit_42_is_failed_42(local_cluster, tmp_path):
    jid = slurm.sbatch(_script(tmp_path, "bad.sh", "exit 42"))
    rec = slurm.wait_for_terminal(jid, timeout_s=60, poll_s=0.3)
    assert rec.state == "FAILED" and rec.exit_code == "42:0" and rec.exit_status == 42
    assert len(rec.nodelist) == 1 and rec.nodelist[0] in ("node1", "node2")


@pytest.mark.slurm
def test_exclude_puts_the_job_on_the_other_node(local_cluster, tmp_path):
    jid = slurm.sbatch(_script(tmp_path, "ex.sh", "true"), exclude=["node1"])
    rec = slurm.wait_for_terminal(jid, timeout_s=60, poll_s=0.3)
    assert rec.state == "COMPLETED" and rec.nodelist == ["node2"]


@pytest.mark.slurm
def test_wait_bound_raises_wait_timeout_with_scontrol(local_cluster, tmp_path):
    jid = slurm.sbatch(_script(tmp_path, "long.sh", "sleep 60"))
    try:
        with pytest.raises(slurm.WaitTimeout) as ei:
            slurm.wait_for_terminal(jid, timeout_s=2.0, poll_s=0.3)
        e = ei.value
        assert e.jobid == jid and e.timeout_s == 2.0
        assert f"JobId={jid}" in e.scontrol
        assert e.last is None or e.last.state in ("PENDING", "RUNNING")
    finally:
        slurm.scancel(jid)
    rec = slurm.wait_for_terminal(jid, timeout_s=60, poll_s=0.3)
    assert rec.base_state == "CANCELLED"


@pytest.mark.slurm
def test_unknown_job_id(local_cluster):
    assert slurm.sacct("987654321") is None
    with pytest.raises(InputError, match="unknown job id"):
        slurm.scontrol_show_job("987654321")


@pytest.mark.slurm
def test_srun_probe_runs_on_one_node(local_cluster):
    cfg = slurm.ClusterConfig(partition="debug", shared_dir="/tmp")
    cp = slurm.srun_probe(["bash", "-c", "echo $SLURM_NNODES $SLURMD_NODENAME"], cfg)
    assert cp.returncode == 0, cp.stderr
    nnodes, name = cp.stdout.split()
    assert nnodes == "1" and name in ("node1", "node2")


@pytest.mark.slurm
def test_expand_hostlist_uses_scontrol(local_cluster):
    assert slurm.expand_hostlist("node[1-2]") == ["node1", "node2"]
    assert slurm.expand_hostlist("node[1-3,7],gpu01") == ["node1", "node2", "node3", "node7", "gpu01"]
    assert slurm.expand_hostlist("None assigned") == []
