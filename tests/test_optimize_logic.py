"""The optimizer loop's node logic without SLURM: the pick node's budgets and order, the decide
node's accept / revert / replicate / guard / crash / infra outcomes over real rule code, the loop
report, and the CLI's one-line refusal of an unsafe catalog before anything is submitted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ai4s_graph import REPO_ROOT
from ai4s_graph.graph.optimize import graph as O
from ai4s_graph.graph.optimize import nodes as N
from ai4s_graph.state.loop import RunResult
from ai4s_graph.tools.levers import catalog as L
from ai4s_graph.tools.errors import InputError

CATALOG = Path(REPO_ROOT) / "tools" / "levers" / "catalogs" / "cpu-toy.yaml"


def _state(tmp_path: Path, **kw) -> dict:
    req = O.new_loop(model="cpu-toy", catalog_path=CATALOG, loop_root=tmp_path / "loops", iterations=kw.pop("iterations", 3),
                     node_hours=kw.pop("node_hours", None))
    cat = L.load_catalog(CATALOG)
    L.dump_catalog(cat, Path(req.loop_dir) / "catalog.original.yaml")
    st = {"request": {**req.model_dump(mode="json"), "out_dir": req.loop_dir}, "catalog": cat.model_dump(mode="json"),
          "applied": [], "tried": [], "iteration": 0, "levers_done": 0, "node_hours_used": 0.0, "current": None,
          "stop": None, "best": None, "baseline": None}
    st.update(kw)
    return st


def _run(job: str, value: float, *, nodes=("node1",), **fom) -> dict:
    f = {"epoch_time_s": value, "global_batch_size": 64, "realized_batch": 64.0, "realized_batch_mean": 64.0,
         "batches_per_epoch": 10, "partial_step_fraction": 0.0, "peak_rss_bytes": 300_000_000, "epoch_losses": [1.0, 0.9]}
    f.update(fom)
    return RunResult(job_id=job, state="COMPLETED", nodes_list=list(nodes), fom=f, primary=value,
                     elapsed_s=8.0, node_hours=8 / 3600).model_dump(mode="json")


def _with_baseline(tmp_path: Path, **kw) -> dict:
    ref = _run("11", 0.60)
    return _state(tmp_path, baseline={"values": [0.60, 0.61], "mean": 0.605, "noise_pct": 5.0, "job_ids": ["10", "11"],
                                      "nodes_list": ["node1"]},
                  best={"value": 0.605, "levers": [], "run": ref, "job_ids": ["10", "11"], "iteration": 0},
                  iteration=1, **kw)


def _current(lever: str, runs: list[dict], **kw) -> dict:
    cat = L.load_catalog(CATALOG)
    cur = {"iteration": 1, "kind": "lever", "lever": lever,
           "change": L.effective_change(cat, [], lever).model_dump(mode="json"), "runs_needed": 1, "runs": runs,
           "attempt": len(runs), "job_id": None, "infra_retries": [], "failed_run": None, "guards": [],
           "outcome": None, "record": None}
    cur.update(kw)
    return cur


def test_pick_baseline_first_then_levers_then_budgets(tmp_path):
    pick = N.make_pick_body()
    upd, st = pick(_state(tmp_path))
    assert upd["current"]["kind"] == "baseline" and upd["current"]["runs_needed"] == 2 and st.status.value == "ok"
    upd, st = pick(_with_baseline(tmp_path / "a"))
    assert upd["current"]["lever"] == "num_workers_2"
    args = L.script_args_list(L.LeverChange.model_validate(upd["current"]["change"]))
    assert args[args.index("--num-workers") + 1] == "2"
    upd, st = pick(_with_baseline(tmp_path / "b", levers_done=3))
    assert upd["route"] == "report" and "iteration budget spent" in upd["stop"]
    upd, st = pick(_with_baseline(tmp_path / "c", node_hours=0.01, node_hours_used=0.02))
    assert "node-hours budget spent" in upd["stop"]
    every = [lv.name for lv in L.eligible_levers(L.load_catalog(CATALOG))]
    upd, _ = pick(_with_baseline(tmp_path / "d", tried=every, iterations=20))
    assert "no eligible lever left" in upd["stop"]


def test_pick_follows_the_report_bottleneck(tmp_path):
    rep = tmp_path / "report.json"
    rep.write_text(json.dumps({"jobid": "1", "bottleneck": {"klass": "compute-bound"}, "levers": []}))
    req = O.new_loop(model="cpu-toy", catalog_path=CATALOG, loop_root=tmp_path / "loops", report=str(rep))
    assert req.bottleneck == "compute-bound"
    st = _with_baseline(tmp_path / "x")
    st["request"]["bottleneck"] = req.bottleneck
    upd, status = N.make_pick_body()(st)
    assert upd["current"]["lever"] == "threads_2" and "targets compute-bound" in status.reason


def test_decide_baseline_sets_noise_band_and_best(tmp_path):
    st = _state(tmp_path)
    cur = {"iteration": 0, "kind": "baseline", "lever": None, "change": {}, "runs_needed": 2,
           "runs": [_run("10", 0.60)], "attempt": 1, "job_id": None, "infra_retries": [], "failed_run": None,
           "guards": [], "outcome": None, "record": None}
    st["current"] = cur
    upd, _ = N.decide_body(st)
    assert upd["route"] == "submit"  # second baseline run still needed
    cur["runs"].append(_run("11", 0.66))
    upd, status = N.decide_body(st)
    assert upd["route"] == "record"
    assert upd["baseline"]["noise_pct"] == pytest.approx(100 * 0.06 / 0.63)  # spread above the 5% floor
    assert upd["best"]["value"] == pytest.approx(0.63) and upd["best"]["job_ids"] == ["10", "11"]
    assert upd["current"]["record"]["decision"] == "baseline"


def test_decide_replicates_then_accepts_a_high_variance_lever(tmp_path):
    st = _with_baseline(tmp_path)
    st["current"] = _current("num_workers_2", [_run("20", 0.40)])
    upd, status = N.decide_body(st)
    assert upd["route"] == "submit" and upd["current"]["runs_needed"] == 2 and "replicate" in status.reason
    st["current"] = {**upd["current"], "runs": [_run("20", 0.40), _run("21", 0.41)]}
    upd, status = N.decide_body(st)
    rec = upd["current"]["record"]
    assert rec["decision"] == "accepted" and rec["fom_values"] == [0.40, 0.41]
    assert upd["applied"] == ["num_workers_2"] and upd["best"]["value"] == pytest.approx(0.405)
    assert L.load_catalog(CATALOG).model_validate(upd["catalog"]).lever("num_workers_2").status.value == "accepted-baked-in"


def test_decide_rejects_on_guard_marks_crashes_and_spares_infra(tmp_path):
    st = _with_baseline(tmp_path)
    plant = _run("30", 0.45, batches_per_epoch=12, realized_batch_mean=53.2, partial_step_fraction=0.25)
    g = L.integrity_guard(RunResult.model_validate(plant), RunResult.model_validate(st["best"]["run"]),
                          L.load_catalog(CATALOG).fom)
    st["current"] = _current("iterable_shards_3w", [plant], guards=[g.model_dump(mode="json")])
    upd, _ = N.decide_body(st)
    rec = upd["current"]["record"]
    assert rec["decision"] == "rejected-guard" and rec["delta_pct"] > 20  # a phantom 'gain', refused
    assert "batches per epoch 12 vs reference 10" in rec["why"] and "best" not in upd

    crashed = RunResult(job_id="31", state="FAILED", exit_code="1:0", nodes_list=["node2"],
                        error="FAILED exit 1:0: RuntimeError: bad\n...tail...").model_dump(mode="json")
    st["current"] = _current("threads_2", [], failed_run=crashed)
    upd, status = N.decide_body(st)
    rec = upd["current"]["record"]
    assert rec["decision"] == "failed" and "RuntimeError: bad" in rec["why"] and status.status.value == "partial"
    assert rec["same_nodes_as_baseline"] is False and "no node-class conclusion" in rec["why"]
    assert L.parse_catalog(upd["catalog"]).lever("threads_2").status.value == "blocked"

    st["current"] = _current("threads_2", [], infra_retries=[{"job_id": "32", "bad_nodes": [], "node_hours": 0.0}],
                             outcome={"decision": "infra-failed", "why": "exit 42 with no bad node named"})
    upd, _ = N.decide_body(st)
    assert upd["current"]["record"]["decision"] == "infra-failed"
    assert L.parse_catalog(upd["catalog"]).lever("threads_2").status.value == "candidate"


def test_record_is_idempotent_and_report_lists_every_iteration(tmp_path):
    st = _with_baseline(tmp_path)
    st["current"] = _current("threads_2", [_run("40", 0.70)])
    upd, _ = N.decide_body(st)
    st.update(upd)
    d = Path(st["request"]["loop_dir"])
    u1, s1 = N.record_body(st)
    u2, s2 = N.record_body(st)  # a resumed loop re-running `record`
    assert "already in the journal" in s2.reason
    assert [r["iteration"] for r in L.read_journal(d)] == [1]
    assert u1["levers_done"] == 1 and u1["tried"] == ["threads_2"] and u1["current"] is None
    assert json.loads((d / "best_config.json").read_text())["value"] == pytest.approx(0.605)
    st.update(u1)
    st["stop"] = "iteration budget spent"
    path, png = N.write_loop_report(st)
    text = path.read_text()
    assert "| 1 | threads_2 | 40 | node1 |" in text and "reverted" in text and png is not None and png.is_file()


def test_cli_refuses_an_unsafe_catalog_before_submitting(tmp_path):
    data = yaml.safe_load(CATALOG.read_text())
    data["levers"][0]["change"]["script_args"]["--num-workers"] = "2; scancel -u root"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "optimize", "--model", "cpu-toy", "--catalog", str(bad),
                         "--loop-root", str(tmp_path / "loops")], capture_output=True, text=True, env=env, timeout=120)
    assert cp.returncode == 1
    last = cp.stdout.strip().splitlines()[-1]
    assert last.startswith("STATUS=fail; reason=") and "refused" in last
    assert len(cp.stderr.strip().splitlines()) == 1 and cp.stderr.startswith("error: ")
    assert not (tmp_path / "loops").exists()  # no loop directory, nothing submitted
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "optimize", "--resume", "loop-nope",
                         "--loop-root", str(tmp_path / "loops")], capture_output=True, text=True, env=env, timeout=120)
    assert cp.returncode == 1 and "no loop loop-nope" in cp.stdout


def test_new_loop_and_find_loop(tmp_path):
    req = O.new_loop(model="cpu-toy", catalog_path=CATALOG, loop_root=tmp_path, iterations=2, node_hours=0.5)
    d = Path(req.loop_dir)
    assert d.name == f"loop-{req.loop_id}" and O.load_request(d).node_hours == 0.5
    assert O.find_loop(d.name, tmp_path) == d and O.find_loop(req.loop_id, tmp_path) == d and O.find_loop(d) == d
    with pytest.raises(InputError, match="is for model"):
        st = _state(tmp_path / "m")
        st["request"]["model"] = "orbit2"
        st.pop("catalog")
        N.init_body(st)


def _catalog_with_noop(tmp_path: Path) -> Path:
    """cpu-toy plus two hand-made levers: one that removes a flag the baseline never passes (a no-op
    by construction) and one that sets an environment variable (a change, whatever its default)."""
    doc = yaml.safe_load(CATALOG.read_text())
    doc["levers"] += [
        {"name": "no_detect_anomaly", "description": "drop --detect-anomaly (never passed here)",
         "change": {"script_args": {"--detect-anomaly": False}}, "status": "candidate", "targets": ["data-loader-bound"]},
        {"name": "launch_blocking_0", "description": "CUDA_LAUNCH_BLOCKING=0",
         "change": {"env": {"CUDA_LAUNCH_BLOCKING": "0"}}, "status": "candidate", "targets": ["data-loader-bound"]},
    ]
    p = tmp_path / "noop.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def test_a_lever_that_renders_the_same_job_is_never_tried(tmp_path):
    p = _catalog_with_noop(tmp_path)
    cat = L.load_catalog(p)
    assert L.changes_nothing(cat, [], "no_detect_anomaly") is True
    assert L.changes_nothing(cat, [], "launch_blocking_0") is False   # env set where it was unset: a change
    assert L.changes_nothing(cat, [], "num_workers_2") is False       # --num-workers 0 -> 2
    assert L.changes_nothing(cat, ["num_workers_2"], "num_workers_2") is True  # already applied
    with pytest.raises(InputError):
        L.changes_nothing(cat, [], "no_such_lever")
    st = _with_baseline(tmp_path / "loop", tried=["num_workers_2", "threads_2", "iterable_shards_3w"], iterations=20)
    st["catalog"] = cat.model_dump(mode="json")
    st["request"]["bottleneck"] = "data-loader-bound"
    picked = []
    for _ in range(len(cat.levers)):
        upd, status = N.make_pick_body()(st)
        if upd.get("stop"):
            break
        picked.append(upd["current"]["lever"])
        st["tried"] = [*st["tried"], upd["current"]["lever"]]
        assert not any(s["lever"] == upd["current"]["lever"] for s in upd["current"]["skipped"])
        assert any(s["lever"] == "no_detect_anomaly" and "changes nothing" in s["why"] for s in upd["current"]["skipped"])
    assert "no_detect_anomaly" not in picked and "launch_blocking_0" in picked


def test_a_baseline_noisier_than_the_replicate_tolerance_makes_every_lever_replicate(tmp_path):
    """The worker-respawn loop of reports/optimizer-2026-12-02: baseline runs 517.8 and 546.1
    samples/s (spread 5.32% > ±5%), then one run of a lever read far above the best. With the
    baseline that noisy a single run is not evidence: the lever replicates, and a replicate that
    disagrees by more than 5% rejects it."""
    cat = L.load_catalog(CATALOG)
    assert L.effective_variance("normal", 5.32, cat.fom).value == "high"
    assert L.effective_variance("normal", 5.0, cat.fom).value == "normal"   # at the tolerance: not wider
    assert L.effective_variance("high", 1.0, cat.fom).value == "high"
    st = _with_baseline(tmp_path)
    st["baseline"]["noise_pct"] = 8.0
    st["current"] = _current("threads_2", [_run("30", 0.40)])          # a normal-variance lever, 34% faster
    upd, status = N.decide_body(st)
    assert upd["route"] == "submit" and upd["current"]["runs_needed"] == 2
    assert "wider than ±5%" in status.reason
    st["current"] = {**upd["current"], "runs": [_run("30", 0.40), _run("31", 0.60)]}   # the replicate disagrees
    upd, status = N.decide_body(st)
    assert upd["current"]["record"]["decision"] == "replicate-disagrees" and "applied" not in upd
