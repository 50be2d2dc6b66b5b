"""Per-parameter optimizer (issue 24): one aten::addcdiv_ per parameter tensor per step is the
per-tensor (foreach=False) path; fires at >= 100 a step, silent below and on the multi-tensor path;
the raw-text count re-derives the claim; the bundled run and its foreach control end to end."""

from __future__ import annotations

import pytest
from cause_inputs import assert_bundled_run, inputs_for, reader_for, trace

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import per_param_optimizer as ppo

CAUSE = ppo.CAUSE


def test_adam_per_tensor_fires_and_is_confirmed(tmp_path):
    # 2 steps of a per-tensor Adam over 300 tensors: 600 addcdiv_ (300 a step >= 100)
    p = trace(tmp_path, {"aten::addcdiv_": 600, "aten::lerp_": 600, "aten::mm": 4})
    [f] = CAUSE.detect(inputs_for(p, rank={"n_steps": 2}))
    assert f.causes == ("per-parameter-optimizer",) and f.claim.value == 600
    assert "300 a step" in f.claim.statement and [lv.name for lv in f.levers] == ["foreach_optimizer"]
    rd = CAUSE.rederive(f.claim, reader_for(p))
    assert rd.value == 600
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


def test_a_different_count_refutes(tmp_path):
    p = trace(tmp_path, {"aten::addcdiv_": 600})
    [f] = CAUSE.detect(inputs_for(p, rank={"n_steps": 2}))
    other = trace(tmp_path, {"aten::addcdiv_": 200}, name="other.json.gz")
    rd = CAUSE.rederive(f.claim, reader_for(other))
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "refuted"


@pytest.mark.parametrize("names,steps,fires", [
    ({"aten::addcdiv_": 300}, 3, True),            # exactly 100 a step (RMSprop / Adagrad use the same op)
    ({"aten::addcdiv_": 297}, 3, False),           # 99 a step: a small model, launch cost negligible
    ({"aten::_foreach_addcdiv_": 3}, 3, False),    # foreach AdamW: one multi-tensor op a step
    ({"aten::_fused_adamw_": 3}, 3, False),        # fused AdamW
    ({"aten::addcdiv_": 900}, 0, False),           # no step count: no per-step figure, no claim
])
def test_borderline_and_multi_tensor(tmp_path, names, steps, fires):
    p = trace(tmp_path, names)
    assert bool(CAUSE.detect(inputs_for(p, rank={"n_steps": steps}))) is fires


@pytest.mark.parametrize("case,cause,lever", [("per-parameter-optimizer", "per-parameter-optimizer",
                                                "foreach_optimizer"), ("experts-foreach", None, None)])
def test_bundled_run_and_its_control(tmp_path, case, cause, lever):
    assert_bundled_run(case, tmp_path, cause, lever)


def test_share_is_the_gpu_idle_time_in_the_optimizer_step(tmp_path):
    from host_traces import Op, host_trace
    from step_traces import read
    # a 3000 µs optimizer step with the GPU idle, then 120 per-tensor updates (tiny kernels): 0.3 of the step
    items = [Op("Optimizer.step#AdamW.step", 3000.0)] + [Op("aten::addcdiv_", 10.0, kernel_us=1.0, launch_us=2.0)] * 120
    x, _ = read(host_trace(tmp_path, items))
    x.rank["n_steps"] = 3
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(0.3, abs=1e-9)
