"""Figures of merit (FOM) of a training log: step and epoch times, throughput, loss sanity
(:func:`parse_log`), written as ``foms.json`` (:func:`write_foms`). The log's lines are read by
:mod:`.formats`; the result models are in :mod:`.models`; the precision discriminator is
:mod:`.precision` (re-exported here as :func:`compare_precision`).

Warm-up rule (default, documented): when the log holds two or more epochs, every step of the
first epoch is warm-up; with a single epoch, the first 10% of its timed steps (at least one) are.
``warmup_steps=`` overrides it with an explicit count of leading timed steps.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .formats import ParsedLog, Step, detect_format, read_steps
from .models import FomKind, FomResult, LogFormat, PrecisionVerdict
from .precision import (DEFAULT_NOISE_BAND, FP32_BF16_COMPUTE_THRESHOLD, FP64_FP32_COMPUTE_THRESHOLD,
                        compare_precision)
from ..errors import InputError
from ...state.publish import publish

__all__ = ["DEFAULT_NOISE_BAND", "FP32_BF16_COMPUTE_THRESHOLD", "FP64_FP32_COMPUTE_THRESHOLD", "FomKind", "FomResult",
           "LogFormat", "PrecisionVerdict", "SINGLE_EPOCH_WARMUP_FRACTION", "compare_precision", "detect_format",
           "fom_kind_for_model", "parse_log", "write_foms"]

#: Fraction of leading steps skipped as warm-up when the log has a single epoch.
SINGLE_EPOCH_WARMUP_FRACTION = 0.10


def fom_kind_for_model(model: str | None) -> Literal["latency", "throughput"]:
    """``latency`` (epoch time primary) for GNN / interatomic-potential models (HydraGNN, MACE,
    mlip: lesson 5), ``throughput`` otherwise (ViT / ORBIT-2 style, lesson 31)."""
    name = (model or "").lower()
    return "latency" if any(k in name for k in ("gnn", "hydra", "mlip", "mace", "schnet", "egnn")) else "throughput"


def _mean(values: list[float]) -> float:
    """``statistics.fmean``, or ±inf where its exact sum overflows (``time 1e308`` raised OverflowError)."""
    try:
        return float(statistics.fmean(values))
    except OverflowError:
        with np.errstate(over="ignore"):
            return float(np.mean(np.asarray(values, dtype=float)))


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def parse_log(
    path: str | os.PathLike[str],
    *,
    global_batch_size: int | None = None,
    rank: int = 0,
    warmup_steps: int | None = None,
    fom_kind: FomKind = "auto",
    fmt: LogFormat | None = None,
    text: str | None = None,
) -> FomResult:
    """Parse a training log and extract its figures of merit.

    ``path``: a text log in one of the formats of this module (auto-detected unless ``fmt`` is
    given). ``global_batch_size``: samples per optimizer step over all ranks (manifest), used for
    the nominal throughput. ``rank``: the rank whose lines are read (labelled logs and EDM tic
    lines; lesson 3). ``warmup_steps``: leading timed steps to skip instead of the default rule
    (module docstring). ``fom_kind``: ``latency`` -> primary FOM ``epoch_time_s`` (lesson 5),
    ``throughput`` -> realized throughput when the log has realized batches, else nominal
    (lesson 31), ``auto`` -> latency for HydraGNN tqdm logs or when no batch size is known,
    throughput otherwise (use :func:`fom_kind_for_model` when the model is known).

    ``text``: the log's text when the caller already read it (:func:`.logtext.read_log`: the one
    read of the log per run). Returns a :class:`FomResult` (seconds, samples/s). Raises
    :class:`InputError` (one line) for a missing or empty log, a log with no recognisable step line,
    or a ``global_batch_size`` that is not a positive integer (:func:`check_batch_size`).
    """
    p = Path(path)
    check_batch_size(global_batch_size)
    parsed = read_steps(p, rank, fmt, text)
    return _summarise(p, parsed, global_batch_size, rank, warmup_steps, fom_kind)


def check_batch_size(global_batch_size: Any, where: str = "global_batch_size") -> int | None:
    """``global_batch_size`` when it is None or a positive integer (samples per optimizer step: a
    count, so at least 1); else :class:`InputError` naming the field (``where``) and the value: a
    zero or negative batch gives a zero or negative throughput, a bool or a float is no count."""
    if global_batch_size is None:
        return None
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) or global_batch_size < 1:
        raise InputError(f"{where} must be a positive integer (samples per optimizer step), got "
                         f"{global_batch_size!r}: refused")
    return global_batch_size


#: The words of :func:`order_problem`'s note (what the telemetry analyst looks for among the notes).
OUT_OF_ORDER = "step lines are out of order"


def steps_out_of_order(result: Any) -> int:
    """How many step lines of a parsed log were out of order (the count in its
    :data:`OUT_OF_ORDER` note; 0 without one). ``result``: a :class:`FomResult` or its dict."""
    notes = result.get("notes") if isinstance(result, dict) else getattr(result, "notes", None)
    for n in notes or []:
        if OUT_OF_ORDER in n:
            return int(n.split(" ", 1)[0])
    return 0


def order_problem(steps: list[Step]) -> tuple[int, str | None]:
    """Step lines out of log order: ``(count, note)``, the count of step lines whose ``(epoch,
    index)`` is not after the previous step line's, or that open a new epoch by going back to an
    index other than the log's lowest (an epoch restarts at its first batch), and a one-line note
    naming the first (None when the log is in order). A training loop logs its steps in the order it runs them, so a decrease or
    a repeat means a shuffled, concatenated or restarted log; the warm-up rule and the epochs, which
    read the log's order, then describe another run's order."""
    bad, first = 0, None
    low = min((s.index for s in steps), default=0)
    for a, b in zip(steps, steps[1:]):
        # a decrease is only a new epoch when it goes back to the log's first index (the "Batch N"
        # parser opens an epoch at every decrease: a shuffled log's would begin anywhere)
        if (b.epoch, b.index) <= (a.epoch, a.index) or (b.epoch != a.epoch and b.index < a.index and b.index != low):
            bad += 1
            if first is None:
                first = (a, b)
    if not bad:
        return 0, None
    a, b = first  # type: ignore[misc]
    return bad, (f"{bad} of {len(steps)} {OUT_OF_ORDER} (epoch {b.epoch} step {b.index} follows epoch "
                 f"{a.epoch} step {a.index}): the log is not in the order the run made its steps (shuffled, "
                 "concatenated or restarted); warm-up and epochs read from it are unreliable")


@dataclass
class _Warmup:
    """The warm-up rule's outcome: steps skipped (``n_skip``; whole epochs ``n_ep_skip`` for tqdm
    logs), the rule in words, the steady step times and where they come from, and the ids of the
    warm-up steps (for the epochs that hold one)."""

    n_skip: int
    rule: str
    n_ep_skip: int
    steady_times: list[float]
    step_src: str
    warm_ids: set[int]


def _epochs(steps: list[Step]) -> tuple[list[int], dict[int, list[Step]], int | None]:
    """(epochs in log order, steps per epoch, batches per epoch: the largest epoch, None if empty)."""
    epochs_in_order: list[int] = []
    for s in steps:
        if s.epoch not in epochs_in_order:
            epochs_in_order.append(s.epoch)
    per_epoch: dict[int, list[Step]] = {e: [] for e in epochs_in_order}
    for s in steps:
        per_epoch[s.epoch].append(s)
    return epochs_in_order, per_epoch, max((len(v) for v in per_epoch.values()), default=0) or None


def _warmup(parsed: ParsedLog, timed: list[Step], epochs_in_order: list[int], bpe: int | None,
            warmup_steps: int | None, rank: int) -> _Warmup:
    """The warm-up steps to skip (module docstring): ``warmup_steps`` when given, else the first
    epoch of a log with two or more, else the first :data:`SINGLE_EPOCH_WARMUP_FRACTION` of the
    steps; tqdm logs skip whole epochs (one mean step time each). Raises InputError for a negative
    ``warmup_steps``."""
    if warmup_steps is not None:
        if warmup_steps < 0:
            raise InputError(f"warmup_steps must be >= 0, got {warmup_steps}")
        n_skip = min(warmup_steps, len(timed))
        rule = f"explicit: first {warmup_steps} timed steps"
    elif len(epochs_in_order) >= 2:
        first = epochs_in_order[0]
        n_skip = sum(1 for s in timed if s.epoch == first)
        rule = "first epoch skipped (log has >= 2 epochs)"
    else:
        n_skip = max(1, math.ceil(SINGLE_EPOCH_WARMUP_FRACTION * len(timed))) if len(timed) >= 2 else 0
        rule = "first 10% of steps skipped (single epoch)"
    if parsed.fmt != "hydragnn_tqdm":
        return _Warmup(n_skip, rule, 0, [s.time_s for s in timed[n_skip:]],  # type: ignore[misc]
                       "per-step log lines", {id(s) for s in timed[:n_skip]})
    # whole epochs only: a tqdm epoch has one (mean) step time
    assert parsed.tqdm_epochs is not None
    n_ep_skip = 0
    if warmup_steps is not None:
        n_ep_skip = math.ceil(warmup_steps / bpe) if bpe else 0
    elif len(parsed.tqdm_epochs) >= 2:
        n_ep_skip = 1
    n_ep_skip = min(n_ep_skip, len(parsed.tqdm_epochs))
    n_skip = sum(n for _, n, _, _ in parsed.tqdm_epochs[:n_ep_skip])
    if warmup_steps is None:
        rule = "first epoch skipped (log has >= 2 epochs)" if n_ep_skip else "no warm-up skipped (single epoch)"
    else:
        rule = f"explicit: {warmup_steps} steps, rounded up to {n_ep_skip} whole epochs (tqdm)"
    return _Warmup(n_skip, rule, n_ep_skip, [spi for _, _, spi, _ in parsed.tqdm_epochs[n_ep_skip:]],
                   f"rank-{rank} tqdm s/it of each steady epoch (one value per epoch)", set())


def _epoch_times(parsed: ParsedLog, complete: list[int], per_epoch: dict[int, list[Step]], w: _Warmup,
                 notes: list[str]) -> tuple[list[float], float | None, str]:
    """(every epoch's time, the median steady epoch: complete epochs free of warm-up steps, else
    all of them with a note; how they were measured). tqdm: s/it x batches of each epoch."""
    epoch_times: list[float] = []
    steady_epoch_times: list[float] = []
    if parsed.fmt == "hydragnn_tqdm":
        assert parsed.tqdm_epochs is not None
        epoch_times = [spi * n for _, n, spi, _ in parsed.tqdm_epochs]
        steady_epoch_times = epoch_times[w.n_ep_skip:]
        method = "rank-0 tqdm s/it x batches per epoch (lesson 3)"
    else:
        for e in complete:
            ts = [s.time_s for s in per_epoch[e]]
            if any(t is None for t in ts):
                notes.append(f"epoch {e} has steps without a time; left out of epoch times")
                continue
            et = float(sum(ts))  # type: ignore[arg-type]
            epoch_times.append(et)
            if not any(id(s) in w.warm_ids for s in per_epoch[e]):
                steady_epoch_times.append(et)
        method = "sum of step times of each complete epoch (no wall clock in the log)"
    if not steady_epoch_times and epoch_times:
        steady_epoch_times = epoch_times
        notes.append("no complete epoch free of warm-up steps: epoch_time_s includes warm-up")
    return epoch_times, float(statistics.median(steady_epoch_times)) if steady_epoch_times else None, method


def _throughput(timed: list[Step], w: _Warmup, tqdm: bool, global_batch_size: int | None, med: float | None,
                notes: list[str]) -> dict[str, Any]:
    """Nominal throughput (global batch / median step) and, when the steps logged their realized
    batch, the realized one (lesson 31): ``throughput_samples_per_s``,
    ``throughput_realized_samples_per_s``, ``realized_batch``, ``partial_step_fraction``,
    ``throughput_method``."""
    thr = global_batch_size / med if (global_batch_size and med) else None
    out: dict[str, Any] = {"throughput_samples_per_s": thr, "throughput_realized_samples_per_s": None,
                           "realized_batch": None, "partial_step_fraction": None,
                           "throughput_method": "nominal: global_batch_size / steady_step_time_s" if thr is not None
                           else None}
    realized = [s for s in (timed[w.n_skip:] if not tqdm else []) if s.samples is not None]
    if realized:
        tot_t = sum(s.time_s for s in realized)  # type: ignore[misc]
        tot_n = sum(s.samples for s in realized)  # type: ignore[misc]
        sizes = [s.samples for s in realized]
        full = float(global_batch_size) if global_batch_size else max(sizes)  # type: ignore[type-var]
        out.update(throughput_realized_samples_per_s=tot_n / tot_t if tot_t > 0 else None,
                   realized_batch=float(statistics.median(sizes)),  # type: ignore[type-var]
                   partial_step_fraction=sum(1 for b in sizes if b < full) / len(sizes),  # type: ignore[operator]
                   throughput_method="real_per_step_batch: sum(realized samples x ranks) / sum(step time) (lesson 31)")
        if len(realized) < len(timed) - w.n_skip:
            notes.append(f"{len(timed) - w.n_skip - len(realized)} steady steps logged no realized batch")
    return out


def _losses(parsed: ParsedLog, steps: list[Step], complete: list[int], per_epoch: dict[int, list[Step]],
            notes: list[str]) -> dict[str, Any]:
    """The loss figures: per-epoch means (finite values; the log's own epoch losses when it has
    them), strictly decreasing / fell first to last, and the NaN/inf ones (a diverged run: counted,
    named, kept out of the means)."""
    logged = [(f"step {s.index} of epoch {s.epoch}", s.loss) for s in steps if s.loss is not None]
    if parsed.logged_epoch_losses is not None:
        logged += [(f"epoch {k}'s train loss", parsed.logged_epoch_losses[k]) for k in sorted(parsed.logged_epoch_losses)]
        epoch_losses = [parsed.logged_epoch_losses[k] for k in sorted(parsed.logged_epoch_losses)
                        if math.isfinite(parsed.logged_epoch_losses[k])]
    else:
        epoch_losses = []
        for e in complete:
            ls = [s.loss for s in per_epoch[e] if s.loss is not None and math.isfinite(s.loss)]
            if ls:
                epoch_losses.append(_mean(ls))
    bad = [where for where, v in logged if not math.isfinite(v)]
    if bad:
        notes.append(f"{len(bad)} of {len(logged)} logged loss values are NaN/inf (first: {bad[0]}): "
                     "training diverged")
    two = len(epoch_losses) >= 2
    return {"epoch_losses": epoch_losses,
            "loss_sanity_pass": all(b < a for a, b in zip(epoch_losses, epoch_losses[1:])) if two else None,
            "loss_decreased": epoch_losses[-1] < epoch_losses[0] if two else None,
            "n_losses": len(logged), "n_nonfinite_losses": len(bad), "first_nonfinite_loss": bad[0] if bad else None,
            "loss_diverged": (bool(bad) if logged else None)}


def _primary(fom_kind: FomKind, tqdm: bool, thr: float | None, thr_real: float | None, epoch_time: float | None,
             med: float | None, notes: list[str]) -> dict[str, Any]:
    """The primary figure of merit (``fom_kind``, ``primary_fom``, ``primary_fom_name``,
    ``fom_higher_is_better``): latency -> the epoch time (else the step time), throughput -> the
    realized throughput (else the nominal one); ``auto`` -> latency for tqdm logs or without a
    batch size (lesson 5), throughput otherwise (lesson 31)."""
    kind: Literal["latency", "throughput"] = (("latency" if tqdm or not (thr or thr_real) else "throughput")
                                             if fom_kind == "auto" else fom_kind)
    if kind == "latency":
        if epoch_time is not None:
            primary, pname = epoch_time, "epoch_time_s"
        else:
            primary, pname = med, ("steady_step_time_s" if med is not None else None)
        return {"fom_kind": kind, "primary_fom": primary, "primary_fom_name": pname, "fom_higher_is_better": False}
    if thr_real is not None:
        primary, pname = thr_real, "throughput_realized_samples_per_s"
    elif thr is not None:
        primary, pname = thr, "throughput_samples_per_s"
    else:
        primary, pname = None, None
        notes.append("throughput FOM asked for but no global_batch_size nor realized batch known")
    return {"fom_kind": kind, "primary_fom": primary, "primary_fom_name": pname, "fom_higher_is_better": True}


def _summarise(
    p: Path,
    parsed: ParsedLog,
    global_batch_size: int | None,
    rank: int,
    warmup_steps: int | None,
    fom_kind: FomKind,
) -> FomResult:
    """The figures of merit of a parsed log: warm-up, step statistics, epochs, throughput, losses,
    the primary FOM (each in its function above; the notes keep that order)."""
    notes = list(parsed.notes)
    steps = parsed.steps
    _n, disorder = order_problem(steps)
    if disorder:
        notes.append(disorder)
    tqdm = parsed.fmt == "hydragnn_tqdm"
    timed = [s for s in steps if s.time_s is not None and math.isfinite(s.time_s)]
    epochs_in_order, per_epoch, bpe = _epochs(steps)
    w = _warmup(parsed, timed, epochs_in_order, bpe, warmup_steps, rank)
    st = w.steady_times
    if not st:
        notes.append("no steady timed step: the run never reached steady state")
    med = float(statistics.median(st)) if st else None
    complete = [e for e in epochs_in_order if e in set(parsed.complete_epochs)]
    epoch_times, epoch_time, method = _epoch_times(parsed, complete, per_epoch, w, notes)
    thr = _throughput(timed, w, tqdm, global_batch_size, med, notes)
    losses = _losses(parsed, steps, complete, per_epoch, notes)
    primary = _primary(fom_kind, tqdm, thr["throughput_samples_per_s"], thr["throughput_realized_samples_per_s"],
                       epoch_time, med, notes)
    return FomResult(
        source=str(p), format=parsed.fmt, rank=rank, ranks_seen=parsed.ranks_seen, n_steps=len(steps),
        n_timed_steps=len(timed), n_epochs=len(epoch_times) if tqdm else len(complete), batches_per_epoch=bpe,
        warmup_steps_skipped=w.n_skip, warmup_rule=w.rule, step_time_source=w.step_src, steady_step_time_s=med,
        step_time_p10_s=_pct(st, 10) if st else None, step_time_p90_s=_pct(st, 90) if st else None,
        step_time_mean_s=_mean(st) if st else None, epoch_times_s=epoch_times,
        epoch_time_s=epoch_time, epoch_time_method=method, global_batch_size=global_batch_size,
        **thr, **losses, **primary, notes=notes, step_times_s=[float(t) for t in st],
    )


# ----------------------------------------------------------------------------------------------
def _finite_or_none(obj: Any) -> Any:
    """``obj`` with every NaN/inf float replaced by None (JSON has no NaN; a diverged run logs
    ``loss nan``)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj


def write_foms(
    result: FomResult,
    path: str | os.PathLike[str],
    *,
    hbm_reserved_bytes: int | None = None,
    hbm_total_bytes: int | None = None,
    hbm_reserved_pct: float | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``foms.json`` for ``result`` and return its path.

    The file holds every :class:`FomResult` field (without the per-step list) plus
    ``max_batches_per_epoch`` and, when given, ``hbm_reserved_bytes`` and ``hbm_reserved_pct``
    (= 100 x reserved / ``hbm_total_bytes`` unless passed directly): lesson 23's guards reject a
    cross-run throughput delta when HBM% or batches per epoch differ from the baseline.
    ``extra`` adds caller keys (e.g. ``jobid``). The write is atomic (temporary file + rename),
    so an existing foms.json is never left half-written. Raises :class:`InputError` for a
    negative or non-finite HBM value.
    """
    out = Path(path)
    data: dict[str, Any] = result.model_dump(mode="json")
    data["max_batches_per_epoch"] = result.batches_per_epoch
    if hbm_reserved_bytes is not None:
        if hbm_reserved_bytes < 0:
            raise InputError(f"hbm_reserved_bytes must be >= 0, got {hbm_reserved_bytes}")
        data["hbm_reserved_bytes"] = int(hbm_reserved_bytes)
        if hbm_reserved_pct is None and hbm_total_bytes:
            hbm_reserved_pct = 100.0 * hbm_reserved_bytes / hbm_total_bytes
    if hbm_reserved_pct is not None:
        if not math.isfinite(hbm_reserved_pct) or hbm_reserved_pct < 0:
            raise InputError(f"hbm_reserved_pct must be a finite number >= 0, got {hbm_reserved_pct}")
        data["hbm_reserved_pct"] = float(hbm_reserved_pct)
    if hbm_total_bytes is not None:
        data["hbm_total_bytes"] = int(hbm_total_bytes)
    if extra:
        data.update(extra)
    publish(out, json.dumps(_finite_or_none(data), indent=1, allow_nan=False) + "\n")  # atomic, refuses a link
    return out
