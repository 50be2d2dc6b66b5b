"""``foms.json`` fields that come from the run's telemetry rather than its log (seed 000 lessons
4 and 24), kept apart from :mod:`ai4s_graph.tools.trainlog.fom` so the log parser stays a log
parser. :func:`extra_foms` is the one call: it reads the run's ``telemetry/*.jsonl`` exports (raw
samples, no PromQL) and returns the fields for :func:`~ai4s_graph.tools.trainlog.fom.write_foms`.

Lesson 24 (HBM %): ``hbm_reserved_pct`` needs the device's HBM total, which no manifest carries.
The total is MEASURED first: the largest ``hbm_total`` sample of the job's GPUs (dcgm-exporter
``FB_USED + FB_FREE`` MiB x 2^20, Omnistat ``rocm_vram_total_bytes``); only without telemetry,
the datasheet capacity of the manifest's GPU (``hbm_gb`` x 2^30: the H200's "141 GB" is GiB-sized,
its device reports 143771 MiB = 140.4 GiB, reports/raw-2026-11-29/eval-vm.json). Each value
names its source in ``hbm_total_source``.

Lesson 4 (MFMA FLOP/s methodology): Omnistat's rocprofiler-sdk collector exposes cumulative
hardware counters as ``omnistat_hardware_counter{card, name="SQ_INSTS_VALU_MFMA_MOPS_<DTYPE>"}``.
Two rates come from one counter and differ by ~60x on a bursty workload (the seed: 0.006-0.012
vs 0.75 TFLOP/s), so they are written as two fields and never compared:

- ``mfma_tflops_<dtype>``: TIME-AVERAGED, the counter's increase over the whole job window / the
  window's length (the seed's standard FOM), per GPU (the mean over the job's GPUs);
- ``mfma_tflops_<dtype>_peak_burst``: the largest rate over any :data:`BURST_WINDOW_S` window of
  one GPU (the seed's PromQL ``rate([10s])``), a separate field;
- ``mfma_flops_method``: the sentence that says which is which.

FLOP per counter unit: :data:`MFMA_FLOP_PER_UNIT`. A counter that goes down was reset (a
collector restart): the increase after it counts from zero, as Prometheus' ``rate()`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..errors import Ai4sError
from ..perfmodel.datasheet import find_gpu
from ..telemetry import export, rawstats

COUNTER = "omnistat_hardware_counter"
MFMA_PREFIX = "SQ_INSTS_VALU_MFMA_MOPS_"
MFMA_FLOP_PER_UNIT = 512
"""AMD's MI300/MI200 performance-counter reference lists ``SQ_INSTS_VALU_MFMA_MOPS_<DTYPE>`` as
"Number of <DTYPE> floating MFMA ops in the unit of 512" (unit FLOP); rocprofiler-compute's FLOPs
sums ``SQ_INSTS_VALU_MFMA_MOPS_*`` x 512."""
BURST_WINDOW_S = 10.0
"""Seed 000 lesson 4: the burst rate is PromQL ``rate(...[10s])``."""
METHOD = ("mfma_tflops_<dtype> is time-averaged: the counter's increase over the whole job window divided by its length, "
          "per GPU (mean over the job's GPUs); mfma_tflops_<dtype>_peak_burst is the largest rate over any 10 s window of one "
          "GPU (PromQL rate([10s])). They measure different things and are never compared (seed 000 lesson 4).")


def _increase(ts: Sequence[float], vs: Sequence[float]) -> list[float]:
    """The counter's running increase at each sample (a drop is a reset: counted from zero)."""
    out, tot = [0.0], 0.0
    for a, b in zip(vs, vs[1:]):
        tot += b - a if b >= a else b
        out.append(tot)
    return out


def mfma_tflops(series: Sequence[export.Series], jobid: str, window: tuple[float, float]) -> dict[str, Any]:
    """The lesson-4 fields of job ``jobid`` over ``window`` (unix seconds) from raw ``series``:
    ``{mfma_tflops_<dtype>, mfma_tflops_<dtype>_peak_burst, mfma_flops_method}`` for every MFMA
    counter dtype the job's GPUs report (TFLOP/s = 10^12 FLOP/s); ``{}`` when there is none.
    Raises InputError (from :mod:`~ai4s_graph.tools.telemetry.rawstats`) for a bad window."""
    start, end = float(window[0]), float(window[1])
    hosts = rawstats.raw_job_hosts(series, jobid, (start, end))
    per: dict[str, list[tuple[float, float]]] = {}  # dtype -> [(time-averaged, burst)] per GPU
    for s in series:
        name = s.metric.get("name", "")
        if s.name != COUNTER or not name.startswith(MFMA_PREFIX) or s.host not in hosts:
            continue
        pts = [(t, v) for t, v in zip(s.timestamps, s.values) if start <= t <= end and v == v]
        if len(pts) < 2:
            continue
        ts, vs = [t for t, _ in pts], [v for _, v in pts]
        inc = _increase(ts, vs)
        avg = inc[-1] * MFMA_FLOP_PER_UNIT / (end - start) / 1e12
        burst, j = 0.0, 0
        for i in range(1, len(ts)):
            while ts[i] - ts[j] > BURST_WINDOW_S:
                j += 1
            if j < i:
                burst = max(burst, (inc[i] - inc[j]) * MFMA_FLOP_PER_UNIT / (ts[i] - ts[j]) / 1e12)
        per.setdefault(name[len(MFMA_PREFIX):].lower(), []).append((avg, burst))
    out: dict[str, Any] = {}
    for dtype, vals in sorted(per.items()):
        out[f"mfma_tflops_{dtype}"] = round(sum(a for a, _ in vals) / len(vals), 6)
        out[f"mfma_tflops_{dtype}_peak_burst"] = round(max(b for _, b in vals), 6)
    if out:
        out["mfma_flops_method"] = METHOD
    return out


def hbm_total(series: Sequence[export.Series], jobid: str, window: tuple[float, float] | None,
              gpu_name: str | None) -> tuple[int | None, str]:
    """(HBM bytes per GPU, source): the largest ``hbm_total`` sample of the job's GPUs (measured),
    else the datasheet capacity of ``gpu_name`` (``hbm_gb`` x 2^30), else ``(None, why)``."""
    if series:
        try:
            v = rawstats.raw_job_stat(series, "hbm_total", jobid, "max", window=window)
        except Ai4sError:
            v = None
        if v:
            return int(v), "telemetry: the job's largest hbm_total sample (device used + free memory)"
    spec = find_gpu(gpu_name or "")
    if spec is not None:
        return int(spec.hbm_gb * (1 << 30)), f"datasheet: {spec.name} {spec.hbm_gb:g} GB (GiB-sized), no telemetry"
    return None, "not checked: needs the run's GPU telemetry (hbm_total) or a known GPU name"


def extra_foms(run_dir: str | Path, manifest: Any) -> dict[str, Any]:
    """The telemetry fields of ``foms.json`` for the run in ``run_dir`` (``manifest``: its
    :class:`~ai4s_graph.state.Manifest`): ``hbm_total_bytes`` and ``hbm_total_source`` (lesson
    24) and the MFMA FLOP/s pair (lesson 4). Unreadable exports add nothing (the telemetry
    analyst reports them)."""
    series: list[export.Series] = []
    for p in getattr(manifest.artifacts, "telemetry", []) or []:
        try:
            series += export.load_export(Path(run_dir) / p)
        except Ai4sError:
            continue
    window = (manifest.start, manifest.end) if manifest.start is not None and manifest.end is not None else None
    total, src = hbm_total(series, manifest.jobid, window, manifest.gpu)
    out: dict[str, Any] = {"hbm_total_bytes": total, "hbm_total_source": src}
    if series and window is not None:
        try:
            out.update(mfma_tflops(series, manifest.jobid, window))
        except Ai4sError:
            pass
    return out
