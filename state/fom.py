"""The figures of merit (FOM): one definition of each, shared by the optimizer loop
(:class:`~ai4s_graph.state.loop.FomSpec`: a catalog's ``fom.primary``), ``ai4s-graph diff``
(:mod:`ai4s_graph.tools.report.diff`) and the training-log parser, which writes every one of them
into ``foms.json`` (:mod:`ai4s_graph.tools.trainlog.fom`).

Each FOM says which way is better, its unit, the statistic behind it and whether warm-up is out of
it. The parser's warm-up rule (``tools/trainlog/fom.py``: the first epoch when the log has two or
more, else the first 10 % of the timed steps) is applied before any of them is computed; whether a
value of a given run is in fact free of warm-up is :func:`warmup_reason` (a single-epoch log's
epoch time still holds its warm-up steps: in the bundled 93003 the first step is 2.22 s of a 6.83 s
epoch).

The FOM a verdict is taken on (:data:`VERDICT_FOMS`) is the steady epoch time when both runs have
a complete epoch free of warm-up, else the steady step time:

- the epoch time is the run's own clock over whole epochs (seed 000 lesson 5: the primary FOM of
  latency-bound work; samples/s misleads when batch size is a lever). At an equal batch, batches per
  epoch and partial-step share, which the integrity guards require of a pair
  (:mod:`ai4s_graph.tools.levers.guards`, lessons 23, 31), it is the reciprocal of the realized
  throughput, taken as a median over epochs. It counts slow steps inside an epoch in full: on the
  CPU pair in ``tests/data/diff`` (DataLoader workers hiding a 60 ms data latency) the median step
  falls 3.1x while the epoch falls 1.33x, as the realized throughput does;
- the steady step time (the median step after warm-up) when no complete epoch is free of warm-up
  (every bundled 9300x run is one 16-step epoch): one slow step in the steady window (the
  profiler's trace export, 1.83 s in 93003 against a 0.197 s median step) does not move it, where
  it dominates a sum over 14 steps.

The nominal throughput (global batch / steady step time, the ORBIT-2 loop's accept/revert FOM, seed
000 line 32) and the realized throughput (a ratio of sums, lesson 31) are reported beside the verdict
FOM; where one of them moves beyond noise against it, that is a contradiction to report.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Direction = Literal["lower", "higher"]


class FomDefinition(BaseModel):
    """One figure of merit: ``name`` (its ``foms.json`` key), ``direction`` (which way is better),
    ``unit``, ``statistic`` (``median`` over steady values, or ``ratio of sums``), ``per``
    (``step`` or ``epoch``: what its steady values are), ``meaning`` (one sentence) and ``source``
    (the seed lesson it comes from)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    direction: Direction
    unit: str
    statistic: Literal["median", "ratio of sums"]
    per: Literal["step", "epoch"]
    meaning: str
    source: str


FOM_DEFINITIONS: dict[str, FomDefinition] = {d.name: d for d in (
    FomDefinition(name="epoch_time_s", direction="lower", unit="s", statistic="median", per="epoch",
                  meaning="median time of the complete epochs that hold no warm-up step",
                  source="seed 000 lesson 5 (latency-bound GNN work)"),
    FomDefinition(name="steady_step_time_s", direction="lower", unit="s", statistic="median", per="step",
                  meaning="median time of the timed steps after warm-up",
                  source="seed 000 lesson 5; the step every other FOM is built from"),
    FomDefinition(name="throughput_samples_per_s", direction="higher", unit="samples/s", statistic="median",
                  per="step", meaning="global batch / steady step time",
                  source="seed 000 line 32 (ORBIT-2 accept/revert FOM); guarded by lessons 23, 31"),
    FomDefinition(name="throughput_realized_samples_per_s", direction="higher", unit="samples/s",
                  statistic="ratio of sums", per="step",
                  meaning="sum of realized samples / sum of step time over the steady steps",
                  source="seed 000 lesson 31 (real_per_step_batch)"),
)}
"""Every FOM the parser writes and the loop may optimise, by name."""

FOM_DIRECTIONS: dict[str, Direction] = {n: d.direction for n, d in FOM_DEFINITIONS.items()}
"""Which way is better, by FOM name (lessons 5 and 31)."""

VERDICT_FOMS: tuple[str, ...] = ("epoch_time_s", "steady_step_time_s")
"""The FOM a verdict is taken on, in order of preference (module docstring)."""


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _int(v: Any) -> int:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else 0


def steady_epochs(foms: dict[str, Any]) -> int:
    """Complete epochs of a ``foms.json`` that hold no warm-up step: ``n_epochs`` less the epochs the
    ``warmup_steps_skipped`` leading steps reach into (``batches_per_epoch`` steps an epoch). When
    the parser skipped none (a one-step log, a single tqdm epoch) the first epoch still holds the
    run's first step and counts as warm-up, unless the user said so (an ``explicit`` rule of 0)."""
    n_ep, skip, bpe = _int(foms.get("n_epochs")), _int(foms.get("warmup_steps_skipped")), _int(foms.get("batches_per_epoch"))
    explicit = str(foms.get("warmup_rule") or "").startswith("explicit")
    if skip:
        warm = math.ceil(skip / bpe) if bpe else 1
    else:
        warm = 0 if explicit else 1
    return max(0, n_ep - warm)


def warmup_reason(name: str, foms: dict[str, Any]) -> str | None:
    """Why the value of FOM ``name`` in ``foms`` (a ``foms.json`` dict) is not a steady-state figure,
    or None when it is. A missing or non-finite value, a step FOM with no timed step after warm-up,
    or none skipped as warm-up (a one-step log; a single-epoch tqdm log, whose one s/it holds its
    warm-up), an epoch time whose complete epochs all hold warm-up steps. An explicit
    ``warmup_steps`` (the rule starts ``explicit``) is the user's word for where warm-up ends.

    Raises ``KeyError`` for a name not in :data:`FOM_DEFINITIONS`."""
    d = FOM_DEFINITIONS[name]
    if _num(foms.get(name)) is None:
        return f"{name} is not in foms.json"
    skip, timed = _int(foms.get("warmup_steps_skipped")), _int(foms.get("n_timed_steps"))
    explicit = str(foms.get("warmup_rule") or "").startswith("explicit")
    if d.per == "epoch":
        if not isinstance(foms.get("n_epochs"), int):
            return f"foms.json does not say how many complete epochs {name} is over (no n_epochs)"
        if steady_epochs(foms) == 0:
            return (f"{name} holds warm-up: all {_int(foms.get('n_epochs'))} complete epoch(s) hold some of the "
                    f"{skip} warm-up step(s)")
        return None
    if not isinstance(foms.get("n_timed_steps"), int):
        return f"foms.json does not say how many timed steps {name} is over (no n_timed_steps)"
    if timed - skip <= 0:
        return f"no timed step after the {skip} warm-up step(s) of {timed}: the run never reached steady state"
    if skip == 0 and not explicit:
        return (f"no warm-up step was skipped ({foms.get('warmup_rule') or 'no rule'}): "
                f"{name} holds the run's first steps")
    return None


def verdict_fom(a: dict[str, Any], b: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The FOM to judge run B against run A on (two ``foms.json`` dicts): the first of
    :data:`VERDICT_FOMS` that is a steady-state figure in both runs. Returns ``(name, notes)``:
    notes say why a preferred FOM was passed over; ``name`` is None when no FOM is free of warm-up
    in both (the notes then give each run's reason: the pair is dominated by warm-up)."""
    notes: list[str] = []
    for name in VERDICT_FOMS:
        why = [f"run {side}: {r}" for side, r in (("A", warmup_reason(name, a)), ("B", warmup_reason(name, b))) if r]
        if not why:
            return name, notes
        notes.append(f"{name} not used: " + "; ".join(why))
    return None, notes
