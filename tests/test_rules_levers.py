"""The lever choice (graph/rules/levers.py): the straggler lever leads; a cause finding a verifier
confirmed adds its lever once, a refuted one adds none; the levers are ordered by their estimated
saving on the first rank (tools/levers/impact.py), hand-computed here."""

from __future__ import annotations

from ai4s_graph.graph.rules import levers as L
from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import sdpa_math
from ai4s_graph.graph.rules.figures import Inputs
from ai4s_graph.state import Bottleneck, BottleneckClass, LeverRecommendation, Tolerance

# 10 ms step, 9 ms GPU busy, 4 ms of DataLoader: num_workers saves min(4, idle 1) = 1 ms at most
RANK0 = {"path": "t.json", "rank": 0, "step_time_ms": 10.0, "n_steps": 1, "dataloader_ms_per_step": 4.0,
         "kernels_per_step": 100, "timeline": {"busy_time": {"time_ms": 9.0}}}


def _finding():
    x = Inputs(rank=RANK0, event_names={sdpa_math.MATH_SDPA: 6})
    [f] = sdpa_math.CAUSE.detect(x)
    return f


def test_a_confirmed_cause_adds_its_lever_a_refuted_one_does_not():
    f = _finding()
    findings = {"trace": {"ranks": [RANK0], "triage": f.entries()}}
    ok = registry.judge(f.claim, "trace_verifier", 6, Tolerance(), "raw")
    bad = registry.judge(f.claim, "trace_verifier", 2, Tolerance(), "raw")
    assert (ok.verdict.value, bad.verdict.value) == ("confirmed", "refuted")
    generic = [LeverRecommendation(name="num_workers", why="overlap")]
    got = L.choose(generic, findings, [ok])
    assert [lv.name for lv in got] == ["num_workers", "sdpa_fused_backend"]
    # num_workers: high min(4, 10 - 9) = 1 ms, low min(1, 10 - 4) = 1 ms; sdpa: no math time measured
    assert "could save 1.00–1.00 ms per step" in got[0].why and "saving not estimated" in got[1].why
    assert [lv.name for lv in L.choose(generic, findings, [bad])] == ["num_workers"]
    # the cause's lever is added once, even when the class's levers already hold it
    again = L.choose([LeverRecommendation(name="sdpa_fused_backend", why="class")], findings, [ok])
    assert [lv.name for lv in again] == ["sdpa_fused_backend"] and again[0].why.startswith("class")


def test_the_straggler_lever_leads_whatever_the_estimates():
    b = Bottleneck(klass=BottleneckClass.compute, straggler=1, supporting_claims=["tl.multi.straggler"])
    first = L.straggler_lever(b)
    assert first.name == L.STRAGGLER_LEVER and "rank 1 is the straggler" in first.why
    got = L.choose([first, LeverRecommendation(name="num_workers", why="overlap")], {"trace": {"ranks": [RANK0]}}, [])
    assert [lv.name for lv in got] == [L.STRAGGLER_LEVER, "num_workers"]
    assert L.straggler_lever(Bottleneck(klass=BottleneckClass.compute)) is None


def test_the_named_cause_is_the_confirmed_finding_with_the_largest_share_and_its_lever_leads():
    from dataclasses import replace

    from ai4s_graph.graph.rules.verdict import name_causes

    f = _finding()
    big = replace(f, causes=("tf32-off",), share=0.6,
                  claim=f.claim.model_copy(update={"id": "cause.tf32"}),
                  levers=(sdpa_math.CAUSE.lever("sdpa_fused_backend", "tf32 stand-in"),))
    small = replace(f, share=0.1)
    refuted = replace(f, causes=("anomaly-mode",), share=0.9, claim=f.claim.model_copy(update={"id": "cause.anom"}))
    findings = {"trace": {"ranks": [RANK0], "triage": small.entries() + big.entries() + refuted.entries()}}
    ok_small = registry.judge(small.claim, "trace_verifier", 6, Tolerance(), "raw")
    ok_big = registry.judge(big.claim, "trace_verifier", 6, Tolerance(), "raw")
    no = registry.judge(refuted.claim, "trace_verifier", 2, Tolerance(), "raw")
    b = name_causes(Bottleneck(klass=BottleneckClass.compute), findings, [ok_small, ok_big, no])
    # 0.6 > 0.1; the refuted 0.9 names nothing
    assert b.cause == "tf32-off" and [c.id for c in b.causes] == ["tf32-off", "sdpa-math-fallback"]
    assert b.causes[0].share == 0.6 and b.causes[0].claim == "cause.tf32"
    generic = [LeverRecommendation(name="num_workers", why="overlap")]
    got = L.choose(generic, findings, [ok_small, ok_big, no], b)
    assert [lv.name for lv in got][0] == "sdpa_fused_backend"
    none = name_causes(Bottleneck(klass=BottleneckClass.compute), findings, [no])
    assert none.cause is None and none.causes == []


def _top_category(cat: str, pct: float):
    from ai4s_graph.state import Claim, Evidence, VerifiedClaim, Verdict

    c = Claim(id="tl.r0.top_op_category", analyst="trace_analyst", statement=f"{cat} {pct}%",
              metric=f"ops_by_category.{cat}.percent", value=pct, unit="%",
              evidence=[Evidence(tool="t", query="q", returned=pct, args={"rank": 0})], confidence=0.8)
    return VerifiedClaim(claim=c, verdict=Verdict.confirmed, verifier="trace_verifier", method="raw",
                         rederived_value=pct, tolerance=Tolerance())


def test_the_class_level_cause_needs_the_class_and_a_dominant_category():
    """GEMM at 65% of kernel time in a compute-bound job names compute-bound-gemm (share 0.65); at
    40% (a conv net whose time is spread) it names nothing; elementwise at 91.6% names
    memory-bound-elementwise only in a memory-bound job; a class-level finding of another class
    (roofline_memory: memory-bound kernels) is not named in a compute-bound job."""
    from ai4s_graph.graph.rules.verdict import class_cause, name_causes

    b = Bottleneck(klass=BottleneckClass.compute, critical_rank=0)
    got = class_cause(b, [_top_category("GEMM", 65.146)])
    assert (got.id, got.share) == ("compute-bound-gemm", 0.65146)
    assert class_cause(b, [_top_category("GEMM", 40.154)]) is None
    assert class_cause(b, [_top_category("elementwise", 91.6)]) is None
    mb = Bottleneck(klass=BottleneckClass.memory, critical_rank=0)
    assert class_cause(mb, [_top_category("elementwise", 91.6)]).id == "memory-bound-elementwise"
    f = _finding()
    from dataclasses import replace
    mem = replace(f, causes=("memory-bound-kernels",), explains="memory-bound")
    ok = registry.judge(mem.claim, "trace_verifier", 6, Tolerance(), "raw")
    findings = {"trace": {"ranks": [RANK0], "triage": mem.entries()}}
    assert name_causes(Bottleneck(klass=BottleneckClass.compute), findings, [ok]).cause is None
    assert name_causes(Bottleneck(klass=BottleneckClass.memory), findings, [ok]).cause == "memory-bound-kernels"
