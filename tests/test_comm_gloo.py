"""Collective counts and sizes on real CPU DDP traces (torch 2.13, gloo, 2 ranks; made by
tests/data/traces/comm/make_gloo_traces.py, whose docstring gives the construction): the host side
of the communication figures where no GPU kernel exists. gloo records no ``record_param_comms``: the
``c10d::allreduce_`` op's Input Dims give the elements and the ``gloo:all_reduce`` annotation the
element type. Expected values follow from the model (8 x Linear(64, 64): 16 parameter tensors,
8 x (64*64 + 64) = 33,280 floats) and DDP's bucketing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ai4s_graph.tools.trace.comm_steps import rank_comm

DATA = Path(__file__).resolve().parent / "data" / "traces" / "comm"


def _step(name):
    rc, _ = rank_comm(DATA / f"{name}_rank0.json.gz")
    assert rc.backend == "gloo" and rc.world_size == 2 and rc.n_steps == 1
    st = rc.steps[0]
    assert st.comm_kernels == 0 and st.comm_us == 0  # a CPU run: no GPU kernel
    return st, {(c.collective, c.dtype, c.phase): c for c in st.collectives}


def test_default_bucket_is_one_all_reduce_of_every_gradient():
    st, by = _step("ddp_default")
    (c,) = by.values()
    # 25 MiB holds all 133,120 B: one bucket, issued from the backward's autograd hooks
    assert (c.collective, c.dtype, c.phase, c.count, c.nelems, c.total_bytes) == ("allreduce", "Float", "backward", 1,
                                                                                  33280, 133120)
    assert c.size_source == "collective op"
    assert (st.buckets, st.bucket_mean_bytes) == (1, 133120)
    assert st.bucket_over_default == pytest.approx(133120 / (25 * 2**20))
    assert st.backward_host.start_us < st.optimizer_host.start_us


def test_find_unused_parameters_adds_the_used_map_all_reduce():
    st, by = _step("ddp_find_unused")
    # the same bucket, plus DDP's used-parameter map: one int per parameter tensor (16 x 4 B)
    assert by[("allreduce", "Float", "backward")].total_bytes == 133120
    used = by[("allreduce", "Int", "backward")]
    assert (used.count, used.nelems, used.total_bytes) == (1, 16, 64)
    assert st.buckets == 1  # integer all-reduces are not gradient buckets


def test_tiny_bucket_cap_makes_one_bucket_per_layer():
    st, by = _step("ddp_tiny_bucket")
    (c,) = by.values()
    # bucket_cap_mb=0.001 (1048 B): each layer's bias (256 B) then its weight (16 KiB) closes a bucket
    assert (c.count, c.nelems, c.mean_bytes, c.min_bytes, c.max_bytes) == (8, 33280, 16640, 16640, 16640)
    assert (st.buckets, st.bucket_mean_bytes) == (8, 16640)
