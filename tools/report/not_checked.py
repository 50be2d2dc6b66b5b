"""Checks of the analysis that could not run, said out loud (issue 28): "not checked: needs ...".

A triage check whose inputs are absent fires nothing, and nothing firing must not read as a clean
bill: each such check gets one line naming what it needs. These lines go in the report's "What was
missing" section but never lower STATUS on their own (the user asked for an analysis, not for
these checks); an input the user DID ask for that is missing stays in ``missing``, which does.

Seed 001 T3 (CPU oversubscription: DataLoader workers x ranks vs the cores the job may use) needs
all three counts; T8 (I/O- vs CPU-transform-bound loading) needs host CPU busy % over the job and
the rank trace's DataLoader share.
"""

from __future__ import annotations

from typing import Any

T3 = "T3 (CPU oversubscription: DataLoader workers x ranks per node vs the cores the job may use)"
T8 = "T8 (I/O-bound vs CPU-transform-bound data loading)"


def triage_not_checked(num_workers: int | None, ranks_per_node: int | None, cores: int | None,
                       cpu_util_pct: float | None, traces: list[Any] | None) -> list[str]:
    """The ``not checked: needs ...`` lines of seed 001 T3 and T8 for these inputs ([] when both
    could run). ``num_workers`` 0 means no worker processes: T3 has nothing to oversubscribe and is
    checked. Units: counts, ``cpu_util_pct`` in percent."""
    out = []
    need = []
    if num_workers is None:
        need.append("the DataLoader workers per rank (num_workers in the manifest or the job script)")
    if ranks_per_node is None:
        need.append("the ranks per node (--ntasks-per-node or gpus_per_node)")
    if cores is None:
        need.append("the cores the job may use (cpus_per_node in the manifest, or --cpus-per-task in the job script)")
    if need and num_workers != 0:
        out.append(f"not checked: {T3}: needs " + "; ".join(need))
    need = []
    if cpu_util_pct is None:
        need.append("host CPU busy % over the job window (cpu_util: node-exporter's node_cpu_seconds_total or "
                    "Omnistat's host collector in the telemetry)")
    if not traces:
        need.append("a rank trace (the DataLoader share of the step)")
    if need:
        out.append(f"not checked: {T8}: needs " + " and ".join(need))
    return out
