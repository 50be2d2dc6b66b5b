"""The telemetry metric name map: one logical name per quantity, and where each vendor's exporter
puts it (the only place a new telemetry metric is added).

- NVIDIA: dcgm-exporter's names (``DCGM_FI_DEV_*``; NVIDIA dcgm-exporter
  ``etc/default-counters.csv`` and the DCGM field docs), as in the shared perf-runs exports.
- AMD: Omnistat's ``rocm_*`` names, from ROCm/omnistat ``docs/metrics.md`` ("ROCm" collector
  table) and ``omnistat/collector_amdsmi.py`` (which adds ``rocm_vram_busy_percentage`` =
  amd-smi ``average_umc_activity``; power and sclk carry a ``source`` label, temperature a
  ``location`` label). Omnistat reports VRAM as ``rocm_vram_used_percentage`` and
  ``rocm_vram_total_bytes`` only, so used/free bytes are derived from the two.
- Node (CPU-only jobs): node_exporter's ``node_cpu_seconds_total`` (counter, label ``mode``),
  ``node_memory_MemAvailable_bytes``, ``node_memory_MemTotal_bytes``, ``node_load1``. (Omnistat's
  host collector has equivalents — ``omnistat_host_cpu_aggregate_core_utilization``,
  ``omnistat_mem_available_bytes``, ``omnistat_mem_total_bytes``, ``omnistat_host_cpu_load1`` —
  not mapped here.)

HBM is normalised to **bytes** on both vendors (dcgm-exporter's ``FB_*`` fields are MiB and are
multiplied by 1048576). ``hbm_total`` on NVIDIA is ``FB_USED + FB_FREE`` (excludes the driver's
``FB_RESERVED``).

A metric may have ``alternates``: the sources read when the exporter does not write the usual
one (``gpu_util`` from DCGM's ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` x 100 when
``DCGM_FI_DEV_GPU_UTIL`` is absent); the report names the source used. DCGM profiling ratios
(0-1) are read as percent.

Statistics (``stat``): ``avg``, ``max``, ``min``, ``p50``, ``p90`` over time per series (a GPU, or
a node for node metrics), then across series: ``avg`` -> mean, ``max`` -> max, ``min`` -> min,
``pNN`` -> mean of the per-series quantiles (:data:`STATS`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..errors import InputError

Vendor = Literal["nvidia", "amd", "none"]
Stat = Literal["avg", "max", "min", "p50", "p90"]

#: stat -> outer aggregation across series (a GPU each, or a node for node metrics).
STATS: dict[str, str] = {"avg": "avg", "max": "max", "min": "min", "p50": "avg", "p90": "avg"}
#: quantile of each ``pNN`` statistic (linear interpolation between order statistics, as
#: Prometheus ``quantile_over_time`` and ``numpy.quantile``'s default).
QUANTILE = {"p50": 0.5, "p90": 0.9}
MIB = 1048576.0
#: Telemetry label values we put into PromQL matchers: a quote or brace would end the matcher.
JOBID_RE = re.compile(r"^[A-Za-z0-9_.+\[\],-]+$")


@dataclass(frozen=True)
class Source:
    """How one vendor exposes a logical metric.

    ``expr``: PromQL expression without the job join (``$RW`` is replaced by the rate window);
    ``inputs``: the raw metric names it reads; ``combine``: the same arithmetic on raw values at
    one timestamp (one argument per input, same label set); ``kind``: ``gauge`` or
    ``cpu_counter`` (util % from ``node_cpu_seconds_total`` deltas); ``scale``: the constant a
    single-input gauge is multiplied by (``expr == f"{inputs[0]} * {scale}"``, or 1)."""

    expr: str
    inputs: tuple[str, ...]
    combine: Callable[..., float] | None = None
    kind: Literal["gauge", "cpu_counter"] = "gauge"
    scale: float = 1.0
    #: how the report names this source when it is not the metric's usual one ('' = the usual one)
    label: str = ""

    @property
    def single(self) -> bool:
        """One raw gauge times a constant (``scale``): its statistics can be taken over the raw
        samples with range-vector functions (``max_over_time(NAME[D]) * scale``)."""
        return self.kind == "gauge" and len(self.inputs) == 1


@dataclass(frozen=True)
class MetricDef:
    """A logical metric: ``unit`` of the normalised value, ``scope`` ``gpu`` or ``node``, and
    its ``sources`` per vendor (``nvidia``, ``amd`` for GPU metrics; ``node`` for node metrics)."""

    name: str
    unit: str
    scope: Literal["gpu", "node"]
    description: str
    sources: dict[str, Source] = field(default_factory=dict)
    #: per vendor, sources read (in order) when the exporter does not write the usual one
    alternates: dict[str, tuple[Source, ...]] = field(default_factory=dict)

    def candidates(self, vendor: str) -> tuple[Source, ...]:
        """The usual source of ``vendor`` first, then its :attr:`alternates` (``()`` if none)."""
        first = self.sources.get(vendor)
        return ((first,) if first else ()) + self.alternates.get(vendor, ())


def _g(name: str) -> Source:
    return Source(expr=name, inputs=(name,))


def _prof(name: str) -> Source:
    """A DCGM profiling ratio (0-1) as percent, named as its source."""
    return Source(f"{name} * 100", (name,), lambda r: r * 100.0, scale=100.0,
                  label=f"{name} x 100 (DCGM profiling counter)")


METRICS: dict[str, MetricDef] = {
    m.name: m
    for m in [
        MetricDef("gpu_util", "%", "gpu", "GPU busy (graphics/compute activity) percent", {
            "nvidia": _g("DCGM_FI_DEV_GPU_UTIL"),
            "amd": _g("rocm_utilization_percentage"),
        }, alternates={
            # on MIG and with recent GPU Operator defaults DEV_GPU_UTIL is absent; the maintainers
            # point to GR_ENGINE_ACTIVE (NVIDIA/dcgm-exporter#430, PR#634): time the graphics or
            # compute engine was active, the same quantity as a ratio
            "nvidia": (_prof("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),),
        }),
        MetricDef("sm_active", "%", "gpu", "SM active: share of cycles an SM has a warp resident, over all SMs "
                  "(AMD: compute units in use over all compute units)", {
            "nvidia": _prof("DCGM_FI_PROF_SM_ACTIVE"),
            # Omnistat's occupancy collector (docs/metrics.md "Occupancy"): used CUs of all CUs
            "amd": Source("100 * rocm_compute_unit_occupancy / rocm_num_compute_units",
                          ("rocm_compute_unit_occupancy", "rocm_num_compute_units"),
                          lambda used, n: 100 * used / n, label="rocm_compute_unit_occupancy / rocm_num_compute_units"),
        }),
        MetricDef("dram_active", "%", "gpu", "DRAM active: share of cycles the device memory interface is busy", {
            "nvidia": _prof("DCGM_FI_PROF_DRAM_ACTIVE"),
            "amd": Source("rocm_vram_busy_percentage", ("rocm_vram_busy_percentage",),
                          label="rocm_vram_busy_percentage (amd-smi UMC activity)"),
        }),
        MetricDef("sm_clock", "MHz", "gpu", "SM / GFX (shader) clock", {
            "nvidia": _g("DCGM_FI_DEV_SM_CLOCK"),
            "amd": _g("rocm_sclk_clock_mhz"),
        }),
        MetricDef("mem_clock", "MHz", "gpu", "memory clock", {
            "nvidia": _g("DCGM_FI_DEV_MEM_CLOCK"),
            "amd": _g("rocm_mclk_clock_mhz"),
        }),
        MetricDef("power", "W", "gpu", "board / socket power", {
            "nvidia": _g("DCGM_FI_DEV_POWER_USAGE"),
            "amd": _g("rocm_average_socket_power_watts"),
        }),
        MetricDef("gpu_temp", "°C", "gpu", "GPU (edge/die) temperature", {
            "nvidia": _g("DCGM_FI_DEV_GPU_TEMP"),
            "amd": _g("rocm_temperature_celsius"),
        }),
        MetricDef("mem_bw_util", "%", "gpu",
                  "memory-controller busy percent (NVIDIA mem copy util; AMD UMC activity)", {
            "nvidia": _g("DCGM_FI_DEV_MEM_COPY_UTIL"),
            "amd": _g("rocm_vram_busy_percentage"),
        }),
        MetricDef("hbm_used", "bytes", "gpu", "device memory in use", {
            "nvidia": Source("DCGM_FI_DEV_FB_USED * 1048576", ("DCGM_FI_DEV_FB_USED",),
                             lambda used: used * MIB, scale=MIB),
            "amd": Source("rocm_vram_used_percentage / 100 * rocm_vram_total_bytes",
                          ("rocm_vram_used_percentage", "rocm_vram_total_bytes"),
                          lambda pct, total: pct / 100 * total),
        }),
        MetricDef("hbm_free", "bytes", "gpu", "device memory free", {
            "nvidia": Source("DCGM_FI_DEV_FB_FREE * 1048576", ("DCGM_FI_DEV_FB_FREE",),
                             lambda free: free * MIB, scale=MIB),
            "amd": Source("(100 - rocm_vram_used_percentage) / 100 * rocm_vram_total_bytes",
                          ("rocm_vram_used_percentage", "rocm_vram_total_bytes"),
                          lambda pct, total: (100 - pct) / 100 * total),
        }),
        MetricDef("hbm_total", "bytes", "gpu", "device memory total (NVIDIA: used + free)", {
            "nvidia": Source("(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) * 1048576",
                             ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
                             lambda used, free: (used + free) * MIB),
            "amd": _g("rocm_vram_total_bytes"),
        }),
        MetricDef("hbm_used_pct", "%", "gpu", "device memory in use, percent of total", {
            "nvidia": Source("100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
                             ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
                             lambda used, free: 100 * used / (used + free)),
            "amd": _g("rocm_vram_used_percentage"),
        }),
        MetricDef("cpu_util", "%", "node", "host CPU busy percent (all cores, 100 - idle)", {
            "node": Source('100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[$RWs])))',
                           ("node_cpu_seconds_total",), kind="cpu_counter"),
        }),
        MetricDef("mem_available", "bytes", "node", "host memory available", {
            "node": _g("node_memory_MemAvailable_bytes"),
        }),
        MetricDef("mem_total", "bytes", "node", "host memory total", {
            "node": _g("node_memory_MemTotal_bytes"),
        }),
        MetricDef("mem_used_pct", "%", "node", "host memory in use, percent (1 - available/total)", {
            "node": Source("100 * (1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes)",
                           ("node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes"),
                           lambda avail, total: 100 * (1 - avail / total)),
        }),
        MetricDef("load1", "1", "node", "host 1-minute load average", {
            "node": _g("node_load1"),
        }),
    ]
}

#: The metric that decides the vendor in :meth:`PromQL.detect_vendor`.
VENDOR_PROBE = "gpu_util"
#: The label that names a GPU series' index, per vendor (dcgm-exporter ``gpu``, Omnistat ``card``),
#: for the join by card (:mod:`.gpujoin`).
GPU_INDEX_LABEL = {"nvidia": "gpu", "amd": "card"}


def metric_def(logical: str) -> MetricDef:
    """The :class:`MetricDef` of a logical metric name; ``InputError`` if unknown."""
    try:
        return METRICS[logical]
    except KeyError:
        raise InputError(f"unknown telemetry metric {logical!r}; known: {', '.join(METRICS)}") from None


def check_jobid(jobid: str) -> str:
    """``jobid`` if it is safe inside a PromQL label matcher (letters, digits, ``_ . + - , [ ]``:
    SLURM's plain, array and het-job ids); else ``InputError``."""
    s = str(jobid)
    if not JOBID_RE.match(s):
        raise InputError(f"bad job id {s!r}: only letters, digits and '_.+-,[]' are allowed")
    return s


def check_stat(stat: str) -> str:
    """``stat`` if it is one of :data:`STATS`; else ``InputError``."""
    if stat not in STATS:
        raise InputError(f"unknown statistic {stat!r}; use one of {', '.join(STATS)}")
    return stat
