"""Per-step device-to-host parameter copies on hand-built traces (known bytes and blocked host
time), the sampler's re-derivation, and the bundled cases (with and without stacks) + control."""

from __future__ import annotations

import pytest
from step_traces import bundled, confirmed, read, step_trace

from ai4s_graph.graph.rules.causes import d2h_param_copy

CAUSE = d2h_param_copy.CAUSE


@pytest.mark.parametrize("rocm", [False, True])
def test_fires_on_large_blocking_copies(tmp_path, rocm):
    # 16 copies of 4 MiB, each blocking the host 200 µs in cudaMemcpyAsync: 3200 µs of 10 ms = 0.32
    x, r = read(step_trace(tmp_path, d2h=16, d2h_bytes=16 << 22, d2h_us=200, rocm=rocm))
    [f] = CAUSE.detect(x)
    assert f.causes == ("d2h-param-copy",) and f.share == pytest.approx(0.32, abs=1e-9)
    assert "67.1 MB device-to-host in 16 copies" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["no_per_step_param_copy"]
    assert confirmed(f, r) == "confirmed"


def test_scalar_reads_do_not_fire(tmp_path):
    # 16 blocking 200 µs copies of 4 bytes each (.item() reads): bytes far below 1 MiB
    x, _ = read(step_trace(tmp_path, d2h=16, d2h_bytes=64, d2h_us=200))
    assert CAUSE.detect(x) == []


def test_large_but_quick_copies_do_not_fire(tmp_path):
    # 4 MiB in 4 copies blocking 100 µs each: 400 µs = 0.04 of the step < 0.10
    x, _ = read(step_trace(tmp_path, d2h=4, d2h_bytes=4 << 20, d2h_us=100))
    assert CAUSE.detect(x) == []


@pytest.mark.parametrize("name", ["d2h-param-copy", "d2h-param-copy-nostack"])
def test_bundled_cases(tmp_path, name):
    row = bundled(name, tmp_path)
    assert (row["named_cause"], row["first_lever"]) == ("d2h-param-copy", "no_per_step_param_copy")


def test_bundled_control(tmp_path):
    ctl = bundled("gemm-base-stacks", tmp_path)   # the control names at most what it has (truth "present")
    assert ctl["named_cause"] != "d2h-param-copy" and ctl["cause_ok"] is True
