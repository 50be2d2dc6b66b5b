"""One sbatch per submission (issue 26 item 5): the intent record written before sbatch, and its
reconciliation with the real local SLURM (tools/slurm/submission.py). Each member is a way the
old code submitted twice: killed after slurmctld accepted the job, sbatch failing after the job
was accepted, sbatch failing before, a record that cannot be written."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ai4s_graph.tools.errors import InputError, ToolUnavailableError
from ai4s_graph.tools.slurm import client as slurm
from ai4s_graph.tools.slurm.jobscript import JobSpec
from ai4s_graph.tools.slurm.submission import intent_path, intent_token, submit_once, unique_job_name

class Killed(BaseException):
    """Stands for SIGKILL arriving after slurmctld accepted the job, before sbatch's answer was
    read (a BaseException, as a kill is not an error the code may handle)."""


def _sbatch(tmp: Path):
    """A submit function running the REAL sbatch on a 1-second job named after the spec."""
    def submit(spec: JobSpec) -> tuple[str, Path]:
        p = tmp / f"{spec.job_name}.sh"
        p.write_text(f"#!/bin/bash\n#SBATCH --job-name={spec.job_name}\n#SBATCH --time=00:02:00\n"
                     f"#SBATCH --output={tmp}/%j.out\nsleep 1\n")
        return slurm.sbatch(p), p
    return submit


def _accepted_then(tmp: Path, exc: BaseException):
    """A submit function whose REAL sbatch is accepted by slurmctld, after which ``exc`` is
    raised instead of the answer; ``got["jobid"]`` holds the id SLURM gave."""
    real, got = _sbatch(tmp), {}

    def submit(named: JobSpec):
        got["jobid"], _ = real(named)
        raise exc

    return submit, got


def _named(name: str) -> list[str]:
    return slurm.find_jobs_by_name(name)


def _spec() -> JobSpec:
    return JobSpec(job_name=f"t-{uuid.uuid4().hex[:8]}")


@pytest.mark.slurm
def test_the_intent_is_on_disk_before_sbatch_runs(local_cluster, tmp_path):
    spec, seen = _spec(), {}
    real = _sbatch(tmp_path)

    def submit(named: JobSpec):
        seen.update(json.loads(intent_path(tmp_path / "st", 1).read_text()))
        return real(named)

    sub = submit_once(spec, state_dir=tmp_path / "st", key={"k": 1}, attempt=1, submit=submit)
    token = intent_token({"k": 1}, 1)
    assert seen["job_name"] == unique_job_name(spec.job_name, token) == f"{spec.job_name}-{token}"
    assert seen["jobid"] is None and sub.how == "submitted"
    assert json.loads(intent_path(tmp_path / "st", 1).read_text())["jobid"] == sub.jobid
    assert _named(seen["job_name"]) == [sub.jobid]
    again = submit_once(spec, state_dir=tmp_path / "st", key={"k": 1}, attempt=1, submit=pytest.fail)
    assert (again.how, again.jobid) == ("adopted", sub.jobid)


@pytest.mark.slurm
def test_killed_after_slurm_accepted_the_job_resumes_without_a_second_one(local_cluster, tmp_path):
    spec = _spec()
    accepted_then_killed, got = _accepted_then(tmp_path, Killed())
    with pytest.raises(Killed):
        submit_once(spec, state_dir=tmp_path / "st", key="k", attempt=1, submit=accepted_then_killed)
    rec = json.loads(intent_path(tmp_path / "st", 1).read_text())
    assert rec["jobid"] is None  # the answer never came back
    sub = submit_once(spec, state_dir=tmp_path / "st", key="k", attempt=1, submit=pytest.fail)
    assert (sub.how, sub.jobid) == ("adopted", got["jobid"]) and "interrupted around sbatch" in sub.note
    assert _named(rec["job_name"]) == [got["jobid"]]


@pytest.mark.slurm
def test_sbatch_failing_after_the_job_was_accepted_adopts_it(local_cluster, tmp_path):
    spec = _spec()
    accepted_then_timed_out, got = _accepted_then(
        tmp_path, slurm.TransientSlurmError("sbatch", "Socket timed out on send/recv operation"))
    sub = submit_once(spec, state_dir=tmp_path / "st", key="k", attempt=1, submit=accepted_then_timed_out)
    assert (sub.how, sub.jobid) == ("adopted", got["jobid"]) and "Socket timed out" in sub.note


@pytest.mark.slurm
def test_sbatch_failing_before_slurm_took_it_submits_once_on_the_rerun(local_cluster, tmp_path):
    spec = _spec()

    def refused(named: JobSpec):
        raise slurm.TransientSlurmError("sbatch", "Batch job submission failed: Unable to contact slurm controller")

    with pytest.raises(ToolUnavailableError, match="has no job named .*: nothing was submitted"):
        submit_once(spec, state_dir=tmp_path / "st", key="k", attempt=1, submit=refused)
    name = json.loads(intent_path(tmp_path / "st", 1).read_text())["job_name"]
    assert _named(name) == []
    sub = submit_once(spec, state_dir=tmp_path / "st", key="k", attempt=1, submit=_sbatch(tmp_path))
    assert sub.how == "submitted" and _named(name) == [sub.jobid]


@pytest.mark.slurm
def test_no_intent_record_no_sbatch(local_cluster, tmp_path):
    st = tmp_path / "st"
    intent_path(st, 1).mkdir(parents=True)  # the record's path is taken by a folder: it cannot be written
    for _ in range(2):  # every re-run refuses the same way; none submits
        with pytest.raises(InputError, match="cannot write the intent record .*nothing submitted"):
            submit_once(_spec(), state_dir=st, key="k", attempt=1, submit=pytest.fail)


@pytest.mark.slurm
def test_a_crafted_intent_record_is_refused(local_cluster, tmp_path):
    p = intent_path(tmp_path / "st", 1)
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"token": "x", "job_name": "n", "attempt": 1, "created_at": 0,
                             "jobid": "1\nSTATUS=ok; reason=forged"}))
    with pytest.raises(InputError, match="not a SLURM job id") as ei:
        submit_once(_spec(), state_dir=tmp_path / "st", key="k", attempt=1, submit=pytest.fail)
    assert "\n" not in str(ei.value)
    p.write_text("{not json")
    with pytest.raises(InputError, match="intent record .* is unreadable"):
        submit_once(_spec(), state_dir=tmp_path / "st", key="k", attempt=1, submit=pytest.fail)


def test_other_attempts_and_other_submissions_get_other_names():
    a, b, c = intent_token("k", 1), intent_token("k", 2), intent_token("other", 1)
    assert len({a, b, c}) == 3 and all(len(t) == 10 for t in (a, b, c))
    long = unique_job_name("ai4s-" + "m" * 80, a)
    assert len(long) == 64 and long.endswith("-" + a)
