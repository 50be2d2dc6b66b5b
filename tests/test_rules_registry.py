"""The registries of the rules room: every claim metric the analysts make on the bundled runs has
its figure (with a tolerance and, for the trace's rank figures, both a maker and a re-derivation),
figure ids are unique, every cause declares its constants' sources and its cause ids, and a
finding's levers pass their preconditions."""

from __future__ import annotations

import re

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes.base import Cause, LeverSpec
from ai4s_graph.graph.rules.figures import CORE, Inputs, find


def test_figure_ids_are_unique_and_each_claimable_figure_has_a_tolerance():
    ids = [f.id for f in registry.FIGURES]
    assert len(ids) == len(set(ids))
    for f in registry.FIGURES:
        assert f.unit is not None and f.doc and f.source in ("rank", "ranks", "telemetry", "fom", "compare", "cause")
    for f in CORE:
        if f.source == "rank":
            assert f.make is not None and f.rederive is not None, f.id


def test_every_metric_the_analysts_claim_has_its_figure():
    # the metrics of the bundled runs' claims (examples/perf-runs, 92001-93005) and of the causes
    metrics = {"gpu_timeline.idle_time.percent", "gpu_timeline.computation_time.percent", "kernels.mean_kernel_us",
               "kernels.short_kernel_count_pct", "kernels.kernels_per_step", "ops_by_category.GEMM.percent",
               "cpu.dataloader_step_share_pct", "diagnosis.trace_bottleneck_class", "collectives.straggler_rank",
               "collectives.allreduce.67108864.busbw_gbps", "telemetry.gpu_util.avg", "telemetry.supports_compute",
               "fom.steady_step_time_s", "fom.loss_decreased", "roofline.elementwise.tbps", "sdpa_math_calls",
               "debug_apis_on", "sm_clock_frac_of_boost", "dataloader_procs_per_core", "cpu_util", "recompile_events"}
    for m in metrics:
        fig, _ = registry.figure_of(m)
        assert fig is not None, m


def test_the_classes_each_figure_supports_are_the_inputs_of_the_class_rules():
    s = registry.supports
    assert s("gpu_timeline.idle_time.percent", "dispatch-bound") and s("gpu_timeline.idle_time.percent", "data-loader-bound")
    assert s("kernels.mean_kernel_us", "dispatch-bound") and not s("kernels.mean_kernel_us", "compute-bound")
    assert s("ops_by_category.GEMM.percent", "compute-bound") and s("ops_by_category.GEMM.percent", "memory-bound")
    assert s("collectives.allreduce.1048576.busbw_gbps", "communication-bound")
    assert not s("gpu_timeline.exposed_memcpy_time.percent", "compute-bound")
    assert not s("sdpa_math_calls", "compute-bound")


def test_every_cause_declares_its_ids_sources_and_levers():
    ids = [i for c in registry.CAUSES for i in c.causes]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)
    for c in registry.CAUSES:
        assert c.seed and c.levers and c.figures and c.analyst in ("trace_analyst", "telemetry_analyst"), c.name
        assert all(k.isupper() and v.source for k, v in c.constants.items()), c.name
        assert all(find(f.id, c.figures)[0] is f for f in c.figures)


def test_a_lever_whose_precondition_fails_is_not_offered():
    class Toy(Cause):
        seed, analyst = "a test", "trace_analyst"
        levers = (LeverSpec("always", "x"), LeverSpec("only_amd", "y", when=lambda x: x.env.get("VENDOR") == "amd"))

    toy = Toy()
    both = (toy.lever("always"), toy.lever("only_amd"))
    assert [lv.name for lv in toy.offer(Inputs(env={"VENDOR": "nvidia"}), *both)] == ["always"]
    assert [lv.name for lv in toy.offer(Inputs(env={"VENDOR": "amd"}), *both)] == ["always", "only_amd"]
    with pytest.raises(KeyError):
        toy.lever("undeclared")
