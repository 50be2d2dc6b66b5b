"""A per-sample loop on hand-built traces with record_shapes (a known batch-1 op sequence repeated k
times), the sampler's re-derivation confirming and refuting, and the bundled case + its control."""

from __future__ import annotations

import pytest
from host_traces import Op, host_trace
from step_traces import bundled, confirmed, read

from ai4s_graph.graph.rules.causes import per_sample_loop
from ai4s_graph.state import Manifest

CAUSE = per_sample_loop.CAUSE
BATCHED = Op("aten::mm", 200.0, kernel_us=1000.0, dims=[[256, 2048], [2048, 2048]])


def head(us: float = 20.0) -> list[Op]:
    """One sample through an auxiliary head: Linear 2048->256, GELU, Linear 256->1 on batch-1 shapes."""
    return [Op("aten::linear", us, 2.0, dims=[[1, 2048], [256, 2048], [256]]),
            Op("aten::gelu", us / 2, 1.0, dims=[[1, 256]]),
            Op("aten::linear", us, 2.0, dims=[[1, 256], [1, 256], [1]])]


def test_fires_with_k_and_the_loop_time(tmp_path):
    # 32 samples x (20 + 10 + 20) µs = 1600 µs of the 10 ms step
    items = [BATCHED] + head() * 32
    x, r = read(host_trace(tmp_path, items, py=("model.py(40): forward", 1, len(items))))
    [f] = CAUSE.detect(x)
    assert f.causes == ("per-sample-loop",) and f.share == pytest.approx(0.16, abs=1e-9)
    st = f.claim.statement
    assert "runs 32 times a step on batch-1 shapes" in st and "aten::linear -> aten::gelu -> aten::linear" in st
    assert "at model.py:40 (forward)" in st
    rep = next(e.returned for e in f.claim.evidence if isinstance(e.returned, dict) and "k" in e.returned)
    assert (rep["k"], rep["period"]) == (32, 3)
    assert [lv.name for lv in f.levers] == ["batch_per_sample_loop"]
    assert confirmed(f, r) == "confirmed"


@pytest.mark.parametrize("rocm", [False, True])
def test_another_member_of_the_kind(tmp_path, rocm):
    # a conv encoder called per image on [1, 3, 32, 32] (MIOpen / cuDNN kernel names), 20 images x 100 µs
    kernel = "MIOpenConvUni" if rocm else "cudnn::implicit_convolve_sgemm"
    one = [Op("aten::conv2d", 60.0, 5.0, dims=[[1, 3, 32, 32], [16, 3, 3, 3], [16]], kernel=kernel),
           Op("aten::relu", 40.0, 2.0, dims=[[1, 16, 30, 30]])]
    x, r = read(host_trace(tmp_path, [BATCHED] + one * 20, rocm=rocm))
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(0.2, abs=1e-9) and "runs 20 times a step" in f.claim.statement
    assert "no Python stacks" in f.claim.statement
    assert confirmed(f, r) == "confirmed"


def test_fewer_repeats_than_the_threshold_do_not_fire(tmp_path):
    # 15 samples x 120 µs = 0.18 of the step, but k = 15 < 16 (the layers of a batch-1 model repeat too)
    x, _ = read(host_trace(tmp_path, [BATCHED] + head(48.0) * 15))
    assert CAUSE.detect(x) == []


def test_a_short_loop_does_not_fire(tmp_path):
    # 32 samples x (10 + 5 + 10) µs = 800 µs = 0.08 of the step < 0.1
    x, _ = read(host_trace(tmp_path, [BATCHED] + head(10.0) * 32))
    assert CAUSE.detect(x) == []


def test_without_shapes_or_for_a_batch_one_job(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    plain = [Op(o.name, o.host_us, o.kernel_us) for o in head()] * 32
    x, _ = read(host_trace(tmp_path / "a", [BATCHED] + plain))
    assert CAUSE.detect(x) == []
    x, _ = read(host_trace(tmp_path / "b", [BATCHED] + head() * 32))
    x.manifest = Manifest(jobid="1", global_batch_size=1)
    assert CAUSE.detect(x) == []


def test_the_verifier_refutes_a_claim_its_trace_does_not_show(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    x, _ = read(host_trace(tmp_path / "a", [BATCHED] + head(60.0) * 32))
    _, other = read(host_trace(tmp_path / "b", [BATCHED] + head() * 2))
    [f] = CAUSE.detect(x)
    assert confirmed(f, other) == "refuted"


def test_bundled_case(tmp_path):
    row = bundled("per-sample-loop", tmp_path)
    assert (row["named_cause"], row["first_lever"]) == ("per-sample-loop", "batch_per_sample_loop")


def test_bundled_control(tmp_path):
    row = bundled("aux-head-batched", tmp_path)
    assert row["cause_ok"] and row["named_cause"] != "per-sample-loop"
