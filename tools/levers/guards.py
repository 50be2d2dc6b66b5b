"""Integrity guards: is a run comparable with the run it is measured against? Used by the
optimizer loop (accept/revert) and by ``ai4s-graph diff`` (regression or not).

Seed 000 sources: lesson 23 (num_workers shrank the real per-step batch 2.4x: HBM 236 -> 98 GB,
batches/epoch 3 -> 4, a phantom +129 %; reject a delta when HBM % or batches per epoch moved),
lesson 31 (real per-step batch and partial-step fraction), lesson 29 (a fast-but-wrong kernel
diverging to NaN), lessons 9, 10 and 18 (a different node placement is not the same experiment).

Memory comes from, in this order, whichever source BOTH runs have: ``hbm_reserved_pct``,
``hbm_reserved_bytes`` (the workload's ``torch.cuda.max_memory_reserved``), ``hbm_used_peak_bytes``
(telemetry: the peak of dcgm-exporter's ``DCGM_FI_DEV_FB_USED`` MiB x 2**20 or Omnistat's
``rocm_vram_used_percentage`` x ``rocm_vram_total_bytes`` / 100, over the run's samples),
``peak_rss_bytes`` (CPU runs). A quantity neither run measured is ``not checked`` -- never a pass.

The guard asks whether the run did the same work and measured it the same way (integrity), not
whether it used the same resources: memory is compared in the direction the lever declares
(``Lever.memory``, :class:`~ai4s_graph.state.loop.MemoryEffect`): a memory-saving lever may lower
it by any amount (the fused SDPA backend on sdpa-math, 93106: reserved HBM 19.2 -> 3.8 GB, -80 %,
rejected by the old two-sided rule: reports/optimizer-2026-12-02), a memory-spending one may raise
it up to the board's capacity (``memory_capacity``; a run that ran out of memory crashed and is a
failed lever, never compared). What a lever must not change: the loss curve beyond
``FomSpec.loss_tolerance_pct`` (``loss_curve``: it computes something else; lessons 23, 29) and the
FOM's definition (``fom_definition``: the log format, the step-time source, the FOM and its method).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ...state.loop import FomSpec, GuardCheck, GuardResult, MemoryEffect, RunResult
from .data_cap import batch_vs_staged

MIB = 1024 * 1024
MEMORY_KEYS = ("hbm_reserved_pct", "hbm_reserved_bytes", "hbm_used_peak_bytes", "peak_rss_bytes", "peak_memory_bytes")
FOM_DEFINITION_KEYS = ("primary_fom_name", "fom_kind", "format", "step_time_source", "throughput_method",
                       "epoch_time_method")
"""The fields of a FOM record (``tools/trainlog/models.py:FomResult``) that define what the FOM
measures; a lever that changes one of them makes its FOM incomparable with the reference's."""


MEMORY_FLOOR_BYTES = float(2**30)
"""The smallest memory move (bytes) the ``memory`` guard judges by its relative tolerance: a footprint
that moves less than 1 GiB passes whatever the percentage (issue 27 report 5 point 6: the precision
pair 92001/92004, a 158 MiB GNN, moves 90 MiB = +57 % and was refused). The moves the guard is for
are tens of GB (lesson 23's phantom batch: HBM 236 -> 98 GB; sdpa-math's fused backend 19.2 -> 3.8
GB); the same-work DDP/FSDP runs of one ViT (93003-93005, 31-33 GB) move 0.1-1.1 GB. 1 GiB is 0.7 %
of an H200's 141 GB and 0.4 % of an MI300X's 192 GB."""
MEMORY_FLOOR_PCT = 1.0
"""The same floor for ``hbm_reserved_pct`` (percentage points of the board): 1 pp is 1.4 GB on an
H200, the order of :data:`MEMORY_FLOOR_BYTES`."""


def memory_floor(key: str) -> float:
    """The absolute move of memory figure ``key`` under which the ``memory`` guard passes whatever
    the relative change: :data:`MEMORY_FLOOR_PCT` percentage points for a ``*_pct`` figure, else
    :data:`MEMORY_FLOOR_BYTES` bytes."""
    return MEMORY_FLOOR_PCT if key.endswith("_pct") else MEMORY_FLOOR_BYTES


def _moved(key: str, delta: float) -> str:
    if key.endswith("_pct"):
        return f"{abs(delta):.2f} pp of the board"
    return f"{abs(delta) / MIB:.0f} MiB"


def _rel_pct(a: float, b: float) -> float:
    return 100.0 * abs(a - b) / abs(b) if b else (0.0 if a == b else math.inf)


def _num(d: dict[str, Any], k: str) -> float | None:
    v = d.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else None


def memory_of(fom: dict[str, Any], prefer: tuple[str, ...] = MEMORY_KEYS) -> tuple[str, float] | tuple[None, None]:
    """(name, value) of the run's first memory figure in ``prefer`` order (see module doc), or
    (None, None) when it has none."""
    for k in prefer:
        v = _num(fom, k)
        if v is not None:
            return k, v
    return None, None


def memory_from_telemetry(run_dir: str | Path) -> dict[str, float]:
    """Peak device memory from the run's ``telemetry/*.jsonl`` exports (VictoriaMetrics JSON
    lines: ``{"metric": {...}, "values": [...], "timestamps": [...]}``).

    Returns ``{"hbm_used_peak_bytes": B}`` (the largest per-GPU peak, bytes) when the export has
    ``DCGM_FI_DEV_FB_USED`` (MiB, dcgm-exporter) or ``rocm_vram_used_percentage`` with
    ``rocm_vram_total_bytes`` (Omnistat); ``{}`` otherwise. Unreadable lines are skipped."""
    peaks: dict[tuple[str, str], float] = {}
    amd_pct: dict[tuple[str, str], float] = {}
    amd_total: dict[tuple[str, str], float] = {}
    for p in sorted(Path(run_dir).glob("telemetry/*.jsonl")):
        try:
            lines = p.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            m = d.get("metric") or {}
            vals = [float(v) for v in d.get("values") or [] if isinstance(v, (int, float)) and math.isfinite(v)]
            if not vals:
                continue
            key = (str(m.get("instance") or m.get("Hostname") or ""), str(m.get("gpu") or m.get("card") or ""))
            name = m.get("__name__")
            if name == "DCGM_FI_DEV_FB_USED":
                peaks[key] = max(peaks.get(key, 0.0), max(vals) * MIB)
            elif name == "rocm_vram_used_percentage":
                amd_pct[key] = max(amd_pct.get(key, 0.0), max(vals))
            elif name == "rocm_vram_total_bytes":
                amd_total[key] = max(vals)
    for key, pct in amd_pct.items():
        if key in amd_total:
            peaks[key] = max(peaks.get(key, 0.0), pct / 100.0 * amd_total[key])
    return {"hbm_used_peak_bytes": max(peaks.values())} if peaks and max(peaks.values()) > 0 else {}


def _fom(x: RunResult | dict[str, Any]) -> dict[str, Any]:
    return x.fom if isinstance(x, RunResult) else dict(x.get("fom") or {})


def _nodes(x: RunResult | dict[str, Any]) -> list[str]:
    return list(x.nodes_list if isinstance(x, RunResult) else x.get("nodes_list") or [])


def memory_check(key: str, value: float, reference: float, tol_pct: float,
                 effect: MemoryEffect | str = MemoryEffect.same) -> GuardCheck:
    """The ``memory`` check of one figure ``key`` in the direction the lever declares (module doc):
    ``same``: within ``tol_pct`` relative either way (lesson 23); ``saves``: any fall passes, a rise
    beyond ``tol_pct`` fails; ``grows``: any rise passes (the capacity is :func:`capacity_check`'s),
    a fall beyond ``tol_pct`` fails. A move smaller than :func:`memory_floor` passes in any direction:
    a relative tolerance is the wrong kind of test on a small absolute footprint."""
    eff = MemoryEffect(effect)
    d = 100.0 * (value - reference) / abs(reference) if reference else (0.0 if value == reference else math.inf)
    floor = memory_floor(key)
    if abs(value - reference) <= floor:
        ok, rule = True, (f"a move of {_moved(key, value - reference)}, under the floor of {_moved(key, floor)}: "
                          "too small a footprint for a relative tolerance")
    elif eff is MemoryEffect.saves:
        ok, rule = d <= tol_pct, f"a memory-saving lever may lower it; rise {max(d, 0.0):.1f}% vs <= {tol_pct:g}%"
    elif eff is MemoryEffect.grows:
        ok, rule = d >= -tol_pct, f"a memory-spending lever may raise it; fall {max(-d, 0.0):.1f}% vs <= {tol_pct:g}%"
    else:
        ok, rule = abs(d) <= tol_pct, f"{abs(d):.1f}% {'<=' if abs(d) <= tol_pct else '>'} {tol_pct:g}%"
    return GuardCheck(name="memory", reference=reference, value=value, passed=ok,
                      why=f"{key} {value:.4g} vs reference {reference:.4g} ({d:+.1f}%; {rule})")


def capacity_check(fom: dict[str, Any]) -> GuardCheck:
    """``memory_capacity``: the run's peak memory within the board's capacity (``hbm_reserved_pct`` <=
    100, or ``hbm_reserved_bytes`` / ``hbm_used_peak_bytes`` <= ``hbm_total_bytes``); not checked
    without a capacity figure."""
    pct = _num(fom, "hbm_reserved_pct")
    total = _num(fom, "hbm_total_bytes")
    used = _num(fom, "hbm_reserved_bytes") or _num(fom, "hbm_used_peak_bytes")
    if pct is not None:
        ok = pct <= 100.0
        return GuardCheck(name="memory_capacity", reference=100.0, value=pct, passed=ok,
                          why=f"reserved HBM {pct:.1f}% of the board {'<=' if ok else '>'} 100%")
    if used is not None and total is not None:
        ok = used <= total
        return GuardCheck(name="memory_capacity", reference=total, value=used, passed=ok,
                          why=f"peak HBM {used:.4g} B {'<=' if ok else '>'} the board's {total:.4g} B")
    return GuardCheck(name="memory_capacity", passed=True, checked=False,
                      why="memory capacity: no HBM total or percentage measured")


def loss_curve_check(r: dict[str, Any], ref: dict[str, Any], tol_pct: float) -> GuardCheck:
    """``loss_curve``: the mean of the run's epoch losses within ``tol_pct`` relative of the
    reference's, over the epochs both logged (``FomSpec.loss_tolerance_pct``: a lever that changes
    the loss curve computes something else, lessons 23 and 29)."""
    def losses(d: dict[str, Any]) -> list[float]:
        return [float(x) for x in (d.get("epoch_losses") or []) if isinstance(x, (int, float)) and math.isfinite(x)]

    a, b = losses(r), losses(ref)
    if not a and not b:
        return GuardCheck(name="loss_curve", passed=True, checked=False, why="loss curve: not logged in either run")
    if not a or not b:
        return GuardCheck(name="loss_curve", passed=False, value=a or None, reference=b or None,
                          why=f"epoch losses logged in only one run ({len(a)} vs reference {len(b)} epochs)")
    n = min(len(a), len(b))
    ma, mb = sum(a[:n]) / n, sum(b[:n]) / n
    d = _rel_pct(ma, mb)
    ok = d <= tol_pct
    return GuardCheck(name="loss_curve", reference=mb, value=ma, passed=ok,
                      why=f"mean epoch loss over {n} epoch(s) {ma:.4g} vs reference {mb:.4g} ({d:.1f}% "
                          f"{'<=' if ok else '>'} {tol_pct:g}%{'' if ok else ': the lever changes what the run computes'})")


def fom_definition_check(r: dict[str, Any], ref: dict[str, Any]) -> GuardCheck:
    """``fom_definition``: the fields of :data:`FOM_DEFINITION_KEYS` either run has are equal in
    both (the same FOM, measured the same way); not checked when neither run has any."""
    keys = [k for k in FOM_DEFINITION_KEYS if r.get(k) is not None or ref.get(k) is not None]
    if not keys:
        return GuardCheck(name="fom_definition", passed=True, checked=False, why="FOM definition: not recorded")
    diff = [k for k in keys if r.get(k) != ref.get(k)]
    if diff:
        k = diff[0]
        return GuardCheck(name="fom_definition", reference=ref.get(k), value=r.get(k), passed=False,
                          why=f"the FOM is defined differently: {k} {r.get(k)!r} vs reference {ref.get(k)!r}")
    return GuardCheck(name="fom_definition", passed=True, why=f"same FOM definition ({', '.join(keys)})")


def integrity_guard(run: RunResult | dict[str, Any], reference: RunResult | dict[str, Any], spec: FomSpec,
                    *, changes_batch: bool = False, check_placement: bool = False,
                    memory: MemoryEffect | str = MemoryEffect.same) -> GuardResult:
    """Is ``run`` comparable with ``reference`` (the current best run)? Lessons 23, 29, 31.

    Checks (each a :class:`GuardCheck` with both values and why):

    - ``realized_over_nominal``: realized per-step batch / nominal batch within
      ``spec.batch_tolerance_pct`` of the reference's (lesson 23's phantom throughput);
    - ``realized_batch``, ``realized_batch_mean`` (when reported), ``batches_per_epoch``: within the
      batch tolerance (not compared for a lever that ``changes_batch``);
    - ``memory``: the first memory figure both runs have (module doc) within
      ``spec.memory_tolerance_pct`` relative in the direction ``memory`` declares
      (:func:`memory_check`; lesson 23); not compared for ``changes_batch``;
    - ``memory_capacity``: the run's peak within the board's capacity (:func:`capacity_check`);
    - ``loss_curve``: the mean epoch loss within ``spec.loss_tolerance_pct`` (:func:`loss_curve_check`;
      not compared for ``changes_batch``); ``fom_definition``: the same FOM definition
      (:func:`fom_definition_check`);
    - ``partial_step_fraction``: within ``spec.partial_step_tolerance`` absolute (lesson 31);
    - ``loss_finite``: epoch losses finite, loss sanity not lost (lesson 29);
    - ``placement`` (``check_placement``): the same nodes as the reference (lessons 9, 10, 18).

    Measured in neither run: ``checked=False`` ("not checked"; does not block). Measured in only
    one run: fails."""
    r, ref = _fom(run), _fom(reference)
    checks: list[GuardCheck] = []
    btol = spec.batch_tolerance_pct

    def num(d: dict[str, Any], k: str) -> float | None:
        v = d.get(k)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    def compare(name: str, a: float | None, b: float | None, tol_pct: float, label: str) -> None:
        if a is None and b is None:
            checks.append(GuardCheck(name=name, passed=True, checked=False, why=f"{label}: not measured in either run"))
        elif a is None or b is None:
            checks.append(GuardCheck(name=name, reference=b, value=a, passed=False,
                                     why=f"{label} measured in only one run (reference {b}, this run {a})"))
        else:
            d = _rel_pct(a, b)
            ok = d <= tol_pct
            checks.append(GuardCheck(
                name=name, reference=b, value=a, passed=ok,
                why=(f"{label} {a:.4g} vs reference {b:.4g} ({d:.1f}% {'<=' if ok else '>'} {tol_pct:g}%)")))

    def ratio(d: dict[str, Any]) -> float | None:
        rb, gb = num(d, "realized_batch"), num(d, "global_batch_size")
        return rb / gb if rb is not None and gb else None

    compare("realized_over_nominal", ratio(r), ratio(ref), btol, "realized/nominal batch ratio")
    if changes_batch:
        for nm in ("realized_batch", "batches_per_epoch", "memory", "loss_curve"):
            checks.append(GuardCheck(name=nm, passed=True, checked=False,
                                     why=f"{nm}: lever changes the batch on purpose; not compared"))
    else:
        compare("realized_batch", num(r, "realized_batch"), num(ref, "realized_batch"), btol, "realized per-step batch")
        if num(r, "realized_batch_mean") is not None or num(ref, "realized_batch_mean") is not None:
            compare("realized_batch_mean", num(r, "realized_batch_mean"), num(ref, "realized_batch_mean"), btol,
                    "mean realized batch")
        compare("batches_per_epoch", num(r, "batches_per_epoch"), num(ref, "batches_per_epoch"), btol, "batches per epoch")
        common = [k for k in MEMORY_KEYS if _num(r, k) is not None and _num(ref, k) is not None]
        if common:
            k = common[0]
            checks.append(memory_check(k, _num(r, k), _num(ref, k), spec.memory_tolerance_pct, memory))
        else:
            mk, mv = memory_of(r)
            rk, rv = memory_of(ref)
            if mk and rk:
                checks.append(GuardCheck(name="memory", reference=rv, value=mv, passed=False,
                                         why=f"memory measured differently ({mk} vs reference {rk})"))
            else:
                compare("memory", mv, rv, spec.memory_tolerance_pct, mk or rk or "peak memory (HBM or RSS)")
        checks.append(loss_curve_check(r, ref, spec.loss_tolerance_pct))
    checks.append(capacity_check(r))
    checks.append(fom_definition_check(r, ref))
    a, b = num(r, "partial_step_fraction"), num(ref, "partial_step_fraction")
    if a is None and b is None:
        checks.append(GuardCheck(name="partial_step_fraction", passed=True, checked=False,
                                 why="partial-step fraction: not measured in either run"))
    else:
        a0, b0 = a or 0.0, b or 0.0
        ok = abs(a0 - b0) <= spec.partial_step_tolerance
        checks.append(GuardCheck(name="partial_step_fraction", reference=b, value=a, passed=ok,
                                 why=f"partial-step fraction {a0:.3f} vs reference {b0:.3f} "
                                     f"({'<=' if ok else '>'} {spec.partial_step_tolerance:g})"))
    losses = [x for x in (r.get("epoch_losses") or []) if isinstance(x, (int, float))]
    has_loss = bool(losses) or r.get("loss_sanity_pass") is not None
    finite = all(math.isfinite(x) for x in losses)
    lost_sanity = ref.get("loss_sanity_pass") is True and r.get("loss_sanity_pass") is False
    ok = finite and not lost_sanity
    why = ("loss is finite and sane" if ok else
           ("loss went non-finite (NaN/inf)" if not finite else "loss sanity failed (epoch losses not decreasing) "
            "while the reference passed"))
    if not has_loss and ref.get("loss_sanity_pass") is None:
        checks.append(GuardCheck(name="loss_finite", passed=True, checked=False, why="loss: not logged in either run"))
    else:
        checks.append(GuardCheck(name="loss_finite", reference=ref.get("loss_sanity_pass"),
                                 value=r.get("loss_sanity_pass"), passed=ok, why=why))
    checks.append(batch_vs_staged(r))  # lesson 25: the batch against the staged sample count
    if check_placement:
        a_n, b_n = sorted(_nodes(run)), sorted(_nodes(reference))
        if not a_n and not b_n:
            checks.append(GuardCheck(name="placement", passed=True, checked=False, why="placement: no nodes list"))
        else:
            same = a_n == b_n
            checks.append(GuardCheck(
                name="placement", reference=",".join(b_n), value=",".join(a_n), passed=same,
                why=(f"same nodes {','.join(a_n)}" if same else
                     f"ran on {','.join(a_n) or '?'}, reference on {','.join(b_n) or '?'}: a different placement is "
                     "not the same experiment (lessons 9, 10, 18)")))
    return GuardResult(passed=all(c.passed for c in checks), checks=checks)
