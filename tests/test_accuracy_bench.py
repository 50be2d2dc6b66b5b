"""The accuracy benchmark (bench/accuracy): the bundled cases carry a valid truth, the truth is what
the bundled files show (the injected cause's signature against its control, the step ratio that
decides whether the cause is scored, the figures a control's class was read from), trimming keeps
the kept steps' figures, the judge scores hand-built reports with known answers (controls for no
cause), and the scorer on the bundled set does not drop below the recorded per-case floor
(bench/accuracy/floor.json, written by ``--write-floor`` from a measured score)."""

from __future__ import annotations

import collections
import gzip
import json
import os
import statistics
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from bench.accuracy import bundle as B
from bench.accuracy import score as S
from bench.accuracy.cases import CASES, CAUSES
from bench.accuracy.measured import EFFECT_RATIO, MEASURED

REPO = Path(__file__).resolve().parents[1]
CLASSES = {"compute-bound", "dispatch-bound", "memory-bound", "data-loader-bound", "communication-bound"}
BY_ID = {c["jobid"]: c for c in CASES}


@lru_cache(maxsize=None)
def _bundled() -> dict[str, tuple[Path, dict]]:
    """jobid -> (bundled directory, truth.json)."""
    return {t["jobid"]: (d, t) for d, t in S.load_cases(S.CASES_DIR)}


@lru_cache(maxsize=None)
def _events(jobid: str) -> tuple[dict, ...]:
    d, _ = _bundled()[jobid]
    return tuple(json.loads(gzip.decompress((d / "traces" / "trace_rank0.json.gz").read_bytes()))["traceEvents"])


def _steps(jobid: str) -> int:
    return len({e["name"] for e in _events(jobid) if e.get("cat") == "user_annotation"
                and str(e.get("name", "")).startswith("ProfilerStep#")})


def _per_step(jobid: str, pred) -> float:
    """Events of rank 0's bundled trace matching ``pred``, per profiled step."""
    return sum(1 for e in _events(jobid) if pred(e)) / _steps(jobid)


def _kernels(jobid: str) -> collections.Counter:
    return collections.Counter(e["name"] for e in _events(jobid) if e.get("cat") == "kernel")


def _log(jobid: str) -> list[float]:
    d, _ = _bundled()[jobid]
    return [float(ln.split(" time ")[1].split()[0]) for ln in (d / "train.log").read_text().splitlines()
            if ln.startswith("Batch ")]


# ------------------------------------------------------------------------------------------ the bundle
def test_every_benchmark_case_is_bundled_with_its_truth():
    cases = S.load_cases(S.CASES_DIR)
    causes = {t["cause"] for _, t in cases}
    assert causes <= set(CAUSES) and len(causes - {"none"}) >= 31
    for d, t in cases:
        man = json.loads((d / "manifest.json").read_text())
        assert man["jobid"] == t["jobid"] and man["state"] == "COMPLETED" and man["gpu"] == "NVIDIA H200"
        assert t["class"] is None or t["class"] in CLASSES
        assert t["rank"] is None or 0 <= t["rank"] < man["ranks"]
        traces = sorted(p.name for p in (d / "traces").glob("trace_rank*.json.gz"))
        assert traces == [f"trace_rank{r}.json.gz" for r in range(man["ranks"])]
        assert (d / "telemetry" / "export.jsonl").stat().st_size > 0
        assert any(ln.startswith("Batch ") for ln in (d / "train.log").read_text().splitlines())
        if not d.is_symlink():  # the 2-GPU cases are examples/perf-runs, bundled there
            assert sum(p.stat().st_size for p in d.rglob("*") if p.is_file()) < 1.75 * 2**20, d.name
            want = {k: BY_ID[t["jobid"]]["truth"].get(k) for k in B.TRUTH_KEYS if k in BY_ID[t["jobid"]]["truth"]}
            assert {k: t.get(k) for k in want} == want, d.name
            assert t["measured"]["log_steps"] == len(_log(t["jobid"]))
    real = [p for p in S.CASES_DIR.rglob("*") if p.is_file() and not any(q.is_symlink() for q in p.parents)]
    assert sum(p.stat().st_size for p in real) < 30 * 2**20
    # every case of cases.py that goes into the benchmark is bundled, with the same cause and rank
    want = {c["jobid"]: c["truth"] for c in CASES if c["bench"]}
    got = {t["jobid"]: t for _, t in cases}
    assert set(got) == set(want)
    for jid, t in want.items():
        assert (got[jid]["cause"], got[jid]["rank"]) == (t["cause"], t["rank"])


def test_controls_are_scored_for_a_class_and_sit_beside_their_cases():
    b = _bundled()
    for jid, (d, t) in b.items():
        if t.get("control_of"):
            assert t["cause"] == "none" and t["class"] in CLASSES, d.name  # a control is scored for its class
            assert set(t.get("present") or ()) <= set(CAUSES) - {"none"}
        if t.get("control") and BY_ID[t["control"]]["bench"]:
            assert t["control"] in b, d.name  # its control is bundled too
    assert {j for j, (_, t) in b.items() if t.get("score_cause") is False} == {"93102", "93119"}
    assert not BY_ID["93132"]["bench"] and BY_ID["93132"]["pending"]  # hung on the device: not made


def test_a_cause_is_scored_only_where_its_step_ratio_shows_an_effect():
    """The step ratio against the control, from the two bundled logs (steady steps: all but the
    first), decides whether the injected cause is scored: median or mean >= EFFECT_RATIO."""
    b = _bundled()
    seen = 0
    for jid, (d, t) in b.items():
        ctl = t.get("control")
        if t["cause"] == "none" or not ctl or ctl not in b:
            continue
        case, control = _log(jid)[1:], _log(ctl)[1:]
        med = statistics.median(case) / statistics.median(control)
        mean = statistics.fmean(case) / statistics.fmean(control)
        assert (max(med, mean) >= EFFECT_RATIO) == (t.get("score_cause") is not False), (d.name, med, mean)
        assert t["measured"]["ratio_to_control"]["median"] == pytest.approx(med, abs=1e-3)
        seen += 1
    assert seen >= 27


def test_a_runs_class_is_borne_out_by_its_measured_figures():
    """Every bundled run with no cause (the controls and the profiler pair) has figures that support
    its class: the rule's figure past its threshold, or within the borderline margin of it, over the
    profiled window or the unprofiled steady step (issue 24: the profiler's stretch does not change
    the class)."""
    from ai4s_graph.graph.rules.diagnosis import BORDERLINE_MARGIN, BUSY_COMPUTE_PCT, IDLE_DISPATCH_PCT

    lo = 1 - BORDERLINE_MARGIN
    n = 0
    for jid, (d, t) in _bundled().items():
        if t["cause"] != "none" or d.is_symlink():
            continue
        m = t["measured"]
        if t["class"] == "compute-bound":
            assert max(m["trace_computing_pct"], 100 * m["computing_share_unprofiled"]) >= BUSY_COMPUTE_PCT * lo, d.name
        elif t["class"] == "dispatch-bound":
            assert max(m["trace_idle_pct"], 100 * m["idle_share_unprofiled"]) >= IDLE_DISPATCH_PCT * lo, d.name
        else:
            raise AssertionError(f"{d.name}: class {t['class']}")
        n += 1
    assert n >= 21


@pytest.mark.slow
def test_the_measured_figures_are_what_the_bundled_files_give():
    """``truth.json``'s ``measured`` is re-derived from the bundled files (whole traces; for the
    trimmed ones the log figures, the trace figures being those of the kept steps)."""
    for jid, (d, t) in _bundled().items():
        if d.is_symlink():
            continue
        again = B.measure(d)
        keys = [k for k in again if k not in ("ratio_to_control",)]
        if jid in B.TRIM:
            keys = ["log_steps", "log_median_ms", "log_mean_ms", "log_max_ms"]
        assert {k: again[k] for k in keys} == {k: t["measured"][k] for k in keys}, d.name


# ------------------------------------------------------------------------------ the cause in the files
def _pair(case: str) -> tuple[str, str]:
    return case, _bundled()[case][1]["control"]


def test_tf32_off_runs_ffma_gemms_where_its_control_runs_tf32_tensor_cores():
    case, ctl = _pair("93111")
    gemm = lambda j: {k: n for k, n in _kernels(j).items() if "gemm" in k.lower()}  # noqa: E731
    assert gemm(case) and not any("tf32" in k for k in gemm(case))
    assert any("tf32" in k for k in gemm(ctl))


def test_debug_apis_and_syncs_leave_their_ops_in_the_trace():
    name = lambda n: (lambda e: e.get("name") == n and e.get("ph") == "X")  # noqa: E731
    assert _per_step("93113", name("aten::isnan")) >= 300 and _per_step("93120", name("aten::isnan")) == 0
    sync = name("cudaStreamSynchronize")
    assert _per_step("93113", sync) >= 300 and _per_step("93120", sync) <= 2
    # 93102: the syncs are there (92 a step) although they cost only 5% of the step (score_cause false)
    assert _per_step("93102", sync) >= 40 * _per_step("93120", sync)
    tensors = json.loads((_bundled()["93123"][0] / "run_info.json").read_text())["param_tensors"]
    assert tensors == 2048 and _per_step("93123", sync) >= tensors and _per_step("93122", sync) <= 4


def test_layout_and_copy_faults_show_in_kernels_and_memcpy():
    assert sum(n for k, n in _kernels("93118").items() if "nchwToNhwc" in k or "nhwcToNchw" in k) > 0
    assert not any("nchwToNhwc" in k for k in _kernels("93117"))
    h2d = lambda j, kind: sum(e["args"]["bytes"] for e in _events(j) if e.get("cat") == "gpu_memcpy"  # noqa: E731
                              and e["name"] == f"Memcpy HtoD ({kind} -> Device)") / _steps(j)
    batch = 128 * 3 * 224 * 224 * 4  # 128 fp32 images 3x224x224 a step (cases.py CONV)
    assert batch <= h2d("93116", "Pageable") < 1.01 * batch and batch <= h2d("93117", "Pinned") < 1.01 * batch
    assert h2d("93117", "Pageable") < 0.01 * batch
    for case in ("93201", "93202"):  # every parameter copied to the host once a step
        pb = json.loads((_bundled()[case][0] / "run_info.json").read_text())["param_bytes"]
        d2h = sum(e["args"]["bytes"] for e in _events(case) if e.get("cat") == "gpu_memcpy"
                  and "DtoH" in e["name"]) / _steps(case)
        assert pb <= d2h <= pb * 1.001
    # cudnn.benchmark off: cuDNN's heuristic picked 2 other convolution kernels than the benchmark, for
    # 1.4% more kernel time a step -- inside lesson 9's +-5% band: no effect to score
    assert len(set(_kernels("93119")) ^ set(_kernels("93117"))) == 4
    ktime = lambda j: sum(e["dur"] for e in _events(j) if e.get("cat") == "kernel") / _steps(j)  # noqa: E731
    assert 1.0 < ktime("93119") / ktime("93117") < 1.05


def test_host_side_kinds_show_their_counts_and_their_python_line():
    name = lambda n: (lambda e: e.get("name") == n and e.get("ph") == "X")  # noqa: E731
    alloc = lambda j: _per_step(j, name("cudaMalloc")) + _per_step(j, name("cudaFree"))  # noqa: E731
    assert alloc("93203") > 0 and alloc("93210") == 0
    batch1 = lambda e: e.get("name") == "aten::linear" and (e.get("args") or {}).get("Input Dims", [[0]])[0][:1] == [1]  # noqa: E731
    assert _per_step("93204", batch1) >= 256 and _per_step("93205", batch1) == 0  # the aux head, 256 times
    kernels = lambda j: _per_step(j, lambda e: e.get("cat") == "kernel")  # noqa: E731
    assert kernels("93121") >= 4 * 2048 and kernels("93122") < 2048  # a few kernels per parameter tensor
    region = lambda e: str(e.get("name", "")).startswith("Torch-Compiled Region") and e.get("cat") == "cpu_op"  # noqa: E731
    assert _per_step("93137", region) > _per_step("93138", region)
    for jid, (d, t) in _bundled().items():  # with stacks, the injected function is in the python events
        if not t.get("sites") or not t["measured"]["python_stacks"]:
            continue
        for s in t["sites"].values():
            want = f"{Path(s['file']).name}({s['def_line']}): {s['function']}"
            assert any(e.get("cat") == "python_function" and e.get("name") == want for e in _events(jid)), (d.name, want)


def test_loader_faults_show_in_the_profiled_steps():
    steps = {e["name"]: e["dur"] for e in _events("93124") if e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("ProfilerStep#")}
    assert steps["ProfilerStep#9"] >= 400_000 > max(steps["ProfilerStep#10"], steps["ProfilerStep#11"])  # µs
    assert len(_log("93124")) == 24  # 8 epochs of 3 steps
    assert min(_log("93124")[3::3]) >= 0.4 > max(_log("93125")[3::3])  # every epoch's first step waits


def test_trimmed_traces_keep_their_listed_steps_and_say_what_went():
    for jid, (kept, why) in B.TRIM.items():
        d, _ = _bundled()[jid]
        doc = json.loads(gzip.decompress((d / "traces" / "trace_rank0.json.gz").read_bytes()))
        rec = doc["ai4s_trim"]
        assert rec["kept_steps"] == kept and rec["why"] == why and sum(rec["removed_events"].values()) > 0
        names = {e["name"] for e in doc["traceEvents"] if e.get("cat") in ("user_annotation", "gpu_user_annotation")
                 and str(e.get("name", "")).startswith("ProfilerStep#")}
        assert names == {f"ProfilerStep#{s}" for s in kept}


# ------------------------------------------------------------------------------------------ trimming
def _ev(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat not in ("kernel", "gpu_memcpy") else 0,
            "tid": 1 if cat not in ("kernel", "gpu_memcpy") else 7, "ts": ts, "dur": dur, "args": args}


def _hand_trace(path: Path) -> None:
    """Three 1000 µs steps; each launches one 300 µs kernel 100 µs in; step 5's second kernel
    (correlation 55, another stream) runs from 900 to 1300 µs, into step 6; a flow pair per
    launch of the steps' own kernels."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for i, s in enumerate((5, 6, 7)):
        t0 = i * 1000.0
        ev.append(_ev("user_annotation", f"ProfilerStep#{s}", t0, 1000.0))
        ev.append(_ev("cpu_op", "aten::mm", t0 + 50, 100.0, **{"External id": s}))
        ev.append(_ev("cuda_runtime", "cudaLaunchKernel", t0 + 60, 20.0, correlation=s))
        ev.append(_ev("kernel", "gemm_kernel", t0 + 100, 300.0, correlation=s, stream=7, device=0))
        ev += [{"ph": "s", "cat": "ac2g", "id": s, "pid": 1, "tid": 1, "ts": t0 + 60, "name": "ac2g"},
               {"ph": "f", "cat": "ac2g", "id": s, "pid": 0, "tid": 7, "ts": t0 + 100, "name": "ac2g", "bp": "e"}]
    ev.append(_ev("cuda_runtime", "cudaLaunchKernel", 800.0, 20.0, correlation=55))
    ev.append({**_ev("kernel", "late_kernel", 900.0, 400.0, correlation=55, stream=8, device=0), "tid": 8})
    path.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode()))


def test_trimming_a_hand_built_trace_keeps_the_kept_step_exactly(tmp_path):
    src, dst = tmp_path / "t.json.gz", tmp_path / "out" / "t.json.gz"
    _hand_trace(src)
    rec = B.trim_trace(src, dst, [6], "test")
    doc = json.loads(gzip.decompress(dst.read_bytes()))
    # step 5 (its annotation, op, launch, kernel and 2 flow halves) and step 7 likewise go; step 5's
    # late kernel overlaps step 6 and stays with its launch
    assert rec["removed_events"] == {"ac2g": 4, "cpu_op": 2, "cuda_runtime": 2, "kernel": 2, "user_annotation": 2}
    assert rec["kept_steps"] == [6] and rec["removed_steps"] == [5, 7] and rec["source_events"] == 21
    names = sorted(e["name"] for e in doc["traceEvents"] if e.get("ph") == "X")
    assert names == ["ProfilerStep#6", "aten::mm", "cudaLaunchKernel", "cudaLaunchKernel", "gemm_kernel",
                     "late_kernel"]
    from ai4s_graph.tools.trace.host_timeline import step_breakdown

    s6 = step_breakdown(dst).steps[0]
    assert (s6.step, s6.wall_us) == (6, 1000.0)
    assert s6.gpu.busy_us == pytest.approx(400.0)  # the late kernel's 1000-1300 µs and its own 1100-1400 µs
    with pytest.raises(ValueError, match=r"steps \[8\] not among"):
        B.trim_trace(src, tmp_path / "x.json.gz", [8])


def test_the_trim_check_refuses_a_trace_whose_kept_step_changed(tmp_path):
    src, other = tmp_path / "t.json.gz", tmp_path / "o.json.gz"
    _hand_trace(src)
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "late_kernel"]
    other.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(ValueError, match="step 6 differs after trimming"):
        B._check_same(src, other, [6])
    assert B.same({"a": [1.0, 2]}, {"a": [1.0 + 1e-12, 2]}) and not B.same({"a": 1.0}, {"a": 1.01})


# ------------------------------------------------------------------------------------------ the judge
def _report(klass, rationale="", claims=(), levers=(), **extra):
    return {"bottleneck": {"klass": klass, "rationale": rationale, **extra},
            "claims": [{"claim": c, "verdict": v} for c, v in claims], "levers": [{"name": n} for n in levers]}


def test_judge_right_answer_with_a_structured_cause_and_rank():
    truth = {"cause": "straggler", "class": None, "rank": 1}
    r = S.judge(truth, _report("compute-bound", cause="straggler", rank=1,
                               claims=[({"metric": "x"}, "confirmed"), ({"metric": "y"}, "refuted")]))
    assert r["cause_ok"] and r["rank_ok"] and r["class_ok"] is None
    assert (r["claims"], r["confirmed"], r["wrong_confident"], r["unknown"]) == (2, 1, False, False)


def test_judge_cause_from_the_rationale_and_rank_from_a_straggler_claim():
    truth = {"cause": "straggler", "class": None, "rank": 1}
    rep = _report("communication-bound", "rank 1 is a straggler: it arrives last at 56 of 57 collectives",
                  claims=[({"metric": "collectives.straggler_rank", "value": 1, "statement": "rank 1"}, "confirmed")])
    r = S.judge(truth, rep)
    assert r["named_cause"] == "straggler" and r["cause_ok"] and r["named_rank"] == 1 and r["rank_ok"]


def test_judge_counts_a_wrong_class_apart_from_unknown():
    truth = {"cause": "dataloader-stall", "class": "data-loader-bound", "rank": None}
    wrong = S.judge(truth, _report("dispatch-bound", "GPU idle 83% with mean kernel 9 us: kernel launch overhead"))
    assert wrong["wrong_confident"] and not wrong["unknown"] and wrong["class_ok"] is False
    assert wrong["named_cause"] == "kernel-launch-overhead" and wrong["cause_ok"] is False
    unk = S.judge(truth, _report("unknown", "no GPU timeline"))
    assert unk["unknown"] and not unk["wrong_confident"] and unk["named_cause"] is None
    failed = S.judge(truth, None, "exit 1")
    assert failed["class_ok"] is False and failed["error"] == "exit 1" and not failed["wrong_confident"]


def test_a_control_is_right_with_no_cause_or_one_it_has_and_wrong_with_another():
    ctl = {"cause": "none", "class": "dispatch-bound", "rank": None, "lever": None, "present": ["kernel-launch-overhead"]}
    assert S.judge(ctl, _report("dispatch-bound", "GPU idle 92%"))["cause_ok"] is True
    has = S.judge(ctl, _report("dispatch-bound", "kernel launch overhead: mean kernel 6 us"))
    assert has["named_cause"] == "kernel-launch-overhead" and has["cause_ok"] is True
    given = S.judge(ctl, _report("dispatch-bound", "a host sync (.item()) every layer"))
    assert given["named_cause"] == "host-sync" and given["cause_ok"] is False
    assert S.judge({**ctl, "present": []}, _report("dispatch-bound", cause="kernel-launch-overhead"))["cause_ok"] is False
    assert S.judge(ctl, None, "exit 1")["cause_ok"] is False and S.judge(ctl, None, "x")["lever_ok"] is None


def test_a_cause_without_effect_is_scored_for_its_class_only():
    t = {"cause": "host-sync", "class": "dispatch-bound", "rank": None, "lever": "remove_host_syncs",
         "score_cause": False}
    r = S.judge(t, _report("dispatch-bound", "kernel launch overhead", levers=["cuda_graphs"]))
    assert (r["class_ok"], r["cause_ok"], r["lever_ok"]) == (True, None, None)
    assert (S.judge(t, None, "exit 1")["cause_ok"], S.judge(t, None, "exit 1")["lever_ok"]) == (None, None)


def test_summary_and_the_per_case_floor_on_known_rows():
    truth_a = {"cause": "host-sync", "class": "dispatch-bound", "rank": None}
    truth_b = {"cause": "straggler", "class": None, "rank": 1}
    rows = [{"case": "a", **S.judge(truth_a, _report("dispatch-bound", "a host sync (.item()) every layer"))},
            {"case": "b", **S.judge(truth_b, _report("compute-bound", "GEMMs dominate"))}]
    res = S.summarize(rows)
    o = res["overall"]
    assert o["class"] == {"right": 1, "of": 1, "accuracy": 1.0}
    assert o["cause"] == {"right": 1, "of": 2, "accuracy": 0.5}
    assert o["rank"] == {"right": 0, "of": 1, "accuracy": 0.0}
    assert res["by_cause"]["host-sync"]["cause"]["right"] == 1
    assert "| host-sync | 1 | 1/1 | 1/1 | n/a |" in S.markdown(res, S.CASES_DIR)
    floor = S.floor_from(res)
    assert floor["version"] == 2 and floor["cases"]["a"] == {"class_ok": True, "cause_ok": True, "rank_ok": None,
                                                            "lever_ok": None, "lead_ok": None,
                                                            "wrong_confident": False}
    assert S.check_floor(res, floor) == [] and S.not_in_floor(res, floor) == []
    # the lead of a case that names no cause is kept too: right in the floor, wrong now, a regression; a floor
    # written before the lead was scored (no lead_ok) checks nothing of it
    led = S.summarize([{"case": "a", **S.judge(truth_a, _report("dispatch-bound", "a host sync (.item()) every layer"))},
                       {"case": "d", **{**S.judge(truth_b, _report("compute-bound")), "lead": "op", "lead_ok": True}}])
    lfloor = S.floor_from(led)
    assert lfloor["cases"]["d"]["lead_ok"] is True and lfloor["totals"]["lead_right"] == 1
    lost = S.summarize([led["cases"][0], {**led["cases"][1], "lead_ok": False}])
    assert S.check_floor(lost, lfloor) == ["d: lead_ok right in the floor, not now"]
    old = {**lfloor, "cases": {k: {a: b for a, b in v.items() if a != "lead_ok"} for k, v in lfloor["cases"].items()}}
    assert S.check_floor(lost, old) == []
    # a case that loses its right cause and one that turns wrong confident, while another is fixed:
    # totals would not move, the per-case floor sees both
    worse = S.summarize([{"case": "a", **S.judge(truth_a, _report("compute-bound", "GEMMs dominate"))},
                         {"case": "b", **S.judge(truth_b, _report("compute-bound", "straggler rank 1", rank=1))},
                         {"case": "c", **S.judge(truth_a, _report("dispatch-bound"))}])
    assert S.check_floor(worse, floor) == ["a: class_ok, cause_ok right in the floor, not now",
                                           "a: wrong confident (class compute-bound, truth dispatch-bound)"]
    assert S.not_in_floor(worse, floor) == ["c"]
    assert S.check_floor(S.summarize(rows[:1]), floor) == ["b: in the floor, not in this set"]
    # a floor of the first format (totals) is checked only on a set of its size
    v1 = {"cases": 13, "class_right": 10, "cause_right": 5, "rank_right": 1, "wrong_confident_max": 0}
    assert S.check_floor(res, v1)[0].startswith("the floor was measured on 13 cases (totals), this set has 2")
    assert S.check_floor(res, {**v1, "cases": 2, "class_right": 1, "cause_right": 2, "rank_right": 0}) == ["cause_right: 1 < floor 2"]


@pytest.mark.slow
def test_scorer_on_the_bundled_set_stays_above_the_floor(tmp_path):
    floor = json.loads(S.FLOOR.read_text())
    res = S.score(S.CASES_DIR, workers=2, work=tmp_path, quiet=True)
    assert res["overall"]["failed_runs"] == 0, [r["error"] for r in res["cases"] if r["error"]]
    assert S.check_floor(res, floor) == []


# ------------------------------------------------------------------------------------------ 93132
def test_workers_with_several_threads_start_without_hanging(tmp_path):
    """93132 (8 workers x 16 threads) hung on the device: workers forked from a parent whose
    OpenMP pool is up hang in their first parallel region (GNU libgomp is not fork-safe). The
    same configuration in small -- the parent's pool started by the model's build, workers of 2
    threads doing matmuls -- finishes now (it hung on CPU before the fix; the limit only catches a
    hang)."""
    args = ["--model", "vit", "--hidden", "512", "--depth", "1", "--tokens", "128", "--batch-size", "2", "--epochs",
            "1", "--steps-per-epoch", "2", "--num-workers", "2", "--worker-threads", "2", "--transform-matmuls", "1",
            "--transform-dim", "256", "--device", "cpu", "--log-format", "batch", "--no-telemetry", "--jobid", "t",
            "--out-dir", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    cp = subprocess.run([sys.executable, str(REPO / "workloads" / "train.py"), *args], capture_output=True, text=True,
                        env=env, timeout=900)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert [ln.split(":")[0] for ln in cp.stdout.splitlines() if ln.startswith("Batch ")] == ["Batch 0", "Batch 1"]
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["knobs"]["worker_threads"] == 2 and info["num_workers"] == 2
