"""CPU oversubscription by DataLoader workers (seed 001 T3, lesson 22): 8 workers x 8 ranks = 64
worker processes on 56 cores (8 tasks x 7 CPUs) is 64/56 = 1.143 per core; the job script's text
alone re-derives the same ratio."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import oversubscription
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.state import Manifest
from ai4s_graph.tools.slurm.scriptparse import parse_job_script

CAUSE = oversubscription.CAUSE
LESSON22 = "#SBATCH --ntasks-per-node=8\n#SBATCH --cpus-per-task=7\nsrun python train.py --num-workers 8\n"


def test_lesson22_64_workers_on_56_cpus():
    job = parse_job_script(LESSON22)
    assert job == {"ntasks_per_node": 8, "cpus_per_task": 7, "num_workers": 8}
    [f] = CAUSE.detect(Inputs(manifest=Manifest(jobid="1"), job=job,
                              telemetry={"stats": {"cpu_util.avg": {"value": 97.0}}}))
    assert f.claim.value == 1.143 == round(64 / 56, 3) and f.claim.unit == "ratio"
    assert "node CPU busy 97%" in f.claim.statement
    assert [(lv.name, lv.why.split(" per rank")[0]) for lv in f.levers] == [("num_workers", "cap num_workers at 6")]
    rd = CAUSE.rederive(f.claim, Reader(job_script=LESSON22, job=job, manifest=Manifest(jobid="1")))
    assert rd.value == 1.143
    assert registry.judge(f.claim, "telemetry_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


def test_the_manifest_wins_over_the_job_script():
    # the manifest says 4 workers and 64 cores per node: 4 x 8 = 32 workers fit
    m = Manifest.model_validate({"jobid": "2", "num_workers": 4, "cpus_per_node": 64})
    assert CAUSE.detect(Inputs(manifest=m, job=parse_job_script(LESSON22))) == []


@pytest.mark.parametrize("workers,ranks,cores", [(4, 8, 56), (7, 8, 56), (None, 8, 56), (8, 8, None)])
def test_fits_or_missing_is_silent(workers, ranks, cores):
    assert CAUSE.check(workers, ranks, cores) is None


def test_no_job_script_no_rederivation():
    [f] = [CAUSE.check(8, 8, 56)]
    assert CAUSE.rederive(f.claim, Reader()).value is None


NEEDS_CORES = ("the cores the job may use (cpus_per_node in the manifest, or --cpus-per-task in the job script)")


@pytest.mark.parametrize("manifest,script,needs", [
    # every count known (the lesson-22 script): T3 ran, nothing to say
    ({"jobid": "3"}, LESSON22, None),
    # workers and ranks but no core count anywhere
    ({"jobid": "4", "num_workers": 8, "gpus_per_node": 4}, "", [NEEDS_CORES]),
    # nothing at all: all three named, in that order
    ({"jobid": "5"}, "", ["the DataLoader workers per rank (num_workers in the manifest or the job script)",
                          "the ranks per node (--ntasks-per-node or gpus_per_node)", NEEDS_CORES]),
    # num_workers 0: no worker process to oversubscribe, T3 is checked whatever else is missing
    ({"jobid": "6", "num_workers": 0}, "", None),
])
def test_not_checked_names_each_missing_count(manifest, script, needs):
    x = Inputs(manifest=Manifest.model_validate(manifest), job=parse_job_script(script))
    lines = CAUSE.not_checked(x)
    if needs is None:
        assert lines == []
    else:
        assert lines == [f"not checked: {oversubscription.T3}: needs " + "; ".join(needs)]
    assert registry.not_checked("telemetry_analyst", x) == lines  # the one telemetry cause with a need
