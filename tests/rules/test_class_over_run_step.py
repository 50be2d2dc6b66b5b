"""The class rules on a profiler-stretched window, between the two rules, on exposed host-to-device
copies, and the log's bursty stalls (issue 24 point 2 and "exposed memcpy as a class, never
unknown"): hand-built tables whose answers are computed by hand, and bundled H200 runs end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ai4s_graph.graph.rules import context as ctx
from ai4s_graph.graph.rules import diagnosis as dg
from ai4s_graph.state import BottleneckClass as C

CASES = Path(__file__).resolve().parents[2] / "bench" / "accuracy" / "cases"


def _rank(comp_ms: float, busy_ms: float, step_ms: list[float], memcpy_ms: float = 0.0,
          kernel_us: dict[str, float] | None = None, steps: tuple[int, ...] = (5, 6, 7)) -> dict:
    """One rank's tables: the GPU window = the profiled steps, rows with their times."""
    total = sum(step_ms)
    row = lambda ms: {"time_ms": ms, "percent": 100.0 * ms / total}  # noqa: E731
    return {"timeline": {"computation_time": row(comp_ms), "exposed_comm_time": row(0.0),
                         "exposed_memcpy_time": row(memcpy_ms), "busy_time": row(busy_ms),
                         "idle_time": row(total - busy_ms), "total_time": row(total),
                         "total_memcpy_time": row(memcpy_ms)},
            "n_steps": len(step_ms), "step_time_ms": total / len(step_ms),
            "per_step": [{"step": s, "dur_ms": d} for s, d in zip(steps, step_ms)],
            "launch": {"mean_kernel_us": 45.0}, "dataloader_ms_per_step": 0.05, "kernel_us": kernel_us or {}}


# the log: steps 0..11, 4.3 ms each outside the profiler, the profiler's edge steps (4, 8) slow
LOG = [0.32, 0.0054, 0.0044, 0.0042, 0.0249, 0.0051, 0.0048, 0.0051, 0.0635, 0.0043, 0.0043, 0.0043]


def test_run_step_leaves_out_the_profiled_steps_and_their_edges():
    rs = ctx.run_step([5, 6, 7], LOG[2:], first_index=2)
    # kept: steps 2, 3, 9, 10, 11 = 4.4, 4.2, 4.3, 4.3, 4.3 ms -> median 4.3
    assert rs["ms"] == pytest.approx(4.3) and rs["n"] == 5 and rs["excluded"] == [4, 8] and rs["stalls"] == []
    # a log that prints every 10th step cannot be matched to ProfilerStep numbers
    assert ctx.run_step([5, 6, 7], [0.004] * 4, first_index=2) is None
    assert ctx.run_step([], LOG, 0) is None


def test_a_stretched_gpu_bound_window_keeps_its_class():
    # 3 steps of 4.85 ms, 3.83 ms computing each (79.0% of the window): no rule fires on the window;
    # over the run's 4.3 ms step the GPU computes 3.83 / 4.3 = 89.1% -> compute-bound (bench: gemm-base)
    r = ctx.with_run_step(_rank(3 * 3.83, 3 * 3.84, [4.85] * 3), LOG[2:], 2)
    d = dg.classify_trace(r)
    assert d.klass is C.compute and d.inputs["computation_pct"] == pytest.approx(100 * 3.83 / 4.3)
    assert d.inputs["step_stretch"] == pytest.approx(4.85 / 4.3, abs=1e-3) and "outside the profiler" in d.rule
    # within the 1.10 noise band the window is read as is
    near = ctx.with_run_step(_rank(3 * 3.83, 3 * 3.84, [4.7] * 3), LOG[2:], 2)
    assert dg.step_correction(near) is None and "step_stretch" not in dg.classify_trace(near).inputs


def test_a_stall_in_the_window_is_not_a_stretch():
    # one 503 ms stall step and two 33/29 ms steps (bench: worker-respawn): the median step (33 ms) is the
    # profiler's stretch, not the mean (188 ms); GPU 8.3 ms a step over the run's 19.75 ms step: 42% busy
    r = _rank(3 * 6.0, 3 * 8.3, [503.0, 33.0, 29.0], steps=(9, 10, 11))
    r["run_step"] = {"ms": 19.75}
    assert dg.profiled_step_ms(r) == 33.0 and dg.step_correction(r) == pytest.approx(33.0 / 19.75)
    d = dg.classify_trace(r)
    assert d.inputs["busy_pct"] == pytest.approx(100 * 8.3 / 19.75) and d.klass is C.dispatch


@pytest.mark.parametrize("comp, idle, want", [
    (77.9, 21.0, C.compute),     # activation-checkpointing: 2.1 pp from the compute rule, 19 from dispatch
    (67.8, 31.6, C.dispatch),    # dataloader-stall-8-workers: 12.2 vs 8.4 pp
    (70.0, 30.0, C.unknown),     # equidistant: a tie
])
def test_between_the_rules_the_nearer_one_borderline(comp, idle, want):
    t = {"timeline": {"computation_time": {"percent": comp}, "exposed_comm_time": {"percent": 0.0},
                      "busy_time": {"percent": 100 - idle}, "idle_time": {"percent": idle}},
         "launch": {"mean_kernel_us": 40.0}}
    d = dg.classify_trace(t)
    assert d.klass is want and d.borderline and not any(x.fired for x in d.tests)
    if want is not C.unknown:
        assert d.confidence == 0.5 and "nearer" in d.rule


@pytest.mark.parametrize("name, fires", [
    ("Memcpy HtoD (Pageable -> Device)", True),   # CUDA, pageable (bench: pageable-h2d, 52.3%)
    ("Memcpy HtoD (Pinned -> Device)", True),     # CUDA, pinned but synchronous
    ("Memcpy HtoD", True),                        # kineto on ROCm (RoctracerActivity: "HtoD")
    ("Memcpy DtoH (Device -> Pageable)", False),  # a device-to-host copy is not the input's (d2h-param-copy)
])
def test_exposed_host_to_device_copies_are_the_input_pipeline(name, fires):
    # 3 steps of 23.4 ms: 9 ms computing, 12 ms exposed copy, 2.4 ms idle each -> copies 51% of the window
    r = _rank(27.0, 63.0, [23.4] * 3, memcpy_ms=36.0, kernel_us={name: 36_000.0})
    d = dg.classify_trace(r)
    assert (d.klass is C.data_loader) is fires
    if fires:
        assert "seed 001 T6" in d.rule and d.inputs["h2d_copy_share"] == pytest.approx(1.0)
    else:
        assert d.klass is C.unknown            # held by copies: no nearest-rule class either
    # below the 20% share the copies do not make the class (conv-control: 12.8% of pinned copies)
    small = _rank(3 * 19.0, 3 * 21.5, [23.4] * 3, memcpy_ms=3 * 2.5, kernel_us={name: 7_500.0})
    assert dg.classify_trace(small).klass is C.compute


def test_bursty_stalls_are_a_finding_not_profiler_inflation():
    # 3 epochs of 4 steps: every epoch's first step 450 ms, the others 20 ms; profiled 9-10 (epoch 2)
    log = [0.45, 0.02, 0.02, 0.02] * 4
    rs = ctx.run_step([9, 10], log[4:], 4, batches_per_epoch=4)
    assert [i for i, _ in rs["stalls"]] == [4, 12] and rs["epoch_start_stalls"] == 2 and rs["ms"] == 20.0
    # kept steps 4-7 and 12-15 (8-11: profiled 9-10 and their edges); the stalls cost
    # (2 x 430) / (2 x 450 + 6 x 20) = 0.8431 of those steps' time
    assert rs["stall_share"] == pytest.approx(860 / 1020, abs=1e-4)
    rec = _rank(2 * 6.0, 2 * 8.0, [21.0, 21.5], steps=(9, 10))
    rec["run_step"] = rs
    rp = ctx.representativeness(rec, None, None)
    assert rp["bursty"] and "epoch starts (seed 001 T5" in rp["statement"] and "not the profiler's doing" in rp["statement"]
    assert rp["representative"]                  # the profiled steps themselves are typical (1.06x)


@pytest.mark.parametrize("case", ["gemm-base", "profiler-stretched", "activation-checkpointing", "pageable-h2d",
                                  "shallow-prefetch", "worker-respawn", "dataloader-stall-8-workers"])
def test_bundled_runs_get_their_class(case, tmp_path):
    from bench.accuracy import score

    d = CASES / case
    row = score.run_case(d, json.loads((d / "truth.json").read_text()), tmp_path, timeout=300)
    assert row["error"] == "" and row["class"] == row["truth_class"], row


def test_loader_stalls_in_the_log_make_a_loader_bound_run():
    # a window read dispatch-bound (idle 60%), and a log whose stalls cost 26% of the run's time
    base = _rank(3 * 8.0, 3 * 8.0, [20.0] * 3)
    rs = {"ms": 20.0, "n": 16, "stall_factor": 3.0, "stalls": [[5, 80.0], [20, 68.0]], "stall_share": 0.26}
    with_workers = dg.classify_trace({**base, "run_step": {**rs, "loader_workers": 4}})
    assert with_workers.klass is C.data_loader and "seed 001 T5/T7" in with_workers.rule
    # without DataLoader workers the stalls are not the loader's: the window's class stands
    assert dg.classify_trace({**base, "run_step": {**rs, "loader_workers": 0}}).klass is C.dispatch
    # both sides of STALL_SHARE
    at = {**rs, "stall_share": dg.STALL_SHARE, "loader_workers": 4}
    assert dg.classify_trace({**base, "run_step": at}).klass is C.data_loader
    below = {**rs, "stall_share": dg.STALL_SHARE - 0.01, "loader_workers": 4}
    assert dg.classify_trace({**base, "run_step": below}).klass is C.dispatch
