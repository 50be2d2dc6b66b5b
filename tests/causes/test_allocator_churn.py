"""Allocator churn (torch.cuda.empty_cache in the step) on hand-built traces with a known
allocator share (CUDA and ROCm naming), its sampler re-derivation, and the bundled case + control."""

from __future__ import annotations

import pytest
from step_traces import bundled, confirmed, read, step_trace

from ai4s_graph.graph.rules.causes import allocator_churn

CAUSE = allocator_churn.CAUSE


@pytest.mark.parametrize("rocm", [False, True])
def test_fires_with_its_share_and_is_confirmed(tmp_path, rocm):
    # 20 x 100 µs hipFree/cudaFree in a 10 ms step: share 0.20 by construction
    x, r = read(step_trace(tmp_path, alloc=20, alloc_us=100, rocm=rocm))
    [f] = CAUSE.detect(x)
    assert f.causes == ("allocator-churn",) and f.share == pytest.approx(0.20, abs=1e-9)
    assert [lv.name for lv in f.levers] == ["no_empty_cache"]
    assert "20 cudaMalloc/cudaFree calls per steady step" in f.claim.statement
    assert confirmed(f, r) == "confirmed"


def test_refuted_when_the_sampler_sees_no_allocator_time(tmp_path):
    x, _ = read(step_trace(tmp_path, alloc=20, alloc_us=100, name="a.json.gz"))
    _, r_other = read(step_trace(tmp_path, alloc=0, name="b.json.gz"))
    [f] = CAUSE.detect(x)
    assert confirmed(f, r_other) == "refuted"


@pytest.mark.parametrize("alloc,alloc_us,fires", [(3, 500.0, False),   # 3 calls < 4 per step
                                                  (20, 20.0, False),   # 400 µs = 0.04 < 0.05
                                                  (25, 20.0, True)])   # 500 µs = 0.05: at the threshold
def test_thresholds(tmp_path, alloc, alloc_us, fires):
    x, _ = read(step_trace(tmp_path, alloc=alloc, alloc_us=alloc_us))
    assert bool(CAUSE.detect(x)) is fires


def test_bundled_case_and_control(tmp_path):
    row = bundled("allocator-churn", tmp_path / "case")
    assert (row["named_cause"], row["first_lever"]) == ("allocator-churn", "no_empty_cache")
    ctl = bundled("gemm-base", tmp_path / "control")   # the control names at most what it has (truth "present")
    assert ctl["named_cause"] != "allocator-churn" and ctl["cause_ok"] is True
