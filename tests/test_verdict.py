"""One verdict from all the evidence (issue 13): ranks, sources, confidence, representativeness,
progress, busbw in context, and both sides of every rule threshold. Inputs are hand-built
(tests/verdict_traces.py) with known answers, and the bundled H200 examples."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.graph.rules import context as ctx, diagnosis as dg
from ai4s_graph.state import claimkit
from ai4s_graph.state.claimkit import claim, verdict
from ai4s_graph.tools.cluster.baseline import load_baseline
from ai4s_graph.graph.analysis.nodes import trace_analyst as ta
from ai4s_graph.graph.analysis.nodes.synthesizer import levers_for as recommend_levers
from ai4s_graph.graph.analysis.nodes.trace_verifier import verify_trace_claims
from ai4s_graph.graph.rules.verdict import decide
from ai4s_graph.state import (BottleneckClass as C, Evidence, Manifest, Report, Tolerance, Verdict,
                              VerifiedClaim)
from ai4s_graph.tools.trace import rank_analysis

sys.path.insert(0, str(Path(__file__).parent))
import verdict_traces as vt  # noqa: E402


# ------------------------------------------------------------------------------------------
# helpers: the real analyst and verifier on hand-built traces
# ------------------------------------------------------------------------------------------

def _analyse(run: Path, tmp: Path) -> tuple[list[VerifiedClaim], dict]:
    traces = {r: str(next((run / "traces").glob(f"trace_rank{r}.json*"))) for r in (0, 1)}
    recs = rank_analysis.analyze_ranks(traces, cache_dir=str(tmp / "cache"), workers=1)
    good = [dict(ta.as_rank_result(r), path=traces[r["rank"]]) for r in recs]
    claims = [c for g in good for c in ta.claims_for_rank(g)]
    multi = ta._multi_rank(good)
    claims += multi.pop("claims")
    vs = list(verify_trace_claims(claims, good))
    return vs, {"trace": {"ranks": good, "multi_rank": multi}}


def _confirm_straggler(vs: list[VerifiedClaim], known_rank: int) -> list[VerifiedClaim]:
    """Where the trace verifier leaves a straggler claim unconfirmed (a 1 µs lead, say), confirm it
    against the traces' KNOWN arrival order, to test what the verdict does with a confirmed one."""
    out = []
    for v in vs:
        if v.claim.metric == "collectives.straggler_rank" and v.verdict is not Verdict.confirmed:
            v = verdict(v.claim, "test", known_rank, Tolerance(), "arrival order the traces were built with")
        out.append(v)
    return out


def _v(cid: str, metric: str, value, ok: bool = True, args: dict | None = None) -> VerifiedClaim:
    c = claim(cid, "telemetry_analyst" if cid.startswith("om.") else "trace_analyst", f"{cid} says {value}",
              metric, value, "x", [Evidence(tool="t", query="q", returned=value, args=args or {})])
    return verdict(c, "test", value if ok else None, Tolerance(), "test")


# ------------------------------------------------------------------------------------------
# 1. ranks
# ------------------------------------------------------------------------------------------

def test_straggler_whose_partner_waits_is_the_critical_path(tmp_path):
    run = vt.write_run(tmp_path / "run", "95001", vt.straggler_steps(), 10.0)
    vs, findings = _analyse(run, tmp_path)
    by_id = {v.claim.id: v for v in vs}
    assert by_id["tl.r0.bottleneck"].claim.value == "communication-bound"   # rank 0 alone looks comms-bound
    assert by_id["tl.r1.bottleneck"].claim.value == "compute-bound"
    st = by_id["tl.multi.straggler"]
    assert st.verdict is Verdict.confirmed and st.rederived_value == 1                # by the real trace verifier
    b = decide(vs, findings)
    assert b.klass is C.compute and b.klass is not C.communication
    assert b.straggler == 1 and b.critical_rank == 1
    assert b.scope == "compute-bound on rank 1, which the other ranks wait for (straggler)"
    assert b.waiting_share == pytest.approx(24.0 / 28.0, abs=1e-3)         # 6 of 7 ms per step is waiting
    assert "tl.multi.straggler" in b.supporting_claims and "tl.r1.bottleneck" in b.supporting_claims
    levers, _ = recommend_levers(b, Manifest(jobid="95001", precision="fp32"), "nvidia", 2)
    assert levers[0].name == "balance_straggler_rank" and "rank 1" in levers[0].why
    assert not any(lv.name == "ddp_bucket_cap_mb" for lv in levers)


def test_unconfirmed_straggler_does_not_move_the_class(tmp_path):
    run = vt.write_run(tmp_path / "run", "95001", vt.straggler_steps(), 10.0)
    vs, findings = _analyse(run, tmp_path)
    vs = [v for v in vs if v.claim.metric != "collectives.straggler_rank"]
    b = decide(vs, findings)
    assert b.straggler is None and b.critical_rank == 0 and b.klass is C.communication


def test_balanced_ranks_with_exposed_communication_stay_communication_bound(tmp_path):
    run = vt.write_run(tmp_path / "run", "95002", vt.balanced_steps(), 10.0)
    vs, findings = _analyse(run, tmp_path)
    # rank 1 arrives 1 µs late every time: even a confirmed "straggler" explains none of the 16 ms
    # of exposed communication, which stays the job's limit
    vs = _confirm_straggler(vs, 1)
    b = decide(vs, findings)
    assert b.klass is C.communication and b.straggler is None and b.waiting_share < 0.001
    assert b.scope == "communication-bound on every rank" and "the communication itself is exposed" in b.rationale
    levers, _ = recommend_levers(b, Manifest(jobid="95002", precision="fp32"), "nvidia", 2)
    assert levers[0].name == "ddp_bucket_cap_mb"


def test_wait_share_threshold_both_sides(tmp_path):
    run = vt.write_run(tmp_path / "run", "95001", vt.straggler_steps(), 10.0)
    vs, findings = _analyse(run, tmp_path)
    vs = _confirm_straggler(vs, 1)
    rows = findings["trace"]["multi_rank"]["collectives"]["stragglers"]["rows"]
    per = {p["rank"]: p for p in findings["trace"]["multi_rank"]["collectives"]["per_rank"]}
    for share, want in ((dg.WAIT_SHARE_STRAGGLER + 0.01, C.compute), (dg.WAIT_SHARE_STRAGGLER - 0.01, C.communication)):
        for r in rows:
            if r["rank"] == 0:
                r["total_wait_us"] = share * per[0]["exposed_comm_us"]
        assert decide(vs, findings).klass is want


def _real_2gpu(repo_root, jobid: str) -> Path:
    d = repo_root / "examples" / "perf-runs" / jobid
    if not (d / "manifest.json").exists():
        pytest.skip(f"real 2-GPU example {jobid} not in this checkout (helper dev's examples/perf-runs/9300x)")
    return d


def test_real_2gpu_straggler_93004(repo_root, tmp_path):
    """Real DDP run on 2 H200s where rank 1 does 24 extra bf16 matmuls a step (examples/perf-runs/93004)."""
    vs, findings = _analyse(_real_2gpu(repo_root, "93004"), tmp_path)
    vs = _confirm_straggler(vs, 1)
    b = decide(vs, findings)
    assert b.straggler == 1 and b.klass is C.compute
    assert b.scope == "compute-bound on rank 1, which the other ranks wait for (straggler)"
    assert b.waiting_share >= dg.WAIT_SHARE_STRAGGLER


def test_real_2gpu_slow_link_busbw_93002(repo_root, tmp_path):
    """93002: the all-reduce through host memory (NCCL_P2P_DISABLE=1) against the 2-GPU baseline."""
    run = _real_2gpu(repo_root, "93002")
    base = repo_root / "reports" / "raw-2026-11-30-2gpu" / "eval-2gpu.json"
    r = CliRunner().invoke(app, ["run", "--job", "93002", "--perf-run", str(run), "--baseline", str(base),
                                 "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    rep = Report.model_validate_json((tmp_path / "o" / "report.json").read_text())
    assert rep.bottleneck.klass is C.communication and rep.bottleneck.straggler is None
    assert rep.busbw_context and all(x["ratio"] < 0.15 for x in rep.busbw_context)   # ~27 vs 285 GB/s
    assert all("eval-2gpu.json" in x["reference"] for x in rep.busbw_context)


def test_straggler_end_to_end_report(tmp_path):
    """The whole graph on the hand-built straggler run: per-rank table, busbw against the datasheet."""
    run = vt.write_run(tmp_path / "run", "95001", vt.straggler_steps(), 10.0)
    r = CliRunner().invoke(app, ["run", "--job", "95001", "--perf-run", str(run), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    rep = Report.model_validate_json((tmp_path / "o" / "report.json").read_text())
    b = rep.bottleneck
    assert b.klass is C.compute and b.straggler == 1 and rep.levers[0].name == "balance_straggler_rank"
    assert "compute-bound on rank 1, which the other ranks wait for (straggler)" in rep.executive_summary
    ranks = {x["rank"]: x for x in rep.ranks}
    assert ranks[0]["wait_ms"] == pytest.approx(24.0) and ranks[1]["pct_arrived_last"] == 100.0
    bw = rep.busbw_context[0]
    assert bw["busbw_gbps"] == pytest.approx(268.44, abs=0.01) and bw["reference_gbps"] == 450.0
    assert bw["ratio"] == pytest.approx(0.597, abs=1e-3) and "datasheet" in bw["reference"]
    md = (tmp_path / "o" / "report.md").read_text()
    assert "### Ranks" in md and "### Collective bandwidth in context" in md


# ------------------------------------------------------------------------------------------
# 2. sources
# ------------------------------------------------------------------------------------------

def _busy_rank(tmp_path) -> tuple[list[VerifiedClaim], dict]:
    steps = {r: [[("gemm", 0.0, 9.7)] for _ in range(4)] for r in (0, 1)}
    run = vt.write_run(tmp_path / "busy", "95003", steps, 10.0)
    return _analyse(run, tmp_path)


def test_precision_pair_contradicting_a_busy_gpu(tmp_path):
    vs, findings = _busy_rank(tmp_path)
    assert {v.claim.value for v in vs if v.claim.metric == "diagnosis.trace_bottleneck_class"} == {"compute-bound"}
    findings["compare"] = {"speedup": 1.01, "threshold": 1.3, "noise_band": 0.05, "hi": "fp64", "lo": "fp32",
                           "hi_jobid": "a", "lo_jobid": "b", "bottleneck_class": "dispatch-bound"}
    vs += [_v("om.compare.speedup", "compare.precision_speedup", 1.01),
           _v("om.compare.bottleneck", "diagnosis.precision_discriminator_class", "dispatch-bound")]
    b = decide(vs, findings)
    assert b.klass is C.compute                                              # the trace decides
    assert "om.compare.speedup" not in b.supporting_claims and "om.compare.bottleneck" not in b.supporting_claims
    (c,) = b.contradictions
    assert "1.010×" in c.indirect and re.search(r"busy 9[0-9]\.\d%", c.direct)
    assert c.winner.startswith("trace") and "replicate both runs" in c.settle and "profile" in c.settle
    alone = decide([v for v in vs if v.claim.id.startswith("om.")], {"compare": findings["compare"]})
    assert alone.klass is C.dispatch and alone.confidence <= 0.7           # no trace: the pair decides


def test_precision_pair_does_not_set_the_class_over_an_undecided_trace(tmp_path):
    # GPU work in one profiled step of four: not a steady-state window, so no class (diagnosis.trace_class)
    steps = {r: [[("gemm", 0.0, 7.0)]] + [[] for _ in range(3)] for r in (0, 1)}
    vs, findings = _analyse(vt.write_run(tmp_path / "mid", "95006", steps, 10.0), tmp_path)
    assert {v.claim.value for v in vs if v.claim.metric == "diagnosis.trace_bottleneck_class"} == {"unknown"}
    vs += [_v("om.compare.bottleneck", "diagnosis.precision_discriminator_class", "compute-bound")]
    b = decide(vs, findings)
    assert b.klass is C.unknown and "does not set the class" in b.rationale


def test_precision_pair_agreeing_supports(tmp_path):
    vs, findings = _busy_rank(tmp_path)
    base = decide(vs, findings).confidence
    vs += [_v("om.compare.speedup", "compare.precision_speedup", 1.9),
           _v("om.compare.bottleneck", "diagnosis.precision_discriminator_class", "compute-bound")]
    b = decide(vs, findings)
    assert "om.compare.speedup" in b.supporting_claims and not b.contradictions and b.confidence > base


def test_telemetry_contradiction_is_reported(tmp_path):
    vs, findings = _busy_rank(tmp_path)
    vs.append(_v("om.tel.supports_compute", "telemetry.supports_compute", False,
                 args={"gpu_util": 30.0, "sm_clock": 1980.0, "power": 200.0}))
    b = decide(vs, findings)
    assert b.klass is C.compute and "om.tel.supports_compute" not in b.supporting_claims
    assert "utilization 30.0%" in b.contradictions[0].indirect


def test_telemetry_contradiction_resolved_by_the_profiled_window(tmp_path):
    from ai4s_graph.graph.rules.verdict import reconcile_with_window

    vs, findings = _busy_rank(tmp_path)
    vs.append(_v("om.tel.supports_compute", "telemetry.supports_compute", False,
                 args={"gpu_util": 30.0, "sm_clock": 1980.0, "power": 200.0}))
    b = decide(vs, findings)
    conf = b.confidence
    reconcile_with_window(b, {"util_pct_window": 96.0, "busy_pct": 97.0, "util_flag": True})
    assert b.contradictions[0].resolved is None and b.confidence == conf          # the window disagrees too
    reconcile_with_window(b, {"util_pct_window": 96.0, "busy_pct": 97.0, "util_flag": False})
    assert "96.0%" in b.contradictions[0].resolved and b.confidence > conf


def test_bundled_pair_reports_the_contradiction(repo_root, tmp_path):
    r = CliRunner().invoke(app, ["run", "--job", "92001", "--perf-run", str(repo_root / "examples/perf-runs/92001"),
                                 "--compare", str(repo_root / "examples/perf-runs/92004"), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rep = Report.model_validate_json((tmp_path / "report.json").read_text())
    b = rep.bottleneck
    assert b.klass is C.dispatch
    disc = next(v for v in rep.claims if v.claim.id == "om.compare.bottleneck")
    if disc.claim.value != "dispatch-bound":
        assert b.contradictions and "om.compare.speedup" not in b.supporting_claims
        assert "Contradictions between sources" in (tmp_path / "report.md").read_text()


# ------------------------------------------------------------------------------------------
# 3. tolerances equal the prompts
# ------------------------------------------------------------------------------------------

def test_verifier_tolerances_equal_the_prompts(repo_root):
    tv = (repo_root / "prompts" / "telemetry_verifier.md").read_text()
    m = re.search(r"±(\d+) ?% or ±(\d+) unit", tv)
    assert m and claimkit.TELEMETRY_TOL == Tolerance(abs=float(m.group(2)), rel=float(m.group(1)) / 100)
    tr = (repo_root / "prompts" / "trace_verifier.md").read_text()
    m = re.search(r"±(\d+) percentage point.*?±(\d+) ?% otherwise", tr, re.S)
    assert m and claimkit.PCT_TOL == Tolerance(abs=float(m.group(1)))
    assert claimkit.REL_TOL == Tolerance(rel=float(m.group(2)) / 100)


# ------------------------------------------------------------------------------------------
# 4. confidence and runner-up
# ------------------------------------------------------------------------------------------

def _tl(comp: float, comm: float = 0.0, idle: float | None = None) -> dict:
    idle = 100.0 - comp - comm if idle is None else idle
    return {"timeline": {"computation_time": {"percent": comp}, "exposed_comm_time": {"percent": comm},
                         "busy_time": {"percent": comp + comm}, "idle_time": {"percent": idle}},
            "launch": {"mean_kernel_us": 50.0}}


def test_confidence_from_margins_and_borderline():
    far = dg.classify_trace(_tl(98.0))
    near = dg.classify_trace(_tl(dg.BUSY_COMPUTE_PCT * 1.05))
    assert far.klass is near.klass is C.compute
    assert far.confidence > near.confidence and not far.borderline and near.borderline
    assert near.runner_up is not None and near.runner_up is not C.compute
    assert dg.confidence_from_margin(0.0) == 0.5 and dg.confidence_from_margin(dg.MARGIN_FULL) == 0.95
    assert dg.classify_trace(_tl(dg.BUSY_COMPUTE_PCT * (1 + dg.BORDERLINE_MARGIN) + 0.5)).borderline is False
    both = dg.classify_trace(_tl(30.0, comm=25.0, idle=45.0))   # comms and dispatch rules both pass
    assert both.klass is C.communication and both.runner_up is C.dispatch


# ------------------------------------------------------------------------------------------
# 5. representativeness
# ------------------------------------------------------------------------------------------

def test_profiler_inflated_steps_are_flagged(tmp_path):
    steps = {0: [[("gemm", 0.0, 1.0), ("gemm", 10.0, 1.0), ("gemm", 20.0, 1.0)] for _ in range(3)]}
    run = vt.write_run(tmp_path / "run", "95004", steps, 30.0, log_step_s=0.020)   # log says 20 ms a step
    rec = ta.as_rank_result(rank_analysis.analyze_rank(str(run / "traces/trace_rank0.json"), 0, str(tmp_path / "c")))
    rec["path"] = str(run / "traces/trace_rank0.json")
    win = ctx.profiled_window(rec)
    assert win[0] == pytest.approx(vt.BASE_NS / 1e9 + 5.0) and win[1] - win[0] == pytest.approx(0.09)
    rp = ctx.representativeness(rec, {"steady_step_time_s": 0.020}, [(win[0] - 0.5, 10.0), (win[1], 12.0)], win)
    assert rp["step_ratio"] == pytest.approx(1.5) and rp["step_flag"] and not rp["representative"]
    assert "1.50×" in rp["statement"] and "NOT representative" in rp["statement"]
    assert rp["class_after_correction"] == "dispatch-bound" and rp["util_flag"] is False
    ok = ctx.representativeness(rec, {"steady_step_time_s": 0.030}, None)
    assert ok["representative"] and ok["step_ratio"] == pytest.approx(1.0)
    # both sides of the thresholds
    for ratio, flag in ((dg.REPR_STEP_RATIO + 0.01, True), (dg.REPR_STEP_RATIO - 0.01, False)):
        assert ctx.representativeness(rec, {"steady_step_time_s": 0.030 / ratio}, None)["step_flag"] is flag
    busy = rec["timeline"]["busy_time"]["percent"]
    for d, flag in ((dg.REPR_UTIL_PP + 1, True), (dg.REPR_UTIL_PP - 1, False)):
        got = ctx.representativeness(rec, None, [(win[0], busy + d)], win)
        assert got["util_flag"] is flag


def test_bundled_host_heavy_example_is_flagged(repo_root, tmp_path):
    r = CliRunner().invoke(app, ["run", "--job", "92001", "--perf-run", str(repo_root / "examples/perf-runs/92001"),
                                 "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rep = Report.model_validate_json((tmp_path / "report.json").read_text())
    rp = rep.representativeness
    # the class rules' stretch: the median profiled step (23.69 ms) over the run's step (17.40 ms), issue 27
    assert rp["step_ratio"] == pytest.approx(23.69 / 17.40, abs=0.01) and not rp["representative"]
    assert rp["class_after_correction"] == "dispatch-bound" and rep.bottleneck.klass is C.dispatch


# ------------------------------------------------------------------------------------------
# 6. progress: hang vs slow
# ------------------------------------------------------------------------------------------

def test_hang_before_timeout():
    steps = [2.0] + [0.1] * 99                       # 100 steps, 11.9 s of work
    util = [(1000.0 + t, 90.0 if t < 15 else 0.0) for t in range(0, 600)]
    p = ctx.progress("TIMEOUT", 1000.0, 1600.0, steps, 1000, util)
    assert p["verdict"] == "hang" and p["gap_s"] == pytest.approx(600 - 11.9, abs=0.5)
    assert p["util_after_pct"] < 5 and "HUNG" in p["statement"] and "sat idle" in p["statement"]
    spin = ctx.progress("TIMEOUT", 1000.0, 1600.0, steps, 1000, [(1000.0 + t, 100.0) for t in range(600)])
    assert spin["verdict"] == "hang" and "kept spinning" in spin["statement"]


def test_first_gpu_activity_threshold_both_sides():
    steps = [1.0] * 10
    act = ctx.progress("TIMEOUT", 0.0, 200.0, steps, None, [(50.0, dg.UTIL_ACTIVE_PCT + 1), (100.0, 0.0)])
    assert act["last_step_s_into_job"] == 60.0 and act["how"].startswith("first GPU activity")
    idle = ctx.progress("TIMEOUT", 0.0, 200.0, steps, None, [(50.0, dg.UTIL_ACTIVE_PCT - 1), (100.0, 0.0)])
    assert idle["last_step_s_into_job"] == 10.0 and "lower bound" in idle["how"]


def test_slow_job_is_not_a_hang():
    steps = [0.5] * 1190                            # logged steps right up to the wall
    p = ctx.progress("TIMEOUT", 0.0, 600.0, steps, 2000, [(float(t), 95.0) for t in range(600)])
    assert p["verdict"] == "slow" and "remaining 810 of 2000 steps" in p["statement"]


def test_hang_gap_threshold_both_sides():
    steps = [1.0] * 10                               # longest 1 s: gap needed = max(60, 10) = 60 s
    need = max(dg.HANG_MIN_GAP_S, dg.HANG_GAP_STEPS * 1.0)
    assert ctx.progress("TIMEOUT", 0.0, 10.0 + need + 1, steps)["verdict"] == "hang"
    assert ctx.progress("TIMEOUT", 0.0, 10.0 + need - 1, steps)["verdict"] == "slow"
    long = [20.0] * 3                                # longest 20 s: 10 × 20 = 200 s
    assert ctx.progress("FAILED", 0.0, 60.0 + 199.0, long)["verdict"] == "stopped"
    assert ctx.progress("FAILED", 0.0, 60.0 + 201.0, long)["verdict"] == "hang"
    assert ctx.progress("COMPLETED", 0.0, 1.0, steps) is None
    assert ctx.progress("FAILED", 0.0, 100.0, [])["verdict"] == "no-progress"


def test_hang_end_to_end_with_log_timestamps(tmp_path):
    run = vt.write_run(tmp_path / "run", "95005", {0: [[("gemm", 0.0, 9.0)]] * 3}, 10.0,
                       state="TIMEOUT", start=1_800_000_000.0, end=1_800_000_900.0, planned_steps=5000)
    log = run / "train.log"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(f"2027-01-15 08:0{min(9, i // 30)}:{i % 60:02d} {x}" for i, x in enumerate(lines)) + "\n")
    r = CliRunner().invoke(app, ["run", "--job", "95005", "--perf-run", str(run), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    rep = Report.model_validate_json((tmp_path / "o" / "report.json").read_text())
    assert rep.progress["verdict"] == "hang" and rep.progress["how"] == "the last step line's timestamp"
    assert "HUNG" in rep.executive_summary and "Where progress stopped" in (tmp_path / "o" / "report.md").read_text()


# ------------------------------------------------------------------------------------------
# 7. busbw in context
# ------------------------------------------------------------------------------------------

def test_busbw_against_an_eval_cluster_baseline(tmp_path):
    j = tmp_path / "eval.json"
    j.write_text('{"network": {"intra": {"ranks": 2, "rows": ['
                 '{"bytes": 1048576, "busbw_gbps": 40.0, "correct": true},'
                 '{"bytes": 268435456, "busbw_gbps": 285.0, "correct": true}]}}}')
    g = [{"collective": "allreduce", "msg_bytes": 268435456.0, "busbw_gbps": 142.5}]
    rows = ctx.busbw_context(g, load_baseline(j), "NVIDIA H200")
    assert rows[0]["reference_gbps"] == 285.0 and rows[0]["ratio"] == 0.5
    assert "eval-cluster all-reduce at 256 MiB" in rows[0]["reference"]
    md = tmp_path / "REPORT.md"
    md.write_text("| payload | time (µs) | algbw (GB/s) | busbw (GB/s) |\n|---|---|---|---|\n"
                  "| 1 MiB | 26.2 | 40.0 | 40.0 |\n| 256 MiB | 941.9 | 285.0 | 285.0 |\n")
    assert ctx.busbw_context(g, load_baseline(md), None)[0]["ratio"] == 0.5
    rows = ctx.busbw_context([{**g[0], "msg_bytes": 2e6}], load_baseline(j), None)
    assert rows[0]["reference_gbps"] == 40.0                                # nearest payload
    with pytest.raises(Exception, match="missing.json"):
        load_baseline(tmp_path / "missing.json")
    rows = ctx.busbw_context(g, None, "NVIDIA H200")
    assert rows[0]["reference_gbps"] == 450.0                                # datasheet fallback
    assert "NVIDIA H200 SXM datasheet" in rows[0]["reference"]


def test_real_one_gpu_eval_report_has_no_allreduce(repo_root):
    with pytest.raises(Exception, match="no all-reduce busbw"):
        load_baseline(repo_root / "reports/raw-2026-11-29/eval-vm.json")


# ------------------------------------------------------------------------------------------
# 8. both sides of each diagnosis threshold
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("trace, want", [
    (_tl(50.0, comm=dg.EXPOSED_COMM_PCT + 0.5), C.communication),
    (_tl(70.0, comm=dg.EXPOSED_COMM_PCT - 0.5, idle=10.5), C.compute),   # below: the nearer rule, borderline
    (_tl(100 - dg.IDLE_DISPATCH_PCT - 0.5), C.dispatch),
    (_tl(100 - dg.IDLE_DISPATCH_PCT + 0.5), C.dispatch),
    (_tl(dg.BUSY_COMPUTE_PCT + 0.5), C.compute),
    (_tl(dg.BUSY_COMPUTE_PCT - 0.5), C.compute),
    (_tl(70.0), C.unknown),                                              # equidistant from both rules: a tie
])
def test_timeline_thresholds(trace, want):
    d = dg.classify_trace(trace)
    assert d.klass is want
    fired = next((t for t in d.tests if t.fired), None)
    if fired is None:   # no rule passed its threshold: a nearest-rule verdict is borderline at confidence 0.5
        assert d.borderline and d.confidence <= 0.5 and (d.klass is C.unknown or "borderline" in d.rule)


def test_dataloader_short_kernel_and_memory_thresholds():
    t = _tl(45.0)
    t.update(step_time_ms=100.0, dataloader_ms_per_step=100 * dg.DATALOADER_STEP_SHARE + 1)
    assert dg.classify_trace(t).klass is C.data_loader
    t["dataloader_ms_per_step"] = 100 * dg.DATALOADER_STEP_SHARE - 1
    assert dg.classify_trace(t).klass is C.dispatch
    t = _tl(10.0)
    t["launch"]["mean_kernel_us"] = dg.SHORT_KERNEL_MEAN_US - 1
    assert "launch overhead" in dg.classify_trace(t).rule
    t["launch"]["mean_kernel_us"] = dg.SHORT_KERNEL_MEAN_US + 1
    assert "launch overhead" not in dg.classify_trace(t).rule
    for share, want in ((dg.MEMORY_BOUND_ELEMENTWISE_SHARE + 0.01, C.memory),
                        (dg.MEMORY_BOUND_ELEMENTWISE_SHARE - 0.01, C.compute)):
        t = _tl(90.0)
        t["ops_by_category"] = [{"category": "elementwise", "kernel_time_ms": share},
                                {"category": "GEMM", "kernel_time_ms": 1 - share}]
        assert dg.classify_trace(t).klass is want


def test_telemetry_thresholds():
    f = dg.telemetry_supports_compute
    hi_clk = 1980 * dg.SM_CLOCK_HIGH_FRAC
    assert f(dg.UTIL_HIGH_PCT + 1, hi_clk + 1, None, 700 * dg.POWER_HIGH_FRAC + 1, None, "NVIDIA H200") is True
    assert f(dg.UTIL_HIGH_PCT - 1, hi_clk + 1, None, 400.0, None, "NVIDIA H200") is False
    assert f(90.0, hi_clk - 1, None, 400.0, None, "NVIDIA H200") is False
    assert f(90.0, 1900.0, None, 700 * dg.POWER_HIGH_FRAC - 1, None, "NVIDIA H200") is False
