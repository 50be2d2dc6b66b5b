"""The training-log result models: :class:`FomResult` (figures of merit of one log, :mod:`.fom`)
and :class:`PrecisionVerdict` (the precision discriminator, :mod:`.precision`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ...state.claims import BottleneckClass

LogFormat = Literal["batch_time", "edm_tic", "hydragnn_tqdm"]
FomKind = Literal["auto", "latency", "throughput"]


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
    epoch losses. Epoch losses are means of the FINITE loss values; ``n_nonfinite_losses`` of the
    ``n_losses`` logged values are NaN/inf (the first at ``first_nonfinite_loss``) and
    ``loss_diverged`` is True when there is any (a NaN loss is a diverged run, whatever the
    other values do), ``None`` when the log has no loss values. Step lines out of log order (a
    shuffled, concatenated or restarted log) are counted in one of ``notes``
    (:func:`.fom.order_problem`, :data:`.fom.OUT_OF_ORDER`). ``primary_fom`` is ``epoch_time_s`` for latency-bound GNN work (lesson 5) and a
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
    n_losses: int = 0
    n_nonfinite_losses: int = 0
    first_nonfinite_loss: str | None = None
    loss_diverged: bool | None = None
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
