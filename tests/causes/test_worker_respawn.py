"""DataLoader workers re-spawned every epoch (seed 001 T5): hand-built step-time logs whose
epoch-first steps stall by construction (fire, silent, borderline at START_RATIO, one export stall
in one epoch only), the verifier's re-derivation from its own per-epoch re-read confirming and
refuting, and the bundled worker-respawn run and its control end to end through the scorer."""

from __future__ import annotations

import pytest
from cause_inputs import assert_bundled

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import worker_respawn as wr
from ai4s_graph.graph.rules.figures import Inputs, Reader

CAUSE = wr.CAUSE


def _log(epochs: list[list[float]], warm: list[float] | None = None) -> dict:
    """Log facts as the telemetry analyst hands them: steady steps after a warm-up epoch."""
    bpe = len(epochs[0])
    return {"path": "train.log", "step_times_s": [t for e in epochs for t in e], "batches_per_epoch": bpe,
            "warmup_steps_skipped": len(warm) if warm is not None else bpe}


def test_fires_on_a_stall_at_every_epoch_start_with_its_share():
    # 4 epochs of 4 steps: first step 0.5 s, the others 0.02 s. Excess per epoch 0.48 s; total 4 x 0.56 s.
    eps = [[0.5, 0.02, 0.02, 0.02]] * 4
    [f] = CAUSE.detect(Inputs(log=_log(eps)))
    assert f.causes == ("dataloader-worker-respawn",) and [lv.name for lv in f.levers] == ["persistent_workers"]
    assert f.share == pytest.approx(4 * 0.48 / (4 * 0.56), abs=1e-6) == f.claim.value
    assert "4 of 4 steady epochs" in f.claim.statement
    # the verifier re-reads the log itself: its epochs include the warm-up epoch, which it drops
    rd = CAUSE.rederive(f.claim, Reader(log={"epochs": [[0.9, 0.02, 0.02, 0.02]] + eps}))
    assert rd.value == pytest.approx(f.share)
    assert registry.judge(f.claim, "telemetry_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"
    # a re-read without the stalls refutes the claim
    rd2 = CAUSE.rederive(f.claim, Reader(log={"epochs": [[0.9, 0.02, 0.02, 0.02]] + [[0.02] * 4] * 4}))
    assert rd2.value == 0.0
    assert registry.judge(f.claim, "telemetry_verifier", rd2.value, rd2.tolerance, rd2.method).verdict.value == "refuted"


def test_another_member_of_the_kind_long_epochs_and_a_slower_steady_step():
    # 3 epochs of 10 steps at 80 ms, each opening with a 300 ms worker start (3.75x): fires; excess 3 x 0.22 s
    eps = [[0.30] + [0.08] * 9] * 3
    [f] = CAUSE.detect(Inputs(log=_log(eps)))
    assert f.share == pytest.approx(3 * 0.22 / (3 * (0.30 + 0.72)), abs=1e-6)


@pytest.mark.parametrize("first,fires", [(wr.START_RATIO * 0.02, True), (wr.START_RATIO * 0.02 - 1e-4, False)])
def test_borderline_at_the_start_ratio(first, fires):
    eps = [[first, 0.02, 0.02]] * 3
    assert bool(CAUSE.detect(Inputs(log=_log(eps)))) is fires


def test_silent_on_one_slow_epoch_start_a_single_epoch_or_unknown_epochs():
    # one export-like stall at one epoch start of 7 (every bundled control has one ~0.4 s step): 1/7 < 1/2
    eps = [[0.45, 0.02, 0.02]] + [[0.02, 0.02, 0.02]] * 6
    assert CAUSE.detect(Inputs(log=_log(eps))) == []
    assert CAUSE.detect(Inputs(log=_log([[0.5, 0.02, 0.02]]))) == []  # one steady epoch: MIN_EPOCHS
    no_epochs = {**_log([[0.5, 0.02]] * 4), "batches_per_epoch": None}
    assert CAUSE.detect(Inputs(log=no_epochs)) == []
    # a warm-up skip that is not a whole number of epochs: the epoch boundaries are unknown
    assert CAUSE.detect(Inputs(log=_log([[0.5, 0.02, 0.02]] * 4, warm=[0.4, 0.02]))) == []


def test_no_lever_without_workers():
    from ai4s_graph.state import Manifest
    x = Inputs(log=_log([[0.5, 0.02, 0.02]] * 3), manifest=Manifest.model_construct(num_workers=0))
    [f] = registry.detect("trace_analyst", x)
    assert f.causes == ("dataloader-worker-respawn",) and f.levers == ()


@pytest.mark.parametrize("case,cause,lever", [("worker-respawn", "dataloader-worker-respawn", "persistent_workers"),
                                              ("persistent-workers", None, None)])
def test_the_bundled_run_and_its_control(repo_root, tmp_path, case, cause, lever):
    assert_bundled(repo_root, tmp_path, case, cause, lever)
