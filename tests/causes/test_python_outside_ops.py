"""Python work outside every recorded op on hand-built traces (known outside-ops time, with and
without stacks), minus the time a more specific cause explains, and the bundled case + controls."""

from __future__ import annotations

import pytest
from step_traces import bundled, confirmed, read, step_trace

from ai4s_graph.graph.rules.causes import python_outside_ops

CAUSE = python_outside_ops.CAUSE


def test_fires_and_names_the_user_line(tmp_path):
    # outside ops over the step: 10000 - 200 (aten::mm with its launch) = 9800 µs; of it during the
    # kernel (1000 µs from mm start + 80 µs): 1000 - 120 (the op's last 120 µs) = 880; GPU-idle and
    # outside ops: 9800 - 880 = 8920 µs = 0.892 of the 10 ms step
    py = [("train.py(470): main", 6000.0), ("metrics.py(31): update_metrics", 5990.0)]
    x, r = read(step_trace(tmp_path, outside_us=6000, py=py))
    [f] = CAUSE.detect(x)
    assert f.causes == ("python-outside-ops",) and f.share == pytest.approx(0.892, abs=1e-6)
    assert "metrics.py:31 (update_metrics)" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["no_python_work_in_step"]
    assert confirmed(f, r) == "confirmed"


def test_without_stacks_says_how_to_get_the_line(tmp_path):
    x, _ = read(step_trace(tmp_path, outside_us=6000))
    [f] = CAUSE.detect(x)
    assert "no Python stacks" in f.claim.statement


def test_time_a_specific_cause_explains_is_not_counted(tmp_path):
    # the same outside ops, 5.99 ms of it inside gc.collect: the rest (0.892 - 0.599) = 0.293
    py = [("train.py(470): main", 6000.0), ("<built-in function collect>", 5990.0)]
    x, _ = read(step_trace(tmp_path, outside_us=6000, py=py))
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(0.892 - 0.599, abs=1e-6)
    py = [("train.py(470): main", 8000.0), ("torch/serialization.py(945): save", 7990.0)]
    x, _ = read(step_trace(tmp_path, outside_us=8000, py=py, name="s.json.gz"))
    assert CAUSE.detect(x) == []  # 0.892 - 0.799 = 0.093 < 0.25


def test_bundled_case_and_controls(tmp_path):
    row = bundled("python-outside-ops", tmp_path / "a")
    assert (row["named_cause"], row["first_lever"]) == ("python-outside-ops", "no_python_work_in_step")
    for i, control in enumerate(("gemm-base-stacks", "preprocess-on-gpu")):
        ctl = bundled(control, tmp_path / str(i))   # names at most what it has (truth "present")
        assert ctl["named_cause"] != "python-outside-ops" and ctl["cause_ok"] is True
