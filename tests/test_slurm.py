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
    info = slurm.queue_job(jid)  # slurmctld's own record (squeue), not a regex over scontrol's text
    assert info["JobID"] == jid and info["State"] == "COMPLETED" and info["NumNodes"] == "2"
    assert slurm.expand_hostlist(info["NodeList"]) == ["node1", "node2"]


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
    assert slurm.queue_job("987654321") is None and not slurm.in_queue("987654321")
    assert slurm.scontrol_show_job_text("987654321") == ""


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
    for good in ("123", "123_4", "123_[1-3]", "123_[1,4-5%2]", "123_[0-15:4]", "123+0", "4294967293",
                 "7_4000000"):
        assert slurm.check_jobid(good) == good
    for bad in ("91001; rm -rf /", "12a", "123_", "123+", "1 2", "$(id)", "123_[1-3", "-1", "../../x",
                "123\nSTATUS=ok; reason=forged", "9" * 5000, "4294967294", "0", "123_4+0", "123_[,]",
                "7_4000001", "7_[1-4000001]", "1\x1b[31m", "123+4294967294"):
        with pytest.raises(InputError) as ei:
            slurm.check_jobid(bad)
        msg = str(ei.value)
        assert "\n" not in msg and "\x1b" not in msg and "not a SLURM job id" in msg and len(msg) < 200, msg


# sacct -P -n -D -o JobID,JobIDRaw,State,ExitCode,NodeList,Start,End,ElapsedRaw,AllocNodes,JobName
# (SLURM_TIME_FORMAT=%s, written here with '|' for the unit separator), built by hand after the
# real rows of the local cluster (requeue, array, het job, scancel) for the states it cannot make
T0 = 1796140800  # 2026-11-30T08:00:00Z


def _rows(text: str) -> list[dict[str, str]]:
    return slurm.parse_sacct(text.replace("|", slurm.FIELD_SEP))


PREEMPTED_THEN_COMPLETED = f"""\
500|500|PREEMPTED|0:0|gpu[01-02]|{T0}|{T0 + 600}|600|2|train
500.batch|500.batch|CANCELLED|0:15|gpu01|{T0}|{T0 + 600}|600|1|batch
500|500|COMPLETED|0:0|gpu[03-04]|{T0 + 720}|{T0 + 1800}|1080|2|train
500.batch|500.batch|COMPLETED|0:0|gpu03|{T0 + 720}|{T0 + 1800}|1080|1|batch
"""
NODE_FAIL = f"501|501|NODE_FAIL|0:0|gpu07|{T0}|{T0 + 60}|60|1|train\n"
OOM = f"""\
502|502|OUT_OF_MEMORY|0:125|gpu01|{T0}|{T0 + 120}|120|1|train
502.batch|502.batch|OUT_OF_MEMORY|0:125|gpu01|{T0}|{T0 + 120}|120|1|batch
"""
OOM_STEP_ONLY = f"""\
503|503|COMPLETED|0:0|gpu01|{T0}|{T0 + 120}|120|1|train
503.batch|503.batch|COMPLETED|0:0|gpu01|{T0}|{T0 + 120}|120|1|batch
503.0|503.0|OUT_OF_MEMORY|0:125|gpu01|{T0 + 1}|{T0 + 60}|59|1|python
"""
# het job 504: components 504+0 (raw 504) and 504+1 (raw 505, the next free id)
HET = f"""\
504+0|504|COMPLETED|0:0|node1|{T0}|{T0 + 5}|5|1|het
504+0.batch|504.batch|COMPLETED|0:0|node1|{T0}|{T0 + 5}|5|1|batch
504+1|505|NODE_FAIL|0:0|node2|{T0}|{T0 + 9}|9|1|het
"""
# array 506: raw ids as the local cluster gave them (51_1 -> 54, 51_2 -> 55, 51_3 -> 51): the last
# task takes the array's own id, the others whatever id was free
ARRAY = f"""\
506_1|509|COMPLETED|0:0|node1|{T0}|{T0 + 5}|5|1|sweep
506_1.batch|509.batch|COMPLETED|0:0|node1|{T0}|{T0 + 5}|5|1|batch
506_2|510|FAILED|1:0|node2|{T0}|{T0 + 6}|6|1|sweep
506_[3-4]|506|PENDING|0:0|None assigned|Unknown|Unknown|0|1|sweep
"""
def test_job_states_from_all_sacct_rows():
    r = slurm.job_record(_rows(PREEMPTED_THEN_COMPLETED), "500")
    assert r.state == "COMPLETED" and r.is_terminal and r.attempts == ["PREEMPTED"]
    assert r.nodelist == ["gpu03", "gpu04"] and r.steps == {"batch": "COMPLETED"}
    assert r.end - r.start == 18 * 60 and r.elapsed_s == 1080 and r.name == "train"
    assert slurm.job_record(_rows(NODE_FAIL), "501").state == "NODE_FAIL"
    oom = slurm.job_record(_rows(OOM), "502")
    assert oom.state == "OUT_OF_MEMORY" and oom.is_terminal and oom.exit_code == "0:125"
    step = slurm.job_record(_rows(OOM_STEP_ONLY), "503")
    assert step.state == "COMPLETED" and step.step_problems == {"0": "OUT_OF_MEMORY"}
    het = slurm.job_record(_rows(HET), "504")
    assert het.components == ["504+0", "504+1"] and het.state == "NODE_FAIL" and het.nodelist == ["node1", "node2"]
    assert slurm.job_record(_rows(HET), "504+0").state == "COMPLETED"
    arr = _rows(ARRAY)
    whole = slurm.job_record(arr, "506")
    assert whole.state == "PENDING" and not whole.is_terminal  # tasks 3-4 have not run
    two = slurm.job_record(arr, "506_[1-2]")
    assert two.components == ["506_1", "506_2"] and two.state == "FAILED" and two.exit_code == "1:0"
    assert slurm.job_record(arr, "506_2").state == "FAILED"
    assert slurm.job_record(arr, "999") is None
    cancelled = slurm.job_record(_rows(f"507|507|CANCELLED by 0|0:0|None assigned|{T0}|{T0}|0|0|x\n"), "507")
    assert cancelled.state == "CANCELLED by 0" and cancelled.base_state == "CANCELLED" and cancelled.is_terminal
    assert cancelled.start == T0 and cancelled.nodelist == []


def test_array_tasks_and_het_components_are_found_by_their_raw_ids():
    """snakemake PR#2036: ``sacct -j 12346`` shows array task ``12345_7``; matching JobID alone
    found no row and the wait ran to its timeout. Each member: the raw id of an array task, of a
    het component, of the task that holds the array's own id, and a raw id nothing has."""
    arr, het = _rows(ARRAY), _rows(HET)
    t1 = slurm.job_record(arr, "509")  # raw id of 506_1
    assert (t1.jobid, t1.display_id, t1.state, t1.nodelist, t1.steps) == ("509", "506_1", "COMPLETED", ["node1"],
                                                                          {"batch": "COMPLETED"})
    assert t1.is_terminal and t1.components == [] and t1.raw_ids == ["509"]
    t2 = slurm.job_record(arr, "510")  # raw id of 506_2, FAILED exit 1
    assert (t2.display_id, t2.state, t2.exit_code) == ("506_2", "FAILED", "1:0")
    h1 = slurm.job_record(het, "505")  # raw id of 504+1
    assert (h1.display_id, h1.state, h1.nodelist) == ("504+1", "NODE_FAIL", ["node2"])
    # "506" is both the array and the raw id of its last task: SLURM's -j 506 means the array
    assert slurm.job_record(arr, "506").components == ["506_1", "506_2", "506_[3-4]"]
    assert slurm.job_record(arr, "511") is None and slurm.job_record(het, "506") is None


def test_id_forms_list_every_id_a_job_is_known_by():
    """What rmsjob_info{jobid} may carry: $SLURM_JOB_ID (the raw id, Omnistat file-based mode) or
    squeue's JobID (123_4, squeue mode). Counted by hand from the rows above."""
    arr, het = _rows(ARRAY), _rows(HET)
    assert slurm.job_record(het, "504").id_forms == ["504", "505", "504+0", "504+1"]
    assert slurm.job_record(het, "505").id_forms == ["505", "504+1"]
    assert slurm.job_record(arr, "509").id_forms == ["509", "506_1"]  # not "506": that names task 3
    assert slurm.job_record(arr, "506_[1-2]").id_forms == ["509", "510", "506_1", "506_2", "506_[1-2]"]
    assert slurm.job_record(_rows(NODE_FAIL), "501").id_forms == ["501"]


def test_one_parser_keeps_free_text_in_its_column():
    """The job name is the last field: a '|' or blanks in it cannot shift a column (the hand-split
    ``sacct -P`` output did)."""
    sep = slurm.FIELD_SEP
    line = sep.join(["600", "600", "COMPLETED", "0:0", "node[1-2]", str(T0), str(T0 + 7), "7", "2",
                     f"a|b c{sep}d"]) + "\n"
    (row,) = slurm.parse_sacct(line)
    assert row["JobName"] == f"a|b c{sep}d" and row["NodeList"] == "node[1-2]"
    rec = slurm.job_record([row], "600")
    assert rec.nodelist == ["node1", "node2"] and rec.elapsed_s == 7 and rec.end - rec.start == 7
    assert slurm.parse_sacct("600\x1fCOMPLETED\n") == []  # too few fields: skipped, never misread


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


@pytest.mark.slurm
def test_real_array_task_and_het_component_waited_on_by_raw_id(local_cluster, tmp_path):
    """On the local cluster: every array task and het component, asked for by its raw id (what
    $SLURM_JOB_ID says inside it), is found and waited on to its end -- before, the wait ran to
    its timeout. The raw ids are read from each task itself, not computed. (The last task's raw id
    is the array's own, and a het leader's raw id the het job's own: SLURM reads those as the whole
    job, and they are checked as such.)"""
    body = 'echo "raw=$SLURM_JOB_ID task=${SLURM_ARRAY_TASK_ID:-} het=${SLURM_HET_SIZE:-}"; ' \
           'test "${SLURM_ARRAY_TASK_ID:-0}" != 2'
    arr = slurm.sbatch(_script(tmp_path, "rawarr.sh", body), extra_args=["--array=1-3"])
    het = slurm.sbatch(_script(tmp_path, "rawhet.sh", "srun --het-group=0,1 true"), extra_args=["-n1", ":", "-n1"])
    whole = slurm.wait_for_terminal(arr, timeout_s=300, poll_s=0.5)
    assert whole.components == [f"{arr}_1", f"{arr}_2", f"{arr}_3"]
    raw_of = {}
    for p in tmp_path.glob("rawarr.sh-*.out"):
        fields = dict(kv.split("=", 1) for kv in p.read_text().split())
        raw_of[f"{arr}_{fields['task']}"] = fields["raw"]
    assert sorted(raw_of) == whole.components and sorted(raw_of.values(), key=int) == whole.raw_ids
    for task, raw in raw_of.items():
        if raw == arr:  # the task holding the array's own id: SLURM's -j <that id> means the array
            assert slurm.sacct(raw).components == whole.components
            continue
        rec = slurm.wait_for_terminal(raw, timeout_s=60, poll_s=0.3)
        want = "FAILED" if task.endswith("_2") else "COMPLETED"
        assert (rec.jobid, rec.display_id, rec.state) == (raw, task, want), rec
        assert rec.id_forms == sorted({raw, task}, key=lambda v: (len(v), v))
    h = slurm.wait_for_terminal(het, timeout_s=300, poll_s=0.5)
    assert h.components == [f"{het}+0", f"{het}+1"] and len(h.raw_ids) == 2
    assert h.raw_ids[0] == het  # the leader's raw id is the het job's own: -j <it> means the whole job
    rec = slurm.wait_for_terminal(h.raw_ids[1], timeout_s=60, poll_s=0.3)
    assert (rec.display_id, rec.state, rec.components) == (f"{het}+1", "COMPLETED", [])


@pytest.mark.slurm
def test_names_and_comments_with_blanks_do_not_break_the_reading(local_cluster, tmp_path):
    """``scontrol show job`` prints ``JobName=name with space`` and ``Comment=hello world x=y``; the
    regex over it split those into false keys. squeue's delimited fields keep them whole."""
    script = _script(tmp_path, "blank.sh", "true")
    jid = slurm.sbatch(script, extra_args=["--job-name=name with | space", "--comment=hello world x=y"])
    rec = slurm.wait_for_terminal(jid, timeout_s=300, poll_s=0.3)
    assert rec.state == "COMPLETED" and rec.nodelist and rec.exit_code == "0:0"
    row = slurm.queue_job(jid)
    assert row is not None and row["JobName"] == "name with | space" and row["State"] == "COMPLETED"
    # sacct records a new job's name as "allocation" for a moment (find_jobs_by_name's doc): poll
    # until accounting has the real one; the column must then hold it whole
    from ai4s_graph.tools.slurm.query import poll

    named = poll(lambda: (lambda r: r if r.name != "allocation" else None)(slurm.sacct(jid)), 60, 0.3)
    assert named is not None and named.name == "name with | space"
    assert "Comment=hello world x=y" in slurm.scontrol_show_job_text(jid)  # kept verbatim for the user
