"""The telemetry verifier's re-read of train.log against the analyst's figures of merit, on logs
built here with known answers (an epoch that holds the warm-up steps is the analyst's stated
fallback, and the verifier re-derives that same definition)."""

from __future__ import annotations

from ai4s_graph.graph.rules.figures import Reader, fom_value
from ai4s_graph.tools.trainlog import fom
from ai4s_graph.tools.trainlog.reread import reread_log


def _log(tmp_path, steps: list[float], epochs: int = 1) -> object:
    lines = []
    for e in range(epochs):
        for i, t in enumerate(steps):
            lines.append(f"Batch {i}: loss 1.0 time {t:.4f} seconds samples 8")
        lines.append(f"Epoch {e} completed")
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_single_epoch_with_warmup_is_confirmed_by_the_same_definition(tmp_path):
    steps = [0.75, 0.25, 0.2, 0.2, 0.2, 0.2]
    p = _log(tmp_path, steps)
    f = fom.parse_log(p, global_batch_size=8)
    assert f.epoch_time_s == sum(steps)  # no epoch free of warm-up: the analyst includes it
    rr = reread_log(p)
    v = fom_value("fom.epoch_time_s", Reader(log=rr, warmup=f.warmup_steps_skipped, global_batch_size=8))
    assert abs(v - sum(steps)) < 1e-9


def test_steady_epochs_exclude_the_warmup_epoch(tmp_path):
    steps = [0.5, 0.25, 0.25, 0.25]
    p = _log(tmp_path, steps, epochs=3)
    rr = reread_log(p)
    v = fom_value("fom.epoch_time_s", Reader(log=rr, warmup=2, global_batch_size=8))
    assert abs(v - sum(steps)) < 1e-9  # epochs 1 and 2 are steady; each sums to 1.25 s
