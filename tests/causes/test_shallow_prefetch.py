"""A DataLoader prefetch queue too shallow for bursty fetch times (seed 001 T7): hand-built step-time
logs whose in-epoch stalls are known by construction (fire with the share computed by hand, silent
on one stall, on epoch-start stalls and on the profiler's steps, borderline at STALL_RATIO, no
workers), the verifier's re-derivation from its own re-read of the log confirming and refuting,
and the bundled shallow-prefetch run and its control end to end through the scorer."""

from __future__ import annotations

import pytest
from cause_inputs import bundled_score

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import shallow_prefetch as sp
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.state import Manifest

CAUSE = sp.CAUSE


def _x(steps: list[float], profiled: list[int] | None = None, bpe: int | None = None, workers: int | None = 4,
       skip: int = 1) -> Inputs:
    """Inputs as the analysts hand them: the log's steps after ``skip`` warm-up steps, the trace's
    profiled step numbers (``per_step``), the manifest's ``num_workers``."""
    log = {"path": "train.log", "step_times_s": steps[skip:], "batches_per_epoch": bpe or len(steps),
           "warmup_steps_skipped": skip}
    rank = {"path": "trace_rank0.json.gz", "per_step": [{"step": n} for n in (profiled or [])]}
    return Inputs(rank=rank, log=log, manifest=Manifest.model_construct(num_workers=workers))


def _judge(f, rd) -> str:
    return registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value


# 24 steps: step 0 a 0.5 s worker start, 20 ms steps, every 5th batch (5, 10, 15, 20) 80 ms (a slow shard),
# steps 8-12 the profiler's (warm-up 8, profiled 9-11, export 12: 0.4 s).
BURSTY = [0.5] + [0.02] * 23
for _i in (5, 10, 15, 20):
    BURSTY[_i] = 0.08
BURSTY[12] = 0.4


def test_fires_on_recurring_in_epoch_stalls_with_the_share_by_hand():
    [f] = CAUSE.detect(_x(BURSTY, profiled=[9, 10, 11]))
    assert f.causes == ("dataloader-shallow-prefetch",) and [lv.name for lv in f.levers] == ["prefetch_factor_8"]
    # counted: steps 1-23 less 8-12 (PROFILER_LEAD 1 before 9, export 12): 18 steps, stalls 5, 15, 20
    # median 0.02; excess 3 x 0.06 = 0.18 s; total 15 x 0.02 + 3 x 0.08 = 0.54 s
    st = f.claim.evidence[-1].returned
    assert (st["counted"], st["stalls"], st["stall_steps"]) == (18, 3, [5, 15, 20])
    assert f.share == pytest.approx(0.18 / 0.54, abs=1e-6) == f.claim.value
    # the verifier re-reads the whole log (one epoch, warm-up step included) and its reader's step numbers
    rd = CAUSE.rederive(f.claim, Reader(log={"epochs": [BURSTY]}, rank={"reader": {"step_numbers": [9, 10, 11]}}))
    assert rd.value == pytest.approx(f.share) and _judge(f, rd) == "confirmed"
    # a re-read without the stalls refutes it
    flat = [0.5] + [0.02] * 23
    rd2 = CAUSE.rederive(f.claim, Reader(log={"epochs": [flat]}, rank={"reader": {"step_numbers": [9, 10, 11]}}))
    assert rd2.value == 0.0 and _judge(f, rd2) == "refuted"
    # without a re-read of the log: inconclusive, never confirmed
    assert CAUSE.rederive(f.claim, Reader()).value is None


def test_another_member_of_the_kind_slow_steps_many_epochs_no_trace():
    # 3 epochs of 10 steps at 100 ms (a heavier model), a 0.3 s decode burst at in-epoch step 4 of each:
    # the epoch-first steps are steady (persistent workers), no trace (no profiler steps to leave out)
    ep = [0.1] * 10
    ep[4] = 0.3
    steps = ep * 3
    x = _x(steps, profiled=None, bpe=10, skip=10)
    [f] = CAUSE.detect(x)
    # counted: epochs 2-3 less their first steps = 18 steps; stalls 2 (global 14, 24): excess 2 x 0.2 s;
    # total 16 x 0.1 + 2 x 0.3 = 2.2 s
    assert f.claim.evidence[-1].returned["stall_steps"] == [14, 24]
    assert f.share == pytest.approx(0.4 / 2.2, abs=1e-6)


@pytest.mark.parametrize("burst,fires", [(sp.STALL_RATIO * 0.02, True), (sp.STALL_RATIO * 0.02 - 1e-4, False)])
def test_borderline_at_the_stall_ratio(burst, fires):
    steps = [0.5] + [0.02] * 15
    steps[4] = steps[9] = burst
    assert bool(CAUSE.detect(_x(steps))) is fires


def test_silent_on_one_stall_on_the_profiler_steps_and_on_epoch_starts():
    one = [0.5] + [0.02] * 15
    one[6] = 0.9  # a one-off (a checkpoint, a GC pause): MIN_STALLS
    assert CAUSE.detect(_x(one)) == []
    prof = [0.5] + [0.02] * 15
    prof[5], prof[9] = 0.06, 0.4  # the profiler's warm-up step before ProfilerStep#6-8 and its export after
    assert CAUSE.detect(_x(prof, profiled=[6, 7, 8])) == []
    assert len(CAUSE.detect(_x(prof))) == 1  # the same steps without the trace's step numbers do read as stalls
    # stalls at every epoch start are worker respawns (seed 001 T5), not a shallow queue
    eps = ([0.5] + [0.02] * 4) * 4
    assert CAUSE.detect(_x(eps, bpe=5, skip=5)) == []


def test_silent_without_workers():
    assert CAUSE.detect(_x(BURSTY, profiled=[9, 10, 11], workers=0)) == []
    assert len(CAUSE.detect(_x(BURSTY, profiled=[9, 10, 11], workers=None))) == 1  # unknown: may have workers


def test_profiler_steps():
    assert sp.profiler_steps([11, 9, 10]) == {8, 9, 10, 11, 12}
    assert sp.profiler_steps([]) == set()


@pytest.mark.parametrize("case,cause,lever", [("shallow-prefetch", "dataloader-shallow-prefetch", "prefetch_factor_8"),
                                              ("deep-prefetch", None, None)])
def test_the_bundled_run_and_its_control(repo_root, tmp_path, case, cause, lever):
    # the class of shallow-prefetch (data-loader-bound by construction; its profiled steps read
    # dispatch-bound) belongs to the class rules (graph/rules/diagnosis.py): asserted there, not here
    row = bundled_score(repo_root, tmp_path, case)
    assert (row["error"], row["named_cause"], row["cause_ok"]) == ("", cause, True), row
    if lever:
        assert (row["first_lever"], row["lever_ok"]) == (lever, True), row


def test_the_verifier_reader_gives_the_profiled_step_numbers(repo_root):
    # tools/trace/kineto.py step_stats: the ProfilerStep#N numbers of the bundled run's trace (9-11)
    from ai4s_graph.tools.trace.kineto import rederive_figures
    p = repo_root / "bench/accuracy/cases/shallow-prefetch/traces/trace_rank0.json.gz"
    assert rederive_figures(str(p))["step_numbers"] == [9, 10, 11]
