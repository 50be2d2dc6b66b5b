"""A checkpoint written every step on hand-built traces with stacks (torch.save, safetensors), the
sampler's re-derivation, and the bundled case."""

from __future__ import annotations

import pytest
from step_traces import bundled, confirmed, read, step_trace

from ai4s_graph.graph.rules.causes import checkpoint_io

CAUSE = checkpoint_io.CAUSE


@pytest.mark.parametrize("writer", ["torch/serialization.py(945): save", "torch/distributed/checkpoint/state_dict_saver.py(150): save"])
def test_fires_with_the_writer_time(tmp_path, writer):
    py = [("train.py(470): main", 5000.0), ("ckpt.py(40): save_state", 4998.0), (writer, 4996.0)]
    x, r = read(step_trace(tmp_path, outside_us=5000, py=py))
    [f] = CAUSE.detect(x)
    assert f.causes == ("checkpoint-io-per-step",) and f.share == pytest.approx(0.4996, abs=1e-9)
    assert "ckpt.py:40 (save_state)" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["no_checkpoint_per_step"]
    assert confirmed(f, r) == "confirmed"


def test_other_python_does_not_fire(tmp_path):
    py = [("train.py(470): main", 5000.0), ("io.py(9): save_metrics", 4998.0)]
    x, _ = read(step_trace(tmp_path, outside_us=5000, py=py))
    assert CAUSE.detect(x) == []


def test_bundled_case(tmp_path):
    row = bundled("checkpoint-per-step", tmp_path)
    assert (row["named_cause"], row["first_lever"]) == ("checkpoint-io-per-step", "no_checkpoint_per_step")
