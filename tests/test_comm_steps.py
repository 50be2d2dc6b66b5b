"""Communication figures (issue 30) on hand-built traces whose answers are known by construction
(:mod:`test_comm_traces`): overlap with computation and with the backward, DDP buckets against the
25 MiB default, the used-parameter all-reduce of ``find_unused_parameters``, FSDP all-gathers with
and without prefetch, host syncs that wait for a collective, busbw against a baseline, the NCCL
environment, and why the last rank was late (GPU work vs host work). Every expected number is worked
out by hand in the comments from the scenario's timeline (whole µs: sums are exact)."""

from __future__ import annotations

import json

import pytest

from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.trace import comm_context as ctx
from ai4s_graph.tools.trace.comm_ranks import comm_report, late_breakdown
from ai4s_graph.tools.trace.comm_steps import DDP_DEFAULT_BUCKET_BYTES, covered, rank_comm
from test_comm_traces import (baseline_json, ddp_step, fsdp_step, small_buckets, straggler_pair,
                              sync_after_backward)

import numpy as np


def _step(b, tmp_path, name="t.json"):
    rc, _tl = rank_comm(b.write(tmp_path / name))
    assert rc.n_steps == 1 and not rc.warnings
    return rc.steps[0]


def _by(st):
    return {(c.collective, c.dtype, c.phase): c for c in st.collectives}


def test_covered_length_of_intervals_under_blocks():
    bs, be = np.array([0.0, 10.0, 30.0]), np.array([5.0, 20.0, 40.0])
    # [2, 12]: 3 of [0,5) + 2 of [10,20); [20, 30]: nothing; [-5, 50]: everything (5 + 10 + 10)
    assert covered(bs, be, np.array([2.0, 20.0, -5.0]), np.array([12.0, 30.0, 50.0])).tolist() == [5.0, 0.0, 25.0]
    assert covered(bs[:0], be[:0], np.array([0.0]), np.array([9.0])).tolist() == [0.0]


# ------------------------------------------------------------------------------- overlap and buckets


def test_ddp_buckets_overlapping_the_backward(tmp_path):
    st = _step(ddp_step(overlap=True), tmp_path)
    # kernels K1 510-560 (under B2 500-600: hidden 50) and K2 600-700 (after every computation kernel)
    assert (st.comm_us, st.hidden_us, st.exposed_us) == (150, 50, 100)
    assert st.hidden_share == pytest.approx(50 / 150)
    # the autograd nodes run 200-400 on the host; the kernels they launched 400-600 on the GPU
    assert (st.backward_host.start_us, st.backward_host.end_us) == (200, 400)
    assert (st.backward_gpu.start_us, st.backward_gpu.end_us) == (400, 600)
    assert (st.optimizer_host.start_us, st.optimizer_host.end_us) == (800, 850)
    assert (st.first_comm_start_us, st.last_comm_end_us) == (510, 700)
    # K1 runs wholly before the backward's GPU end (50 of 150 µs); K2 starts at it
    assert st.comm_before_backward_end_share == pytest.approx(50 / 150)
    assert st.comm_started_in_backward == 1
    # two buckets of 1 M floats = 4,000,000 B each, both issued inside the backward
    assert (st.buckets, st.bucket_mean_bytes, st.bucket_min_bytes, st.bucket_max_bytes) == (2, 4e6, 4e6, 4e6)
    assert st.bucket_over_default == 4e6 / (25 * 2**20) and DDP_DEFAULT_BUCKET_BYTES == 26214400
    (c,) = st.collectives
    assert (c.collective, c.dtype, c.phase, c.count, c.kernels) == ("allreduce", "Float", "backward", 2, 2)
    assert (c.nelems, c.total_bytes, c.kernel_us, c.exposed_us, c.size_source) == (2e6, 8e6, 150, 100,
                                                                                    "record_param_comms")


def test_ddp_buckets_all_after_the_backward_cannot_overlap(tmp_path):
    st = _step(ddp_step(overlap=False), tmp_path)
    # K1 600-650 and K2 650-750: both start when the last backward kernel has ended (600)
    assert (st.comm_us, st.hidden_us, st.exposed_us, st.hidden_share) == (150, 0, 150, 0)
    assert st.comm_before_backward_end_share == 0 and st.comm_started_in_backward == 0
    assert st.buckets == 2


def test_find_unused_parameters_used_map_all_reduce(tmp_path):
    st = _step(ddp_step(overlap=True, extra_int=16), tmp_path)
    by = _by(st)
    # DDP's used-parameter map: one Int all-reduce of 16 elements (64 B) in the backward, kernel 760-770;
    # the buckets stay the two float all-reduces
    used = by[("allreduce", "Int", "backward")]
    assert (used.count, used.nelems, used.total_bytes, used.kernel_us, used.exposed_us) == (1, 16, 64, 10, 10)
    assert by[("allreduce", "Float", "backward")].count == 2 and st.buckets == 2
    # the extra kernel adds 10 µs of exposed communication: 160 in all, 50 hidden
    assert (st.comm_us, st.hidden_us, st.exposed_us, st.comm_kernels) == (160, 50, 110, 3)


def test_tiny_bucket_cap_many_small_all_reduces(tmp_path):
    st = _step(small_buckets(n=8, nelems=1024), tmp_path)
    # 8 buckets of 1024 floats = 4096 B each: 4096 / 26214400 of the default bucket
    assert (st.buckets, st.bucket_mean_bytes, st.bucket_over_default) == (8, 4096, 4096 / 26214400)
    (c,) = st.collectives
    assert (c.count, c.total_bytes, c.kernel_us) == (8, 8 * 4096, 80)
    rc, _ = rank_comm(tmp_path / "t.json")
    assert rc.median["count.allreduce"] == 8 and rc.median["bucket_mean_bytes"] == 4096


# ------------------------------------------------------------------------------------- FSDP prefetch


def test_fsdp_with_prefetch_hides_every_all_gather_but_the_first(tmp_path):
    st = _step(fsdp_step(prefetch=True), tmp_path)
    rows = [(g.phase, g.module, g.start_us, g.dur_us, g.hidden_us, g.exposed_us, g.msg_bytes) for g in st.gathers]
    # AG0 0-50 runs before any compute; AG1 60-110 under L0 (50-150), AG2 160-210 under L1; in the
    # backward AG1 410-460 under B2 (400-600), AG0 610-660 under B1; 4 M elements in, 8 M out = 32 MB
    assert rows == [("forward", "layers.0", 0, 50, 0, 50, 32e6), ("forward", "layers.1", 60, 50, 50, 0, 32e6),
                    ("forward", "layers.2", 160, 50, 50, 0, 32e6), ("backward", "layers.1", 410, 50, 50, 0, 32e6),
                    ("backward", "layers.0", 610, 50, 50, 0, 32e6)]
    assert st.gather_us == {"forward": 150, "backward": 100}
    assert st.gather_exposed_us == {"forward": 50, "backward": 0}
    assert (st.comm_us, st.hidden_us, st.exposed_us) == (250, 200, 50)
    assert st.buckets == 0  # no all-reduce at all


def test_fsdp_without_prefetch_exposes_every_all_gather(tmp_path):
    st = _step(fsdp_step(prefetch=False), tmp_path)
    # each all-gather starts when the layer before it ends and its layer waits for it: nothing overlaps
    assert [g.hidden_us for g in st.gathers] == [0, 0, 0, 0, 0]
    assert [(g.phase, g.start_us) for g in st.gathers] == [("forward", 0), ("forward", 150), ("forward", 300),
                                                           ("backward", 700), ("backward", 950)]
    assert st.gather_exposed_us == {"forward": 150, "backward": 100}
    assert (st.comm_us, st.hidden_us, st.exposed_us, st.hidden_share) == (250, 0, 250, 0)
    by = _by(st)
    assert by[("allgather", "Float", "forward")].count == 3 and by[("allgather", "Float", "backward")].count == 2
    assert by[("allgather", "Float", "forward")].mean_bytes == 32e6  # the output: 8 M floats


# ----------------------------------------------------------------------------- host sync on a collective


def test_item_between_backward_and_optimizer_waits_for_the_all_reduce(tmp_path):
    st = _step(sync_after_backward(before_optimizer=True), tmp_path)
    (y,) = st.syncs_on_comm
    # cudaStreamSynchronize 525-910 after the backward (host 200-300) and before Optimizer.step# (940):
    # it awaited the copy 905-908, which waited for the all-reduce 600-900 on stream 20
    assert (y.name, y.op, y.position, y.start_us, y.dur_us) == ("cudaStreamSynchronize", "aten::item",
                                                                 "before_optimizer", 525, 385)
    assert (y.collective, y.msg_bytes, y.comm_in_call_us, y.awaited) == ("allreduce", 16e6, 300, True)
    # the sync returns at 910; the optimizer's kernel starts at 950: the GPU idles 40 µs
    assert y.gpu_idle_after_us == 40
    assert st.syncs_by_position == {"before_optimizer": 1} and st.sync_us_by_position == {"before_optimizer": 385}
    # the critical path runs through the all-reduce (300 µs of communication)
    assert st.comm_on_critical_path_us == 300


def test_item_after_the_optimizer_is_the_control(tmp_path):
    st = _step(sync_after_backward(before_optimizer=False), tmp_path)
    (y,) = st.syncs_on_comm
    # the optimizer (520-560) launched its kernel first (905-925, after the all-reduce); the sync
    # 575-935 awaits the copy 930-933 <- O <- the all-reduce: same collective, after the optimizer
    assert (y.position, y.start_us, y.dur_us, y.comm_in_call_us, y.awaited) == ("after_optimizer", 575, 360, 300, True)
    assert y.gpu_idle_after_us == 65  # 935 to the step's end (1000): nothing left to run
    assert st.syncs_by_position == {"after_optimizer": 1}


def test_item_in_a_gradient_hook_during_the_backward_runs_beside_the_all_reduce(tmp_path):
    b = ddp_step(overlap=True)
    b.op("aten::item", 320, 290, tid=2)  # a grad-norm .item() in node 2 (300-400), as in a gradient hook
    b.launch(321, 3, 600, 3, tid=2, api="cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pinned)", cat="gpu_memcpy",
             nbytes=4)
    b.runtime("cudaStreamSynchronize", 325, 280, tid=2)
    st = _step(b, tmp_path)
    (y,) = st.syncs_on_comm
    # the sync 325-605 starts inside the backward's host window (the autograd nodes, 200-400);
    # K1 (510-560) ends inside it and K2 (600-700) runs into it: 55 µs of communication in the call
    assert (y.position, y.comm_in_call_us, y.collective) == ("backward", 55, "allreduce")
    # but it awaited the copy 600-603 behind B2 and B1 on the compute stream, not the all-reduce
    assert y.awaited is False
    assert y.gpu_idle_after_us == 0  # K2 still runs at 605
    assert st.syncs_by_position == {"backward": 1} and st.sync_us_by_position == {"backward": 280}


def test_sync_with_no_collective_running_is_not_on_comm(tmp_path):
    b = ddp_step(overlap=True)
    b.op("aten::item", 900, 50)
    b.runtime("cudaStreamSynchronize", 905, 40)  # after every kernel ended (880): awaits nothing
    st = _step(b, tmp_path)
    assert st.syncs_on_comm == [] and st.syncs_by_position == {"after_optimizer": 1}


# ------------------------------------------------------------------------------- across ranks


def _pair(kind, tmp_path, **kw):
    r0, r1 = straggler_pair(kind)
    return comm_report({0: r0.write(tmp_path / f"{kind}0.json"), 1: r1.write(tmp_path / f"{kind}1.json")}, **kw)


def test_gpu_straggler_lag_is_computation(tmp_path):
    rep = _pair("gpu", tmp_path)
    # rank 1 arrives at t0+340 against rank 0's t0+160 in both steps; ends coincide: both resolved
    assert (rep.n_sync, rep.n_resolved, rep.last_counts) == (2, 2, {0: 0, 1: 2})
    (lr,) = rep.late
    assert (lr.rank, lr.n_last, lr.first, lr.n_steps, lr.max_wait_us) == (1, 2, 0, 1, 180)
    # step 1: spans from the end of step 0's all-reduce (390 on both) to the arrivals: rank 1 390-1340
    # (950), rank 0 390-1160 (770): lag 180. Computation over them: rank 1 O 410-420 + FW 1020-1040 +
    # X 1040-1240 + BW 1240-1340 = 330; rank 0 O + FW + BW 1060-1160 = 130: +200
    assert lr.lag_us == 180 and lr.lag_parts_us["gpu:computation"] == 200
    assert (lr.lag_gpu_us, lr.lag_host_us) == (200, -20)  # rank 1's host did the same, with its GPU busy
    assert lr.largest == "gpu:computation" and lr.lag_share == 180 / 1000
    assert sum(lr.lag_parts_us.values()) == pytest.approx(lr.lag_us)


def test_host_straggler_lag_is_host_time_with_the_gpu_idle(tmp_path):
    rep = _pair("host", tmp_path)
    (lr,) = rep.late
    # rank 1 leaves aten::mm at t0+30 and starts its backward 200 µs later than rank 0 (t0+250 vs 50):
    # spans 410-1360 (950) and 410-1160 (750); the same kernels in both (130 µs): lag 200, all of it
    # rank 1's GPU idle while its host ran no recorded op
    assert (lr.rank, lr.n_steps, lr.lag_us, lr.lag_gpu_us, lr.lag_host_us) == (1, 1, 200, 0, 200)
    assert lr.lag_parts_us["host:outside_ops"] == 200 and lr.lag_parts_us["gpu:computation"] == 0
    assert lr.largest == "host:outside_ops"
    assert lr.step_diff_us["host:outside_ops"] == 200 and lr.step_diff_us["gpu:exposed_comm"] == -200


def test_a_rank_on_a_skewed_clock_gives_the_same_figures(tmp_path):
    r0, r1 = straggler_pair("host")
    for e in r0.cpu + r0.gpu:  # rank 0's clock runs 5 ms ahead: on raw times it would arrive last
        if "ts" in e:
            e["ts"] += 5000
    rep = comm_report({0: r0.write(tmp_path / "a.json"), 1: r1.write(tmp_path / "b.json")})
    # every rank's all-reduce ends at the same instant: the median end difference is the offset
    assert rep.clock_offsets_us == {0: 0.0, 1: -5000.0}
    (lr,) = rep.late
    assert (lr.rank, lr.lag_us, lr.lag_parts_us["host:outside_ops"]) == (1, 200, 200)
    assert any("aligned on the ends of 2" in n for n in rep.notes)
    given = comm_report({0: tmp_path / "a.json", 1: tmp_path / "b.json"}, clock_offsets_us={0: 0.0, 1: 0.0})
    # unaligned, rank 0 would start last, but its ends lie 5 ms apart too: no order is resolved
    assert given.clock_offsets_us == {0: 0.0, 1: 0.0} and (given.n_resolved, given.late) == (0, [])


def test_balanced_ranks_name_no_late_rank(tmp_path):
    rep = _pair("none", tmp_path)
    # both arrive at t0+160: a tie is no last arrival
    assert (rep.n_sync, rep.n_resolved, rep.late) == (2, 0, [])
    assert rep.last_counts == {0: 0, 1: 0}


def test_busbw_against_the_baseline_and_its_p2p_disabled_sweep(tmp_path):
    rep = _pair("gpu", tmp_path, baseline=baseline_json(tmp_path / "eval.json"))
    (b,) = rep.busbw
    # 1 M floats = 4e6 B in the shortest kernel of the pair (rank 1's, 50 µs): algbw 80 GB/s, x 2(n-1)/n = 1
    assert (b.collective, b.msg_bytes, b.count, b.busbw_gbps) == ("allreduce", 4e6, 2, pytest.approx(80.0))
    # baseline 40 GB/s at 1 MB, 160 at 16 MB: 4 MB is halfway in log2(size) -> 100 GB/s; P2P off 10 / 20 -> 15
    assert b.baseline_gbps == pytest.approx(100.0) and b.baseline_bytes == [1e6, 16e6] and not b.extrapolated
    assert b.ratio == pytest.approx(0.8) and b.p2p_disabled_gbps == pytest.approx(15.0)
    assert b.ratio_p2p_disabled == pytest.approx(80 / 15)
    assert "p2p_disabled" in rep.baseline_source


def test_late_breakdown_parts_sum_to_the_interval(tmp_path):
    r0, r1 = straggler_pair("host")
    _rc, tl = rank_comm(r1.write(tmp_path / "r1.json"))
    # rank 1 over 1030-1260: FW (1020-1040) computes its first 10 µs, then the GPU idles until BW (1260)
    length, parts = late_breakdown(tl, 1030.0, 1260.0)
    assert length == 230 and parts["gpu:computation"] == 10
    # 1040-1250 outside ops, 1250-1251 the autograd node, 1251-1253 its launch, 1253-1260 the node again
    assert parts["host:outside_ops"] == 210 and parts["host:launch"] == 2 and parts["host:op"] == 8
    assert sum(parts.values()) == pytest.approx(length)


# ---------------------------------------------------------------------------------- baseline and env


def test_baseline_interpolation_and_extrapolation():
    rows = [(1e6, 40.0), (16e6, 160.0)]
    assert ctx.baseline_at(rows, 1e6) == (40.0, [1e6], False)
    assert ctx.baseline_at(rows, 2e6) == (pytest.approx(70.0), [1e6, 16e6], False)  # 1/4 of the way
    assert ctx.baseline_at(rows, 64e6) == (160.0, [16e6], True)
    assert ctx.baseline_at(rows, 1e3) == (40.0, [1e6], True)


def test_baseline_from_intra_node_rows_and_bad_files(tmp_path):
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"network": {"intra": {"ranks": 2, "rows": [
        {"bytes": 1 << 20, "busbw_gbps": 50.0, "correct": True}, {"bytes": 1 << 24, "busbw_gbps": 5.0, "correct": False}]}}}))
    sweeps, src = ctx.load_collective_baseline(p)
    assert sweeps == {"default": {"allreduce": [(float(1 << 20), 50.0)]}} and "network.intra" in src
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        ctx.load_collective_baseline(bad)
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    with pytest.raises(InputError, match="no collective busbw"):
        ctx.load_collective_baseline(empty)


def test_nccl_environment_from_manifest_script_and_command(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"jobid": "1", "env": {"NCCL_P2P_DISABLE": "1", "PATH": "/bin"},
                                                        "artifacts": {"job_script": "job.sbatch"}}))
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n# NCCL_ALGO=Tree (a comment)\nexport NCCL_IB_DISABLE=1\n"
                                         "NCCL_PROTO='Simple' srun python train.py\nexport OMP_NUM_THREADS=4\n"
                                         "export NCCL_P2P_DISABLE=0\n")
    (tmp_path / "cmd.txt").write_text("CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun train.py --bucket-cap-mb 1")
    env = {e.name: e for e in ctx.env_from_run(tmp_path)}
    assert sorted(env) == ["CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_PROTO"]
    # the manifest (what the workload saw) wins over the script's assignment
    assert (env["NCCL_P2P_DISABLE"].value, env["NCCL_P2P_DISABLE"].source) == ("1", "manifest")
    assert (env["NCCL_PROTO"].value, env["NCCL_PROTO"].source) == ("Simple", "job script")
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"].source == "command"
    assert "peer-to-peer" in env["NCCL_P2P_DISABLE"].restricts and "sockets" in env["NCCL_IB_DISABLE"].restricts
    (tmp_path / "manifest.json").write_text("[1]")
    with pytest.raises(InputError, match="JSON object"):
        ctx.env_from_run(tmp_path)


def test_one_rank_has_no_cross_rank_figures(tmp_path):
    rep = comm_report([ddp_step(True).write(tmp_path / "trace_rank0.json")])
    assert len(rep.ranks) == 1 and rep.busbw == [] and rep.late == []
    assert any("one rank" in n for n in rep.notes)
    assert any("of world_size=2" in n for n in rep.notes)


def test_kernels_without_metadata_still_count_and_say_why(tmp_path):
    b = ddp_step(overlap=True)
    for e in b.cpu:  # an older PyTorch: no record_param_comms, no c10d op
        if e["name"] in ("record_param_comms",) or e["name"].startswith("c10d::") or e["name"].startswith("nccl:"):
            e["name"] = "aten::detach"
    for e in b.gpu:
        if e.get("cat") == "kernel" and "nccl" in e["name"]:
            e["args"] = {k: v for k, v in e["args"].items() if k in ("device", "stream", "correlation")}
    rc, _ = rank_comm(b.write(tmp_path / "old.json"))
    st = rc.steps[0]
    (c,) = st.collectives  # the type from the kernel name, no size
    assert (c.collective, c.count, c.kernels, c.total_bytes, c.kernel_us) == ("allreduce", 2, 2, None, 150)
    assert st.buckets == 0 and st.comm_us == 150
    assert any("no collective metadata" in w for w in rc.warnings)
