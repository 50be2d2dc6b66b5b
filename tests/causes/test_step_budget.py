"""The step accounting's share figure and its re-derivation by the verifier's host sampler, on a
hand-built trace whose budget is known by construction (tests/causes/step_traces.py)."""

from __future__ import annotations

import pytest
from step_traces import read, step_trace

from ai4s_graph.graph.rules import step_budget


def test_share_is_the_hand_built_budget_and_the_sampler_agrees(tmp_path):
    # 20 cudaFree of 100 µs in each 10 ms step: 2000 µs = 0.20 of the step in the allocator; the
    # aten::mm is 200 µs host of which 20 µs launch: op 180 µs; the rest (7800 µs) outside any op
    x, r = read(step_trace(tmp_path, alloc=20, alloc_us=100))
    b = step_budget.budget(x)
    assert step_budget.share(b, "host", "allocator") == pytest.approx(0.20, abs=1e-9)
    assert step_budget.share(b, "host", "outside_ops") == pytest.approx(0.78, abs=1e-9)
    assert step_budget.mean_wall_us(b) == pytest.approx(10000.0)
    v, tol = step_budget.sampled_share(r.rank["steps_sampled"], "host", "allocator")
    assert v == pytest.approx(0.20, abs=1e-4) and tol < step_budget.MIN_TOL


def test_no_steps_no_budget_and_the_check_says_so(tmp_path):
    from ai4s_graph.graph.rules.causes import allocator_churn, python_outside_ops
    from ai4s_graph.graph.rules.figures import Inputs
    x = Inputs(rank={"path": "t.json", "rank": 0, "step_accounting_error": "t.json: no ProfilerStep"})
    assert step_budget.budget(x) is None
    assert allocator_churn.CAUSE.detect(x) == [] and allocator_churn.CAUSE.not_checked(x) == []
    [line] = python_outside_ops.CAUSE.not_checked(x)
    assert line.startswith("not checked: host-side causes") and line.endswith("(t.json: no ProfilerStep)")
    assert python_outside_ops.CAUSE.not_checked(Inputs(rank={"path": "t.json", "rank": 0})) == []
