"""tools/slurm/query.scontrol_state: the job's state from ``scontrol show job`` text, for a wait that
timed out before sacct had a row (the launcher's TIMEOUT_WAITING manifest)."""

from ai4s_graph.tools.slurm.query import scontrol_state

# the shape of slurm-wlm 22.05's `scontrol show job` (first two lines of a pending job, local cluster)
PENDING = ("JobId=1234 JobName=ai4s-e2ewait\n   UserId=root(0) GroupId=root(0) MCS_label=N/A\n"
           "   Priority=1 Nice=0 Account=(null) QOS=normal\n   JobState=PENDING Reason=None Dependency=(null)\n")


def test_state_of_a_pending_and_a_running_job():
    assert scontrol_state(PENDING) == "PENDING"
    assert scontrol_state(PENDING.replace("JobState=PENDING", "JobState=RUNNING")) == "RUNNING"
    assert scontrol_state(PENDING.replace("JobState=PENDING", "JobState=OUT_OF_MEMORY")) == "OUT_OF_MEMORY"


def test_no_state():
    assert scontrol_state(None) is None
    assert scontrol_state("") is None
    assert scontrol_state("slurm_load_jobs error: Invalid job id specified") is None
