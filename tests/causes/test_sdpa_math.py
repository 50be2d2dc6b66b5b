"""SDPA math fallback (seed 001 T14): fires on a trace whose attention ran the math backend, with
the count as its value; silent on fused backends and on the bundled real traces; the raw-text
re-derivation of the same read confirms it, and refutes a claim the trace does not bear out."""

from __future__ import annotations

from cause_inputs import inputs_for, reader_for, trace

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import sdpa_math
from ai4s_graph.state import Tolerance

CAUSE = sdpa_math.CAUSE


def test_fires_with_the_math_call_count_and_its_lever(tmp_path):
    p = trace(tmp_path, {"aten::scaled_dot_product_attention": 12, sdpa_math.MATH_SDPA: 12,
                         "aten::_scaled_dot_product_efficient_attention": 3})
    [f] = CAUSE.detect(inputs_for(p))
    assert f.causes == ("sdpa-math-fallback",) and f.claim.id == "triage.t14.sdpa_math"
    assert f.claim.value == 12 and f.claim.metric == "sdpa_math_calls"
    assert "12 attention calls" in f.claim.statement and "3 ran a fused kernel" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["sdpa_fused_backend"]
    rd = CAUSE.rederive(f.claim, reader_for(p))
    assert rd.value == 12 and rd.method == sdpa_math.METHOD and rd.tolerance == Tolerance()
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


def test_a_claim_the_trace_does_not_bear_out_is_refuted(tmp_path):
    p = trace(tmp_path, {sdpa_math.MATH_SDPA: 6})
    [f] = CAUSE.detect(inputs_for(p))
    other = trace(tmp_path, {sdpa_math.MATH_SDPA: 2}, name="other.json.gz")
    rd = CAUSE.rederive(f.claim, reader_for(other))
    assert rd.value == 2
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "refuted"


def test_fused_backends_are_silent(tmp_path):
    p = trace(tmp_path, {"aten::scaled_dot_product_attention": 12, "aten::_scaled_dot_product_flash_attention": 12})
    assert CAUSE.detect(inputs_for(p)) == []
    assert reader_for(p).rank["raw_counts"]["sdpa_math"] == 0


def test_the_bundled_real_traces_raise_nothing(repo_root):
    paths = sorted((repo_root / "examples" / "perf-runs").glob("*/traces/*.json.gz"))
    assert len(paths) >= 9
    for p in paths[:4]:
        assert CAUSE.detect(inputs_for(p)) == [], p.name
