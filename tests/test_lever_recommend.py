"""Lever recommendation (tools/levers/recommend.py, rules.py): the model's catalog first, then the
generic rules; blocked and baked-in levers never recommended. Known answers from the bundled
catalogs/hydragnn.yaml and the rules table."""

from __future__ import annotations

from ai4s_graph.state import Bottleneck, BottleneckClass, Manifest
from ai4s_graph.tools.levers.recommend import catalog_for_model, recommend_levers
from ai4s_graph.tools.levers.rules import LEVERS, lever_applies


def test_hydragnn_dispatch_bound_gets_catalog_levers_first_and_never_blocked_ones():
    b = Bottleneck(klass=BottleneckClass.dispatch, supporting_claims=["tl.r0.idle_time"])
    recs, cat = recommend_levers(b, Manifest(jobid="1", model="hydragnn-mlip", precision="fp32"), "amd", 1)
    names = [r.name for r in recs]
    assert cat == "levers/hydragnn.yaml"
    assert names[0] == "batch_800"                           # the one candidate targeting dispatch-bound
    # rccl_high_priority is accepted-baked-in in the catalog: not recommended again, even on AMD
    assert "rccl_high_priority" not in names
    assert "torch_compile_e3nn" not in names and "torch_jit_script" not in names   # blocked
    assert names[1:] == ["torch_compile_reduce_overhead", "fuse_small_kernels", "larger_batch_per_launch"]
    assert all(r.claims == ["tl.r0.idle_time"] for r in recs)


def test_no_catalog_model_gets_the_generic_rules_that_fit_the_job():
    b = Bottleneck(klass=BottleneckClass.compute)
    recs, cat = recommend_levers(b, Manifest(jobid="2", model="conv", precision="bf16"), "nvidia", 1)
    assert cat is None and catalog_for_model("conv") is None
    # already bf16: no precision lever; otherwise the table's order
    assert [r.name for r in recs] == ["sdpa_efficient", "scale_out", "bigger_effective_batch"]


def test_rules_fit_the_job():
    assert not lever_applies("rccl_high_priority", precision="fp32", vendor="nvidia", ranks=8)
    assert lever_applies("rccl_high_priority", precision="fp32", vendor="amd", ranks=8)
    assert not lever_applies("ddp_bucket_cap_mb", precision="fp32", vendor="amd", ranks=1)
    assert LEVERS[BottleneckClass.unknown] == []


def test_the_project_workloads_map_to_their_own_catalogs():
    # gnn.yaml is the configuration of examples/perf-runs/92001 (its header) and blocks levers (lesson 6)
    assert [catalog_for_model(m) for m in ("gnn", "GNN", "mlip-gnn", "orbit-2", "wide", "vit")] == \
        ["gnn", "gnn", "hydragnn", "orbit2", None, None]
    b = Bottleneck(klass=BottleneckClass.dispatch)
    recs, cat = recommend_levers(b, Manifest(jobid="3", model="gnn", precision="fp32"), "nvidia", 1)
    names = [r.name for r in recs]
    assert cat == "levers/gnn.yaml"
    # the catalog's dispatch-bound candidates first; its blocked torch_compile / cuda_graphs never
    assert names[:3] == ["batch_32_half_steps", "batch_64_quarter_steps", "batch_128_eighth_steps"]
    assert "cuda_graphs" not in names and "torch_compile" not in names
