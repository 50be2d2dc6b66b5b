"""Hand-built telemetry inputs for the tests: JSON-lines exports (VictoriaMetrics ``/api/v1/export``
format) and perf-run directories whose right answers are computed by hand in each test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

T0 = 1795000000.0  # hand-built jobs of these tests start here (unix s, 2026-11-18: in the past)


def line(name: str, labels: dict[str, str], points: Iterable[tuple[float, Any]]) -> str:
    """One export line: ``name{labels}`` with ``(unix s, value)`` points (a value may be None: a
    staleness marker, or anything else JSON can hold)."""
    pts = list(points)
    return json.dumps({"metric": {"__name__": name, **labels}, "values": [v for _, v in pts],
                       "timestamps": [int(round(t * 1000)) for t, _ in pts]}) + "\n"


def grid(t_from: float, t_to: float, hz: float = 4.0) -> list[float]:
    """Sample times from ``t_from`` to ``t_to`` inclusive at ``hz``."""
    n = int(round((t_to - t_from) * hz)) + 1
    return [t_from + i / hz for i in range(n)]


def dcgm_gpu(host: str, gpu: int, ts: list[float], util: Callable[[float], Any] | None,
             power: Callable[[float], Any] = lambda t: 300.0, extra: dict[str, Callable[[float], Any]] | None = None,
             labels: dict[str, str] | None = None) -> str:
    """dcgm-exporter series of one GPU (``gpu``, ``device``, ``modelName``, ``Hostname``,
    ``instance`` labels as dcgm-exporter writes them): utilization (unless None), power, SM
    clock 1980 MHz, FB used 20000 MiB, plus ``extra`` {name: value(t)}."""
    lab = {"gpu": str(gpu), "device": f"nvidia{gpu}", "modelName": "NVIDIA H200", "Hostname": host,
           "instance": host, **(labels or {})}
    out = line("DCGM_FI_DEV_GPU_UTIL", lab, [(t, util(t)) for t in ts]) if util is not None else ""
    out += line("DCGM_FI_DEV_POWER_USAGE", lab, [(t, power(t)) for t in ts])
    out += line("DCGM_FI_DEV_SM_CLOCK", lab, [(t, 1980.0) for t in ts])
    out += line("DCGM_FI_DEV_FB_USED", lab, [(t, 20000.0) for t in ts])
    for name, f in (extra or {}).items():
        out += line(name, lab, [(t, f(t)) for t in ts])
    return out


def rms(host: str, jobid: str, ts: list[float], card: str | None = None, values: Callable[[float], Any] | None = None) -> str:
    """``rmsjob_info{jobid}`` on ``host`` (with Omnistat's ``card`` label when given)."""
    lab = {"instance": host, "jobid": jobid, "type": "slurm", **({"card": card} if card is not None else {})}
    return line("rmsjob_info", lab, [(t, (values(t) if values else 1.0)) for t in ts])


def perf_run(tmp: Path, jobid: str, export: str, *, start: float, end: float, nodes: list[str],
             gpus_per_node: int = 1, gpu: str = "NVIDIA H200", log: str | None = None) -> Path:
    """A perf-run directory: ``manifest.json`` (SLURM start/end), ``telemetry/export.jsonl`` and a
    small ``train.log`` (20 steps of 0.5 s in one epoch unless ``log`` gives the text)."""
    run = tmp / f"run-{jobid}"
    (run / "telemetry").mkdir(parents=True)
    (run / "telemetry" / "export.jsonl").write_text(export)
    (run / "train.log").write_text(log if log is not None else
                                   "".join(f"Batch {i}: loss {2.0 - i / 40:.4f} time 0.5 seconds\n" for i in range(20))
                                   + "Epoch 0 completed\n")
    (run / "manifest.json").write_text(json.dumps({
        "jobid": jobid, "state": "COMPLETED", "nodes_list": nodes, "num_nodes": len(nodes),
        "gpus_per_node": gpus_per_node, "gpu": gpu, "model": "mlip-gnn", "global_batch_size": 16,
        "start_unix": start, "end_unix": end}))
    return run
