"""The bundled example runs (examples/perf-runs/, made by the project's workload on one H200)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report

pytestmark = pytest.mark.vm


def _analyse(repo_root, tmp_path, jobid, *extra):
    r = CliRunner().invoke(app, ["run", "--job", jobid, "--perf-run", str(repo_root / "examples/perf-runs" / jobid),
                                 "--out", str(tmp_path / jobid), *extra])
    assert r.exit_code == 0, r.output
    return Report.model_validate_json((tmp_path / jobid / "report.json").read_text())


def _claim(rep, cid):
    return next(v for v in rep.claims if v.claim.id == cid)


@pytest.mark.parametrize("jobid, klass", [("92001", "dispatch-bound"), ("92002", "data-loader-bound"),
                                          ("92003", "compute-bound"), ("92004", "dispatch-bound")])
def test_bundled_example_classes(repo_root, tmp_path, jobid, klass):
    rep = _analyse(repo_root, tmp_path, jobid)
    assert rep.bottleneck.klass.value == klass
    assert _claim(rep, "tl.r0.bottleneck").verdict.value == "confirmed"
    assert not [v for v in rep.claims if v.verdict.value in ("refuted", "unsupported")]


def test_data_loader_example_shows_the_starvation(repo_root, tmp_path):
    rep = _analyse(repo_root, tmp_path, "92002")
    dl = _claim(rep, "tl.r0.dataloader_share")
    assert dl.verdict.value == "confirmed" and dl.claim.value > 30.0        # DataLoader ≥ 30% of the step
    assert _claim(rep, "tl.r0.idle_time").claim.value > 20.0
    # the named loader cause leads with its lever (the catalog id; the class lever is the generic num_workers)
    assert rep.bottleneck.cause is not None and rep.bottleneck.cause.startswith("dataloader-")
    assert rep.levers[0].name == "num_workers_8"


def test_discriminator_disagreeing_with_an_idle_gpu_is_flagged(repo_root, tmp_path):
    rep = _analyse(repo_root, tmp_path, "92001", "--compare", str(repo_root / "examples/perf-runs/92004"))
    sp = _claim(rep, "om.compare.speedup")
    assert sp.verdict.value == "confirmed"
    assert rep.bottleneck.klass.value == "dispatch-bound"
    if _claim(rep, "om.compare.bottleneck").claim.value != "dispatch-bound":
        # the trace decides; the pair's reading is a contradiction with both numbers and how to settle it
        (c,) = rep.bottleneck.contradictions
        assert "replicate both runs" in c.settle and "idle 94.6%" in c.direct
        assert "om.compare.speedup" not in rep.bottleneck.supporting_claims
