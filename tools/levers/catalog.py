"""The lever catalog and the perf-optimizer loop's pure rules: load and validate a catalog, apply
levers to the baseline job, pick the next lever, the integrity guards, the noise rule, and the
loop directory's files (journal, known bad nodes, best config, updated catalog).

Nothing here talks to SLURM; ``graph/optimize/nodes.py`` does, and calls these.

Rules and where they come from (seed 000 lessons):

- the picker skips ``blocked`` and ``accepted-baked-in`` levers (lessons 6, 17), levers that imply a
  mechanism a blocked lever implies (``Lever.implies``, lesson 6) and levers already tried in this loop, and prefers the levers the analysis report recommends, then those whose
  ``targets`` match the report's bottleneck class (lesson 13: the bottleneck class shapes the
  whole lever strategy);
- a lever is accepted only when it beats the current best by more than the noise band: the
  measured run-to-run spread of the baseline runs, with ``fom.min_noise_pct`` as floor;
  a ``variance: high`` lever is re-run and accepted only when the two runs agree within +-5 %
  (lesson 9);
- the integrity guard refuses a comparison when peak memory (HBM reserved %, or peak RSS on
  CPU), batches per epoch, the realized per-step batch, its ratio to the nominal batch, or the
  partial-step fraction moved from the reference run, or when the loss went non-finite
  (lessons 23, 29, 31).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path
from typing import Any, Iterable, Literal, Protocol, Sequence

import yaml
from pydantic import ValidationError

from ...state.claims import BottleneckClass
from ...state.loop import (
    Catalog,
    Decision,
    EvidenceItem,
    FomSpec,
    GuardCheck,
    GuardResult,
    IterationRecord,
    Lever,
    LeverChange,
    LeverStatus,
    RunResult,
    VarianceClass,
    check_value,
)
from ...state.publish import append, publish
from ..errors import InputError

JOURNAL = "journal.jsonl"
KNOWN_BAD = "known_bad_nodes.txt"
BEST_CONFIG = "best_config.json"
CATALOG_UPDATED = "catalog.updated.yaml"
SUBMISSIONS = "submissions.jsonl"
LOOP_REPORT = "loop_report.md"

# --------------------------------------------------------------------------------------------
# catalog I/O


def _validation_line(e: ValidationError, source: str) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{source}: {loc}: {msg}" if loc else f"{source}: {msg}"


def parse_catalog(data: Any, source: str = "catalog") -> Catalog:
    """Validate a catalog given as data (the YAML mapping).

    Raises :class:`InputError` with one line naming the field, e.g. ``levers.2.change.env.X: value
    'a;b' has characters outside ...`` -- a lever value with shell metacharacters is refused here,
    before anything is submitted."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping at the top level")
    try:
        return Catalog.model_validate(data)
    except ValidationError as e:
        raise InputError(_validation_line(e, source)) from None


def load_catalog(path: str | os.PathLike[str]) -> Catalog:
    """Read and validate ``tools/levers/catalogs/<model>.yaml``. Raises :class:`InputError` (one line) for a
    missing file, bad YAML or an invalid catalog."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"lever catalog {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise InputError(f"lever catalog {p} is not valid YAML: {str(e).splitlines()[0]}") from None
    return parse_catalog(data, p.name)


def dump_catalog(catalog: Catalog, path: str | os.PathLike[str]) -> Path:
    """Write ``catalog`` as YAML (atomically, refusing a link: :func:`ai4s_graph.state.publish.publish`)."""
    p = Path(path)
    data = catalog.model_dump(mode="json", exclude_none=True)
    publish(p, yaml.safe_dump(data, sort_keys=False, width=110, allow_unicode=True))
    return p


def bundled_catalog(model: str) -> Path:
    """The catalog shipped for ``model`` (``tools/levers/catalogs/<model>.yaml``: ``hydragnn``, ``orbit2``,
    ``cpu-toy``). Raises :class:`InputError` when there is none."""
    p = Path(__file__).resolve().parent / "catalogs" / f"{model}.yaml"
    if not p.is_file():
        raise InputError(f"no bundled lever catalog for model {model!r} (looked for {p})")
    return p


# --------------------------------------------------------------------------------------------
# applying levers


def effective_change(catalog: Catalog, applied: Sequence[str], lever: str | None = None) -> LeverChange:
    """The baseline change, then every accepted lever in ``applied`` (in order), then ``lever``.

    Raises :class:`InputError` for an unknown lever name."""
    ch = catalog.baseline.change
    for name in [*applied, *([lever] if lever else [])]:
        try:
            ch = ch.merged(catalog.lever(name).change)
        except KeyError:
            raise InputError(f"lever {name!r} is not in the {catalog.model} catalog") from None
    return ch


def env_strings(change: LeverChange, extra: dict[str, Any] | None = None) -> dict[str, str]:
    """The change's environment as strings (``True``/``False`` -> ``1``/``0``), values
    re-checked against the safe pattern (:func:`~ai4s_graph.state.loop.check_value`)."""
    out: dict[str, str] = {}
    for k, v in {**change.env, **(extra or {})}.items():
        check_value(f"env {k}", v)
        out[k] = ("1" if v else "0") if isinstance(v, bool) else str(v)
    return out


def script_args_list(change: LeverChange) -> list[str]:
    """``{"--num-workers": 2, "--pin-memory": True, "--x": False}`` ->
    ``["--num-workers", "2", "--pin-memory"]`` (``False`` drops the flag)."""
    out: list[str] = []
    for k, v in change.script_args.items():
        check_value(f"script arg {k}", v)
        if v is True:
            out.append(k)
        elif v is False:
            continue
        else:
            out += [k, str(v)]
    return out


def sbatch_options_strings(change: LeverChange) -> dict[str, str]:
    """The change's ``#SBATCH`` options as strings."""
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in change.sbatch_options.items()}


def rendered_job(change: LeverChange) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[tuple[str, str], ...]]:
    """What a change puts into the job: (environment, workload arguments, ``#SBATCH`` options),
    each as rendered into the job script (:func:`env_strings`, :func:`script_args_list`,
    :func:`sbatch_options_strings`), sorted so two changes that render alike compare equal."""
    return (tuple(sorted(env_strings(change).items())), tuple(script_args_list(change)),
            tuple(sorted(sbatch_options_strings(change).items())))


def changes_nothing(catalog: Catalog, applied: Sequence[str], lever: str) -> bool:
    """True when ``lever`` on top of the baseline and the accepted levers ``applied`` renders the
    same job as without it (e.g. ``--detect-anomaly: false`` on a baseline that never passed the
    flag): such a run can only measure noise, and accepting it is a false accept (measured:
    reports/optimizer-2026-12-02, a no-op ``anomaly_detection_off`` beat the best by 33.5% on a
    bursty loader workload). An environment variable set to a value the job did not have before
    (``CUDA_LAUNCH_BLOCKING=0`` where it was unset) counts as a change: its default is the
    program's, not known here. Raises :class:`InputError` for an unknown lever name."""
    return rendered_job(effective_change(catalog, applied)) == rendered_job(effective_change(catalog, applied, lever))


def effective_variance(variance: VarianceClass | str, noise_pct: float, spec: FomSpec) -> VarianceClass:
    """The variance class a lever is judged with: its own, or ``high`` when the baseline's
    measured noise band (``noise_pct``, percent) is wider than lesson 9's replicate tolerance
    (``spec.replicate_tolerance_pct``, +-5 %): on a workload whose repeated baseline runs already
    differ by more than that, one run of any lever is not evidence, so every lever replicates
    before it is accepted (seed 000 lesson 9; measured: the worker-respawn baseline's two runs
    differed by 5.32%, and a single run of a no-op lever then read +33.5%)."""
    v = VarianceClass(variance)
    return VarianceClass.high if noise_pct > spec.replicate_tolerance_pct else v


def nominal_batch(catalog: Catalog, change: LeverChange) -> int | None:
    """The nominal global batch of a run: ``--batch-size`` when the change sets it, else the
    catalog's ``baseline.global_batch_size``."""
    for flag in ("--batch-size", "--batch_size"):
        v = change.script_args.get(flag)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
        if isinstance(v, str) and v.isdigit():
            return int(v)
    return catalog.baseline.global_batch_size


# --------------------------------------------------------------------------------------------
# picking


class LeverPicker(Protocol):
    """The seam where a picker plugs in (the rule picker below, or an LLM picker later).

    Called with the levers that may be tried (never blocked, baked-in, applied or already
    tried) and the loop context (``bottleneck``: the report's class or None, ``recommended``:
    lever names the report recommends, ``journal``: the records so far); returns one of
    ``candidates`` or None to stop."""

    def __call__(self, candidates: list[Lever], context: dict[str, Any]) -> Lever | None: ...


def blocked_mechanisms(catalog: Catalog) -> dict[str, str]:
    """Mechanism -> the ``blocked`` lever of ``catalog`` that implies it (``Lever.implies``; seed 000
    lesson 6: a blocked torch.compile blocks every lever that compiles, CUDA graphs through
    ``reduce-overhead`` included)."""
    out: dict[str, str] = {}
    for lv in catalog.levers:
        if lv.status == LeverStatus.blocked:
            for m in lv.implies:
                out.setdefault(m, lv.name)
    return out


def mechanism_blocked(catalog: Catalog, lever: Lever) -> str | None:
    """Why ``lever`` may not be tried although its own status allows it: it implies a mechanism a
    blocked lever of the catalog implies (:func:`blocked_mechanisms`); None otherwise."""
    mech = blocked_mechanisms(catalog)
    for m in lever.implies:
        if m in mech and mech[m] != lever.name:
            return f"implies {m}, blocked in the catalog through {mech[m]}"
    return None


def eligible_levers(catalog: Catalog, tried: Iterable[str] = (), applied: Iterable[str] = ()) -> list[Lever]:
    """Levers the loop may try: status ``candidate`` or ``experimental``, not tried, not applied,
    and implying no mechanism the catalog blocks (:func:`mechanism_blocked`)."""
    skip = set(tried) | set(applied)
    return [
        lv for lv in catalog.levers
        if lv.status in (LeverStatus.candidate, LeverStatus.experimental) and lv.name not in skip
        and mechanism_blocked(catalog, lv) is None
    ]


def rule_picker(candidates: list[Lever], context: dict[str, Any]) -> Lever | None:
    """The deterministic picker: a lever the report recommends first, then one whose ``targets``
    contain the report's bottleneck class, then ``candidate`` before ``experimental``; ties keep
    catalog order."""
    if not candidates:
        return None
    recommended = list(context.get("recommended") or [])
    klass = context.get("bottleneck")

    def rank(item: tuple[int, Lever]) -> tuple[int, int, int, int]:
        i, lv = item
        rec = recommended.index(lv.name) if lv.name in recommended else len(recommended)
        hit = 0 if klass and any(t.value == klass for t in lv.targets) else 1
        exp = 0 if lv.status == LeverStatus.candidate else 1
        return (rec, hit, exp, i)

    return min(enumerate(candidates), key=rank)[1]


def pick_lever(
    catalog: Catalog,
    tried: Iterable[str] = (),
    applied: Iterable[str] = (),
    *,
    bottleneck: str | BottleneckClass | None = None,
    recommended: Sequence[str] = (),
    journal: Sequence[dict[str, Any]] = (),
    picker: LeverPicker | None = None,
) -> Lever | None:
    """The next lever to try, or None when none is left.

    ``bottleneck``: the analysis report's ``bottleneck.klass`` (e.g. ``data-loader-bound``);
    ``recommended``: the report's lever names; ``picker``: replaces :func:`rule_picker`. A picker
    answer that is not one of the eligible levers raises :class:`InputError` (a picker can never
    resurrect a blocked lever)."""
    cands = eligible_levers(catalog, tried, applied)
    klass = bottleneck.value if isinstance(bottleneck, BottleneckClass) else bottleneck
    ctx = {"bottleneck": klass, "recommended": list(recommended), "journal": list(journal), "model": catalog.model}
    choice = (picker or rule_picker)(cands, ctx)
    if choice is None:
        return None
    if choice.name not in {c.name for c in cands}:
        raise InputError(f"picker chose {choice.name!r}, which is not an eligible lever (blocked, baked in or tried)")
    return choice


def read_report_hint(path: str | os.PathLike[str]) -> tuple[str | None, list[str]]:
    """From an analysis ``report.json``: (``bottleneck.klass``, recommended lever names).

    Raises :class:`InputError` for a missing or malformed file."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"report {p} does not exist")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"report {p} is not valid JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, dict):
        raise InputError(f"report {p}: expected a JSON object")
    klass = (data.get("bottleneck") or {}).get("klass")
    if klass is not None and klass not in {b.value for b in BottleneckClass}:
        raise InputError(f"report {p}: bottleneck.klass {klass!r} is not a known bottleneck class")
    if klass == BottleneckClass.unknown.value:
        klass = None
    levers = [str(x.get("name")) for x in (data.get("levers") or []) if isinstance(x, dict) and x.get("name")]
    return klass, levers


# --------------------------------------------------------------------------------------------
# numbers: improvement, noise, decision


def improvement_pct(value: float, best: float, direction: Literal["lower", "higher"]) -> float:
    """How much better ``value`` is than ``best``, in percent of ``best`` (positive = better).

    ``lower``: (best - value) / best; ``higher``: (value - best) / best."""
    if best == 0:
        raise ValueError("best FOM is zero")
    d = (best - value) if direction == "lower" else (value - best)
    return 100.0 * d / abs(best)


def spread_pct(values: Sequence[float]) -> float:
    """Run-to-run spread of repeated runs: (max - min) / mean, in percent (0 for one value)."""
    vals = [float(v) for v in values]
    if len(vals) < 2:
        return 0.0
    m = statistics.fmean(vals)
    return 100.0 * (max(vals) - min(vals)) / abs(m) if m else math.inf


def noise_band_pct(baseline_values: Sequence[float], spec: FomSpec) -> float:
    """The accept threshold: the baseline runs' spread (:func:`spread_pct`), never below
    ``spec.min_noise_pct``. Raises ``ValueError`` with fewer than two baseline runs (the baseline
    is measured at least twice)."""
    if len(baseline_values) < 2:
        raise ValueError("the baseline must be measured at least twice to know its spread")
    return max(spread_pct(baseline_values), spec.min_noise_pct)


Action = Literal["accept", "revert", "replicate", "replicate-disagrees"]


def decide(
    values: Sequence[float],
    best: float,
    noise_pct: float,
    spec: FomSpec,
    variance: VarianceClass | str = VarianceClass.normal,
) -> tuple[Action, str, float]:
    """Accept/revert rule for one lever's FOM values (one run, or a run and its replicate).

    Returns (action, why, delta_pct) where delta_pct is the improvement over ``best`` in percent
    (of the mean of the values). ``replicate``: a ``high``-variance lever beat the best once; run
    it again (lesson 9). With two values: ``replicate-disagrees`` when they differ by more than
    ``spec.replicate_tolerance_pct`` (+-5 %), else accept only when their mean beats the best by
    more than ``noise_pct``."""
    if not values:
        raise ValueError("no FOM values to decide on")
    name, direction = spec.primary, spec.direction
    variance = VarianceClass(variance)
    mean = statistics.fmean(values)
    delta = improvement_pct(mean, best, direction)
    word = "lower" if direction == "lower" else "higher"
    if len(values) >= 2:
        rep = spread_pct(values)
        if rep > spec.replicate_tolerance_pct:
            return ("replicate-disagrees",
                    f"high-variance lever: replicate {values[1]:.4g} vs first run {values[0]:.4g} differ by "
                    f"{rep:.1f}% > {spec.replicate_tolerance_pct:g}% (lesson 9)", delta)
    if delta <= noise_pct:
        verdict = "worse than" if delta < -noise_pct else "within the noise band of"
        return ("revert",
                f"{name} {mean:.4g} vs best {best:.4g}: {delta:+.2f}% ({word} is better) is {verdict} the best "
                f"(needs > +{noise_pct:.2f}%)", delta)
    if variance == VarianceClass.high and len(values) < 2:
        return ("replicate",
                f"{name} {mean:.4g} beats best {best:.4g} by {delta:+.2f}% > noise {noise_pct:.2f}%, but the lever "
                "is high-variance: re-run to replicate within 5% (lesson 9)", delta)
    rep_note = f"; replicate agrees within {spread_pct(values):.1f}%" if len(values) >= 2 else ""
    return ("accept",
            f"{name} {mean:.4g} beats best {best:.4g} by {delta:+.2f}% > noise band {noise_pct:.2f}%{rep_note}", delta)


# --------------------------------------------------------------------------------------------
# integrity guards: tools/levers/guards.py (re-exported here for the existing callers)

from .guards import integrity_guard, memory_of  # noqa: E402,F401


# --------------------------------------------------------------------------------------------
# catalog updates from the loop


def record_outcome(catalog: Catalog, record: IterationRecord) -> Catalog:
    """The catalog after one lever iteration (a new object; ``catalog`` is unchanged).

    ``accepted`` -> ``accepted-baked-in`` and its change merged into the baseline (the next loop
    starts from the best config, lesson 17); ``failed`` -> ``blocked`` with the verbatim error;
    every other decision appends evidence only (reverted / rejected-guard / replicate-disagrees /
    infra-failed keep their status: infra trouble never penalizes a lever, lesson 1)."""
    if record.kind != "lever" or not record.lever:
        return catalog
    cat = catalog.model_copy(deep=True)
    lv = cat.lever(record.lever)
    ev = EvidenceItem(jobs=list(record.job_ids), fom=record.fom_name, fom_delta_pct=record.delta_pct,
                      loop_id=record.loop_id, decision=record.decision.value, note=record.why[:400])
    if record.decision == Decision.failed:
        ev.error = record.runs[-1].error if record.runs and record.runs[-1].error else record.why
        lv.evidence.append(ev)
        lv.status = LeverStatus.blocked
    elif record.decision == Decision.accepted:
        lv.evidence.append(ev)
        lv.status = LeverStatus.accepted_baked_in
        cat.baseline.change = cat.baseline.change.merged(lv.change)
    else:
        lv.evidence.append(ev)
    return Catalog.model_validate(cat.model_dump())


# --------------------------------------------------------------------------------------------
# loop directory files


def append_journal(loop_dir: str | os.PathLike[str], record: IterationRecord) -> bool:
    """Append ``record`` to ``journal.jsonl`` unless a record of the same iteration is already
    there (a resumed loop re-running its record step). Returns True when it wrote."""
    p = Path(loop_dir) / JOURNAL
    for old in read_journal(loop_dir):
        if old.get("iteration") == record.iteration:
            return False
    append(p, record.model_dump_json() + "\n", sync=True)  # refuses a link
    return True


def read_journal(loop_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The journal's records, oldest first ([] when there is none); a torn last line (the loop
    was killed mid-write) is skipped."""
    p = Path(loop_dir) / JOURNAL
    if not p.is_file():
        return []
    out = []
    for line in p.read_text().splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def record_submission(loop_dir: str | os.PathLike[str], key: str, job_id: str, **extra: Any) -> None:
    """Ledger of every sbatch, written right after it returns (before the graph checkpoints),
    so a loop killed in between finds its job instead of submitting it again."""
    append(Path(loop_dir) / SUBMISSIONS, json.dumps({"key": key, "job_id": job_id, **extra}) + "\n",
           sync=True)  # refuses a link


def find_submission(loop_dir: str | os.PathLike[str], key: str) -> str | None:
    """The job id already submitted under ``key`` (see :func:`record_submission`), or None."""
    p = Path(loop_dir) / SUBMISSIONS
    if not p.is_file():
        return None
    found = None
    for line in p.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("key") == key:
            found = str(rec["job_id"])
    return found


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Write JSON atomically, refusing a link (:func:`ai4s_graph.state.publish.publish`)."""
    p = Path(path)
    publish(p, json.dumps(data, indent=2, default=str) + "\n")
    return p
