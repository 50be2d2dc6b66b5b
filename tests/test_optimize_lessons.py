"""Seed lessons as loop behaviour (no cluster): candidates come from the verified bottleneck class
(lessons 13, 16), the report's predicted saving is recorded beside the realized change, a run on
other nodes than the best run is rejected by the placement guard (lessons 9, 10, 18), and a guard
with no memory data on either side is reported "not checked"."""

from __future__ import annotations

import json
from pathlib import Path

from ai4s_graph import REPO_ROOT
from ai4s_graph.graph.optimize import graph as O
from ai4s_graph.graph.optimize import nodes as N
from ai4s_graph.state.loop import RunResult
from ai4s_graph.tools.levers import catalog as L

CATALOG = Path(REPO_ROOT) / "tools" / "levers" / "catalogs" / "cpu-toy.yaml"


def _state(tmp_path: Path, report: dict | None = None, **kw) -> dict:
    rep = None
    if report is not None:
        rep = tmp_path / "report.json"
        rep.write_text(json.dumps(report))
    req = O.new_loop(model="cpu-toy", catalog_path=CATALOG, loop_root=tmp_path / "loops", iterations=5,
                     report=str(rep) if rep else None, executor="local", shared_dir=tmp_path / "shared")
    st = {"request": {**req.model_dump(mode="json"), "out_dir": req.loop_dir}, "statuses": {}}
    upd, _ = N.init_body(st)
    st.update(upd)
    st.update(kw)
    return st


def _run(job: str, value: float, nodes=("n1",), **fom) -> dict:
    f = {"epoch_time_s": value, "global_batch_size": 64, "realized_batch": 64.0, "batches_per_epoch": 10,
         "partial_step_fraction": 0.0, "epoch_losses": [1.0, 0.9]}
    f.update(fom)
    return RunResult(job_id=job, state="COMPLETED", nodes_list=list(nodes), fom=f, primary=value).model_dump(mode="json")


def _measured(st: dict) -> dict:
    ref = _run("11", 0.60, peak_rss_bytes=3e8)
    st.update(baseline={"values": [0.60, 0.61], "mean": 0.605, "noise_pct": 5.0, "job_ids": ["10", "11"],
                        "nodes_list": ["n1"]},
              best={"value": 0.605, "levers": [], "run": ref, "job_ids": ["10", "11"], "iteration": 0}, iteration=1)
    return st


def test_levers_aimed_at_another_class_are_skipped_with_a_reason(tmp_path):
    report = {"jobid": "1", "bottleneck": {"klass": "compute-bound"},
              "levers": [{"name": "threads_2", "why": "more threads", "predicted_saving_pct": 12.5}]}
    st = _measured(_state(tmp_path, report))
    upd, status = N.make_pick_body()(st)
    cur = upd["current"]
    assert cur["lever"] == "threads_2" and cur["bottleneck"] == "compute-bound"
    skipped = {s["lever"]: s["why"] for s in cur["skipped"]}
    # every eligible lever aimed at other classes only is skipped, with the class it aims at
    assert skipped["num_workers_2"] == "aimed at data-loader-bound; the verified bottleneck is compute-bound"
    assert set(skipped) == {"num_workers_2", "iterable_shards_3w", "pin_memory", "batch_128"}
    assert "noop_env" not in skipped  # a lever that claims no class is not aimed elsewhere
    assert cur["predicted_saving_pct"] == 12.5 and "predicted saving 12.5%" in status.reason
    # once threads_2 and noop_env are tried, nothing aims at compute-bound: the loop stops, saying why
    st["tried"] = ["threads_2", "noop_env"]
    upd, status = N.make_pick_body()(st)
    assert upd["stop"].startswith("no eligible lever aims at the verified bottleneck compute-bound")


def test_prediction_beside_realized_change_in_the_journal(tmp_path):
    report = {"jobid": "1", "bottleneck": {"klass": "compute-bound"},
              "levers": [{"name": "threads_2", "why": "x", "impact": {"saving_pct": 8.0}}]}
    st = _measured(_state(tmp_path, report))
    upd, _ = N.make_pick_body()(st)
    st.update(upd)
    st["current"]["runs"] = [_run("40", 0.50, peak_rss_bytes=3e8)]
    upd, status = N.decide_body(st)
    rec = upd["current"]["record"]
    assert rec["decision"] == "accepted" and rec["predicted_saving_pct"] == 8.0
    assert abs(rec["delta_pct"] - 100 * (0.605 - 0.50) / 0.605) < 1e-9
    assert "predicted saving 8.0%, realized +17.4%" in rec["why"]
    assert rec["bottleneck"] == "compute-bound" and rec["executor"] == "local"
    st.update(upd)
    u, _ = N.record_body(st)
    assert u["route"] == "pick"  # --analyze off: no re-analysis; with it, an accepted lever re-analyses
    st["request"]["analyze"] = True
    st["current"]["record"]["iteration"] = 2
    u2, _ = N.record_body(st)
    assert u2["route"] == "analyse"


def test_other_placement_is_rejected_not_accepted(tmp_path):
    st = _measured(_state(tmp_path))
    upd, _ = N.make_pick_body()(st)
    st.update(upd)
    st["current"]["runs"] = [_run("41", 0.40, nodes=("n2",), peak_rss_bytes=3e8)]  # 34% faster, other node
    g, _ = N.guard_body(st)
    st["current"] = g["current"]
    upd, status = N.decide_body(st)
    rec = upd["current"]["record"]
    assert rec["decision"] == "rejected-guard"
    assert "ran on n2, reference on n1" in rec["why"] and rec["same_nodes_as_baseline"] is False
    assert L.parse_catalog(upd["catalog"]).lever(rec["lever"]).status.value == "candidate"  # not penalized


def test_guard_without_memory_data_is_not_checked_in_the_report(tmp_path):
    st = _measured(_state(tmp_path))
    st["best"]["run"] = _run("11", 0.60)  # no memory figure in the best run ...
    upd, _ = N.make_pick_body()(st)
    st.update(upd)
    st["current"]["runs"] = [_run("42", 0.59)]  # ... nor in this one
    g, status = N.guard_body(st)
    assert "not checked: memory" in status.reason
    st["current"] = g["current"]
    upd, _ = N.decide_body(st)
    st.update(upd)
    u, _ = N.record_body(st)
    st.update(u)
    path, _ = N.write_loop_report(st)
    row = next(ln for ln in path.read_text().splitlines() if ln.startswith("| 1 |"))
    # neither run measured memory, the board's capacity or the FOM's definition: not checked, never a pass
    assert "pass (4 not checked: memory, memory_capacity, fom_definition, staged_samples)" in row


def test_pin_follows_the_baseline_nodes_unless_known_bad(tmp_path):
    st = _measured(_state(tmp_path))
    cur = {"kind": "lever", "runs": []}
    assert N.pin_for(st, cur, []) == (["n1"], "pinned to the baseline's nodes n1")
    pin, why = N.pin_for(st, cur, ["n1"])
    assert pin == [] and "include known bad n1" in why
    first = {"kind": "baseline", "runs": []}
    st2 = _state(tmp_path / "b")
    assert N.pin_for(st2, first, [])[0] == []  # the first baseline run is placed by the scheduler
    assert N.pin_for(st2, {"kind": "baseline", "runs": [_run("1", 1.0, nodes=("n7",))]}, [])[0] == ["n7"]
    spec = N.build_spec(L.load_catalog(CATALOG), L.effective_change(L.load_catalog(CATALOG), []), job_name="j",
                        exclude=[], nodelist=["n7"])
    assert spec.sbatch_options["nodelist"] == "n7"


def test_analysis_follows_the_best_run_as_the_bottleneck_moves(tmp_path, repo_root):
    """``--analyze``: the analysis runs on the best run and again after each accepted lever; the
    next pick follows the new class. Bundled runs with known answers: 92001 dispatch-bound,
    92003 compute-bound."""
    st = _state(tmp_path)
    st["request"]["analyze"] = True
    ex = repo_root / "examples" / "perf-runs"
    st["best"] = {"value": 1.0, "levers": [], "run": {**_run("92001", 1.0), "perf_run": str(ex / "92001")}}
    upd, status = N.analyse_body(st)
    assert upd["analysis"]["bottleneck"] == "dispatch-bound" and "bottleneck dispatch-bound" in status.reason
    st.update(upd)
    again, status = N.analyse_body(st)  # the best did not change: not analysed twice
    assert "analysis" not in again and "no new best run" in status.reason
    st["best"] = {"value": 0.5, "levers": ["x"], "run": {**_run("92003", 0.5), "perf_run": str(ex / "92003")}}
    upd, status = N.analyse_body(st)
    assert upd["analysis"]["bottleneck"] == "compute-bound" and "moved from dispatch-bound" in status.reason
    assert [h["bottleneck"] for h in upd["analysis"]["history"]] == ["dispatch-bound", "compute-bound"]
    st.update(upd)
    _measured_best = st["best"]
    st.update(baseline={"values": [1.0, 1.0], "mean": 1.0, "noise_pct": 2.0, "job_ids": ["a", "b"],
                        "nodes_list": ["n1"]}, iteration=2, best=_measured_best)
    pick, status = N.make_pick_body()(st)
    assert pick["current"]["lever"] == "threads_2" and pick["current"]["bottleneck"] == "compute-bound"
