"""GPU datasheet peaks: dense (no-sparsity) matrix throughput per precision, HBM bandwidth, and
the GPU-to-GPU link's unidirectional bandwidth, with the source of every row.

Units: TFLOP/s (10^12 floating-point operations per second), TB/s (10^12 bytes per second), GB/s
(10^9 bytes per second), W. Vendors often print the sparse figure (2x the dense one); every number
here is the dense one, as in the TFLOPS comparison table seed 003 links
(https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md#tflops-comparison-table).
Precision keys: ``fp64``, ``fp32`` (non-tensor / vector), ``tf32``, ``bf16``, ``fp16``, ``fp8``.
A missing key means the GPU has no dense matrix path for that precision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GPUSpec:
    """One GPU's datasheet row. ``tflops``: dense peak per precision (TFLOP/s); ``hbm_tbps``:
    peak HBM bandwidth (TB/s); ``hbm_gib``: capacity (GiB as the vendor's GB/1.074); ``link_gbps_uni``:
    GPU-to-GPU link bandwidth per GPU, one direction (GB/s); ``tdp_w``: board power (W); ``boost_mhz``:
    maximum SM/GFX clock (MHz; the H200's 1980 MHz was read by NVML on the device, reports/raw-2026-11-29);
    ``link_source``: the sentence citing ``link_gbps_uni`` (the reference a report prints beside an
    achieved all-reduce busbw)."""

    name: str
    tflops: dict[str, float]
    hbm_tbps: float
    hbm_gb: float
    link: str
    link_gbps_uni: float
    tdp_w: float
    source: str
    notes: str = ""
    boost_mhz: float | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)
    link_source: str = ""


GPUS: dict[str, GPUSpec] = {
    "A100": GPUSpec(
        "NVIDIA A100 SXM4", {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        hbm_tbps=2.039, hbm_gb=80, link="NVLink 3", link_gbps_uni=300.0, boost_mhz=1410, tdp_w=400,
        source="NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), dense figures; "
               "NVLink 600 GB/s bidirectional",
        link_source="NVIDIA A100 SXM datasheet: NVLink 600 GB/s bidirectional, 300 GB/s per direction"),
    "H100": GPUSpec(
        "NVIDIA H100 SXM5", {"fp64": 67.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
        hbm_tbps=3.35, hbm_gb=80, link="NVLink 4", link_gbps_uni=450.0, boost_mhz=1980, tdp_w=700,
        source="NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), SXM column; the sheet prints "
               "tensor figures with sparsity, halved here (989 bf16 as in the ml-engineering TFLOPS comparison table); NVLink 900 GB/s bidirectional",
        link_source="NVIDIA H100 SXM datasheet: NVLink 900 GB/s bidirectional, 450 GB/s per direction"),
    "H200": GPUSpec(
        "NVIDIA H200 SXM", {"fp64": 67.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
        hbm_tbps=4.8, hbm_gb=141, link="NVLink 4", link_gbps_uni=450.0, boost_mhz=1980, tdp_w=700,
        source="NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200), SXM column, sparse "
               "figures halved (dense BF16 989, 1979 with sparsity); NVLink 900 GB/s bidirectional",
        link_source="NVIDIA H200 SXM datasheet: NVLink 900 GB/s bidirectional, 450 GB/s per direction"),
    "B200": GPUSpec(
        "NVIDIA B200 SXM", {"fp64": 40.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
        hbm_tbps=8.0, hbm_gb=180, link="NVLink 5", link_gbps_uni=900.0, tdp_w=1000,
        source="NVIDIA DGX/HGX B200 datasheet (nvidia.com/en-us/data-center/hgx), per-GPU, sparse figures halved; "
               "NVLink 5 1.8 TB/s bidirectional; bf16 2250 as in the ml-engineering TFLOPS comparison table",
        link_source="NVIDIA HGX B200 datasheet: NVLink 5 1.8 TB/s bidirectional, 900 GB/s per direction"),
    "MI250X": GPUSpec(
        "AMD Instinct MI250X", {"fp64": 95.7, "fp32": 95.7, "bf16": 383.0, "fp16": 383.0},
        hbm_tbps=3.2768, hbm_gb=128, link="Infinity Fabric", link_gbps_uni=400.0, boost_mhz=1700, tdp_w=560,
        source="AMD Instinct MI250X datasheet (amd.com/en/products/accelerators/instinct/mi200/mi250x), matrix "
               "figures; Infinity Fabric up to 800 GB/s aggregate bidirectional",
        notes="one MI250X package is two GCDs, each visible as a device; per-device peaks are half",
        link_source="AMD Instinct MI250X datasheet: Infinity Fabric up to 800 GB/s aggregate bidirectional, 400 GB/s per direction"),
    "MI300X": GPUSpec(
        "AMD Instinct MI300X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
        hbm_tbps=5.3, hbm_gb=192, link="Infinity Fabric", link_gbps_uni=448.0, boost_mhz=2100, tdp_w=750,
        source="AMD Instinct MI300X datasheet (amd.com/en/products/accelerators/instinct/mi300/mi300x), dense "
               "figures; 7 Infinity Fabric links x 64 GB/s per direction",
        link_source="AMD Instinct MI300X datasheet: Infinity Fabric 896 GB/s peak aggregate, 448 GB/s per direction"),
    "MI325X": GPUSpec(
        "AMD Instinct MI325X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
        hbm_tbps=6.0, hbm_gb=256, link="Infinity Fabric", link_gbps_uni=448.0, boost_mhz=2100, tdp_w=1000,
        source="AMD Instinct MI325X datasheet (amd.com/en/products/accelerators/instinct/mi300/mi325x), dense "
               "figures; 7 Infinity Fabric links x 64 GB/s per direction",
        link_source="AMD Instinct MI325X datasheet: 7 Infinity Fabric links x 64 GB/s, 448 GB/s per direction"),
    "MI355X": GPUSpec(
        "AMD Instinct MI355X", {"fp64": 78.6, "fp32": 157.3, "tf32": 1257.9, "bf16": 2516.6, "fp16": 2516.6, "fp8": 5033.2},
        hbm_tbps=8.0, hbm_gb=288, link="Infinity Fabric", link_gbps_uni=537.6, boost_mhz=2400, tdp_w=1400,
        source="AMD Instinct MI355X datasheet (amd.com/en/products/accelerators/instinct/mi350/mi355x), dense "
               "figures; 7 Infinity Fabric links x 76.8 GB/s per direction; 288 GB HBM3E as in seed 000 lesson 23",
        link_source="AMD Instinct MI355X datasheet: 7 Infinity Fabric links x 76.8 GB/s, 537.6 GB/s per direction"),
}
"""The GPUs the project meets (seed 000: MI355X clusters; the H200 device; TraceLens's H100 traces)."""

PRECISION_ALIASES = {"float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "bfloat16": "bf16",
                     "c10::bfloat16": "bf16", "float16": "fp16", "half": "fp16", "c10::half": "fp16",
                     "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8"}


def gpu_key(name: str) -> str | None:
    """The :data:`GPUS` key (``H200``, ``MI300X``...) of a device name such as ``NVIDIA H200``,
    ``NVIDIA H100 80GB HBM3`` or ``AMD Instinct MI300X``; None when unknown. PCIe and NVL
    variants have other peaks: None."""
    up = name.upper()
    flat = up.replace(" ", "").replace("-", "")
    if "PCIE" in flat or "NVL" in flat:  # "PCIe", "PCI-E", "H200 NVL": other peaks
        return None
    for key in sorted(GPUS, key=len, reverse=True):  # longest first: MI325X is not MI32...
        # the key as a word's start: not inside another name (GH200 is not an H200)
        if re.search(r"(?<![A-Z0-9])" + re.escape(key), up):
            return key
    return None


def find_gpu(name: str) -> GPUSpec | None:
    """The datasheet row for a device name (see :func:`gpu_key`); None when unknown."""
    k = gpu_key(name)
    return GPUS[k] if k else None


def device_for(manifest_gpu: Any, trace_device: Any) -> tuple[str, str | None]:
    """The device name whose datasheet row the roofline reads, and a one-line note when the two
    sources disagree. ``manifest_gpu``: the run's ``manifest.json`` ``gpu`` (what the launcher or the
    user wrote); ``trace_device``: the trace's ``deviceProperties[0].name`` (what the profiler
    recorded of the device the rank ran on: the direct record, which wins). Returns ``(name,
    note)``: the trace's name when :func:`find_gpu` knows it, or when it names a PCIe or NVL card
    (other peaks, no row here: no roofline rather than another card's); else the manifest's (``""``
    when neither is a string). ``note`` is None unless both name GPUs and they are different rows
    (or the trace's card has no row where the manifest's has one). Names in the note are cut at 60
    characters. Never raises."""
    m = manifest_gpu.strip() if isinstance(manifest_gpu, str) else ""
    t = trace_device.strip() if isinstance(trace_device, str) else ""
    sm, st = (find_gpu(m) if m else None), (find_gpu(t) if t else None)
    variant = bool(t) and st is None and any(v in t.upper().replace(" ", "") for v in ("PCIE", "NVL"))
    if st is None and not variant:
        return (m or t), None
    if sm is not None and (variant or sm.name != st.name):  # type: ignore[union-attr]
        got = "has no datasheet row (PCIe and NVL cards have other peaks): no roofline" if variant else \
            f"({st.name}): the roofline uses the trace's"  # type: ignore[union-attr]
        return t, (f"the manifest's gpu {m[:60]!r} ({sm.name}) and the trace's device {t[:60]!r} disagree: the "
                   f"trace's {got}, the profiler's record of the device the rank ran on; the telemetry's board "
                   "limits read the manifest's")
    return t, None


def peak_tflops(gpu: GPUSpec, precision: str) -> float | None:
    """Dense peak TFLOP/s of ``gpu`` for ``precision`` (``bf16``, ``float32``...); fp32 matmuls
    use the fp32 (non-TF32) peak. None when the GPU has no dense path for it."""
    p = PRECISION_ALIASES.get(precision.lower(), precision.lower())
    return gpu.tflops.get(p)


def official_bf16(name: str) -> tuple[float | None, str]:
    """(dense BF16 TFLOP/s, source) for a device name; (None, "") if unknown."""
    g = find_gpu(name)
    if g is None or "bf16" not in g.tflops:
        return None, ""
    return g.tflops["bf16"], g.source
