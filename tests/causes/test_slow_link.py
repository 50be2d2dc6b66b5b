"""The slow-link cause: hand-built collectives with known link ratios (NVLink 4 and AMD Infinity
Fabric datasheets), the verifier's own cross-rank summary from hand-built kernels, and the bundled
NCCL_P2P_DISABLE=1 run beside the NVLink runs."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules.causes import slow_link
from ai4s_graph.tools.trace import crossrank_check
from cause_inputs import assert_bundled_run, confirmed
from comm_inputs import group, inputs, kernel, rank_row, reader

MIB64 = 64 * 2**20
ROWS = [rank_row(0, 80.0), rank_row(1, 84.0)]


def test_fires_on_p2p_disabled_with_its_share_and_the_p2p_lever_first():
    # one all-reduce group at 27 GB/s against NVLink 4's 450 GB/s: ratio 0.06; share = 0.80 x 0.94 = 0.752
    [f] = slow_link.CAUSE.detect(inputs(ROWS, [group(MIB64, 48, 120_000.0, 27.0)], env={"NCCL_P2P_DISABLE": "1"}))
    assert f.causes == ("slow-link",) and f.claim.value == 0.06
    assert f.share == pytest.approx(0.752, abs=1e-4)
    assert [lv.name for lv in slow_link.CAUSE.offer(inputs(ROWS, [], env={"NCCL_P2P_DISABLE": "1"}), *f.levers)] \
        == ["enable_p2p", "nccl_env"]
    assert "NCCL_P2P_DISABLE=1" in f.claim.statement


def test_other_member_socket_transport_on_mi300x_without_the_p2p_lever():
    # AMD MI300X, 448 GB/s Infinity Fabric: 2 groups, 40 GB/s for 3000 us and 20 GB/s for 1000 us
    # ratio = (3000*40 + 1000*20) / 448 / 4000 = 0.0781; no P2P variable: enable_p2p is not offered
    x = inputs(ROWS, [group(MIB64, 10, 3000.0, 40.0), group(2**20, 10, 1000.0, 20.0)], gpu="AMD Instinct MI300X",
               env={"NCCL_NET": "Socket"})
    [f] = slow_link.CAUSE.detect(x)
    assert f.claim.value == 0.078
    assert [lv.name for lv in slow_link.CAUSE.offer(x, *f.levers)] == ["nccl_env"]


def test_does_not_fire_at_nvlink_speed_hidden_or_across_nodes():
    assert slow_link.CAUSE.detect(inputs(ROWS, [group(MIB64, 48, 12_000.0, 264.0)])) == []  # ratio 0.59 (93001)
    # slow but hidden: least exposed rank 3% -> share 0.03 x 0.94 < 0.05
    assert slow_link.CAUSE.detect(inputs([rank_row(0, 3.0), rank_row(1, 4.0)], [group(MIB64, 4, 9000.0, 27.0)])) == []
    x = inputs(ROWS, [group(MIB64, 48, 120_000.0, 27.0)], nodes=2)
    assert slow_link.CAUSE.detect(x) == [] and "multi-node" in slow_link.CAUSE.not_checked(x)[0]
    assert slow_link.CAUSE.detect(inputs([rank_row(0, 80.0)], [group(MIB64, 48, 120_000.0, 27.0)])) == []


def test_borderline_at_the_threshold():
    # 90 GB/s over 450 GB/s is exactly 0.2: not under it; 89 GB/s is
    assert slow_link.CAUSE.detect(inputs(ROWS, [group(MIB64, 8, 10_000.0, 90.0)])) == []
    assert slow_link.CAUSE.detect(inputs(ROWS, [group(MIB64, 8, 10_000.0, 89.0)]))


def test_collective_summary_from_kernels_by_hand():
    # 64 MiB fp32 all-reduce on 2 ranks, 3 instances; the transfer is the shorter kernel (rank 0 waits):
    # busbw = 2(n-1)/n x S / t = 67108864 B / 2500 us = 26.84 GB/s; latency = 3 x 2500 us
    n = MIB64 // 4
    t0 = {"allreduce": [kernel(i * 10_000.0, 3000.0, n) for i in range(3)]}
    t1 = {"allreduce": [kernel(i * 10_000.0 + 500.0, 2500.0, n) for i in range(3)]}
    s = crossrank_check.collective_summary({0: t0, 1: t1})
    [g] = s["groups"]
    assert (g["collective"], g["msg_bytes"], g["count"], g["latency_us"]) == ("allreduce", float(MIB64), 3, 7500.0)
    assert g["busbw_gbps"] == pytest.approx(MIB64 / 2500e-6 / 1e9)
    assert s["straggler_rank"] == 1


def test_verifier_rederives_from_its_own_summary_confirming_and_refuting():
    n = MIB64 // 4
    slow = {r: {"allreduce": [kernel(i * 10_000.0, 2500.0, n) for i in range(3)]} for r in (0, 1)}
    [f] = slow_link.CAUSE.detect(inputs(ROWS, [group(MIB64, 3, 7500.0, 26.84)]))
    assert confirmed(slow_link.CAUSE, f.claim, reader({0: 80.0, 1: 84.0}, slow)) == "confirmed"
    fast = {r: {"allreduce": [kernel(i * 10_000.0, 250.0, n) for i in range(3)]} for r in (0, 1)}
    assert confirmed(slow_link.CAUSE, f.claim, reader({0: 80.0, 1: 84.0}, fast)) == "refuted"
    assert confirmed(slow_link.CAUSE, f.claim, reader({0: 80.0, 1: 84.0})) == "inconclusive"


@pytest.mark.parametrize("case, cause, lever", [("ddp-slow-link", "slow-link", "enable_p2p"),
                                                ("ddp-overlapped", None, None)])
def test_bundled_case_and_its_control(case, cause, lever, tmp_path):
    assert_bundled_run(case, tmp_path, cause, lever)
