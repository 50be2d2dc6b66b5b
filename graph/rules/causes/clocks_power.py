"""Utilization believed only with clock and power (seed 001 T2, gotcha U21/U23): a GPU reading
busy (utilization >= :data:`~..diagnosis.UTIL_HIGH_PCT`) with the board at >= 95% of its datasheet
power limit and the SM clock under :data:`~..diagnosis.SM_CLOCK_HIGH_FRAC` of boost is held by its
power cap (throttled); busy with clock under that and power under
:data:`~..diagnosis.POWER_HIGH_FRAC` of the limit, it runs a trickle of small kernels (NVML counts
any running kernel as busy).

Detects from the telemetry statistics and the one GPU datasheet
(:mod:`ai4s_graph.tools.perfmodel.datasheet`); re-derived from the mean of the ``sm_clock``
series (``query_range`` points, not the PromQL statistic) over the same boost clock. Levers
``check_power_thermal`` / ``torch_compile_reduce_overhead``."""

from __future__ import annotations

from typing import Any

from .base import Cause, Constant, Finding, LeverSpec, ev
from .. import diagnosis as dg
from ..figures import Figure, Inputs, Reader, Rederived, returned_dicts, series_mean
from ....state import Claim, Tolerance
from ....tools.perfmodel.datasheet import find_gpu

POWER_CAP_FRAC = 0.95
"""Board at >= 95% of its power limit: the clock is held by the power cap (seed 001 T2 / U23)."""


def clock_frac(returned: list[Any]) -> float | None:
    """``sm_clock_frac_of_boost`` from what the claim's evidence returned: mean SM clock (the
    telemetry statistic) over the datasheet boost clock, rounded as claimed."""
    d = returned_dicts(returned)
    if d.get("sm_clock") is None or not d.get("boost_mhz"):
        return None
    return round(float(d["sm_clock"]) / float(d["boost_mhz"]), 3)


class ClocksPower(Cause):
    """Power-capped or starved GPUs read from clock and power against the datasheet (seed 001 T2)."""

    seed = "seed 001 T2"
    causes = {"power-capped": "the board holds its power limit and lowers its clock",
              "small-kernel-trickle": "utilization reads busy while clock and power are low: tiny kernels"}
    analyst = "telemetry_analyst"
    reads = ("telemetry.gpu_util.avg", "telemetry.sm_clock.avg", "telemetry.power.avg", "manifest")
    figures = (Figure("sm_clock_frac_of_boost", "ratio", "mean SM clock over the datasheet boost clock", "cause",
                      Tolerance(abs=0.05), from_evidence=clock_frac),)
    constants = {"POWER_CAP_FRAC": Constant(POWER_CAP_FRAC, "seed 001 T2 / U23: at the power limit the clock drops"),
                 "SM_CLOCK_HIGH_FRAC": Constant(dg.SM_CLOCK_HIGH_FRAC, "seed 001 T2 (graph/rules/diagnosis.py)"),
                 "UTIL_HIGH_PCT": Constant(dg.UTIL_HIGH_PCT, "seed 001 T1/T2 (graph/rules/diagnosis.py)"),
                 "POWER_HIGH_FRAC": Constant(dg.POWER_HIGH_FRAC, "seed 001 T2 (graph/rules/diagnosis.py)")}
    levers = (LeverSpec("check_power_thermal", "the board holds its power limit: compare with the node's MSMF "
                        "(eval-cluster) before blaming the code; check cooling and power caps"),
              LeverSpec("torch_compile_reduce_overhead", "fewer, larger kernels (graphs, fusion)",
                        saving="torch_compile_reduce_overhead"))
    verifier_needs = ("series",)

    def detect(self, x: Inputs) -> list[Finding]:
        gpu = x.manifest.gpu if x.manifest is not None else None
        spec = find_gpu(gpu or "")
        f = self.check(gpu, x.statistic("gpu_util.avg"), x.statistic("sm_clock.avg"), x.statistic("power.avg"),
                       boost_mhz=spec.boost_mhz if spec else None)
        return [f] if f is not None else []

    def check(self, gpu_name: str | None, gpu_util_pct: float | None, sm_clock_mhz: float | None,
              power_w: float | None, boost_mhz: float | None = None) -> Finding | None:
        """The finding for these readings (see the module docstring); None when an input is
        missing, the GPU is not busy, or clock and power agree with the utilization."""
        spec = find_gpu(gpu_name or "")
        if spec is None or gpu_util_pct is None or sm_clock_mhz is None or power_w is None or not boost_mhz:
            return None
        if gpu_util_pct < dg.UTIL_HIGH_PCT:
            return None
        cf, pf = sm_clock_mhz / boost_mhz, power_w / spec.tdp_w
        evidence = [ev("promql.instant", "gpu_util, sm_clock, power avg", {"gpu_util": gpu_util_pct,
                       "sm_clock": sm_clock_mhz, "power": power_w}),
                    ev("datasheet", spec.name, {"tdp_w": spec.tdp_w, "boost_mhz": boost_mhz})]
        if pf >= POWER_CAP_FRAC and cf < dg.SM_CLOCK_HIGH_FRAC:
            c = self.claim("triage.t2.power_capped",
                           f"GPU {gpu_util_pct:.0f}% busy at {power_w:.0f} W ({pf * 100:.0f}% of the {spec.tdp_w:.0f} W "
                           f"limit) with the SM clock at {sm_clock_mhz:.0f} MHz ({cf * 100:.0f}% of boost): power-capped "
                           "(seed 001 T2)", "sm_clock_frac_of_boost", round(cf, 3), "ratio", evidence, 0.8)
            return Finding(("power-capped",), c, (self.lever("check_power_thermal"),))
        if cf < dg.SM_CLOCK_HIGH_FRAC and pf < dg.POWER_HIGH_FRAC:
            c = self.claim("triage.t2.util_lies",
                           f"GPU reads {gpu_util_pct:.0f}% busy but the SM clock is {cf * 100:.0f}% of boost and power "
                           f"{pf * 100:.0f}% of the limit: a trickle of small kernels, not a compute-bound GPU (seed 001 "
                           "T2)", "sm_clock_frac_of_boost", round(cf, 3), "ratio", evidence, 0.7)
            return Finding(("small-kernel-trickle",), c, (self.lever("torch_compile_reduce_overhead"),))
        return None

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        sm = series_mean(r.series.get("sm_clock"))
        boost = next((e.returned.get("boost_mhz") for e in c.evidence if e.tool == "datasheet"
                      and isinstance(e.returned, dict)), None)
        if sm is not None and boost:
            return Rederived(round(sm / boost, 3), "mean of the sm_clock series over the datasheet boost clock",
                             Tolerance(abs=0.05))
        return Rederived(None, "no independent path for this triage claim", Tolerance())


CAUSE = ClocksPower()
