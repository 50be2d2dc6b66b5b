"""Impact estimates: hand-computed savings per lever, the ordering by estimated saving, and the
bundled examples (92001 dispatch-bound ranks a launch lever first, 92002 data-loader-bound a
DataLoader lever first)."""

from __future__ import annotations

import pytest

from ai4s_graph.state.report import LeverRecommendation
from ai4s_graph.tools.levers import impact as I
from ai4s_graph.tools.trace.backends import analyze_trace


def trace(step=100.0, busy_total=120.0, n=3, dl=30.0, kernels=1000, exposed=0.0):
    return {"step_time_ms": step, "n_steps": n, "dataloader_ms_per_step": dl, "kernels_per_step": kernels,
            "timeline": {"busy_time": {"time_ms": busy_total}, "exposed_comm_time": {"time_ms": exposed}}}


def test_launch_overhead_bounds():
    # busy 40 ms/step of 100 -> idle 60; DataLoader 30 -> high 30; low 1000 x 3.5 us = 3.5 ms
    e = I.estimate("torch_compile_reduce_overhead", trace())
    assert (e.saving_ms_low, e.saving_ms_high) == pytest.approx((3.5, 30.0))
    assert "1000 kernels/step × 3.5 µs" in e.arithmetic
    # idle smaller than the launch floor: capped by idle
    e = I.estimate("cuda_graphs", trace(step=41.0, dl=0.0))
    assert (e.saving_ms_low, e.saving_ms_high) == pytest.approx((1.0, 1.0))


def test_each_launch_lever_has_its_own_model_never_a_copy():
    # batch x2: the same launches carry twice the samples: per step of today's samples the graph
    # bounds (3.5, 30) x (1 - 1/2) = (1.75, 15)
    e = I.estimate("larger_batch_per_launch", trace())
    assert (e.saving_ms_low, e.saving_ms_high) == pytest.approx((1.75, 15.0))
    assert "× (1 − 1/2)" in e.arithmetic
    # fusion: the fusion factor is not in one trace -> no estimate, said so
    f = I.estimate("fuse_small_kernels", trace())
    assert f.saving_ms_high is None and "not visible in one trace" in f.arithmetic
    g = I.estimate("torch_compile_reduce_overhead", trace())
    assert (g.saving_ms_low, g.saving_ms_high) != (e.saving_ms_low, e.saving_ms_high)


def test_dataloader_overlap_bounds():
    e = I.estimate("num_workers", trace())
    assert (e.saving_ms_low, e.saving_ms_high) == pytest.approx((30.0, 30.0))
    # loading 70 of a 100 ms step, GPU busy 20: high min(70, 80) = 70, low min(70, 100 - 70) = 30
    e = I.estimate("prefetch_factor", trace(busy_total=60.0, dl=70.0))
    assert (e.saving_ms_low, e.saving_ms_high) == pytest.approx((30.0, 70.0))


def test_exposed_comm_and_missing_inputs():
    e = I.estimate("ddp_bucket_cap_mb", trace(exposed=15.0))
    assert (e.saving_ms_low, e.saving_ms_high) == pytest.approx((0.0, 5.0))
    assert I.estimate("num_workers", {}).saving_ms_high is None
    assert I.estimate("scale_out", trace()).saving_ms_high is None  # no model: says so
    assert "not estimated" in I.estimate("scale_out", trace()).text()


def test_memory_bound_category_to_peak_bandwidth():
    # 3 steps, elementwise 30 ms at 1.5 TB/s of a 3.0 TB/s peak (50%): bytes = 45e9 B
    rf = {"categories": {"elementwise": {"bound": "memory", "kernel_us": 30000.0, "bytes": 45e9, "tbps": 1.5,
                                         "pct_peak_bw": 50.0}}}
    e = I.estimate("fuse_elementwise", trace(), rf)
    t, t_peak = 10.0, 45e9 / 3 / 3.0e12 * 1000  # 10 ms -> 5 ms per step at peak
    assert e.saving_ms_high == pytest.approx(t - t_peak)
    assert e.saving_ms_low == pytest.approx(t - t_peak / I.ACHIEVABLE_BW_FRAC)
    assert I.estimate("fuse_elementwise", trace(), {"categories": {}}).saving_ms_high is None


def test_memory_bound_category_above_peak_gets_no_saving():
    """A category whose modelled bytes exceed the peak over its kernel time (the byte model
    over-counts) is not turned into a saving: with no other category the lever has none, and the
    text says why; beside a plausible category only that one is summed."""
    over = {"bound": "memory", "kernel_us": 3000.0, "bytes": 16e9, "tbps": 5.333, "pct_peak_bw": 5.333 / 4.8 * 100,
            "above_peak_bw": True}
    e = I.estimate("fuse_elementwise", trace(), {"categories": {"elementwise": over}})
    assert e.saving_ms_high is None and e.saving_ms_low is None and "over-count" in e.text()
    ok = {"bound": "memory", "kernel_us": 30000.0, "bytes": 45e9, "tbps": 1.5, "pct_peak_bw": 50.0}
    e = I.estimate("fuse_elementwise", trace(), {"categories": {"elementwise": over, "normalization": ok}})
    assert e.saving_ms_high == pytest.approx(10.0 - 45e9 / 3 / 3.0e12 * 1000) and "over-count" in e.text()


def test_sdpa_and_precision():
    e = I.estimate("sdpa_efficient", trace(), sdpa_math_ms=15.0)
    assert (e.saving_ms_low, e.saving_ms_high) == pytest.approx((13.5, 14.0))
    rf = {"peak_bf16_tflops": 989.0, "categories": {"GEMM": {"precision": "fp32", "kernel_us": 60000.0, "peak_tflops": 67.0}}}
    e = I.estimate("precision_bf16", trace(), rf)
    assert e.saving_ms_low == pytest.approx(20.0 * (1 - 1 / 1.4))
    assert e.saving_ms_high == pytest.approx(20.0 * (1 - 67.0 / 989.0))


def test_rank_and_annotate_order_by_saving():
    recs = [LeverRecommendation(name="scale_out", why="a"), LeverRecommendation(name="torch_compile_reduce_overhead", why="b"),
            LeverRecommendation(name="num_workers", why="c")]
    out = I.annotate(recs, trace())
    # num_workers 30-30 (mid 30) before the launch lever 3.5-30 (mid 16.75); no-model lever last
    assert [r.name for r in out] == ["num_workers", "torch_compile_reduce_overhead", "scale_out"]
    assert "could save 30.00–30.00 ms per step" in out[0].why and out[0].why.startswith("c; ")


@pytest.mark.parametrize("run,first", [("92001", "torch_compile_reduce_overhead"), ("92002", "num_workers")])
def test_examples_rank_their_class_lever_first(repo_root, run, first):
    a = analyze_trace(repo_root / "examples" / "perf-runs" / run / "traces" / "trace_rank0.json.gz", backend="kineto").model_dump()
    ranked = I.rank_levers(["num_workers", "torch_compile_reduce_overhead"], a)
    assert ranked[0].lever == first


@pytest.mark.parametrize("device, floor, which", [
    ("NVIDIA H200", 5.5, "H200, measured"),                   # reports/raw-2026-11-29 node probe: 6.02 µs
    ("AMD Instinct MI355X", 3.5, "MI355X, measured"),         # seed 000 lesson 18
    ("NVIDIA H100 80GB HBM3", 3.5, "not measured"),           # no measurement: lesson 18's smallest floor
    (None, 3.5, "not measured"),
])
def test_the_launch_floor_is_the_traces_gpu(device, floor, which):
    assert I.launch_floor_us(device)[0] == floor and which in I.launch_floor_us(device)[1]
    t = dict(trace(), device_name=device) if device else trace()
    e = I.estimate("cuda_graphs", t)
    # 1000 kernels/step × the floor, below the 60 ms idle; high unchanged (30 ms)
    assert (e.saving_ms_low, e.saving_ms_high) == pytest.approx((1000 * floor / 1000, 30.0))
    assert f"× {floor} µs launch floor" in e.arithmetic
