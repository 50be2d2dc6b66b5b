"""The exposed-communication cause: hand-built per-rank exposed communication with known answers
(balanced ranks, a straggler whose own exposed communication is small, 4 ranks), the slow link
taking precedence, the verifier's re-derivation from every rank's timeline, and the bundled runs
(93001 exposed, 93004 straggler: the verdict keeps the straggler there)."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules.causes import exposed_comm
from cause_inputs import assert_bundled_run, bundled_row, confirmed
from comm_inputs import group, inputs, rank_row, reader

MIB64 = 64 * 2**20
NVLINK = [group(MIB64, 48, 12_000.0, 264.0)]  # 0.59 of NVLink 4: not a slow link


def test_fires_when_even_the_least_exposed_rank_is_communication_bound():
    # 93001's shape: rank 0 (arrives last, waits for nobody) 21.2%, rank 1 (waits 16.6 ms) 50.8%
    x = inputs([rank_row(0, 21.2, 44_819.5), rank_row(1, 50.8, 44_538.7)], NVLINK, waits_ms={0: 0.0, 1: 16.6})
    [f] = exposed_comm.CAUSE.detect(x)
    assert f.causes == ("exposed-communication",) and f.claim.value == 21.2
    assert f.share == pytest.approx(0.212, abs=1e-4)
    assert [lv.name for lv in f.levers] == ["batch_64_per_rank"]


def test_other_member_four_ranks_fsdp_all_gathers():
    # 4 ranks, all-gathers; the least exposed rank 2 with 30%: share 0.30
    rows = [rank_row(0, 41.0), rank_row(1, 35.5), rank_row(2, 30.0), rank_row(3, 44.0)]
    [f] = exposed_comm.CAUSE.detect(inputs(rows, [group(MIB64, 20, 8000.0, 300.0, "allgather")]))
    assert f.claim.value == 30.0 and f.share == pytest.approx(0.30)


def test_does_not_fire_on_a_straggler_overlap_or_one_rank():
    # 93004's shape: the waiting rank 3.0%, the straggler 0.03%; 93003 overlapped 0.05% / 0.18%
    assert exposed_comm.CAUSE.detect(inputs([rank_row(0, 3.0), rank_row(1, 0.03)], NVLINK)) == []
    assert exposed_comm.CAUSE.detect(inputs([rank_row(0, 0.05), rank_row(1, 0.18)], NVLINK)) == []
    assert exposed_comm.CAUSE.detect(inputs([rank_row(0, 60.0)], NVLINK)) == []


def test_a_slow_link_explains_the_time_instead():
    rows = [rank_row(0, 80.0), rank_row(1, 84.0)]
    assert exposed_comm.CAUSE.detect(inputs(rows, [group(MIB64, 48, 120_000.0, 27.0)])) == []


def test_borderline_at_the_class_threshold():
    assert exposed_comm.CAUSE.detect(inputs([rank_row(0, 20.0), rank_row(1, 50.0)], NVLINK))
    assert exposed_comm.CAUSE.detect(inputs([rank_row(0, 19.9), rank_row(1, 50.0)], NVLINK)) == []


def test_verifier_rederives_from_every_ranks_timeline():
    [f] = exposed_comm.CAUSE.detect(inputs([rank_row(0, 21.2), rank_row(1, 50.8)], NVLINK))
    assert confirmed(exposed_comm.CAUSE, f.claim, reader({0: 21.5, 1: 50.1})) == "confirmed"
    assert confirmed(exposed_comm.CAUSE, f.claim, reader({0: 2.0, 1: 50.1})) == "refuted"
    assert confirmed(exposed_comm.CAUSE, f.claim, reader({0: 21.5})) == "inconclusive"


def test_bundled_case(tmp_path):
    assert_bundled_run("ddp-exposed-comm", tmp_path, "exposed-communication", "batch_64_per_rank")


def test_bundled_straggler_run_keeps_its_straggler(tmp_path):
    # 93004: the straggler's own exposed communication is 0.03% (it waits for no rank): still a straggler
    r = bundled_row("ddp-straggler", tmp_path)
    assert (r["error"], r["named_cause"], r["named_rank"], r["first_lever"]) == ("", "straggler", 1,
                                                                                  "balance_straggler_rank")
