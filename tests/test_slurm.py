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
    rec = slurm.wait_for_terminal(jid, timeout_s=300, poll_s=0.3)
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
    rec = slurm.wait_for_terminal(jid, timeout_s=300, poll_s=0.3)
    assert rec.state == "FAILED" and rec.exit_code == "42:0" and rec.exit_status == 42
    assert len(rec.nodelist) == 1 and rec.nodelist[0] in ("node1", "node2")


@pytest.mark.slurm
def test_exclude_puts_the_job_on_the_other_node(local_cluster, tmp_path):
    jid = slurm.sbatch(_script(tmp_path, "ex.sh", "true"), exclude=["node1"])
    rec = slurm.wait_for_terminal(jid, timeout_s=300, poll_s=0.3)
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
    rec = slurm.wait_for_terminal(jid, timeout_s=300, poll_s=0.3)
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
def test_expand_hostlist_on_the_cluster(local_cluster):
    assert slurm.expand_hostlist("node[1-2]") == ["node1", "node2"]
    assert slurm.expand_hostlist("node[1-3,7],gpu01") == ["node1", "node2", "node3", "node7", "gpu01"]
    assert slurm.expand_hostlist("None assigned") == []


# ---------------------------------------------------------------- hostlists, job ids, job states
def test_expand_hostlist_without_slurm(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: python-hostlist does it
    assert slurm.expand_hostlist("gpu[01-03,07]") == ["gpu01", "gpu02", "gpu03", "gpu07"]
    assert slurm.expand_hostlist("node[1-3,7],gpu01") == ["node1", "node2", "node3", "node7", "gpu01"]
    assert slurm.expand_hostlist("rack[1-2]-n[08-09]") == ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]
    assert slurm.expand_hostlist("None assigned") == [] and slurm.expand_hostlist("") == []
    with pytest.raises(InputError, match="not a SLURM hostlist"):
        slurm.expand_hostlist("gpu[03-01")


def test_manifest_expands_compressed_nodes_list():
    from ai4s_graph.state import Manifest

    assert Manifest(jobid="91001", nodes_list="gpu[01-03,07]").nodes_list == ["gpu01", "gpu02", "gpu03", "gpu07"]
    assert Manifest(jobid="1", nodes_list=["node[1-2]", "gpu7"]).nodes_list == ["node1", "node2", "gpu7"]


def test_job_ids_follow_slurm_syntax():
    for good in ("123", "123_4", "123_[1-3]", "123_[1,4-5%2]", "123+0"):
        assert slurm.check_jobid(good) == good
    for bad in ("91001; rm -rf /", "12a", "123_", "123+", "1 2", "$(id)", "123_[1-3", "-1"):
        with pytest.raises(InputError) as ei:
            slurm.check_jobid(bad)
        assert "\n" not in str(ei.value) and "not a SLURM job id" in str(ei.value)


# sacct -P -n -D -o JobID,State,ExitCode,NodeList,Start,End,Elapsed,AllocNodes, built by hand after
# the real rows of the local cluster (requeue, array, het job, scancel) for the states it cannot make
PREEMPTED_THEN_COMPLETED = """\
500|PREEMPTED|0:0|gpu[01-02]|2026-11-30T08:00:00|2026-11-30T08:10:00|00:10:00|2
500.batch|CANCELLED|0:15|gpu01|2026-11-30T08:00:00|2026-11-30T08:10:00|00:10:00|1
500|COMPLETED|0:0|gpu[03-04]|2026-11-30T08:12:00|2026-11-30T08:30:00|00:18:00|2
500.batch|COMPLETED|0:0|gpu03|2026-11-30T08:12:00|2026-11-30T08:30:00|00:18:00|1
"""
NODE_FAIL = "501|NODE_FAIL|0:0|gpu07|2026-11-30T08:00:00|2026-11-30T08:01:00|00:01:00|1\n"
OOM = """\
502|OUT_OF_MEMORY|0:125|gpu01|2026-11-30T08:00:00|2026-11-30T08:02:00|00:02:00|1
502.batch|OUT_OF_MEMORY|0:125|gpu01|2026-11-30T08:00:00|2026-11-30T08:02:00|00:02:00|1
"""
OOM_STEP_ONLY = """\
503|COMPLETED|0:0|gpu01|2026-11-30T08:00:00|2026-11-30T08:02:00|00:02:00|1
503.batch|COMPLETED|0:0|gpu01|2026-11-30T08:00:00|2026-11-30T08:02:00|00:02:00|1
503.0|OUT_OF_MEMORY|0:125|gpu01|2026-11-30T08:00:01|2026-11-30T08:01:00|00:00:59|1
"""
HET = """\
504+0|COMPLETED|0:0|node1|2026-11-30T08:00:00|2026-11-30T08:00:05|00:00:05|1
504+0.batch|COMPLETED|0:0|node1|2026-11-30T08:00:00|2026-11-30T08:00:05|00:00:05|1
504+1|NODE_FAIL|0:0|node2|2026-11-30T08:00:00|2026-11-30T08:00:09|00:00:09|1
"""
ARRAY = """\
505_1|COMPLETED|0:0|node1|2026-11-30T08:00:00|2026-11-30T08:00:05|00:00:05|1
505_2|FAILED|1:0|node2|2026-11-30T08:00:00|2026-11-30T08:00:06|00:00:06|1
505_[3-4]|PENDING|0:0|None assigned|Unknown|Unknown|00:00:00|1
"""


def test_job_states_from_all_sacct_rows():
    r = slurm.job_record(slurm.parse_sacct(PREEMPTED_THEN_COMPLETED), "500")
    assert r.state == "COMPLETED" and r.is_terminal and r.attempts == ["PREEMPTED"]
    assert r.nodelist == ["gpu03", "gpu04"] and r.steps == {"batch": "COMPLETED"}
    assert r.end - r.start == 18 * 60
    assert slurm.job_record(slurm.parse_sacct(NODE_FAIL), "501").state == "NODE_FAIL"
    oom = slurm.job_record(slurm.parse_sacct(OOM), "502")
    assert oom.state == "OUT_OF_MEMORY" and oom.is_terminal and oom.exit_code == "0:125"
    step = slurm.job_record(slurm.parse_sacct(OOM_STEP_ONLY), "503")
    assert step.state == "COMPLETED" and step.step_problems == {"0": "OUT_OF_MEMORY"}
    het = slurm.job_record(slurm.parse_sacct(HET), "504")
    assert het.components == ["504+0", "504+1"] and het.state == "NODE_FAIL" and het.nodelist == ["node1", "node2"]
    assert slurm.job_record(slurm.parse_sacct(HET), "504+0").state == "COMPLETED"
    arr = slurm.parse_sacct(ARRAY)
    whole = slurm.job_record(arr, "505")
    assert whole.state == "PENDING" and not whole.is_terminal  # tasks 3-4 have not run
    two = slurm.job_record(arr, "505_[1-2]")
    assert two.components == ["505_1", "505_2"] and two.state == "FAILED" and two.exit_code == "1:0"
    assert slurm.job_record(arr, "505_2").state == "FAILED"
    assert slurm.job_record(arr, "999") is None
    cancelled = slurm.job_record(slurm.parse_sacct(
        "506|CANCELLED by 0|0:0|None assigned|2026-11-30T08:00:00|2026-11-30T08:00:00|00:00:00|0\n"), "506")
    assert cancelled.state == "CANCELLED by 0" and cancelled.base_state == "CANCELLED" and cancelled.is_terminal


@pytest.mark.slurm
def test_hostlist_agrees_with_scontrol(local_cluster):
    for hl in ("node[1-2]", "gpu[01-03,07]", "node[1-3,7],gpu01", "rack[1-2]-n[08-09]", "a1,b[2-3]"):
        assert slurm.expand_hostlist(hl) == slurm.scontrol_hostnames(hl), hl


@pytest.mark.slurm
def test_requeued_job_is_waited_on_until_its_second_run_completes(local_cluster, tmp_path):
    import subprocess
    import time

    jid = slurm.sbatch(_script(tmp_path, "rq.sh", "sleep 3"), extra_args=["--requeue"])
    deadline = time.monotonic() + 60
    while (slurm.sacct(jid) is None or slurm.sacct(jid).state != "RUNNING") and time.monotonic() < deadline:
        time.sleep(0.3)
    subprocess.run(["scontrol", "requeue", jid], check=True)
    time.sleep(1.0)
    # SLURM holds a requeued job back (BeginTime); release it now
    subprocess.run(["scontrol", "update", f"jobid={jid}", "StartTime=now"], check=True)
    rec = slurm.wait_for_terminal(jid, timeout_s=300, poll_s=0.5)
    assert rec.state == "COMPLETED" and rec.attempts == ["REQUEUED"] and rec.steps == {"batch": "COMPLETED"}


@pytest.mark.slurm
def test_array_het_and_cancelled_jobs_on_the_cluster(local_cluster, tmp_path):
    arr = slurm.sbatch(_script(tmp_path, "arr.sh", 'test "$SLURM_ARRAY_TASK_ID" != 2'), extra_args=["--array=1-3"])
    het = slurm.sbatch(_script(tmp_path, "het.sh", "srun --het-group=0,1 true"), extra_args=["-n1", ":", "-n1"])
    long = slurm.sbatch(_script(tmp_path, "long.sh", "sleep 60"))
    slurm.scancel(long)
    a = slurm.wait_for_terminal(arr, timeout_s=300, poll_s=0.5)
    assert a.components == [f"{arr}_1", f"{arr}_2", f"{arr}_3"] and a.state == "FAILED" and a.exit_code == "1:0", a
    assert slurm.wait_for_terminal(f"{arr}_[1,3]", timeout_s=120).state == "COMPLETED"
    h = slurm.wait_for_terminal(het, timeout_s=300, poll_s=0.5)
    assert h.components == [f"{het}+0", f"{het}+1"] and h.state == "COMPLETED" and sorted(h.nodelist) == ["node1", "node2"]
    c = slurm.wait_for_terminal(long, timeout_s=300, poll_s=0.5)
    assert c.base_state == "CANCELLED" and c.state.startswith("CANCELLED by ")
