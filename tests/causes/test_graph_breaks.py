"""Graph breaks (issue 24): >= 3 compiled regions a step fire, one or two a step are silent, the
raw-text count re-derives the claim; the bundled run and its no-break control end to end (the
recompile kind stays apart: no compile event, no recompilation named)."""

from __future__ import annotations

import pytest
from cause_inputs import assert_bundled_run, inputs_for, reader_for, trace

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import graph_breaks as gb, recompiles

CAUSE = gb.CAUSE


def test_breaks_in_a_layer_loop_fire_and_are_confirmed(tmp_path):
    # 2 steps: the main frame once and its resume function 4 times a step (10 regions, 5 a step)
    p = trace(tmp_path, {"Torch-Compiled Region: 0/0": 2, "Torch-Compiled Region: 2/0": 2,
                         "Torch-Compiled Region: 2/1": 6, "aten::item": 8})
    x = inputs_for(p, rank={"n_steps": 2})
    [f] = CAUSE.detect(x)
    assert f.causes == ("graph-break",) and f.claim.value == 10 and "5.0 a step, frames 0, 2" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["remove_graph_breaks"]
    assert recompiles.CAUSE.detect(x) == []  # the other kind stays silent
    rd = CAUSE.rederive(f.claim, reader_for(p))
    assert rd.value == 10
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"
    other = trace(tmp_path, {"Torch-Compiled Region: 0/0": 2}, name="o.json.gz")
    rd = CAUSE.rederive(f.claim, reader_for(other))
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "refuted"


@pytest.mark.parametrize("names,steps,fires", [
    ({"Torch-Compiled Region: 0/0": 3}, 3, False),                                   # one graph a step
    ({"Torch-Compiled Region: 0/0": 3, "Torch-Compiled Region: 1/0": 3}, 3, False),  # model + loss compiled
    ({"Torch-Compiled Region: 0/0": 6, "Torch-Compiled Region: 1/3": 3}, 3, True),   # exactly 3 a step
    ({"Torch-Compiled Region: 0/0": 9}, 0, False),                                   # no steps: no claim
])
def test_borderline(tmp_path, names, steps, fires):
    assert bool(CAUSE.detect(inputs_for(trace(tmp_path, names), rank={"n_steps": steps}))) is fires


@pytest.mark.parametrize("case,cause,lever", [("graph-break", "graph-break", "remove_graph_breaks"),
                                              ("compiled-no-breaks", None, None)])
def test_bundled_run_and_its_control(tmp_path, case, cause, lever):
    assert_bundled_run(case, tmp_path, cause, lever)


def test_share_is_the_time_in_the_fragments(tmp_path):
    from host_traces import Op, host_trace
    from step_traces import read
    # 6 compiled fragments a step of 500 µs each (100 µs kernels): 3000 µs of the 10 ms step
    x, _ = read(host_trace(tmp_path, [Op("Torch-Compiled Region: 0/1", 500.0, kernel_us=100.0)] * 6))
    x.rank["n_steps"] = 3
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(0.3, abs=1e-9)
