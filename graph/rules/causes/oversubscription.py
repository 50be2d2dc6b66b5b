"""Host CPU oversubscription by DataLoader workers (seed 001 T3; seed 000 lesson 22: 8 workers x 8
ranks = 64 processes on 56 CPUs regressed 5.6%): ``num_workers x ranks_per_node`` worker processes
above the cores the job may use (``cpus_per_task x ranks``, or the node's count).

Detects from the manifest and the job script's fields (and the node's CPU utilization as context);
re-derived from the job script's text alone. Lever ``num_workers``, saving from
``tools/levers/impact.py`` (the DataLoader overlap model)."""

from __future__ import annotations

from typing import Any

from .base import Cause, Finding, LeverSpec, ev
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

CLAIM_ID = "triage.t3.oversubscription"
T3 = "T3 (CPU oversubscription: DataLoader workers x ranks per node vs the cores the job may use)"
"""The check as the report's "not checked" line names it (seed 001 T3)."""


def manifest_field(x: Inputs | Reader, key: str) -> Any:
    """A manifest field or extra (``num_workers``, ``cpus_per_node``, ``gpus_per_node``), or None."""
    m = x.manifest
    if m is None:
        return None
    return m.model_dump(mode="json", by_alias=False).get(key)


def not_checked_line(num_workers: int | None, ranks_per_node: int | None, cores: int | None) -> str | None:
    """``not checked: T3 ...: needs ...`` naming each of the three counts T3 needs that is None
    (counts of processes / cores); None when all are known, or when ``num_workers`` is 0 (no worker
    processes: nothing to oversubscribe, T3 is checked)."""
    need = []
    if num_workers is None:
        need.append("the DataLoader workers per rank (num_workers in the manifest or the job script)")
    if ranks_per_node is None:
        need.append("the ranks per node (--ntasks-per-node or gpus_per_node)")
    if cores is None:
        need.append("the cores the job may use (cpus_per_node in the manifest, or --cpus-per-task in the job script)")
    return f"not checked: {T3}: needs " + "; ".join(need) if need and num_workers != 0 else None


def procs_per_core(num_workers: int | None, ranks_per_node: int | None, cores: int | None) -> float | None:
    """DataLoader worker processes per allowed core, None when an input is missing."""
    if not num_workers or not ranks_per_node or not cores:
        return None
    return round(num_workers * ranks_per_node / cores, 3)


class CpuOversubscription(Cause):
    """More DataLoader worker processes than allowed cores (seed 001 T3, lesson 22)."""

    seed = "seed 001 T3; seed 000 lesson 22"
    causes = {"cpu-oversubscription": "more DataLoader worker processes than the cores the job may use"}
    analyst = "telemetry_analyst"
    reads = ("manifest", "job", "cpu.host_util_pct")
    figures = (Figure("dataloader_procs_per_core", "ratio", "DataLoader worker processes per allowed core", "cause",
                      Tolerance(rel=0.001)),)
    constants = {}
    levers = (LeverSpec("num_workers", "cap num_workers per rank at the cores per rank less one and OMP_NUM_THREADS "
                        "to the cgroup quota (lesson 22: 64 workers on 56 CPUs regressed 5.6%)", saving="num_workers"),)
    verifier_needs = ("job",)

    @staticmethod
    def counts(x: Inputs) -> tuple[int | None, int | None, int | None]:
        """``(num_workers, ranks_per_node, cores)`` of the job: the manifest's fields, else the job
        script's (``num_workers``, ``--ntasks-per-node``, ``--cpus-per-task`` x ranks); None each
        when neither gives it."""
        js = x.job
        ranks = js.get("ntasks_per_node") or manifest_field(x, "gpus_per_node")
        cores = manifest_field(x, "cpus_per_node") or ((js.get("cpus_per_task") or 0) * (ranks or 0)) or None
        nw = manifest_field(x, "num_workers")
        return (nw if nw is not None else js.get("num_workers")), ranks, cores

    def detect(self, x: Inputs) -> list[Finding]:
        f = self.check(*self.counts(x), x.figure("cpu.host_util_pct"))
        return [f] if f is not None else []

    def not_checked(self, x: Inputs) -> list[str]:
        line = not_checked_line(*self.counts(x))
        return [line] if line else []

    def check(self, num_workers: int | None, ranks_per_node: int | None, cores: int | None,
              cpu_util_pct: float | None = None, source: str = "manifest") -> Finding | None:
        """The finding for these counts: ``num_workers x ranks_per_node`` above ``cores``; None
        when an input is missing or the workers fit. ``cpu_util_pct`` (node CPU busy %) is added as
        evidence when known."""
        if not num_workers or not ranks_per_node or not cores:
            return None
        procs = num_workers * ranks_per_node
        if procs <= cores:
            return None
        ratio = procs / cores
        evidence = [ev(source, "num_workers x ranks_per_node / cores", {"num_workers": num_workers, "ranks_per_node":
                       ranks_per_node, "cores": cores, "ratio": round(ratio, 3)},
                       num_workers=num_workers, ranks_per_node=ranks_per_node, cores=cores)]
        if cpu_util_pct is not None:
            evidence.append(ev("promql.instant", "cpu_util avg", cpu_util_pct))
        c = self.claim(CLAIM_ID, f"{num_workers} DataLoader workers x {ranks_per_node} ranks = {procs} worker processes "
                       f"on {cores} cores ({ratio:.2f} per core), plus the ranks themselves: the host CPUs are "
                       "oversubscribed (seed 001 T3)" + (f"; node CPU busy {cpu_util_pct:.0f}%" if cpu_util_pct is not None
                                                          else ""),
                       "dataloader_procs_per_core", round(ratio, 3), "ratio", evidence, 0.8)
        why = (f"cap num_workers at {max(1, cores // ranks_per_node - 1)} per rank and OMP_NUM_THREADS to the cgroup "
               "quota (lesson 22: 64 workers on 56 CPUs regressed 5.6%)")
        return Finding(("cpu-oversubscription",), c, (self.lever("num_workers", why),))

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        method = "the job script's --ntasks-per-node, --cpus-per-task and num_workers"
        if not r.job_script:
            return Rederived(None, method, Tolerance(rel=0.001))
        p = r.job
        n, ranks = p.get("num_workers"), p.get("ntasks_per_node")
        cores = manifest_field(r, "cpus_per_node") or ((p.get("cpus_per_task") or 0) * (ranks or 0)) or None
        return Rederived(procs_per_core(n, ranks, cores), method, Tolerance(rel=0.001))


CAUSE = CpuOversubscription()
