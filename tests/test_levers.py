"""Pure-logic tests of the lever catalog and the optimizer loop's rules (no SLURM): catalog
validation (seed verdicts, unsafe values), the picker, the noise rule (lesson 9), the integrity
guards (lessons 23, 31, 29), catalog updates, the journal and the submissions ledger."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from ai4s_graph.state import Bottleneck, BottleneckClass, Report
from ai4s_graph.state.loop import (
    Catalog,
    Decision,
    FomSpec,
    IterationRecord,
    LeverChange,
    LeverStatus,
    RunResult,
    VarianceClass,
)
from ai4s_graph.tools.levers import catalog as L
from ai4s_graph.tools.errors import InputError

REPO = Path(__file__).resolve().parent.parent
LEVERS = REPO / "tools" / "levers" / "catalogs"


def cat(name: str) -> Catalog:
    return L.load_catalog(LEVERS / f"{name}.yaml")


# ------------------------------------------------------------------ bundled catalogs: seed verdicts


def test_bundled_catalogs_load_and_carry_fom_per_model():
    h, o, t = cat("hydragnn"), cat("orbit2"), cat("cpu-toy")
    assert (h.model, h.fom.primary, h.fom.direction) == ("hydragnn", "epoch_time_s", "lower")  # lesson 5
    assert (o.model, o.fom.primary, o.fom.direction) == ("orbit2", "throughput_samples_per_s", "higher")  # 31
    assert t.fom.primary == "epoch_time_s"
    assert L.bundled_catalog("orbit2") == LEVERS / "orbit2.yaml"
    with pytest.raises(InputError, match="no bundled lever catalog"):
        L.bundled_catalog("nosuchmodel")


def test_hydragnn_verdicts_from_the_seed():
    h = cat("hydragnn")
    tc = h.lever("torch_compile_e3nn")
    assert tc.status == LeverStatus.blocked
    assert any(e.error == "RuntimeError: torch.compile with aot_autograd does not currently support double backward"
               for e in tc.evidence)  # lesson 6, verbatim
    js = h.lever("torch_jit_script")
    assert js.status == LeverStatus.blocked and "keyword-arg expansion is not supported" in js.evidence[0].error  # 14
    for name in ("tunable_op_live", "tunable_op_warmup_then_use"):  # lessons 8, 15
        lv = h.lever(name)
        assert lv.status == LeverStatus.blocked and "Memory access fault" in lv.evidence[0].error
    assert h.lever("tunable_op_live").evidence[0].jobs == ["7188"]
    rhp = h.lever("rccl_high_priority")
    assert rhp.status == LeverStatus.accepted_baked_in  # lesson 17
    assert rhp.change.env == {"TORCH_NCCL_HIGH_PRIORITY": 1, "GPU_MAX_HW_QUEUES": 2}
    assert h.baseline.change.env["TORCH_NCCL_HIGH_PRIORITY"] == 1  # baked into the baseline
    nw = h.lever("num_workers_12")
    assert nw.variance == VarianceClass.high  # lesson 9
    assert sorted(e.fom_delta_pct for e in nw.evidence) == [-10.7, 12.4]
    assert h.lever("precision_fp32").evidence[0].lessons == [13, 16]


def test_orbit2_verdicts_from_the_seed():
    o = cat("orbit2")
    tun = o.lever("tunable_op_warmup_then_use")
    # experimental after the isolated probe (27), then rejected as a correctness hazard (29)
    decisions = {e.decision: e for e in tun.evidence}
    assert decisions["experimental"].lessons == [27]
    assert "NaN" in decisions["rejected"].error and decisions["rejected"].lessons == [29]
    assert tun.status == LeverStatus.blocked
    assert o.lever("gpu_max_hw_queues_4").status == LeverStatus.blocked  # lesson 26
    assert "terminate called recursively" in o.lever("gpu_max_hw_queues_4").evidence[0].error
    nw = o.lever("num_workers_4")
    assert nw.variance == VarianceClass.high and nw.targets == []  # not a throughput lever (23, 31)
    assert {23, 31} <= set(nw.evidence[0].lessons)
    sd = o.lever("sdpa_efficient_backend")  # lesson 21
    assert sd.status == LeverStatus.accepted_baked_in and sd.change.env["ORBIT2_SDPA_BACKENDS"] == "EFFICIENT_ATTENTION,MATH"
    assert o.lever("precision_bf16").evidence[0].jobs == ["9261", "9264"]  # lesson 22
    assert o.baseline.change.env["ORBIT2_PRECISION"] == "bf16"


# ------------------------------------------------------------------ validation: unsafe values refused


def _toy_data() -> dict:
    return yaml.safe_load((LEVERS / "cpu-toy.yaml").read_text())


@pytest.mark.parametrize("value", ["2; rm -rf /", "$(id)", "`id`", "a b", "x|y", "a&b", "q'uote", "new\nline", "2\n", "a>b"])
def test_lever_value_with_shell_metacharacters_is_refused_in_one_line(value):
    data = _toy_data()
    data["levers"][0]["change"]["script_args"]["--num-workers"] = value
    with pytest.raises(InputError) as ei:
        L.parse_catalog(data, "cpu-toy.yaml")
    msg = str(ei.value)
    assert "\n" not in msg and "levers.0.change.script_args" in msg and "refused" in msg


def test_bad_names_and_types_are_refused(tmp_path):
    data = _toy_data()
    data["levers"][1]["change"]["env"] = {"BAD-NAME": 1}
    with pytest.raises(InputError, match="env name 'BAD-NAME'"):
        L.parse_catalog(data)
    data = _toy_data()
    data["levers"][1]["change"]["env"] = {"X": [1, 2]}
    with pytest.raises(InputError):
        L.parse_catalog(data)
    data = _toy_data()
    data["levers"][1]["change"]["script_args"] = {"num-workers; id": 2}
    with pytest.raises(InputError, match="script arg name"):
        L.parse_catalog(data)
    data = _toy_data()
    data["levers"].append(dict(data["levers"][0]))
    with pytest.raises(InputError, match="appears twice"):
        L.parse_catalog(data)
    data = _toy_data()
    data["fom"]["primary"] = "mfu"
    with pytest.raises(InputError, match="primary FOM"):
        L.parse_catalog(data)
    bad = tmp_path / "bad.yaml"
    bad.write_text("levers: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        L.load_catalog(bad)
    with pytest.raises(InputError, match="does not exist"):
        L.load_catalog(tmp_path / "missing.yaml")


@pytest.mark.parametrize("field", ["global_batch_size", "nodes", "ntasks_per_node", "cpus_per_task", "gpus_per_node"])
@pytest.mark.parametrize("value, needle", [(True, "not a count"), (False, "not a count"), (1e30, "integer"),
                                           (float("inf"), "finite"), (-3, "greater than or equal"), ([1], "integer")])
def test_baseline_counts_that_are_not_counts_are_refused(field, value, needle):
    """The baseline's counts: a YAML boolean (which pydantic would take as 1 / 0), a number past any
    batch, infinity, a negative or a list is one InputError line naming the field."""
    data = _toy_data()
    data["baseline"][field] = value
    with pytest.raises(InputError) as ei:
        L.parse_catalog(data, "cpu-toy.yaml")
    msg = str(ei.value)
    assert "\n" not in msg and f"baseline.{field}" in msg and needle in msg, msg


def test_blocked_lever_needs_its_verbatim_error():
    data = _toy_data()
    blocked = next(lv for lv in data["levers"] if lv["status"] == "blocked")
    blocked["evidence"] = [{"note": "it failed"}]
    with pytest.raises(InputError, match="verbatim error"):
        L.parse_catalog(data)


# ------------------------------------------------------------------ applying levers


def test_effective_change_and_rendered_arguments():
    t = cat("cpu-toy")
    ch = L.effective_change(t, ["num_workers_2"], "pin_memory")
    args = L.script_args_list(ch)
    i = args.index("--num-workers")
    assert args[i + 1] == "2" and "--pin-memory" in args and args.count("--num-workers") == 1
    assert L.env_strings(L.effective_change(t, [], "noop_env")) == {"AI4S_TOY_NOOP": "1"}
    assert L.nominal_batch(t, L.effective_change(t, [], "batch_128")) == 128
    assert L.nominal_batch(t, ch) == 64
    assert L.script_args_list(LeverChange(script_args={"--x": False, "--y": True})) == ["--y"]
    with pytest.raises(InputError, match="not in the cpu-toy catalog"):
        L.effective_change(t, ["nope"])


def test_build_spec_renders_a_job_script_with_the_lever(tmp_path):
    from ai4s_graph.graph.optimize.nodes import build_spec
    from ai4s_graph.tools.slurm.jobscript import render
    from ai4s_graph.tools.slurm.client import ClusterConfig

    t = cat("cpu-toy")
    spec = build_spec(t, L.effective_change(t, [], "num_workers_2"), job_name="ai4s-test-i1-s0", exclude=["node1"])
    text = render(spec, ClusterConfig(shared_dir=str(tmp_path)))
    assert "--num-workers 2" in text and "#SBATCH --exclude=node1" in text and "--data-latency-ms 60" in text
    o = cat("orbit2")
    spec = build_spec(o, L.effective_change(o, [], "scale_out_2node"), job_name="o2", exclude=[])
    assert spec.nodes == 2 and "nodes" not in spec.sbatch_options  # a JobSpec field, not an extra option
    text = render(spec, ClusterConfig(shared_dir=str(tmp_path)))
    assert "export ORBIT2_SDPA_BACKENDS=EFFICIENT_ATTENTION,MATH" in text and "#SBATCH --nodes=2" in text
    h = cat("hydragnn")
    text = render(build_spec(h, L.effective_change(h, [], "num_workers_12"), job_name="h", exclude=[]),
                  ClusterConfig(shared_dir=str(tmp_path)))
    assert "export TORCH_NCCL_HIGH_PRIORITY=1" in text and "export HYDRAGNN_NUM_WORKERS=12" in text


# ------------------------------------------------------------------ picker


def test_picker_skips_blocked_baked_in_tried_and_applied():
    t = cat("cpu-toy")
    names = [lv.name for lv in L.eligible_levers(t)]
    assert "compile_blocked_example" not in names and "baked_in_example" not in names
    assert L.pick_lever(t).name == "num_workers_2"  # catalog order, candidates first
    assert L.pick_lever(t, tried=["num_workers_2"]).name == "threads_2"
    assert L.pick_lever(t, tried=["threads_2"], applied=["num_workers_2"]).name == "iterable_shards_3w"
    every = [lv.name for lv in L.eligible_levers(t)]
    assert L.pick_lever(t, tried=every) is None
    h = cat("hydragnn")
    assert {lv.name for lv in L.eligible_levers(h)} == {"num_workers_12", "batch_800", "precision_fp32"}


def test_picker_prefers_the_report_bottleneck_and_recommendations(tmp_path):
    t = cat("cpu-toy")
    assert L.pick_lever(t, bottleneck="compute-bound").name == "threads_2"
    assert L.pick_lever(t, bottleneck=BottleneckClass.dispatch).name == "batch_128"
    assert L.pick_lever(t, bottleneck="data-loader-bound", recommended=["pin_memory"]).name == "pin_memory"
    rep = Report(jobid="91001", bottleneck=Bottleneck(klass=BottleneckClass.compute),
                 levers=[{"name": "threads_2", "why": "compute-bound"}])
    p = tmp_path / "report.json"
    p.write_text(rep.model_dump_json())
    assert L.read_report_hint(p) == ("compute-bound", ["threads_2"])
    p.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        L.read_report_hint(p)


def test_picker_seam_accepts_a_custom_picker_but_never_a_blocked_lever():
    t = cat("cpu-toy")
    seen = {}

    def last(cands, ctx):
        seen.update(ctx)
        return cands[-1]

    assert L.pick_lever(t, picker=last, bottleneck="compute-bound").name == "batch_128"
    assert seen["bottleneck"] == "compute-bound" and seen["model"] == "cpu-toy"
    with pytest.raises(InputError, match="not an eligible lever"):
        L.pick_lever(t, picker=lambda c, ctx: t.lever("compile_blocked_example"))


# ------------------------------------------------------------------ noise rule (lesson 9)


def test_noise_band_is_the_measured_spread_with_a_floor():
    spec = FomSpec(primary="epoch_time_s", min_noise_pct=2.0)
    assert L.spread_pct([10.0, 11.0]) == pytest.approx(100 / 10.5)
    assert L.noise_band_pct([10.0, 11.0], spec) == pytest.approx(9.5238, rel=1e-3)
    assert L.noise_band_pct([10.0, 10.01], spec) == 2.0
    with pytest.raises(ValueError, match="at least twice"):
        L.noise_band_pct([10.0], spec)


def test_decide_accepts_only_beyond_the_noise_band_both_directions():
    lat = FomSpec(primary="epoch_time_s")
    thr = FomSpec(primary="throughput_samples_per_s")
    act, why, d = L.decide([90.0], best=100.0, noise_pct=5.0, spec=lat)
    assert act == "accept" and d == pytest.approx(10.0) and "beats best" in why
    act, why, d = L.decide([97.0], best=100.0, noise_pct=5.0, spec=lat)
    assert act == "revert" and d == pytest.approx(3.0) and "noise" in why
    act, _, d = L.decide([110.0], best=100.0, noise_pct=5.0, spec=lat)
    assert act == "revert" and d == pytest.approx(-10.0)
    act, _, d = L.decide([4089.0], best=1718.0, noise_pct=1.5, spec=thr)  # lesson 22: bf16 vs fp32
    assert act == "accept" and d == pytest.approx(138.0, abs=0.1)
    act, _, _ = L.decide([3068.0], best=2987.0, noise_pct=3.0, spec=thr)  # lesson 31: +2.7% real = noise
    assert act == "revert"


def test_high_variance_lever_must_replicate_within_5_percent():
    lat = FomSpec(primary="epoch_time_s")
    act, why, _ = L.decide([87.6], best=100.0, noise_pct=2.0, spec=lat, variance="high")
    assert act == "replicate" and "lesson 9" in why
    # lesson 9: num_workers_12 -12.4% one run, +10.7% the other
    act, why, _ = L.decide([87.6, 110.7], best=100.0, noise_pct=2.0, spec=lat, variance="high")
    assert act == "replicate-disagrees" and "5%" in why
    act, why, d = L.decide([87.6, 89.0], best=100.0, noise_pct=2.0, spec=lat, variance="high")
    assert act == "accept" and "replicate agrees" in why and d == pytest.approx(11.7)
    act, _, _ = L.decide([99.0, 98.5], best=100.0, noise_pct=2.0, spec=lat, variance="high")
    assert act == "revert"


# ------------------------------------------------------------------ integrity guards (lessons 23, 31)


def _run(job: str, **fom) -> RunResult:
    base = {"global_batch_size": 4096, "realized_batch": 4096.0, "batches_per_epoch": 3,
            "partial_step_fraction": 0.0, "hbm_reserved_pct": 82.0, "epoch_losses": [2.9, 2.86],
            "loss_sanity_pass": True}
    base.update(fom)
    return RunResult(job_id=job, state="COMPLETED", fom=base, primary=fom.get("throughput_samples_per_s", 3150.0))


def test_guard_rejects_the_lesson_23_phantom_throughput():
    spec = cat("orbit2").fom
    ref = _run("10504", throughput_samples_per_s=3150.0)
    # num_workers=4: nominal 4096 but the real per-step batch shrank ~2.4x, HBM 236 -> 98 GB,
    # max_batches_per_epoch 3 -> 4; the nominal throughput said +129% (7215 vs 3150 s/s)
    phantom = _run("10505", throughput_samples_per_s=7215.0, realized_batch=1700.0, batches_per_epoch=4,
                   hbm_reserved_pct=34.0, partial_step_fraction=0.25)
    g = L.integrity_guard(phantom, ref, spec)
    assert not g.passed
    failed = {c.name for c in g.checks if not c.passed}
    assert {"realized_over_nominal", "realized_batch", "batches_per_epoch", "memory", "partial_step_fraction"} <= failed
    assert any("realized/nominal batch ratio 0.415" in r for r in g.reasons)
    # the planted lever looked like a win: the delta the guard refused to use
    assert L.improvement_pct(7215.0, 3150.0, "higher") > 100


def test_guard_passes_a_comparable_run_and_respects_changes_batch():
    spec = cat("orbit2").fom
    ref = _run("a")
    assert L.integrity_guard(_run("b", hbm_reserved_pct=83.0), ref, spec).passed
    big = _run("c", global_batch_size=8192, realized_batch=8192.0, batches_per_epoch=2, hbm_reserved_pct=95.0)
    assert not L.integrity_guard(big, ref, spec).passed
    assert L.integrity_guard(big, ref, spec, changes_batch=True).passed
    # a declared batch change still may not hide a realized < nominal artifact
    short = _run("d", global_batch_size=8192, realized_batch=4096.0, batches_per_epoch=2)
    g = L.integrity_guard(short, ref, spec, changes_batch=True)
    assert not g.passed and [c.name for c in g.checks if not c.passed] == ["realized_over_nominal"]


def test_guard_rejects_a_diverged_loss_and_one_sided_measurements():
    spec = cat("orbit2").fom
    ref = _run("a")
    nan = _run("b", epoch_losses=[5.5, math.nan], loss_sanity_pass=False)  # lesson 29
    g = L.integrity_guard(nan, ref, spec)
    assert not g.passed and any("non-finite" in r for r in g.reasons)
    one = _run("c")
    one.fom.pop("hbm_reserved_pct")
    g = L.integrity_guard(one, ref, spec)
    assert not g.passed and any("measured differently" in r or "only one run" in r for r in g.reasons)
    # CPU runs: peak RSS stands in for HBM
    cpu_ref = RunResult(job_id="1", state="COMPLETED", fom={"peak_rss_bytes": 300e6, "realized_batch": 64,
                                                          "global_batch_size": 64, "batches_per_epoch": 10})
    cpu = RunResult(job_id="2", state="COMPLETED", fom={"peak_rss_bytes": 320e6, "realized_batch": 64,
                                                      "global_batch_size": 64, "batches_per_epoch": 10})
    assert L.integrity_guard(cpu, cpu_ref, cat("cpu-toy").fom).passed


# ------------------------------------------------------------------ catalog updates, journal, ledger


def _record(decision: Decision, lever: str = "threads_2", **kw) -> IterationRecord:
    return IterationRecord(loop_id="abcd1234", iteration=kw.pop("iteration", 2), kind="lever", lever=lever,
                           job_ids=["21"], fom_name="epoch_time_s", decision=decision, why="because", **kw)


def test_record_outcome_updates_a_copy_of_the_catalog():
    t = cat("cpu-toy")
    acc = L.record_outcome(t, _record(Decision.accepted, "num_workers_2", delta_pct=29.0))
    assert acc.lever("num_workers_2").status == LeverStatus.accepted_baked_in
    assert acc.baseline.change.script_args["--num-workers"] == 2
    assert t.lever("num_workers_2").status == LeverStatus.candidate  # the input is untouched
    fail = _record(Decision.failed, runs=[RunResult(job_id="21", state="FAILED", exit_code="1:0",
                                                   error="FAILED exit 1:0: RuntimeError: boom")])
    bl = L.record_outcome(t, fail)
    assert bl.lever("threads_2").status == LeverStatus.blocked
    assert bl.lever("threads_2").evidence[-1].error.startswith("FAILED exit 1:0: RuntimeError: boom")
    inf = L.record_outcome(t, _record(Decision.infra_failed))
    assert inf.lever("threads_2").status == LeverStatus.candidate  # infra never penalizes a lever (lesson 1)
    rev = L.record_outcome(t, _record(Decision.rejected_guard))
    assert rev.lever("threads_2").evidence[-1].decision == "rejected-guard"
    out = L.dump_catalog(rev, Path(__import__("tempfile").mkdtemp()) / "c.yaml")
    assert L.load_catalog(out).lever("threads_2").evidence[-1].loop_id == "abcd1234"


def test_journal_is_append_once_per_iteration_and_tolerates_a_torn_line(tmp_path):
    assert L.append_journal(tmp_path, _record(Decision.reverted, iteration=1))
    assert not L.append_journal(tmp_path, _record(Decision.reverted, iteration=1))  # resumed record step
    with (tmp_path / L.JOURNAL).open("a") as f:
        f.write('{"loop_id": "abcd1234", "iterat')  # killed mid-write
    assert [r["iteration"] for r in L.read_journal(tmp_path)] == [1]


def test_submission_ledger(tmp_path):
    assert L.find_submission(tmp_path, "iter1-sub0") is None
    L.record_submission(tmp_path, "iter1-sub0", "41", lever="threads_2")
    L.record_submission(tmp_path, "iter1-sub1", "42")
    assert L.find_submission(tmp_path, "iter1-sub0") == "41"
    assert json.loads((tmp_path / L.SUBMISSIONS).read_text().splitlines()[0])["lever"] == "threads_2"
