"""Training-log parser and figure-of-merit (FOM) extractor.

Three log formats are recognised (auto-detected, see :func:`detect_format`):

``batch_time``
    ``Batch N: loss L time T seconds`` per step, optionally followed by ``samples S`` (the
    realized number of samples of that step, all ranks together), and ``Epoch N completed``
    after each epoch (the mlip-gnn workload of jobs 91001/91002).
``edm_tic``
    The ORBIT-2 / Bayes-CAST EDM pair ``epoch: N batch_idx M world_size W loss tensor(L, ...)``
    followed by ``my rank R. tic4-tic1 in X seconds``; each tic line is paired to the step line
    before it and per-epoch losses are synthesised from per-step losses (seed 000 lesson 21).
    Optional ``y.shape torch.Size([B, ...])`` lines give the realized per-rank batch ``B`` of a
    step (lesson 31); it is multiplied by ``W`` to give the step's global sample count.
``hydragnn_tqdm``
    HydraGNN's progress bars: ``hydragnn.utils.print_utils.iterate_tqdm`` wraps the training
    loader in ``tqdm(..., desc="Train", total=nbatch)`` (``hydragnn/train/train_validate_test.py``),
    so each epoch prints ``Train: 100%|██████████| 20/20 [00:25<00:00,  1.25s/it]`` on stderr, its
    updates separated by carriage returns. With verbosity 4 every rank prints its own bar and
    ``srun --label`` prefixes each line with ``<rank>: ``. Only rank 0's bars are read (lesson 3:
    counting every rank's 100% line over-counts epochs by N_ranks); epoch wall time is rank 0's
    s/it x number of batches (lesson 3). Epoch losses come from HydraGNN's
    ``Epoch: NN, Train Loss: L, Val Loss: ..., Test Loss: ...`` lines.

Warm-up rule (default, documented): when the log holds two or more epochs, every step of the
first epoch is warm-up; with a single epoch, the first 10% of its timed steps (at least one) are.
``warmup_steps=`` overrides it with an explicit count of leading timed steps.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ...state.claims import BottleneckClass
from ..files import publish
from ..errors import InputError

LogFormat = Literal["batch_time", "edm_tic", "hydragnn_tqdm"]
FomKind = Literal["auto", "latency", "throughput"]

#: Default relative noise band of a FOM comparison: lesson 9 of seed 000 treats lever results as
#: noise until they replicate within +-5%; lesson 13's "+1.3% within noise" sits inside it.
DEFAULT_NOISE_BAND = 0.05
#: fp64 -> fp32 speedup at or above which a workload is compute-bound (seed 000 lesson 13:
#: "A compute-bound workload should show >=30% speedup when switching fp64->fp32").
FP64_FP32_COMPUTE_THRESHOLD = 1.30
#: fp32 -> bf16/fp16 speedup at or above which a workload is GEMM/compute-bound (seed 000
#: lesson 22: "A >=1.4x precision speedup => MFMA/GEMM-bound").
FP32_BF16_COMPUTE_THRESHOLD = 1.40
#: Fraction of leading steps skipped as warm-up when the log has a single epoch.
SINGLE_EPOCH_WARMUP_FRACTION = 0.10

_FORMATS_TRIED = (
    "batch_time ('Batch N: loss L time T seconds'), "
    "edm_tic ('epoch: N batch_idx M ... loss tensor(L)' + 'my rank R. tic4-tic1 in X seconds'), "
    "hydragnn_tqdm ('Train: 100%|...| n/N [..., X s/it]')"
)

# ----------------------------------------------------------------------------------------------
# line patterns
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
_LABEL = re.compile(r"^\s*(\d+): ")  # srun --label prefix ("0: ", " 3: ", "12: ")
_BATCH = re.compile(
    rf"Batch\s+(\d+):\s+loss\s+({_NUM})\s+time\s+({_NUM})\s+seconds(?:\s+samples\s+(\d+))?",
    re.IGNORECASE,
)
_EPOCH_DONE = re.compile(r"\bEpoch\s+(\d+)\s+completed\b")
_EDM_STEP = re.compile(
    rf"epoch:\s*(\d+)\s+batch_idx\s+(\d+)(?:\s+world_size\s+(\d+))?.*?\bloss\s+"
    rf"(?:tensor\(\s*)?({_NUM})"
)
_EDM_TIC = re.compile(rf"my rank\s+(\d+)\.?\s+tic4-tic1 in\s+({_NUM})\s+seconds")
_YSHAPE = re.compile(r"y\.shape\W*torch\.Size\(\[\s*(\d+)")
# tqdm's default bar: "{desc}: {pct:3.0f}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]"
# (tqdm.std.tqdm.format_meter; rate is "{:5.2f}it/s", or "{:5.2f}s/it" when slower than 1 it/s,
# with an SI prefix when unit_scale is on, "?it/s" before the first update).
_TQDM = re.compile(
    r"(?:(?P<desc>[^\r\n|]*?):\s*)?(?P<pct>\d{1,3})%\|[^|\r\n]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:?]+),\s*(?P<rate>\?|[\d.]+\s*[kMGT]?)\s*"
    r"(?P<unit>it/s|s/it)"
)
_HYDRA_EPOCH = re.compile(rf"Epoch:\s*(\d+),\s*Train Loss:\s*({_NUM})")


# ----------------------------------------------------------------------------------------------
class FomResult(BaseModel):
    """Figures of merit of one training log (all times in seconds, throughputs in samples/s).

    ``n_steps`` counts parsed training steps; ``batches_per_epoch`` is the largest number of steps
    seen in one epoch (lesson 23: ``max_batches_per_epoch``). ``steady_step_time_s`` is the median
    of the steady (post-warm-up) step times; ``step_time_p10_s``/``p90``/``mean`` describe the
    same set. ``epoch_times_s`` lists each complete epoch's time (sum of its step times, or for
    tqdm logs rank-0 s/it x batches, lesson 3); ``epoch_time_s`` is the median over steady complete
    epochs. ``throughput_samples_per_s`` = ``global_batch_size / steady_step_time_s`` (nominal);
    ``throughput_realized_samples_per_s`` = sum of realized samples / sum of step time over steady
    steps that logged their batch (lesson 31). ``loss_sanity_pass`` is the seed's rule, literally:
    epoch losses strictly decreasing; ``loss_decreased`` is the looser last < first (long runs
    plateau and a strictly-decreasing rule fails on noise). Both are ``None`` with fewer than two
    epoch losses. ``primary_fom`` is ``epoch_time_s`` for latency-bound GNN work (lesson 5) and a
    throughput for throughput-bound work (lesson 31); ``fom_higher_is_better`` says which way is
    better."""

    source: str
    format: LogFormat
    rank: int = 0
    ranks_seen: list[int] = Field(default_factory=list)
    n_steps: int
    n_timed_steps: int
    n_epochs: int = Field(description="complete epochs")
    batches_per_epoch: int | None
    warmup_steps_skipped: int
    warmup_rule: str
    step_time_source: str
    steady_step_time_s: float | None
    step_time_p10_s: float | None
    step_time_p90_s: float | None
    step_time_mean_s: float | None
    epoch_times_s: list[float]
    epoch_time_s: float | None
    epoch_time_method: str
    global_batch_size: int | None
    throughput_samples_per_s: float | None
    throughput_realized_samples_per_s: float | None
    throughput_method: str | None
    realized_batch: float | None
    partial_step_fraction: float | None
    epoch_losses: list[float]
    loss_sanity_pass: bool | None
    loss_decreased: bool | None
    fom_kind: Literal["latency", "throughput"]
    primary_fom: float | None
    primary_fom_name: str | None
    fom_higher_is_better: bool
    notes: list[str] = Field(default_factory=list)
    step_times_s: list[float] = Field(default_factory=list, exclude=True, repr=False)


class PrecisionVerdict(BaseModel):
    """Outcome of the precision discriminator (seed 000 lessons 13 and 22).

    ``speedup`` = time at ``hi`` precision / time at ``lo`` precision (>1: the lower precision is
    faster). ``noise_band`` is the relative band treated as "no change"; ``threshold`` the speedup
    at or above which the workload is compute-bound. ``verdict`` is the class name, or
    ``inconclusive`` when the speedup falls between the noise band and the threshold."""

    hi: str
    lo: str
    metric: str
    hi_value: float
    lo_value: float
    speedup: float
    noise_band: float
    threshold: float
    bottleneck_class: BottleneckClass
    verdict: str
    rule: str
    lesson: str


@dataclass
class _Step:
    epoch: int
    index: int
    loss: float | None = None
    time_s: float | None = None
    samples: float | None = None  # realized samples of the step, all ranks together
    world_size: int = 1


@dataclass
class _Parsed:
    fmt: LogFormat
    steps: list[_Step]
    complete_epochs: list[int]
    ranks_seen: list[int]
    notes: list[str]
    # tqdm only: per-epoch (epoch, n_batches, s_per_it, elapsed_s) and epoch losses from log lines
    tqdm_epochs: list[tuple[int, int, float, float | None]] | None = None
    logged_epoch_losses: dict[int, float] | None = None


# ----------------------------------------------------------------------------------------------
def _float(s: str) -> float:
    return float(s)


def _read(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"training log not found: {path}") from None
    except OSError as exc:
        raise InputError(f"cannot read training log {path}: {exc.strerror or exc}") from None
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise InputError(f"training log {path} is empty (tried formats: {_FORMATS_TRIED})")
    return text


def _records(text: str) -> list[tuple[int | None, str]]:
    """Split a log into ``(srun_label, segment)`` records: lines on ``\\n``, then tqdm's
    carriage-return updates on ``\\r``; a segment inherits its line's ``srun --label`` rank."""
    out: list[tuple[int | None, str]] = []
    for line in text.split("\n"):
        label: int | None = None
        m = _LABEL.match(line)
        if m:
            label = int(m.group(1))
            line = line[m.end():]
        for seg in line.split("\r"):
            m2 = _LABEL.match(seg) if label is not None else None
            if m2:  # a label repeated after a carriage return (unbuffered srun output)
                seg = seg[m2.end():]
            if seg.strip():
                out.append((label, seg))
    return out


def _counts(text: str) -> dict[LogFormat, int]:
    return {
        "batch_time": len(_BATCH.findall(text)),
        "edm_tic": len(_EDM_STEP.findall(text)),
        "hydragnn_tqdm": sum(
            1 for m in _TQDM.finditer(text) if (m.group("desc") or "").strip().endswith("Train")
        ),
    }


def detect_format(text: str) -> LogFormat | None:
    """The log format with the most step lines in ``text``, or ``None`` when no step line of any
    known format is present."""
    counts = _counts(text)
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] > 0 else None


def _filter_rank(recs: list[tuple[int | None, str]], rank: int, pattern: re.Pattern[str]):
    """Keep the records of ``rank`` when step lines carry srun labels; all records otherwise."""
    labels = sorted({lab for lab, seg in recs if lab is not None and pattern.search(seg)})
    if not labels:
        return recs, []
    if rank not in labels:
        raise InputError(f"no step lines of rank {rank} in the labelled log (ranks seen: {labels})")
    return [(lab, seg) for lab, seg in recs if lab == rank], labels


def _close_epochs(steps: list[_Step], marked: set[int]) -> list[int]:
    """Complete epochs: those closed by an ``Epoch N completed`` line or followed by a later
    epoch's steps; a trailing unmarked epoch is complete only when it holds as many steps as the
    largest earlier epoch."""
    order: list[int] = []
    counts: dict[int, int] = {}
    for s in steps:
        if s.epoch not in counts:
            order.append(s.epoch)
            counts[s.epoch] = 0
        counts[s.epoch] += 1
    complete = []
    for i, ep in enumerate(order):
        if ep in marked or i < len(order) - 1:
            complete.append(ep)
        elif i > 0 and counts[ep] >= max(counts[e] for e in order[:i]):
            complete.append(ep)
    return complete


def _parse_batch_time(recs, rank: int) -> _Parsed:
    recs, labels = _filter_rank(recs, rank, _BATCH)
    steps: list[_Step] = []
    marked: set[int] = set()
    epoch = 0
    last_idx: int | None = None
    notes: list[str] = []
    for _, seg in recs:
        m = _BATCH.search(seg)
        if m:
            idx = int(m.group(1))
            if last_idx is not None and idx <= last_idx and steps and steps[-1].epoch == epoch:
                # batch index went back without an "Epoch N completed" line: a new epoch began
                epoch += 1
            samples = float(m.group(4)) if m.group(4) else None
            steps.append(_Step(epoch, idx, _float(m.group(2)), _float(m.group(3)), samples))
            last_idx = idx
            continue
        m = _EPOCH_DONE.search(seg)
        if m:
            n = int(m.group(1))
            cur = [s for s in steps if s.epoch == epoch]
            if cur and n != epoch:
                for s in cur:  # trust the log's own epoch number
                    s.epoch = n
            marked.add(n)
            epoch = n + 1
            last_idx = None
    return _Parsed("batch_time", steps, _close_epochs(steps, marked), labels, notes)


def _parse_edm(recs, rank: int) -> _Parsed:
    recs, labels = _filter_rank(recs, rank, _EDM_STEP)
    steps: list[_Step] = []
    marked: set[int] = set()
    tic_ranks: set[int] = set()
    cur: _Step | None = None
    cur_has_tic = True
    pending_batch: int | None = None
    cur_batch: int | None = None
    orphan_tics = 0
    for _, seg in recs:
        m = _EDM_STEP.search(seg)
        if m:
            ws = int(m.group(3)) if m.group(3) else 1
            cur = _Step(int(m.group(1)), int(m.group(2)), _float(m.group(4)), None, None, ws)
            steps.append(cur)
            cur_has_tic = False
            cur_batch = pending_batch
            pending_batch = None
            if cur_batch is not None:
                cur.samples = float(cur_batch * ws)
            continue
        m = _EDM_TIC.search(seg)
        if m:
            r = int(m.group(1))
            tic_ranks.add(r)
            if r != rank:
                continue
            if cur is None or cur_has_tic:
                orphan_tics += 1
                continue
            cur.time_s = _float(m.group(2))
            cur_has_tic = True
            continue
        m = _YSHAPE.search(seg)
        if m:
            b = int(m.group(1))
            if cur is not None and not cur_has_tic and cur.samples is None:
                cur.samples = float(b * cur.world_size)  # printed inside the step
            else:
                pending_batch = b  # printed before the next step line
            continue
        m = _EPOCH_DONE.search(seg)
        if m:
            marked.add(int(m.group(1)))
    notes = []
    if orphan_tics:
        notes.append(f"{orphan_tics} tic4-tic1 lines had no preceding step line and were ignored")
    if tic_ranks and rank not in tic_ranks:
        raise InputError(f"no 'my rank {rank}. tic4-tic1' lines in the log (ranks seen: {sorted(tic_ranks)})")
    ranks = labels or sorted(tic_ranks)
    return _Parsed("edm_tic", steps, _close_epochs(steps, marked), ranks, notes)


def _hms(s: str) -> float | None:
    try:
        parts = [int(p) for p in s.split(":")]
    except ValueError:
        return None
    t = 0
    for p in parts:
        t = t * 60 + p
    return float(t)


def _rate_s_per_it(rate: str, unit: str) -> float | None:
    rate = rate.strip()
    if rate == "?":
        return None
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    mult = 1.0
    if rate and rate[-1] in scale:
        mult = scale[rate[-1]]
        rate = rate[:-1]
    v = float(rate) * mult
    if v <= 0:
        return None
    return v if unit == "s/it" else 1.0 / v


def _parse_tqdm(recs, rank: int, desc: str = "Train") -> _Parsed:
    notes: list[str] = []
    bars: list[tuple[int | None, int, dict[str, str]]] = []  # (label, record index, groups)
    epoch_lines: list[tuple[int, int, float]] = []  # (record index, epoch, train loss)
    for i, (lab, seg) in enumerate(recs):
        for m in _TQDM.finditer(seg):
            d = (m.group("desc") or "").strip()
            d = _LABEL.sub("", d)
            if d == desc or d.endswith(" " + desc):
                bars.append((lab, i, m.groupdict()))
        m = _HYDRA_EPOCH.search(seg)
        if m:
            epoch_lines.append((i, int(m.group(1)), _float(m.group(2))))
    labels = sorted({lab for lab, _, _ in bars if lab is not None})
    if labels:
        if rank not in labels:
            raise InputError(f"no '{desc}' progress bars of rank {rank} in the log (ranks seen: {labels})")
        bars = [b for b in bars if b[0] == rank]
    # one completion per bar instance: a 100% update closes the bar; repeated 100% updates (tqdm
    # prints the final state again on close) refine it; an update below 100% opens a new bar.
    completions: list[tuple[int, dict[str, str]]] = []
    open_bar = True
    for _, idx, g in bars:
        done = int(g["n"]) >= int(g["total"]) > 0
        if done:
            if open_bar:
                completions.append((idx, g))
                open_bar = False
            else:
                completions[-1] = (completions[-1][0], g)
        else:
            open_bar = True
    if not labels and epoch_lines and len(completions) > len(epoch_lines):
        # unlabelled log with every rank's bars: keep the first completion before each epoch line
        kept: list[tuple[int, dict[str, str]]] = []
        start = -1
        for rec_idx, _, _ in epoch_lines:
            inside = [c for c in completions if start < c[0] < rec_idx]
            if inside:
                kept.append(inside[0])
            start = rec_idx
        tail = [c for c in completions if c[0] > start]
        notes.append(
            f"unlabelled log with {len(completions)} '{desc}' completions for {len(epoch_lines)} epoch "
            "lines: kept the first completion per epoch (rank unknown; lesson 3)"
        )
        completions = kept + tail[:1]
    epochs: list[tuple[int, int, float, float | None]] = []
    for e, (_, g) in enumerate(completions):
        spi = _rate_s_per_it(g["rate"], g["unit"])
        if spi is None:
            continue
        epochs.append((e, int(g["total"]), spi, _hms(g["elapsed"])))
    steps = [_Step(e, i, None, spi) for e, n, spi, _ in epochs for i in range(n)]
    losses: dict[int, float] = {}
    for _, ep, loss in epoch_lines:
        losses.setdefault(ep, loss)
    return _Parsed(
        "hydragnn_tqdm", steps, [e for e, *_ in epochs], labels, notes,
        tqdm_epochs=epochs, logged_epoch_losses=losses,
    )


# ----------------------------------------------------------------------------------------------
def fom_kind_for_model(model: str | None) -> Literal["latency", "throughput"]:
    """``latency`` (epoch time primary) for GNN / interatomic-potential models (HydraGNN, MACE,
    mlip: lesson 5), ``throughput`` otherwise (ViT / ORBIT-2 style, lesson 31)."""
    name = (model or "").lower()
    return "latency" if any(k in name for k in ("gnn", "hydra", "mlip", "mace", "schnet", "egnn")) else "throughput"


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

    Returns a :class:`FomResult` (seconds, samples/s). Raises :class:`InputError` (one line) for a
    missing or empty log, or a log with no recognisable step line.
    """
    p = Path(path)
    text = _read(p)
    fmt = fmt or detect_format(text)
    if fmt is None:
        raise InputError(f"no recognizable step line in {p} (tried formats: {_FORMATS_TRIED})")
    recs = _records(text)
    if fmt == "batch_time":
        parsed = _parse_batch_time(recs, rank)
    elif fmt == "edm_tic":
        parsed = _parse_edm(recs, rank)
    else:
        parsed = _parse_tqdm(recs, rank)
    if not parsed.steps and fmt != "hydragnn_tqdm":
        raise InputError(f"no recognizable step line in {p} (tried formats: {_FORMATS_TRIED})")
    if fmt == "hydragnn_tqdm" and not parsed.tqdm_epochs:
        raise InputError(f"no completed rank-{rank} 'Train' progress bar in {p} (format hydragnn_tqdm)")
    return _summarise(p, parsed, global_batch_size, rank, warmup_steps, fom_kind)


def _summarise(
    p: Path,
    parsed: _Parsed,
    global_batch_size: int | None,
    rank: int,
    warmup_steps: int | None,
    fom_kind: FomKind,
) -> FomResult:
    notes = list(parsed.notes)
    steps = parsed.steps
    timed = [s for s in steps if s.time_s is not None and math.isfinite(s.time_s)]
    epochs_in_order: list[int] = []
    for s in steps:
        if s.epoch not in epochs_in_order:
            epochs_in_order.append(s.epoch)
    per_epoch: dict[int, list[_Step]] = {e: [] for e in epochs_in_order}
    for s in steps:
        per_epoch[s.epoch].append(s)
    bpe = max((len(v) for v in per_epoch.values()), default=0) or None

    # --- warm-up
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
    fmt_is_tqdm = parsed.fmt == "hydragnn_tqdm"
    n_ep_skip = 0
    if fmt_is_tqdm:
        # whole epochs only: a tqdm epoch has one (mean) step time
        assert parsed.tqdm_epochs is not None
        if warmup_steps is not None:
            n_ep_skip = math.ceil(warmup_steps / bpe) if bpe else 0
        elif len(parsed.tqdm_epochs) >= 2:
            n_ep_skip = 1
        n_ep_skip = min(n_ep_skip, len(parsed.tqdm_epochs))
        steady_epochs = parsed.tqdm_epochs[n_ep_skip:]
        n_skip = sum(n for _, n, _, _ in parsed.tqdm_epochs[:n_ep_skip])
        if warmup_steps is None:
            rule = "first epoch skipped (log has >= 2 epochs)" if n_ep_skip else "no warm-up skipped (single epoch)"
        else:
            rule = f"explicit: {warmup_steps} steps, rounded up to {n_ep_skip} whole epochs (tqdm)"
        steady_times = [spi for _, _, spi, _ in steady_epochs]
        step_src = f"rank-{rank} tqdm s/it of each steady epoch (one value per epoch)"
    else:
        steady = timed[n_skip:]
        steady_times = [s.time_s for s in steady]  # type: ignore[misc]
        step_src = "per-step log lines"
    warm_ids = {id(s) for s in timed[:n_skip]} if not fmt_is_tqdm else set()

    if not steady_times:
        notes.append("no steady timed step: the run never reached steady state")
    med = float(statistics.median(steady_times)) if steady_times else None
    p10 = _pct(steady_times, 10) if steady_times else None
    p90 = _pct(steady_times, 90) if steady_times else None
    mean = float(statistics.fmean(steady_times)) if steady_times else None

    # --- epochs
    complete = [e for e in epochs_in_order if e in set(parsed.complete_epochs)]
    epoch_times: list[float] = []
    steady_epoch_times: list[float] = []
    if fmt_is_tqdm:
        assert parsed.tqdm_epochs is not None
        for e, n, spi, _ in parsed.tqdm_epochs:
            epoch_times.append(spi * n)
        steady_epoch_times = epoch_times[n_ep_skip:]
        method = "rank-0 tqdm s/it x batches per epoch (lesson 3)"
    else:
        for e in complete:
            ts = [s.time_s for s in per_epoch[e]]
            if any(t is None for t in ts):
                notes.append(f"epoch {e} has steps without a time; left out of epoch times")
                continue
            et = float(sum(ts))  # type: ignore[arg-type]
            epoch_times.append(et)
            if not any(id(s) in warm_ids for s in per_epoch[e]):
                steady_epoch_times.append(et)
        method = "sum of step times of each complete epoch (no wall clock in the log)"
    if not steady_epoch_times and epoch_times:
        steady_epoch_times = epoch_times
        notes.append("no complete epoch free of warm-up steps: epoch_time_s includes warm-up")
    epoch_time = float(statistics.median(steady_epoch_times)) if steady_epoch_times else None

    # --- throughput
    thr = global_batch_size / med if (global_batch_size and med) else None
    realized = [s for s in (timed[n_skip:] if not fmt_is_tqdm else []) if s.samples is not None]
    thr_real = None
    realized_batch = None
    partial = None
    thr_method = "nominal: global_batch_size / steady_step_time_s" if thr is not None else None
    if realized:
        tot_t = sum(s.time_s for s in realized)  # type: ignore[misc]
        tot_n = sum(s.samples for s in realized)  # type: ignore[misc]
        thr_real = tot_n / tot_t if tot_t > 0 else None
        sizes = [s.samples for s in realized]
        realized_batch = float(statistics.median(sizes))  # type: ignore[type-var]
        full = float(global_batch_size) if global_batch_size else max(sizes)  # type: ignore[type-var]
        partial = sum(1 for b in sizes if b < full) / len(sizes)  # type: ignore[operator]
        thr_method = "real_per_step_batch: sum(realized samples x ranks) / sum(step time) (lesson 31)"
        if len(realized) < len(timed) - n_skip:
            notes.append(f"{len(timed) - n_skip - len(realized)} steady steps logged no realized batch")

    # --- losses
    if parsed.logged_epoch_losses is not None:
        epoch_losses = [parsed.logged_epoch_losses[k] for k in sorted(parsed.logged_epoch_losses)]
    else:
        epoch_losses = []
        for e in complete:
            ls = [s.loss for s in per_epoch[e] if s.loss is not None]
            if ls:
                epoch_losses.append(float(statistics.fmean(ls)))
    if len(epoch_losses) >= 2:
        sanity = all(b < a for a, b in zip(epoch_losses, epoch_losses[1:]))
        decreased = epoch_losses[-1] < epoch_losses[0]
    else:
        sanity = decreased = None

    # --- primary FOM
    if fom_kind == "auto":
        kind: Literal["latency", "throughput"] = (
            "latency" if fmt_is_tqdm or not (thr or thr_real) else "throughput"
        )
    else:
        kind = fom_kind
    if kind == "latency":
        if epoch_time is not None:
            primary, pname = epoch_time, "epoch_time_s"
        else:
            primary, pname = med, ("steady_step_time_s" if med is not None else None)
        higher = False
    else:
        if thr_real is not None:
            primary, pname = thr_real, "throughput_realized_samples_per_s"
        elif thr is not None:
            primary, pname = thr, "throughput_samples_per_s"
        else:
            primary, pname = None, None
            notes.append("throughput FOM asked for but no global_batch_size nor realized batch known")
        higher = True

    return FomResult(
        source=str(p),
        format=parsed.fmt,
        rank=rank,
        ranks_seen=parsed.ranks_seen,
        n_steps=len(steps),
        n_timed_steps=len(timed),
        n_epochs=len(epoch_times) if fmt_is_tqdm else len(complete),
        batches_per_epoch=bpe,
        warmup_steps_skipped=n_skip,
        warmup_rule=rule,
        step_time_source=step_src,
        steady_step_time_s=med,
        step_time_p10_s=p10,
        step_time_p90_s=p90,
        step_time_mean_s=mean,
        epoch_times_s=epoch_times,
        epoch_time_s=epoch_time,
        epoch_time_method=method,
        global_batch_size=global_batch_size,
        throughput_samples_per_s=thr,
        throughput_realized_samples_per_s=thr_real,
        throughput_method=thr_method,
        realized_batch=realized_batch,
        partial_step_fraction=partial,
        epoch_losses=epoch_losses,
        loss_sanity_pass=sanity,
        loss_decreased=decreased,
        fom_kind=kind,
        primary_fom=primary,
        primary_fom_name=pname,
        fom_higher_is_better=higher,
        notes=notes,
        step_times_s=[float(t) for t in steady_times],
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
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".foms-", suffix=".json", dir=out.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(_finite_or_none(data), fh, indent=1, allow_nan=False)
            fh.write("\n")
        publish(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


# ----------------------------------------------------------------------------------------------
_PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


def _time_of(v: FomResult | float, name: str) -> tuple[float, str]:
    if isinstance(v, FomResult):
        if v.steady_step_time_s is None:
            raise InputError(f"{name} run has no steady step time to compare")
        return v.steady_step_time_s, "steady_step_time_s"
    f = float(v)
    if not math.isfinite(f) or f <= 0:
        raise InputError(f"{name} FOM must be a positive finite number, got {v}")
    return f, "value"


def compare_precision(
    fom_hi: FomResult | float,
    fom_lo: FomResult | float,
    hi: str = "fp64",
    lo: str = "fp32",
    *,
    noise_band: float = DEFAULT_NOISE_BAND,
    higher_is_better: bool = False,
) -> PrecisionVerdict:
    """The precision discriminator: run the same workload at two precisions and classify it.

    ``fom_hi``/``fom_lo``: the run at the higher precision ``hi`` and the lower precision ``lo``,
    either :class:`FomResult` (their ``steady_step_time_s`` are compared: same batch, seconds per
    step) or plain numbers (times in seconds unless ``higher_is_better=True``, e.g. samples/s).
    ``speedup`` = time_hi / time_lo. Rules (seed 000):

    * lesson 13 (fp64 -> fp32; threshold 1.30): speedup >= 1.30 -> compute-bound; |speedup - 1|
      <= ``noise_band`` -> dispatch-bound ("fp32 ~ fp64"); fp32 slower than fp64 beyond the noise
      band (speedup < 1 - noise) -> memory-bound (lesson 13's "fp32 > fp64" branch, epoch times).
    * lesson 22 (fp32/tf32 -> bf16/fp16; threshold 1.40): speedup >= 1.40 -> GEMM/compute-bound;
      within noise -> dispatch-bound (by analogy with lesson 13); slower -> no seed rule.
    * any other pair uses lesson 13's 1.30 threshold (stated in ``rule``).
    * a speedup between the noise band and the threshold is ``inconclusive`` (class ``unknown``):
      replicate the runs (lesson 9).

    ``noise_band`` defaults to 0.05 (lesson 9: results count only when they replicate within
    +-5%). Raises :class:`InputError` for an unknown precision name, equal precisions, or a
    non-positive value.
    """
    hi_n, lo_n = hi.lower(), lo.lower()
    for n in (hi_n, lo_n):
        if n not in _PRECISIONS:
            raise InputError(f"unknown precision {n!r} (known: {', '.join(_PRECISIONS)})")
    if _PRECISIONS.index(hi_n) >= _PRECISIONS.index(lo_n):
        raise InputError(f"hi precision {hi_n} must be wider than lo precision {lo_n}")
    if not (0 <= noise_band < 1):
        raise InputError(f"noise_band must be in [0, 1), got {noise_band}")
    vh, metric = _time_of(fom_hi, "hi")
    vl, _ = _time_of(fom_lo, "lo")
    if higher_is_better and not isinstance(fom_hi, FomResult):
        speedup = vl / vh
        metric = "throughput (higher is better)"
    else:
        speedup = vh / vl
        metric = metric if metric != "value" else "time (lower is better)"

    if hi_n in ("fp32", "tf32") and lo_n in ("bf16", "fp16"):
        threshold, lesson = FP32_BF16_COMPUTE_THRESHOLD, "seed 000 lesson 22"
        memory_branch = False
    else:
        threshold, lesson = FP64_FP32_COMPUTE_THRESHOLD, "seed 000 lesson 13"
        memory_branch = (hi_n, lo_n) == ("fp64", "fp32")
        if (hi_n, lo_n) != ("fp64", "fp32"):
            lesson += " (threshold extrapolated to this precision pair)"

    if speedup >= threshold:
        cls, rule = BottleneckClass.compute, f"speedup {speedup:.3f} >= {threshold:.2f}: {lo_n} much faster than {hi_n} -> compute-bound"
    elif abs(speedup - 1.0) <= noise_band:
        cls, rule = BottleneckClass.dispatch, (
            f"|speedup - 1| = {abs(speedup - 1):.3f} <= noise {noise_band:.2f}: {lo_n} ~ {hi_n} -> dispatch-bound"
        )
    elif speedup < 1.0 - noise_band and memory_branch:
        cls, rule = BottleneckClass.memory, (
            f"speedup {speedup:.3f} < {1 - noise_band:.2f}: fp32 slower than fp64 -> memory-bound (lesson 13 branch 3)"
        )
    elif speedup < 1.0 - noise_band:
        cls, rule = BottleneckClass.unknown, (
            f"speedup {speedup:.3f} < {1 - noise_band:.2f}: {lo_n} slower than {hi_n}; no seed rule for this pair"
        )
    else:
        cls, rule = BottleneckClass.unknown, (
            f"speedup {speedup:.3f} between noise band (1 +- {noise_band:.2f}) and threshold {threshold:.2f}: "
            "inconclusive, replicate (lesson 9)"
        )
    return PrecisionVerdict(
        hi=hi_n,
        lo=lo_n,
        metric=metric,
        hi_value=vh,
        lo_value=vl,
        speedup=speedup,
        noise_band=noise_band,
        threshold=threshold,
        bottleneck_class=cls,
        verdict=cls.value if cls is not BottleneckClass.unknown else "inconclusive",
        rule=rule,
        lesson=lesson,
    )
