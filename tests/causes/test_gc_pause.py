"""gc.collect() in the step on hand-built traces with Python stacks (known collect time), the
sampler's re-derivation, no stacks → not checked, and the bundled case."""

from __future__ import annotations

import pytest
from step_traces import bundled, confirmed, read, step_trace

from ai4s_graph.graph.rules.causes import gc_pause

CAUSE = gc_pause.CAUSE


@pytest.mark.parametrize("builtin", ["<built-in function collect>", "gc.collect"])
def test_fires_with_the_collect_time(tmp_path, builtin):
    py = [("train.py(470): main", 4000.0), ("hooks.py(12): on_step_end", 3998.0), (builtin, 3996.0)]
    x, r = read(step_trace(tmp_path, outside_us=4000, py=py))
    [f] = CAUSE.detect(x)
    assert f.causes == ("gc-pause",) and f.share == pytest.approx(0.3996, abs=1e-9)
    assert "hooks.py:12 (on_step_end)" in f.claim.statement
    assert confirmed(f, r) == "confirmed"


def test_short_collections_do_not_fire(tmp_path):
    py = [("train.py(470): main", 400.0), ("<built-in function collect>", 398.0)]  # 0.0398 < 0.05
    x, _ = read(step_trace(tmp_path, outside_us=400, py=py))
    assert CAUSE.detect(x) == []


def test_without_stacks_not_checked(tmp_path):
    x, _ = read(step_trace(tmp_path, outside_us=4000))
    assert CAUSE.detect(x) == []
    assert CAUSE.not_checked(x) == ["not checked: gc pause: needs Python stacks (profile with with_stack=True)"]


def test_bundled_case(tmp_path):
    row = bundled("gc-pause", tmp_path)
    assert (row["named_cause"], row["first_lever"]) == ("gc-pause", "no_gc_collect_per_step")
