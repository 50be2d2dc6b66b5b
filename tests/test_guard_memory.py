"""The optimizer's integrity guard guards integrity, not resources (tools/levers/guards.py; issue 24:
on sdpa-math the fused-SDPA lever was rejected because reserved HBM fell 80%). Memory is compared in
the direction the lever declares (``Lever.memory``); a rise beyond the board's capacity fails; a
lever that changes the loss curve or the FOM's definition is still rejected. Hand-built loop
histories with the measured numbers of reports/optimizer-2026-12-02 (sdpa-math, 93106) and of seed
000 lessons 23 and 29, run through the guard and decide nodes on the bundled workload catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.graph.optimize import graph as O
from ai4s_graph.graph.optimize import nodes as N
from ai4s_graph.state.loop import FomSpec, MemoryEffect, RunResult
from ai4s_graph.tools.levers import catalog as L
from ai4s_graph.tools.levers import guards as G

WORKLOAD = Path(REPO_ROOT) / "tools" / "levers" / "catalogs" / "workload.yaml"
HBM_MATH, HBM_FUSED = 1.92e10, 3.817e9   # reserved HBM, sdpa-math baseline vs the fused-backend run (93106 loop)
H200 = 150_000_000_000                   # hbm_total_bytes of an H200 as torch reports it (~139.8 GiB)


def _fom(**kw) -> dict:
    f = {"throughput_samples_per_s": 84.5, "global_batch_size": 16, "realized_batch": 16.0, "batches_per_epoch": 10,
         "partial_step_fraction": 0.0, "hbm_reserved_bytes": HBM_MATH, "hbm_total_bytes": H200,
         "epoch_losses": [128.9], "primary_fom_name": "throughput_realized_samples_per_s", "fom_kind": "throughput",
         "format": "batch_time", "step_time_source": "per-step log lines"}
    f.update(kw)
    return f


def _run(job: str, value: float, **kw) -> dict:
    return RunResult(job_id=job, state="COMPLETED", nodes_list=["vm"], fom=_fom(throughput_samples_per_s=value, **kw),
                     primary=value).model_dump(mode="json")


def _state(tmp_path: Path) -> dict:
    req = O.new_loop(model="workload", catalog_path=WORKLOAD, loop_root=tmp_path / "loops", iterations=3)
    cat = L.load_catalog(WORKLOAD)
    ref = _run("700002", 84.7)
    return {"request": {**req.model_dump(mode="json"), "out_dir": req.loop_dir}, "catalog": cat.model_dump(mode="json"),
            "applied": [], "tried": [], "iteration": 1, "levers_done": 0, "node_hours_used": 0.0, "stop": None,
            "baseline": {"values": [84.39, 84.7], "mean": 84.54, "noise_pct": 2.0, "job_ids": ["700001", "700002"],
                         "nodes_list": ["vm"]},
            "best": {"value": 84.54, "levers": [], "run": ref, "job_ids": ["700001", "700002"], "iteration": 0}}


def _iterate(tmp_path: Path, lever: str, run: dict) -> dict:
    """One lever iteration through the guard and decide nodes; returns the journal record."""
    st = _state(tmp_path)
    cat = L.load_catalog(WORKLOAD)
    st["current"] = {"iteration": 1, "kind": "lever", "lever": lever,
                     "change": L.effective_change(cat, [], lever).model_dump(mode="json"), "runs_needed": 1,
                     "runs": [run], "attempt": 1, "job_id": None, "infra_retries": [], "failed_run": None,
                     "guards": [], "outcome": None, "record": None}
    upd, _ = N.guard_body(st)
    st["current"] = upd["current"]
    upd, _ = N.decide_body(st)
    return upd["current"]["record"]


def test_the_fused_sdpa_backend_is_accepted_at_minus_80_percent_hbm(tmp_path):
    assert L.load_catalog(WORKLOAD).lever("sdpa_fused_backend").memory is MemoryEffect.saves
    rec = _iterate(tmp_path, "sdpa_fused_backend", _run("700003", 432.4, hbm_reserved_bytes=HBM_FUSED,
                                                         epoch_losses=[136.56]))
    assert rec["decision"] == "accepted", rec["why"]
    mem = next(c for c in rec["guard"]["checks"] if c["name"] == "memory")
    # (3.817e9 - 1.92e10) / 1.92e10 = -80.1%: what the fused kernel saves, not a different job
    assert mem["passed"] and "-80.1%" in mem["why"] and "memory-saving lever may lower it" in mem["why"]
    assert round(rec["delta_pct"], 1) == round(100 * (432.4 - 84.54) / 84.54, 1)


def test_the_old_two_sided_rule_still_holds_for_a_lever_that_should_not_move_memory(tmp_path):
    # tf32_matmul declares nothing: an 80% fall means the run did different work (lesson 23)
    rec = _iterate(tmp_path, "tf32_matmul", _run("700004", 114.0, hbm_reserved_bytes=HBM_FUSED))
    assert rec["decision"] == "rejected-guard" and "80.1% > 25%" in rec["why"]


def test_a_memory_saving_lever_that_raises_memory_is_rejected():
    spec = FomSpec(primary="throughput_samples_per_s")
    c = G.memory_check("hbm_reserved_bytes", 1.4 * HBM_MATH, HBM_MATH, spec.memory_tolerance_pct, "saves")
    assert not c.passed and "rise 40.0% vs <= 25%" in c.why
    assert G.memory_check("hbm_reserved_bytes", 1.2 * HBM_MATH, HBM_MATH, 25.0, "saves").passed  # within the band


def test_a_memory_spending_lever_may_grow_up_to_the_board_not_beyond():
    spec = FomSpec(primary="throughput_samples_per_s")
    ref = RunResult(job_id="1", state="COMPLETED", fom=_fom(hbm_reserved_pct=30.0))
    assert L.load_catalog(WORKLOAD).lever("no_activation_checkpointing").memory is MemoryEffect.grows
    # activation recompute off: +60% reserved (30 -> 48% of the board) is the lever working
    grown = RunResult(job_id="2", state="COMPLETED", fom=_fom(hbm_reserved_pct=48.0))
    g = G.integrity_guard(grown, ref, spec, memory="grows")
    assert g.passed, g.reasons
    assert not G.integrity_guard(grown, ref, spec).passed  # undeclared: +60% > 25%
    # beyond the board: 104% reserved (or more bytes than the board has) fails whatever the declaration
    over = RunResult(job_id="3", state="COMPLETED", fom=_fom(hbm_reserved_pct=104.0))
    g = G.integrity_guard(over, ref, spec, memory="grows")
    assert not g.passed and [c.name for c in g.checks if not c.passed] == ["memory_capacity"]
    assert "104.0% of the board > 100%" in g.reasons[0]
    c = G.capacity_check(_fom(hbm_reserved_bytes=1.6e11, hbm_total_bytes=H200))
    assert not c.passed and c.value == 1.6e11 and c.reference == H200
    assert not G.capacity_check({}).checked
    # a memory-spending lever that lowers memory by more than the band did not do what it says
    assert not G.memory_check("hbm_reserved_pct", 15.0, 30.0, 25.0, "grows").passed


def test_a_memory_saving_lever_that_changes_the_loss_curve_is_still_rejected(tmp_path):
    # the fused backend on the bundled pair moved the mean epoch loss 5.9% (136.56 vs 128.90): passes;
    # a lever that moves it like lesson 23's shrunken batch (2.86 -> 3.50, +22%) computes something else
    ok = G.loss_curve_check({"epoch_losses": [136.56]}, {"epoch_losses": [128.90]}, 15.0)
    assert ok.passed and "5.9% <= 15%" in ok.why
    rec = _iterate(tmp_path, "sdpa_fused_backend", _run("700005", 432.4, hbm_reserved_bytes=HBM_FUSED,
                                                         epoch_losses=[128.9 * 3.50 / 2.86]))
    assert rec["decision"] == "rejected-guard"
    assert "mean epoch loss" in rec["why"] and "22.4% > 15%" in rec["why"]
    # lesson 29: the tuned run's epoch-0 loss 5.5 vs the baseline's 0.87
    bad = G.loss_curve_check({"epoch_losses": [5.5]}, {"epoch_losses": [0.87]}, 15.0)
    assert not bad.passed and "changes what the run computes" in bad.why
    one = G.loss_curve_check({"epoch_losses": []}, {"epoch_losses": [1.0]}, 15.0)
    assert not one.passed and "only one run" in one.why
    assert not G.loss_curve_check({}, {}, 15.0).checked


@pytest.mark.parametrize("field, value", [("primary_fom_name", "throughput_samples_per_s"),
                                          ("format", "tqdm"), ("step_time_source", "wall clock between lines")])
def test_a_lever_that_changes_the_fom_definition_is_rejected(tmp_path, field, value):
    rec = _iterate(tmp_path, "sdpa_fused_backend", _run("700006", 432.4, hbm_reserved_bytes=HBM_FUSED, **{field: value}))
    assert rec["decision"] == "rejected-guard" and f"the FOM is defined differently: {field}" in rec["why"]


def test_a_lever_that_changes_the_batch_skips_memory_and_loss_but_not_capacity():
    spec = FomSpec(primary="throughput_samples_per_s")
    ref = RunResult(job_id="1", state="COMPLETED", fom=_fom(hbm_reserved_pct=30.0, epoch_losses=[1.0]))
    big = RunResult(job_id="2", state="COMPLETED", fom=_fom(global_batch_size=64, realized_batch=64.0,
                                                             hbm_reserved_pct=101.0, epoch_losses=[2.0]))
    g = G.integrity_guard(big, ref, spec, changes_batch=True)
    assert {c.name: c.checked for c in g.checks}["loss_curve"] is False
    assert [c.name for c in g.checks if not c.passed] == ["memory_capacity"]
