"""Every bottleneck rule of graph/rules/diagnosis.py at both sides of its threshold, on
hand-built trace figures with known answers (the memory-bound and communication-bound rules
included), and seed 001 T2's telemetry rule against the datasheet limits."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules import diagnosis as D
from ai4s_graph.state import BottleneckClass as B


def tr(idle=10.0, comp=85.0, comm=0.0, mean_k=50.0, step=100.0, dl=0.0, gemm=0.7, elem=0.2):
    rest = max(0.0, 1.0 - gemm - elem)
    return {"timeline": {"idle_time": {"percent": idle}, "computation_time": {"percent": comp},
                         "exposed_comm_time": {"percent": comm}, "busy_time": {"percent": 100 - idle}},
            "launch": {"mean_kernel_us": mean_k}, "step_time_ms": step, "dataloader_ms_per_step": dl,
            "ops_by_category": [{"category": "GEMM", "kernel_time_ms": 100 * gemm},
                                {"category": "elementwise", "kernel_time_ms": 100 * elem},
                                {"category": "other", "kernel_time_ms": 100 * rest}]}


def k(t):
    return D.classify_trace(t).klass


def fired(t):
    """The class of the first rule that passed its threshold, None when none did (the verdict is
    then the nearer rule's, borderline: :func:`~ai4s_graph.graph.rules.diagnosis.nearest_rule`)."""
    return next((r.klass for r in D.classify_trace(t).tests if r.fired), None)


def test_communication_both_sides():
    assert k(tr(comm=D.EXPOSED_COMM_PCT)) is B.communication
    assert k(tr(comm=D.EXPOSED_COMM_PCT - 0.1)) is B.compute


def test_data_loader_both_sides():
    idle = D.IDLE_DISPATCH_PCT / 2
    assert k(tr(idle=idle, comp=50, dl=D.DATALOADER_STEP_SHARE * 100)) is B.data_loader
    below = tr(idle=idle, comp=50, dl=D.DATALOADER_STEP_SHARE * 100 - 1)
    assert fired(below) is None and k(below) is B.dispatch          # nearer the dispatch rule (20 vs 30 pp)
    # the DataLoader share alone is not enough: the GPU must also be idle
    assert k(tr(idle=idle - 0.1, comp=85, dl=50)) is B.compute


def test_dispatch_both_sides():
    assert k(tr(idle=D.IDLE_DISPATCH_PCT, comp=55, mean_k=D.SHORT_KERNEL_MEAN_US - 0.1)) is B.dispatch
    d = D.classify_trace(tr(idle=D.IDLE_DISPATCH_PCT, comp=55, mean_k=D.SHORT_KERNEL_MEAN_US))
    # idle exactly at the threshold, kernels not short: zero margin, so the lowest confidence, borderline
    assert d.klass is B.dispatch and d.confidence == pytest.approx(0.5) and d.borderline
    below = tr(idle=D.IDLE_DISPATCH_PCT - 0.1, comp=55, mean_k=5.0)
    assert fired(below) is None and k(below) is B.dispatch and D.classify_trace(below).borderline


def test_compute_and_memory_both_sides():
    assert k(tr(comp=D.BUSY_COMPUTE_PCT)) is B.compute
    below = tr(comp=D.BUSY_COMPUTE_PCT - 0.1)
    assert fired(below) is None and k(below) is B.compute and D.classify_trace(below).confidence == 0.5
    assert k(tr(comp=90, gemm=0.3, elem=D.MEMORY_BOUND_ELEMENTWISE_SHARE)) is B.memory
    assert k(tr(comp=90, gemm=0.3, elem=D.MEMORY_BOUND_ELEMENTWISE_SHARE - 0.01)) is B.compute


def test_no_timeline_is_unknown():
    assert k({}) is B.unknown


def test_t2_telemetry_against_the_datasheet():
    # H200: 700 W, 1980 MHz boost; clock high at >= 80% of boost, power >= 50% of the limit
    assert D.telemetry_supports_compute(95, 0.8 * 1980, None, 360, None, gpu_name="NVIDIA H200") is True
    assert D.telemetry_supports_compute(95, 0.8 * 1980 - 1, None, 360, None, gpu_name="NVIDIA H200") is False
    assert D.telemetry_supports_compute(95, 1900, None, 349, None, gpu_name="NVIDIA H200") is False
    assert D.telemetry_supports_compute(79.9, 1900, None, 600, None, gpu_name="NVIDIA H200") is False
    assert D.telemetry_supports_compute(None, 1900, None, 600, None, gpu_name="NVIDIA H200") is None
