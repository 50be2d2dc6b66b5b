"""The injected causes of the accuracy benchmark (workloads/faults.py, bench/accuracy/cases.py) on
CPU: every control is its case with the lever applied (on the parsed arguments), the lever
catalog says the same as cases.LEVERS, each ``# injected:`` line is where the truth says, and tiny
CPU runs of the new faults leave their signature in a real kineto trace (counts known by
construction: layer norms recomputed, one ``.item()`` per parameter tensor, compiled regions per
step, python_function events at the truth's ``file(def_line): function``, batch-1 shapes x k).

GPU-only signatures (TF32 sgemm kernels, cuDNN layout transposes, pageable memcpy, cudaMalloc
churn) cannot show on a CPU; for those the knobs are checked to reach the run (``run_info``)."""

from __future__ import annotations

import collections
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the workload needs torch (pip install 'ai4s-graph[workload]')")

import ai4s_graph  # noqa: E402
from ai4s_graph.workloads import faults, train  # noqa: E402
from bench.accuracy import cases as C  # noqa: E402

REPO = ai4s_graph.REPO_ROOT
HOOKS = str(REPO / "workloads" / "lever_hooks.py")
VOLATILE = {"out_dir", "jobid", "truth", "write_manifest", "log_format", "device", "fault"}
"""Namespace keys that are not the run's configuration (``fault`` is an alias already resolved
into the knobs)."""


def _config(args: list[str]) -> dict:
    ns = vars(train.parse_args([*args, "--out-dir", "/nonexistent"]))
    return {k: v for k, v in ns.items() if k not in VOLATILE}


def _by_id() -> dict[str, dict]:
    return {c["jobid"]: c for c in C.CASES}


# ------------------------------------------------------------------------------------ cases and levers
def test_apply_change_replaces_removes_and_appends_like_the_job_script():
    args = ["--model", "vit", "--host-sync", "--num-workers", "1", "--fault", "none"]
    got, env = C.apply_change(args, {"A": "1"}, {"script_args": {"--host-sync": False, "--num-workers": 8,
                                                                "--pin-memory": True, "--x": False, "--y": 0},
                                                "env": {"B": 1, "A": "0"}})
    assert got == ["--model", "vit", "--num-workers", "8", "--fault", "none", "--pin-memory", "--y", "0"]
    assert env == {"A": "0", "B": "1"}


def test_every_control_is_its_case_with_the_lever_applied():
    by = _by_id()
    pairs = 0
    for c in C.CASES:
        t = c["truth"]
        if not t.get("control"):
            continue
        ctl = by[t["control"]]
        assert ctl["truth"]["cause"] == "none" and c["jobid"] in ctl["truth"].get("control_of", [c["jobid"]])
        assert ctl["gpus"] == c["gpus"]
        if t["lever"] is None:  # the GPU shared with another process: the control is the run without the hog
            assert c["hog"] and not ctl["hog"] and c["args"] == ctl["args"] and c["env"] == ctl["env"]
            continue
        args, env = C.apply_change(c["args"], c["env"], C.LEVERS[t["lever"]][0])
        assert _config(args) == _config(ctl["args"]), (c["jobid"], t["lever"], ctl["jobid"])
        assert env == ctl["env"], (c["jobid"], ctl["jobid"])
        assert _config(c["args"]) != _config(ctl["args"]) or c["env"] != ctl["env"]  # the lever changes something
        pairs += 1
    # every injected case has its control but the first ones whose lever needs torch.compile/CUDA graphs or a
    # larger batch (93001 exposed communication, 93103 launch-bound, 93104 memory-bound) and the healthy GEMM
    without = {c["jobid"] for c in C.CASES if c["truth"]["cause"] != "none" and not c["truth"]["control"]}
    assert without == {"93001", "93103", "93104", "93105"}
    assert pairs == sum(1 for c in C.CASES if c["truth"]["control"]) - 1  # all but 93109 (the hog)


def test_truth_vocabulary_order_and_plan():
    by = _by_id()
    for c in C.CASES:
        t = c["truth"]
        assert t["cause"] in C.CAUSES and (t["class"] is None or t["class"] in
                                           {"compute-bound", "dispatch-bound", "memory-bound", "data-loader-bound",
                                            "communication-bound"})
        if t["lever"]:
            assert t["cause"] in C.LEVERS[t["lever"]][1], (c["jobid"], t["lever"])
        for j in t.get("control_of", []):
            assert by[j]["truth"]["control"] == c["jobid"]
    one = [j for j in C.ORDER_1GPU if j != "long"]
    assert len(one) == len(set(one)) and C.ORDER_1GPU[-1] == "long"
    pending1 = {c["jobid"] for c in C.CASES if c["pending"] and c["gpus"] == 1}
    assert pending1 <= set(one) and all(by[j]["gpus"] == 1 for j in one)
    assert {c["jobid"] for c in C.CASES if c["pending"] and c["gpus"] == 2} <= set(C.ORDER_2GPU)
    causes1 = {by[j]["truth"]["cause"] for j in one} - {"none"}
    assert len(causes1) >= 20  # issue 24 + issue 34 causes one GPU can show
    host34 = {"d2h-param-copy", "allocator-churn", "per-sample-loop", "python-outside-ops", "gc-pause",
              "checkpoint-io-per-step", "cpu-preprocess-in-step"}
    assert host34 <= causes1
    total = C.WARMUP_EST_S + C.LONG_EST_S + sum(by[j]["est_s"] for j in one)
    # the whole 1-GPU order fits one device call: the 600 s per-call limit less generate.py's 30 s packing
    # reserve (the two loader cases run 300 steps since 2026-12-02, so the order no longer fits call 1's 420 s)
    assert total <= 570.0


def test_the_workload_catalog_holds_every_lever_with_the_same_change():
    from ai4s_graph.tools.levers.catalog import load_catalog

    cat = load_catalog(REPO / "tools" / "levers" / "catalogs" / "workload.yaml")
    assert {lv.name for lv in cat.levers} == set(C.LEVERS)
    for lv in cat.levers:
        want = C.LEVERS[lv.name][0]
        assert {k: str(v) for k, v in lv.change.env.items()} == want.get("env", {}), lv.name
        assert lv.change.script_args == want.get("script_args", {}), lv.name
        assert lv.targets, lv.name


def test_catalog_for_a_case_has_its_configuration_as_baseline(tmp_path):
    pytest.importorskip("yaml")
    from ai4s_graph.tools.levers.catalog import effective_change, load_catalog, script_args_list

    sys.path.insert(0, str(REPO / "bench" / "accuracy"))
    from bench.accuracy import generate

    cat = load_catalog(generate.catalog_for("93113", tmp_path / "c.yaml"))
    base = effective_change(cat, [])
    assert base.env["AI4S_WORKLOAD_MODULE"] == "ai4s_graph.workloads.lever_hooks"
    assert base.env["CUDA_LAUNCH_BLOCKING"] == "0"
    args = script_args_list(base)
    assert _config(args) == _config(_by_id()["93113"]["args"])
    fixed = script_args_list(effective_change(cat, [], "anomaly_detection_off"))
    assert _config(fixed) == _config(_by_id()["93120"]["args"])  # the lever reaches the control


def test_every_injected_line_is_found_with_its_function():
    for cause in set(train.SITE_CAUSES.values()) | {"straggler-host"}:
        s = faults.site(cause)
        assert s is not None, cause
        lines = (REPO / s["file"]).read_text().splitlines()
        assert lines[s["line"] - 1].rstrip().endswith(f"# injected: {cause}")
        assert lines[s["def_line"] - 1].lstrip().startswith(f"def {s['function']}(")
    assert faults.site("no-such-cause") is None


def test_lever_hook_sets_cudnn_benchmark_both_ways():
    from ai4s_graph.workloads import lever_hooks

    old = torch.backends.cudnn.benchmark
    try:
        assert lever_hooks.apply_hooks({"AI4S_CUDNN_BENCHMARK": "1"}) == ["cudnn.benchmark=True"]
        assert torch.backends.cudnn.benchmark is True
        assert lever_hooks.apply_hooks({"AI4S_CUDNN_BENCHMARK": "0"}) == ["cudnn.benchmark=False"]
        assert torch.backends.cudnn.benchmark is False
    finally:
        torch.backends.cudnn.benchmark = old


def test_bad_knob_combinations_are_refused_with_one_line():
    for args, word in ((["--model", "vit", "--graph-breaks"], "--graph-breaks"),
                       (["--model", "mlp", "--persistent-workers"], "--num-workers"),
                       (["--model", "gemm", "--checkpointing"], "--checkpointing")):
        cp = subprocess.run([sys.executable, str(REPO / "workloads" / "train.py"), *args, "--out-dir", "/tmp/x"],
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode == 2 and word in cp.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------------------------------ tiny CPU runs
def _env(**extra) -> dict[str, str]:
    e = {**os.environ, "AI4S_PROFILE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **extra}
    for k in ("AI4S_TSDB_URL", "SLURM_JOB_ID", "SLURMD_NODENAME", "RANK", "WORLD_SIZE", "MASTER_ADDR",
              "AI4S_PROFILE_WITH_STACK", "AI4S_PROFILE_RECORD_SHAPES"):
        e.pop(k, None)
    return {**e, **extra}


def _run(out: Path, args: list[str], **env) -> tuple[list[dict], dict]:
    """Run the workload (through lever_hooks, as the driver does) on the CPU; its trace events of
    the profiled steps and its run_info."""
    cmd = [sys.executable, HOOKS, "--device", "cpu", "--out-dir", str(out), "--no-telemetry", "--batch-size", "2",
           "--epochs", "1", "--steps-per-epoch", "8", *args]
    cp = subprocess.run(cmd, capture_output=True, text=True, env=_env(**env), timeout=300)
    assert cp.returncode == 0, cp.stderr[-3000:]
    ev = json.loads(gzip.decompress((out / "traces" / "trace_rank0.json.gz").read_bytes()))["traceEvents"]
    return ev, json.loads((out / "run_info.json").read_text())


def _count(ev: list[dict], name: str) -> int:
    return sum(1 for e in ev if e.get("ph") == "X" and e.get("name") == name)


@pytest.fixture(scope="module")
def vit_pair(tmp_path_factory):
    base = ["--model", "vit"]
    d = tmp_path_factory.mktemp("vit")
    return {k: _run(d / k, base + extra) for k, extra in
            (("control", []), ("anomaly", ["--detect-anomaly"]), ("ckpt", ["--checkpointing"]))}


def test_anomaly_mode_checks_every_backward_op_for_nan(vit_pair):
    ctl, case = vit_pair["control"][0], vit_pair["anomaly"][0]
    assert _count(ctl, "aten::isnan") == 0
    n = _count(case, "aten::isnan")
    # one NaN check (isnan -> _is_any_true -> item) per backward node output, 3 profiled steps
    assert n > 0 and n % 3 == 0 and _count(case, "aten::_is_any_true") == n
    assert vit_pair["anomaly"][1]["faults"] == ["detect-anomaly"]


def test_activation_checkpointing_runs_every_layer_forward_twice(vit_pair):
    ctl, case = vit_pair["control"][0], vit_pair["ckpt"][0]
    # vit on CPU: 2 encoder layers x 2 pre-norm LayerNorms, 3 profiled steps; recomputed in the backward
    assert _count(ctl, "aten::layer_norm") == 2 * 2 * 3
    assert _count(case, "aten::layer_norm") == 2 * _count(ctl, "aten::layer_norm")
    site = vit_pair["ckpt"][1]["sites"]["activation-checkpointing"]
    assert site["file"] == "workloads/models.py" and site["function"] == "forward"


def test_grad_norm_sync_reads_every_parameter_once_per_step(tmp_path):
    base = ["--model", "experts", "--optimizer-impl", "foreach"]
    ctl, _ = _run(tmp_path / "c", base)
    case, info = _run(tmp_path / "s", base + ["--grad-norm-sync", "after"])
    tensors = info["param_tensors"]
    assert tensors == 4 * 64  # experts on CPU: 64 experts x (w1, b1, w2, b2)
    assert _count(case, "aten::item") - _count(ctl, "aten::item") == tensors * 3
    assert info["host_syncs"] == tensors * 8 and info["sites"]["host-sync"]["function"] == "_norm"


def test_graph_breaks_split_the_compiled_step_into_regions(tmp_path):
    base = ["--model", "wide", "--compile", "default", "--compile-backend", "aot_eager"]
    ctl, _ = _run(tmp_path / "c", base)
    case, info = _run(tmp_path / "b", base + ["--graph-breaks"])

    def regions(ev):
        return sum(1 for e in ev if str(e.get("name", "")).startswith("Torch-Compiled Region"))

    assert regions(ctl) == 3  # one compiled region per profiled step
    # wide on CPU: 4 BreakingLinear layers; each graph break ends a region, so more than one per layer
    assert regions(case) >= 3 * 4
    assert info["sites"]["graph-break"]["function"] == "forward"


def test_host_side_faults_are_named_by_the_python_tracer_at_their_line(tmp_path):
    args = ["--model", "gemm", "--precision", "bf16", "--d2h-params", "--python-work-ms", "5", "--gc-collect",
            "--save-every-step", "--save-dir", str(tmp_path), "--preprocess", "cpu"]
    ev, info = _run(tmp_path / "h", args, AI4S_PROFILE_WITH_STACK="1")
    names = collections.Counter(e["name"] for e in ev if e.get("cat") == "python_function")
    for cause in ("d2h-param-copy", "python-outside-ops", "gc-pause", "checkpoint-io-per-step",
                  "cpu-preprocess-in-step"):
        s = info["sites"][cause]
        want = f"{Path(s['file']).name}({s['def_line']}): {s['function']}"
        hits = [n for n in names if n.endswith(want)]
        assert hits and sum(names[n] for n in hits) == 3, (cause, want)  # once per profiled step
    assert info["step_faults"] == {"preprocess": 8, "d2h_params": 8, "save": 8, "gc_collect": 8, "python_work": 8}
    assert info["profiler"] == {"record_shapes": False, "with_stack": True, "profile_memory": False}
    assert not list(tmp_path.glob("ai4s-ckpt-*.pt"))  # the per-step checkpoint is deleted (lesson 30)
    sorts = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name") == "aten::sort"]
    outer = [s for s in sorts if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in sorts)]
    assert len(outer) == 3  # the CPU preprocessing (torch.sort on the host), once per profiled step


def test_per_sample_loop_shows_k_batch1_calls_with_record_shapes(tmp_path):
    ev, info = _run(tmp_path / "p", ["--model", "gemm", "--aux-head", "2", "--per-sample-loop"],
                    AI4S_PROFILE_RECORD_SHAPES="1")
    lin = [e for e in ev if e.get("name") == "aten::linear"]
    one = [e for e in lin if (e.get("args", {}).get("Input Dims") or [[0]])[0][:1] == [1]]
    # batch 2 -> k = 2 samples, the aux head's 2 Linear each, 3 profiled steps
    assert len(one) == 2 * 2 * 3
    assert info["sites"]["per-sample-loop"]["file"] == "workloads/models.py"
    ctl, _ = _run(tmp_path / "b", ["--model", "gemm", "--aux-head", "2"], AI4S_PROFILE_RECORD_SHAPES="1")
    assert not [e for e in ctl if e.get("name") == "aten::linear"
                and (e.get("args", {}).get("Input Dims") or [[0]])[0][:1] == [1]]


def test_worker_respawn_stall_falls_in_the_profiled_window(tmp_path):
    """8 epochs of 3 steps: the profiler's active steps 9-11 start at epoch 3, whose first step
    waits for the new workers' 300 ms start (a sleep: a lower bound, whatever the load)."""
    ev, info = _run(tmp_path / "w", ["--model", "vit", "--epochs", "8", "--steps-per-epoch", "3", "--num-workers",
                                     "1", "--worker-init-ms", "300"])
    steps = {e["name"]: e["dur"] for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert sorted(steps) == ["ProfilerStep#10", "ProfilerStep#11", "ProfilerStep#9"]
    assert steps["ProfilerStep#9"] >= 300_000  # us
    assert info["steps"] == 24 and info["knobs"]["persistent_workers"] is False


# ------------------------------------------------------------------------------------ scorer and job script
def test_scorer_judges_the_first_lever_against_the_truth():
    from bench.accuracy import score as S

    truth = {"cause": "tf32-off", "class": "compute-bound", "rank": None, "lever": "tf32_matmul"}
    rep = {"bottleneck": {"klass": "compute-bound", "cause": "tf32-off"},
           "levers": [{"name": "tf32_matmul"}, {"name": "bf16_autocast"}], "claims": []}
    assert S.judge(truth, rep)["lever_ok"] is True
    wrong = S.judge(truth, {**rep, "levers": [{"name": "torch_compile"}, {"name": "tf32_matmul"}]})
    assert wrong["lever_ok"] is False and wrong["first_lever"] == "torch_compile"
    assert S.judge(truth, {**rep, "levers": []})["lever_ok"] is False
    assert S.judge({**truth, "lever": None}, rep)["lever_ok"] is None  # a control: not applicable
    assert S.judge(truth, None, "exit 1")["lever_ok"] is False
    res = S.summarize([{"case": "a", **S.judge(truth, rep)}, {"case": "b", **wrong}])
    assert res["overall"]["lever"] == {"right": 1, "of": 2, "accuracy": 0.5}


@pytest.mark.parametrize("env, want", [({}, "0"), ({"AI4S_PROFILE_WITH_STACK": "1"}, "1")])
def test_job_script_turns_profiler_stacks_on_through_the_environment(env, want, tmp_path):
    from ai4s_graph.tools.slurm.client import ClusterConfig
    from ai4s_graph.tools.slurm.jobscript import JobSpec, render

    spec = JobSpec(template="cpu-toy", job_name="t", model="workload", nodes=1, gpus_per_node=1, ntasks_per_node=1,
                   cpus_per_task=2, time_limit="00:10:00", env=env, script_args=["--model", "vit"], profile=True)
    text = render(spec, ClusterConfig(partition="gpu", shared_dir=str(tmp_path)))
    body = text.split("# levers", 1)[1].split("RUN_DIR=", 1)[0]  # the levers' exports and the profiler block
    cp = subprocess.run(["bash", "-c", body + '\necho "$AI4S_PROFILE $AI4S_PROFILE_WITH_STACK"'], capture_output=True,
                        text=True, env={"PATH": os.environ["PATH"]}, timeout=30)
    assert cp.returncode == 0 and cp.stdout.split() == ["1", want], cp.stderr


def test_driver_runs_a_case_packs_it_within_the_return_limits_and_verifies_it(tmp_path):
    """generate.py --cpu on one case end to end: the run, summary.json, one runs archive, and
    --verify reading it back (the CPU trace has no GPU events, which trace timeline says)."""
    gen = str(REPO / "bench" / "accuracy" / "generate.py")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cp = subprocess.run([sys.executable, gen, "--out", str(tmp_path / "out"), "--scratch", str(tmp_path / "s"), "--cpu",
                         "--only", "93120", "--skip", "warmup,long", "--budget", "600"], capture_output=True, text=True,
                        env=env, timeout=600)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["driver.log", "runs-1gpu.tar.gz", "summary.json"]
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["jobid"] for r in s["cases"]] == ["93120"] and s["failed"] == [] and s["packed"] == ["runs-1gpu.tar.gz"]
    assert s["cases"][0]["steps"]["n"] == 8 and s["plan_s"] == _by_id()["93120"]["est_s"] + C.WARMUP_EST_S
    assert "STATUS=ok" in s["log"][-1]
    v = subprocess.run([sys.executable, gen, "--verify", str(tmp_path / "out" / "runs-1gpu.tar.gz")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert v.returncode == 0 and v.stdout.strip().splitlines()[-1].startswith("STATUS=ok; reason=1 cases"), v.stdout
    bad = subprocess.run([sys.executable, gen, "--plan", "--only", "99999"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stdout.strip() == "STATUS=fail; reason=unknown jobid"
