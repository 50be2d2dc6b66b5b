"""Plausibility bounds on raw telemetry samples, by metric name: a sample outside its bound is a
sensor or exporter fault (an exporter that lost the device writes 1e300 %, a wrapped counter
−12 %), never a reading to average. Out-of-range samples are excluded from every statistic and
counted (:class:`~.export.ExportReport`); the report says how many of which metric.

Bounds, each with its source:

- Utilizations in percent (``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_MEM_COPY_UTIL``,
  ``rocm_utilization_percentage``, ``rocm_vram_used_percentage``, ``rocm_vram_busy_percentage``):
  0–100 % (a share of time or of capacity; DCGM field docs "GPU utilization (in %)", Omnistat
  ``docs/metrics.md`` "(%)").
- DCGM profiling ratios (``DCGM_FI_PROF_*_ACTIVE``): 0–1 (DCGM field docs: "Ratio of cycles ...
  active"; dcgm-exporter ``etc/dcp-metrics-included.csv`` "ratio").
- Power (``DCGM_FI_DEV_POWER_USAGE``, ``rocm_average_socket_power_watts``): 0 W to the board's
  power limit × :data:`POWER_LIMIT_FACTOR` (the limit is ``tdp_w`` of
  :mod:`ai4s_graph.tools.perfmodel.datasheet`; the factor leaves room for the board's
  millisecond excursions above its limit, which a 1 s average never reaches by half again). No
  upper bound when the board is unknown.
- SM / GFX clock (``DCGM_FI_DEV_SM_CLOCK``, ``rocm_sclk_clock_mhz``): 0 to the board's maximum
  clock (``boost_mhz`` of the datasheet row; the H200's 1980 MHz read by NVML). Memory clocks:
  ≥ 0 only (the datasheet has no memory-clock row).
- Device memory (``DCGM_FI_DEV_FB_USED``/``FB_FREE`` in MiB, ``rocm_vram_total_bytes`` in
  bytes): 0 to the board's HBM capacity (``hbm_gb`` of the datasheet row, in GiB: the H200's
  141 ≥ the 143771 MiB = 140.4 GiB NVML reports).
- Temperatures (``DCGM_FI_DEV_GPU_TEMP``, ``DCGM_FI_DEV_MEMORY_TEMP``, ``rocm_temperature_*``):
  :data:`TEMP_MIN_C`–:data:`TEMP_MAX_C` °C.

The board is the series' own ``modelName`` label (dcgm-exporter) when it has one, else the GPU
named by the caller (the manifest's ``gpu``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ..perfmodel.datasheet import GPUSpec, find_gpu

#: Power may exceed the board limit by this factor at most (issue 26's bound: the limit × 1.5).
POWER_LIMIT_FACTOR = 1.5
#: A running GPU in a data centre sits above its inlet air, which ASHRAE TC 9.9 class A1 allows
#: from 15 °C: a reading below freezing is a sensor fault.
TEMP_MIN_C = 0.0
#: Above silicon's 125 °C junction rating (JEDEC JESD51) and every GPU's thermal shutdown
#: (nvidia-smi "GPU Shutdown Temp", 90–100 °C on data-centre boards): a sensor fault.
TEMP_MAX_C = 150.0
MIB = 1048576.0
GIB = 1073741824.0

_PERCENT = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "rocm_utilization_percentage",
            "rocm_vram_used_percentage", "rocm_vram_busy_percentage")
_POWER = ("DCGM_FI_DEV_POWER_USAGE", "rocm_average_socket_power_watts")
_SM_CLOCK = ("DCGM_FI_DEV_SM_CLOCK", "rocm_sclk_clock_mhz")
_MEM_CLOCK = ("DCGM_FI_DEV_MEM_CLOCK", "rocm_mclk_clock_mhz")
_FB_MIB = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")
_TEMP = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "rocm_temperature_celsius",
         "rocm_temperature_memory_celsius")


@dataclass(frozen=True)
class Bound:
    """Closed range ``[lo, hi]`` (``hi`` None: no upper bound) of one metric's samples, in the
    metric's own unit, with ``why`` (where the bound comes from, in words)."""

    lo: float
    hi: float | None
    unit: str
    why: str

    def holds(self, v: float) -> bool:
        """Whether finite ``v`` is inside the range (NaN/inf are the caller's: counted as NaN)."""
        return v >= self.lo and (self.hi is None or v <= self.hi)

    def text(self) -> str:
        """``0–100 %`` / ``≥ 0 W``, for the report."""
        return (f"{self.lo:g}–{self.hi:g} {self.unit}" if self.hi is not None else f"≥ {self.lo:g} {self.unit}").strip()


@lru_cache(maxsize=64)
def _board(name: str) -> GPUSpec | None:
    return find_gpu(name) if name else None


def bound_for(name: str, labels: dict[str, str] | None = None, gpu_name: str | None = None) -> Bound | None:
    """The :class:`Bound` of raw metric ``name`` (module docstring), or None when it has none
    (``rmsjob_info``, node metrics, unknown names). ``labels``: the series' labels (its
    ``modelName`` names the board first); ``gpu_name``: the board otherwise (``NVIDIA H200``)."""
    model = (labels or {}).get("modelName") or gpu_name or ""
    if name in _PERCENT:
        return Bound(0.0, 100.0, "%", "a percentage")
    if name.startswith("DCGM_FI_PROF_") and name.endswith("_ACTIVE"):
        return Bound(0.0, 1.0, "", "a DCGM profiling ratio")
    if name in _POWER or name in _SM_CLOCK or name in _FB_MIB or name == "rocm_vram_total_bytes":
        g = _board(model)
        if name in _POWER:
            return (Bound(0.0, g.tdp_w * POWER_LIMIT_FACTOR, "W", f"{g.name} power limit {g.tdp_w:g} W × {POWER_LIMIT_FACTOR:g}")
                    if g else Bound(0.0, None, "W", "power is not negative (board unknown)"))
        if name in _SM_CLOCK:
            return (Bound(0.0, g.boost_mhz, "MHz", f"{g.name} maximum clock {g.boost_mhz:g} MHz")
                    if g and g.boost_mhz else Bound(0.0, None, "MHz", "a clock is not negative (board max unknown)"))
        scale, unit = (MIB, "MiB") if name in _FB_MIB else (1.0, "bytes")
        return (Bound(0.0, g.hbm_gb * GIB / scale, unit, f"{g.name} HBM {g.hbm_gb:g} GiB")
                if g else Bound(0.0, None, unit, "memory is not negative (board unknown)"))
    if name in _MEM_CLOCK:
        return Bound(0.0, None, "MHz", "a clock is not negative")
    if name in _TEMP:
        return Bound(TEMP_MIN_C, TEMP_MAX_C, "°C", "a physical GPU temperature")
    return None


def is_finite_number(v: object) -> bool:
    """True for an int or float (not bool) that is finite."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
