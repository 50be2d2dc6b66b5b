"""Utilization believed only with clock and power (seed 001 T2) on the H200 datasheet row (700 W,
1980 MHz boost): busy at 690 W with the clock at 1400/1980 = 0.707 of boost is power-capped; busy at
150 W and 900 MHz is a trickle of small kernels; a healthy or idle GPU is silent. The ratio is a
formula of the evidence (clock / datasheet boost), so the claim is supported and the sm_clock
series re-derives it."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import clocks_power
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.state import Manifest
from ai4s_graph.state.claimkit import is_supported

CAUSE = clocks_power.CAUSE


def _x(util: float, clock: float, power: float, gpu: str = "NVIDIA H200") -> Inputs:
    st = {"gpu_util.avg": {"value": util}, "sm_clock.avg": {"value": clock}, "power.avg": {"value": power}}
    return Inputs(manifest=Manifest(jobid="1", gpu=gpu), telemetry={"stats": st})


def test_power_capped_is_found_supported_and_confirmed():
    [f] = CAUSE.detect(_x(98.0, 1400.0, 690.0))
    assert f.claim.id == "triage.t2.power_capped" and f.claim.value == 0.707
    assert [lv.name for lv in f.levers] == ["check_power_thermal"]
    assert not is_supported(f.claim)  # 0.707 is not among the returned numbers...
    assert clocks_power.clock_frac([e.returned for e in f.claim.evidence]) == 0.707  # ...it is their ratio
    r = Reader(series={"sm_clock": {"node1": [(0.0, 1390.0), (1.0, 1410.0)]}})
    rd = CAUSE.rederive(f.claim, r)
    assert rd.value == round(1400.0 / 1980.0, 3)
    assert registry.judge(f.claim, "telemetry_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


def test_a_series_far_from_the_claim_refutes_it():
    [f] = CAUSE.detect(_x(98.0, 1400.0, 690.0))
    rd = CAUSE.rederive(f.claim, Reader(series={"sm_clock": {"node1": [(0.0, 1900.0)]}}))
    assert rd.value == round(1900 / 1980, 3)  # 0.960 vs 0.707: beyond ±0.05
    assert registry.judge(f.claim, "telemetry_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "refuted"


def test_small_kernel_trickle():
    [f] = CAUSE.detect(_x(98.0, 900.0, 150.0))
    assert f.claim.id == "triage.t2.util_lies" and f.claim.value == round(900 / 1980, 3)
    assert [lv.name for lv in f.levers] == ["torch_compile_reduce_overhead"]


@pytest.mark.parametrize("util,clock,power,gpu", [(98.0, 1700.0, 650.0, "NVIDIA H200"),  # clock >= 80% of boost
                                                  (50.0, 900.0, 150.0, "NVIDIA H200"),   # not busy
                                                  (98.0, 900.0, 150.0, "Unknown GPU")])  # no datasheet row
def test_silent(util, clock, power, gpu):
    assert CAUSE.detect(_x(util, clock, power, gpu)) == []
