"""The step accounting's share figure and its re-derivation by the verifier's host sampler, on a
hand-built trace whose budget is known by construction (tests/causes/step_traces.py)."""

from __future__ import annotations

from pathlib import Path

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


# Issue 34 "Done when" on the six host-side kinds bundled (real H200 runs, each beside its control):
# case -> (its injected cause, the host state the step accounting must find largest, its control)
HOST_KINDS = {
    "d2h-param-copy": ("d2h-param-copy", "sync", "gemm-base-stacks"),
    "d2h-param-copy-nostack": ("d2h-param-copy", "sync", "gemm-base"),
    "per-sample-loop": ("per-sample-loop", "op", "aux-head-batched"),
    "python-outside-ops": ("python-outside-ops", "outside_ops", "gemm-base-stacks"),
    "gc-pause": ("gc-pause", "outside_ops", "gemm-base-stacks"),
    "checkpoint-per-step": ("checkpoint-io-per-step", "outside_ops", "gemm-base-stacks"),
    "cpu-preprocess": ("cpu-preprocess-in-step", "op", "preprocess-on-gpu"),
}
CASES = Path(__file__).resolve().parents[2] / "bench/accuracy/cases"


def _bundled(case: str):
    import json
    from ai4s_graph.graph.rules import registry
    d = CASES / case
    x, r = read(sorted((d / "traces").iterdir())[0])
    x.rank["n_steps"] = x.rank["step_accounting"]["n_steps"]
    return json.loads((d / "truth.json").read_text()), registry.detect("trace_analyst", x), x, r


@pytest.mark.parametrize("case", sorted(HOST_KINDS))
def test_host_kind_accounted_named_with_its_numbers_and_line(case):
    from step_traces import confirmed
    cause, state, control = HOST_KINDS[case]
    truth, found, x, r = _bundled(case)
    b = x.rank["step_accounting"]
    for s in b["steps"]:  # the breakdown sums to the step (within 2%), the GPU-idle split to the idle time
        assert sum(s["host_us"].values()) == pytest.approx(s["wall_us"], rel=0.02)
        assert sum(s["idle_by_host_us"].values()) == pytest.approx(s["gpu"]["idle_us"], rel=0.02)
        assert s["gpu"]["busy_us"] + s["gpu"]["idle_us"] == pytest.approx(s["wall_us"], rel=0.02)
    idle = b["mean_idle_by_host_us"]
    assert max(idle, key=idle.get) == state == b["lead"]["category"]  # the largest attribution is the injected one
    top = max((f for f in found if f.share is not None), key=lambda f: f.share)
    assert top.causes == (cause,) and confirmed(top, r) == "confirmed"
    assert f"{top.share:.0%}" in top.claim.statement and " ms" in top.claim.statement  # its numbers
    site = truth["sites"][cause]
    if b["has_python_stacks"]:  # the user's file:line, not torch internals
        where = top.claim.statement.split(", at ")[-1].split(", called from ")[-1]
        assert where.startswith(site["file"].rsplit("/", 1)[-1] + ":") and "torch/" not in where
        if case != "python-outside-ops":  # there the innermost user frame is the injected helper spin()
            assert f":{site['def_line']} ({site['function']})" in where
    else:
        assert "no Python stacks" in top.claim.statement
    _, found_c, _, _ = _bundled(control)
    assert cause not in {c for f in found_c for c in f.causes}  # its control does not fire
