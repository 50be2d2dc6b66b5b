"""The levers follow the catalog and the evidence (issue 24 point 4; tools/levers/policy.py,
graph/rules/levers.py): a lever the workload's catalog blocks is dropped, and so is every lever that
implies a mechanism a blocked lever implies (one declaration per lever, ``implies``, never name
matching); a lever whose declared precondition (``requires``) the trace's one pass did not count is
dropped; each drop is returned with its reason. Known answers from the bundled catalogs (seed 000
lesson 6), hand-built catalogs of another member of the kind, and the bundled runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.graph.rules import levers as R
from ai4s_graph.graph.rules import registry
from ai4s_graph.state import Bottleneck, BottleneckClass, LeverRecommendation, Manifest
from ai4s_graph.state.loop import LeverStatus
from ai4s_graph.tools.levers import catalog as L
from ai4s_graph.tools.levers.policy import LeverPolicy, check_ids, policy_from
from ai4s_graph.tools.levers.recommend import lever_policy, policy_for
from ai4s_graph.tools.levers.rules import EVIDENCE, MECHANISMS, TRAITS

REPO = Path(REPO_ROOT)
CATALOGS = REPO / "tools" / "levers" / "catalogs"
DOUBLE_BACKWARD = "torch.compile with aot_autograd does not currently support double backward"


def _recs(*names: str) -> list[LeverRecommendation]:
    return [LeverRecommendation(name=n, why="class") for n in names]


def _catalog(levers: list[dict]):
    return L.parse_catalog({"model": "toy", "baseline": {"template": "cpu-toy"}, "levers": levers})


def test_hydragnn_blocks_torch_compile_and_with_it_every_lever_that_compiles():
    p = policy_for("hydragnn")
    assert p.catalog == "levers/hydragnn.yaml"
    assert set(p.blocked) == {"torch_compile_e3nn", "torch_jit_script", "tunable_op_live", "tunable_op_warmup_then_use"}
    # TunableOp's blocks declare no mechanism: they block only themselves (lesson 27: not platform-blocked)
    assert p.blocked_mechanisms() == {"torch_compile": "torch_compile_e3nn", "torch_jit": "torch_jit_script"}
    kept, dropped = R.filter_levers(_recs("cuda_graphs", "torch_compile_reduce_overhead", "torch_compile",
                                          "compile_dynamic_shapes", "fuse_small_kernels", "batch_800"), {}, p)
    assert [lv.name for lv in kept] == ["fuse_small_kernels", "batch_800"]
    assert [lv.name for lv in dropped] == ["cuda_graphs", "torch_compile_reduce_overhead", "torch_compile",
                                           "compile_dynamic_shapes"]
    assert all("implies torch_compile" in lv.why and "torch_compile_e3nn" in lv.why and DOUBLE_BACKWARD in lv.why
               and "lesson 2, 6, 7" in lv.why for lv in dropped)


def test_gnn_blocks_cuda_graphs_by_name_and_torch_compile_reduce_overhead_by_its_mechanism():
    p = lever_policy(Manifest(jobid="92001", model="gnn"))
    kept, dropped = R.filter_levers(_recs("cuda_graphs", "torch_compile_reduce_overhead", "larger_batch_per_launch"), {}, p)
    assert [lv.name for lv in kept] == ["larger_batch_per_launch"]
    why = {lv.name: lv.why for lv in dropped}
    assert why["cuda_graphs"].startswith("levers/gnn.yaml blocks it (cuda_graphs: RuntimeError: " + DOUBLE_BACKWARD)
    assert why["torch_compile_reduce_overhead"].startswith("it implies torch_compile, which levers/gnn.yaml blocks")


def test_another_member_a_blocked_graph_capture_blocks_reduce_overhead_but_not_plain_compile():
    # a catalog that blocks CUDA graphs alone (variable graph shapes: a capture per shape), not torch.compile
    cat = _catalog([{"name": "graph_capture", "status": "blocked", "implies": ["cuda_graphs"],
                     "evidence": [{"error": "RuntimeError: CUDA graph capture: shapes differ per batch"}]}])
    p = policy_from(None, cat, "levers/toy.yaml")
    kept, dropped = R.filter_levers(_recs("torch_compile_reduce_overhead", "torch_compile", "hip_graphs"), {}, p)
    # reduce-overhead implies cuda_graphs (rules.TRAITS); plain torch.compile and an undeclared name stay
    assert [lv.name for lv in kept] == ["torch_compile", "hip_graphs"]
    assert [lv.name for lv in dropped] == ["torch_compile_reduce_overhead"]
    assert "implies cuda_graphs" in dropped[0].why and "graph_capture" in dropped[0].why


def test_no_catalog_blocks_nothing_and_the_straggler_lever_is_never_dropped():
    p = policy_for(None)
    assert p.catalog is None and not p.blocked
    kept, dropped = R.filter_levers(_recs("cuda_graphs", "torch_compile"), {}, p)
    assert [lv.name for lv in kept] == ["cuda_graphs", "torch_compile"] and dropped == []
    strict = LeverPolicy(blocked={R.STRAGGLER_LEVER: "x"}, implies={}, requires={})
    assert [lv.name for lv in R.filter_levers(_recs(R.STRAGGLER_LEVER), {}, strict)[0]] == [R.STRAGGLER_LEVER]
    # no policy: choose behaves as before
    assert [lv.name for lv in R.choose(_recs("cuda_graphs"), {}, [])] == ["cuda_graphs"]


def test_every_declared_mechanism_and_precondition_is_in_its_table():
    for f in sorted(CATALOGS.glob("*.yaml")):
        cat = L.load_catalog(f)
        check_ids({lv.name: lv.implies for lv in cat.levers}, {lv.name: lv.requires for lv in cat.levers})
    check_ids({k: v.get("implies", ()) for k, v in TRAITS.items()}, {k: v.get("requires", ()) for k, v in TRAITS.items()})
    with pytest.raises(ValueError, match="lever x: implies 'jit_magic'"):
        check_ids({"x": ["jit_magic"]}, {})
    with pytest.raises(ValueError, match="lever y: requires 'moe'"):
        check_ids({}, {"y": ["moe"]})
    # a lever declared in two places declares the same mechanisms and preconditions (one meaning per id)
    seen = {k: (tuple(v.get("implies", ())), tuple(v.get("requires", ()))) for k, v in TRAITS.items()}
    for f in sorted(CATALOGS.glob("*.yaml")):
        for lv in L.load_catalog(f).levers:
            mine = (tuple(lv.implies), tuple(lv.requires))
            if lv.name in seen:
                assert mine == seen[lv.name], (f.name, lv.name)
            seen[lv.name] = mine
    assert set(MECHANISMS) >= {m for ms, _ in seen.values() for m in ms}


def test_the_optimizer_never_tries_a_lever_whose_mechanism_the_catalog_blocks():
    cat = _catalog([
        {"name": "compile_inductor", "status": "blocked", "implies": ["torch_compile"],
         "evidence": [{"error": "RuntimeError: " + DOUBLE_BACKWARD, "lessons": [6]}]},
        {"name": "compile_dynamic", "change": {"script_args": {"--compile": "dynamic"}}, "implies": ["torch_compile"]},
        {"name": "batch_x2", "change": {"script_args": {"--batch-size": 32}}, "changes_batch": True},
    ])
    assert L.blocked_mechanisms(cat) == {"torch_compile": "compile_inductor"}
    assert L.mechanism_blocked(cat, cat.lever("compile_dynamic")) == \
        "implies torch_compile, blocked in the catalog through compile_inductor"
    assert [lv.name for lv in L.eligible_levers(cat)] == ["batch_x2"]
    assert cat.lever("compile_dynamic").status is LeverStatus.candidate  # its own status is untouched


# ------------------------------------------------------------------ preconditions


FLASH = {"aten::scaled_dot_product_attention": 72, "aten::_scaled_dot_product_cudnn_attention": 36,
         "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0": 36}
"""The event names of the bundled ViT controls (checkpointing-control, profiler-plain): cuDNN flash SDPA."""


def _findings(*counts: dict[str, int]) -> dict:
    return {"trace": {"ranks": [{"rank": i, "event_names": c} for i, c in enumerate(counts)]}}


def test_sdpa_efficient_needs_attention_on_the_math_backend():
    p = policy_for(None)
    cases = {
        "cuDNN flash only (the bundled ViT controls)": (FLASH, False),
        "no attention at all (a GEMM or conv net)": ({"aten::mm": 10}, False),
        # another member: ROCm's fused kernels (aotriton / CK) are fused too
        "ROCm aotriton flash": ({"aten::_scaled_dot_product_flash_attention": 12, "attn_fwd": 12}, False),
        "the math backend on CUDA": ({"aten::_scaled_dot_product_attention_math": 24}, True),
        "the math backend on one rank of two": (None, True),
    }
    for what, (counts, keep) in cases.items():
        f = _findings(FLASH, {"aten::_scaled_dot_product_attention_math": 6}) if counts is None else _findings(counts)
        kept, dropped = R.filter_levers(_recs("sdpa_efficient", "scale_out"), f, p)
        assert ("sdpa_efficient" in [lv.name for lv in kept]) is keep, what
        assert "scale_out" in [lv.name for lv in kept]
        if not keep:
            assert "attention on SDPA's unfused math backend" in dropped[0].why and "absent" in dropped[0].why
    # no trace read: the precondition is not checked, the lever stays
    assert [lv.name for lv in R.filter_levers(_recs("sdpa_efficient"), {}, p)[0]] == ["sdpa_efficient"]
    assert R.event_counts({}) is None
    assert R.event_counts(_findings({"a": 1}, {"a": 2, "b": 0})) == {"a": 3, "b": 0}


def test_fsdp_prefetch_needs_fsdp_and_the_one_pass_counts_both_families():
    p = policy_for(None)
    ddp = {"DistributedDataParallel.forward": 30, "nccl:all_reduce": 30}
    fsdp = {"FSDP::all_gather": 30, "FSDP::pre_forward": 30}
    assert [lv.name for lv in R.filter_levers(_recs("fsdp_prefetch"), _findings(ddp), p)[1]] == ["fsdp_prefetch"]
    assert [lv.name for lv in R.filter_levers(_recs("fsdp_prefetch"), _findings(fsdp), p)[0]] == ["fsdp_prefetch"]
    for name in ("aten::_scaled_dot_product_attention_math", "FSDP::all_gather",
                 "FullyShardedDataParallel.forward"):
        assert registry.event_name_wanted(name), name
    assert set(EVIDENCE) == {"sdpa_math", "fsdp"}


# ------------------------------------------------------------------ the bundled runs end to end


def _run_case(tmp_path: Path, perf_run: Path) -> dict:
    job = json.loads((perf_run / "manifest.json").read_text())["jobid"]
    out = tmp_path / job
    p = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", "--job", job, "--perf-run", str(perf_run),
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads((out / "report.json").read_text()) | {"md": (out / "report.md").read_text()}


def test_the_gnn_example_never_leads_with_a_lever_its_catalog_blocks(tmp_path):
    rep = _run_case(tmp_path, REPO / "examples" / "perf-runs" / "92001")
    names = [lv["name"] for lv in rep["levers"]]
    assert rep["bottleneck"]["cause"] == "kernel-launch-overhead"
    assert not {"cuda_graphs", "torch_compile", "torch_compile_reduce_overhead"} & set(names)
    dropped = {d["name"]: d["why"] for d in rep["levers_dropped"]}
    assert set(dropped) == {"cuda_graphs", "torch_compile_reduce_overhead"}
    assert "levers/gnn.yaml blocks it" in dropped["cuda_graphs"] and DOUBLE_BACKWARD in dropped["cuda_graphs"]
    assert "Left out (the lever catalog or the trace rules them out):" in rep["md"] and "- `cuda_graphs` — " in rep["md"]


@pytest.mark.parametrize("case, first, dropped", [
    ("gemm-base", "scale_out", ["sdpa_efficient"]),           # bf16 GEMMs, no attention
    ("sdpa-flash", None, ["sdpa_efficient"]),                 # cuDNN flash SDPA: already fused
    ("sdpa-math", "sdpa_fused_backend", []),                  # the math backend: the cause's lever leads
])
def test_the_bundled_compute_bound_runs_get_sdpa_levers_only_with_the_math_backend(tmp_path, case, first, dropped):
    rep = _run_case(tmp_path, REPO / "bench" / "accuracy" / "cases" / case)
    names = [lv["name"] for lv in rep["levers"]]
    assert ("sdpa_efficient" in names) is (not dropped)
    if first:
        assert names[0] == first
    assert [d["name"] for d in rep["levers_dropped"]] == dropped


def test_the_loop_skips_what_the_analysis_left_out_and_what_its_catalog_blocks_by_mechanism(tmp_path):
    from ai4s_graph.graph.optimize import graph as O
    from ai4s_graph.graph.optimize import nodes as N

    cat = L.parse_catalog({
        "model": "toy", "fom": {"primary": "throughput_samples_per_s"}, "baseline": {"template": "cpu-toy"},
        "levers": [
            {"name": "compile_inductor", "status": "blocked", "implies": ["torch_compile"], "targets": ["compute-bound"],
             "evidence": [{"error": "RuntimeError: " + DOUBLE_BACKWARD, "lessons": [6]}]},
            {"name": "compile_max_autotune", "change": {"env": {"AI4S_TORCH_COMPILE": "max-autotune"}},
             "implies": ["torch_compile"], "targets": ["compute-bound"]},
            {"name": "sdpa_fused_backend", "change": {"script_args": {"--sdpa-backend": "auto"}},
             "requires": ["sdpa_math"], "targets": ["compute-bound"]},
            {"name": "tf32_matmul", "change": {"env": {"AI4S_MATMUL_PRECISION": "high"}}, "targets": ["compute-bound"]},
        ]})
    path = L.dump_catalog(cat, tmp_path / "toy.yaml")
    req = O.new_loop(model="toy", catalog_path=path, loop_root=tmp_path / "loops", iterations=3)
    run = {"job_id": "2", "state": "COMPLETED", "fom": {}, "primary": 100.0}
    why_left = "its precondition, attention on SDPA's unfused math backend, is absent: no such event in the trace"
    st = {"request": {**req.model_dump(mode="json"), "out_dir": req.loop_dir}, "catalog": cat.model_dump(mode="json"),
          "applied": [], "tried": [], "iteration": 1, "levers_done": 0, "node_hours_used": 0.0, "current": None,
          "stop": None, "baseline": {"values": [100.0, 101.0], "mean": 100.5, "noise_pct": 2.0, "job_ids": ["1", "2"],
                                     "nodes_list": []},
          "best": {"value": 100.5, "levers": [], "run": run, "job_ids": ["1", "2"], "iteration": 0},
          "analysis": {"job_id": None, "bottleneck": "compute-bound", "recommended": ["sdpa_fused_backend"],
                       "predictions": {}, "dropped": {"sdpa_fused_backend": why_left}}}
    upd, _ = N.make_pick_body()(st)
    cur = upd["current"]
    assert cur["lever"] == "tf32_matmul"   # recommended-but-left-out and mechanism-blocked levers are never tried
    skipped = {s["lever"]: s["why"] for s in cur["skipped"]}
    assert skipped["sdpa_fused_backend"] == "the analysis left it out: " + why_left
    assert skipped["compile_max_autotune"] == "implies torch_compile, blocked in the catalog through compile_inductor"
    assert "compile_inductor" not in skipped   # blocked by its own status, listed nowhere as a candidate
    # the report reader carries levers_dropped through
    from ai4s_graph.graph.optimize.nodes.analysis import read_report

    rp = tmp_path / "report.json"
    rp.write_text(json.dumps({"bottleneck": {"klass": "compute-bound"}, "levers": [{"name": "tf32_matmul", "why": "x"}],
                              "levers_dropped": [{"name": "sdpa_efficient", "why": why_left}]}))
    assert read_report(rp)["dropped"] == {"sdpa_efficient": why_left}
