"""``ai4s-graph diff <run A> <run B>``: what changed between two analysed runs, and whether B is a
regression of A -- only when the two runs are comparable.

Inputs: two analysis output directories (``report.json``, ``foms.json``, ``manifest.json``, as
``ai4s-graph run --out`` writes them); the run's rank traces are found through the FOM claim's
evidence (the run directory of its ``train.log``) for the top-kernel table.

Compared: the figure of merit with its noise band, the GPU timeline rows, the top kernels by time
per profiled step, collectives, telemetry, every claim both reports make (the ones that moved
beyond the noise band are listed), and the bottleneck class.

Comparable means the optimizer's integrity guards pass (:mod:`ai4s_graph.tools.levers.guards`:
realized batch, batches per epoch, memory, partial steps, loss; seed 000 lessons 23, 29, 31) and
the model and nominal batch are the same; the node placement is noted (lessons 10, 18). An unlike
pair is refused with its reasons: its FOM delta is shown but never called a regression.

The FOM a verdict is taken on is the one definition shared with the optimizer and the log parser
(:mod:`ai4s_graph.state.fom`): the steady epoch time when both runs have a complete epoch free of
warm-up, else the steady step time (median step after warm-up). A pair where neither is free of
warm-up in both runs is refused, with each run's reason (the pair is dominated by warm-up). The
nominal and realized throughputs and the epoch time are listed beside it (``figures``); one that
moves beyond noise against the verdict FOM is a contradiction (``contradictions``).

Noise band: ``max(floor, 2 * sqrt(semA**2 + semB**2))``, sem each run's standard error of the
verdict FOM in percent of it (:func:`median_sem_pct`: the standard error of a median,
sqrt(pi/2) * sigma / sqrt(n), sigma from the median absolute deviation, 1.4826 * MAD, which holds
with up to half the values outlying: Rousseeuw & Croux, JASA 88 (1993) 1273). The values are the
steady epochs' times, or the steady step times re-read from the run's ``train.log`` with its own
warm-up count; when the log is out of reach, sigma ~ (p90 - p10) / 2.563 from ``foms.json``, which
holds with up to 10 % of outlying steps only (``noise_method`` says which). floor =
``FomSpec().min_noise_pct`` (2 %, the seed's noise-level deltas of +-1-3 %, lessons 22 and 24) or
``--noise-pct`` (e.g. a loop's measured baseline spread).

Exit code: 0 = comparable and no regression beyond noise; 1 = a regression beyond noise, or the
pair was refused as unlike (CI cannot certify it), or bad input.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...state.fom import FOM_DEFINITIONS, FomDefinition, steady_epochs, verdict_fom, warmup_reason
from ...state.loop import FomSpec
from ...state.publish import ensure_dir, publish_many
from ...state.status import one_line_all
from ..errors import Ai4sError, InputError
from ..jsonguard import load_file
from ..levers.catalog import improvement_pct
from ..levers.guards import integrity_guard, memory_from_telemetry
from .write import in_progress

#: sigma of a normal distribution = MAD x this (1 / Phi^-1(3/4); Rousseeuw & Croux 1993).
MAD_TO_SIGMA = 1.4826
#: standard error of a median = this x sigma / sqrt(n) (sqrt(pi/2): the median's asymptotic
#: efficiency 2/pi against the mean under a normal distribution).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2.0)
#: sigma of a normal distribution = (p90 - p10) / this (2 x 1.2816, the 90 % normal quantile).
P10_P90_TO_SIGMA = 2.563


#: From this factor up a change reads as a factor ("19.0× slower"), below it as a percentage ("5.0%
#: slower"): a presentation choice (a 1.3× change reads more plainly as "30% slower").
FACTOR_WORDS_FROM = 1.5


def change_words(va: float, vb: float, d: FomDefinition) -> dict[str, Any]:
    """B against A in words a reader cannot misread: ``time_ratio`` (B's time for the same work over
    A's: B/A for a time, A/B for a throughput), ``change_pct`` (B's value against A's, signed, in
    percent of A), ``words`` (``19.0× slower``, ``5.0% slower``, ``13.3% faster``, ``unchanged``) and
    ``text`` (``19.0× slower (+1800% step time)``, ``5.0% slower (-4.8% throughput)``; the percentage
    with one decimal under 100%). Raises
    ``ZeroDivisionError`` for a zero value (the caller checks)."""
    ratio = vb / va if d.direction == "lower" else va / vb
    pct = 100.0 * (vb - va) / abs(va)
    what = f"{d.per} time" if d.unit == "s" else ("realized throughput" if d.statistic == "ratio of sums" else "throughput")
    f = ratio if ratio >= 1 else 1.0 / ratio
    how = "slower" if ratio > 1 else "faster"
    if round(100.0 * (f - 1.0), 1) == 0.0:
        words = "unchanged"
    else:
        words = f"{f:.1f}× {how}" if f >= FACTOR_WORDS_FROM else f"{100.0 * (f - 1.0):.1f}% {how}"
    num = f"{pct:+.0f}" if abs(pct) >= 100 else f"{pct:+.1f}"
    return {"time_ratio": ratio, "change_pct": pct, "words": words, "text": f"{words} ({num}% {what})"}


@dataclass
class Side:
    """One analysed run: its directory, ``report.json``, ``foms.json``, ``manifest.json`` and the
    run directory of its inputs (None when the report does not say)."""

    path: Path
    report: dict[str, Any]
    foms: dict[str, Any]
    manifest: dict[str, Any]
    perf_run: Path | None = None
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: list[float] | None = None  # steady step times re-read from train.log (None: not reachable)
    steps_note: str = ""

    @property
    def jobid(self) -> str:
        return str(self.report.get("jobid") or self.manifest.get("jobid") or "?")


def _read(p: Path) -> dict[str, Any]:
    d = load_file(p)  # size, depth and string bounds first (tools/jsonguard.py); InputError otherwise
    if not isinstance(d, dict):
        raise InputError(f"{p}: expected a JSON object")
    return d


def _check_report(p: Path, rep: dict[str, Any]) -> None:
    """``report.json``'s shape against the report model (:class:`~ai4s_graph.state.report.Report`,
    what ``run`` writes; older schema versions validate: their missing fields have defaults).
    Raises InputError naming the first field that does not fit."""
    from pydantic import ValidationError

    from ...state.report import Report

    try:
        Report.model_validate(rep)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err.get("loc") or ()) or "(top level)"
        raise InputError(f"{p} is not an ai4s-graph report: {where}: {err.get('msg', 'invalid')} "
                         f"({e.error_count()} field(s) do not fit)") from None


def load_side(path: str | Path) -> Side:
    """Read one analysed run. Raises :class:`InputError` when ``report.json`` is missing (run
    ``ai4s-graph run`` on it first) or unreadable, or the folder is inconsistent: a run into it did
    not publish its report (:func:`~.write.in_progress`), or ``report.json`` and ``manifest.json``
    name different jobs, or ``report.json`` is not shaped as a report (:func:`_check_report`)."""
    d = Path(path)
    if not (d / "report.json").is_file():
        raise InputError(f"{d} is not an analysed run (no report.json): run `ai4s-graph run --perf-run ... --out {d}` first")
    mark = in_progress(d)
    if mark is not None:
        raise InputError(f"{d} is inconsistent: a run of job {mark.get('jobid') or '?'} into it did not finish "
                         "(manifest.json, foms.json newer than report.json); re-run it to finish")
    rep = _read(d / "report.json")
    _check_report(d / "report.json", rep)
    foms = _read(d / "foms.json") if (d / "foms.json").is_file() else {}
    man = _read(d / "manifest.json") if (d / "manifest.json").is_file() else {}
    if rep.get("jobid") is not None and man.get("jobid") is not None and str(rep["jobid"]) != str(man["jobid"]):
        raise InputError(f"{d} is inconsistent: report.json is job {rep['jobid']}'s, manifest.json job {man['jobid']}'s")
    claims = {}
    perf = None
    for vc in rep.get("claims") or []:
        c = vc.get("claim") or {}
        if c.get("id"):
            claims[c["id"]] = {"metric": c.get("metric"), "value": c.get("value"), "unit": c.get("unit"),
                               "verdict": vc.get("verdict"), "statement": c.get("statement")}
        for ev in c.get("evidence") or []:
            p = (ev.get("args") or {}).get("path")
            if perf is None and p and str(p).endswith("train.log") and Path(p).parent.is_dir():
                perf = Path(p).parent
    side = Side(d, rep, foms, man, perf, claims)
    side.steps, side.steps_note = steady_steps(side)
    return side


def steady_steps(s: Side) -> tuple[list[float] | None, str]:
    """The run's steady step times (s), re-read from its ``train.log`` (``foms.json`` ``source``, or
    the run directory's) with the parser, rank, format and warm-up count of its ``foms.json``; the
    re-read must give the same median step as ``foms.json`` (else the log changed since the
    analysis). Returns ``(steps or None, why not)``."""
    from ..trainlog.fom import parse_log

    f = s.foms
    cands = [Path(str(f["source"]))] if f.get("source") else []
    if s.perf_run is not None:
        cands.append(s.perf_run / "train.log")
    log = next((p for p in cands if p.is_file()), None)
    med = _num(f.get("steady_step_time_s"))
    if log is None or med is None:
        return None, "train.log out of reach" if log is None else "no steady step time in foms.json"
    try:
        r = parse_log(log, global_batch_size=f.get("global_batch_size"), rank=int(f.get("rank") or 0),
                      warmup_steps=int(f.get("warmup_steps_skipped") or 0), fmt=f.get("format"))
    except (Ai4sError, ValueError) as e:
        return None, f"{log.name} re-read failed: {e}"
    if not r.step_times_s or not math.isclose(statistics.median(r.step_times_s), med, rel_tol=1e-9):
        return None, f"{log} no longer gives foms.json's steady step time {med:g} s"
    return list(r.step_times_s), ""


def median_sem_pct(values: list[float]) -> float | None:
    """Standard error of the median of ``values``, in percent of it: sqrt(pi/2) x 1.4826 x MAD /
    sqrt(n) (module docstring). None with fewer than 3 values or a zero median."""
    if len(values) < 3:
        return None
    med = statistics.median(values)
    if not med:
        return None
    mad = statistics.median(abs(v - med) for v in values)
    return 100.0 * MEDIAN_SE_FACTOR * MAD_TO_SIGMA * mad / abs(med) / math.sqrt(len(values))


def _sem_pct(s: Side, name: str | None) -> tuple[float | None, str]:
    """(standard error of FOM ``name`` of run ``s`` in percent, how it was estimated)."""
    f = s.foms
    if name == "epoch_time_s":
        ep = [float(x) for x in (f.get("epoch_times_s") or []) if _num(x) is not None]
        steady = ep[len(ep) - steady_epochs(f):] if steady_epochs(f) else []
        return median_sem_pct(steady), f"MAD of the {len(steady)} steady epoch times"
    if s.steps is not None:
        return median_sem_pct(s.steps), f"MAD of the {len(s.steps)} steady step times (train.log re-read)"
    p10, p90, med = (_num(f.get(k)) for k in ("step_time_p10_s", "step_time_p90_s", "steady_step_time_s"))
    n = steady_epochs(f) if f.get("format") == "hydragnn_tqdm" else \
        int(_num(f.get("n_timed_steps")) or 0) - int(_num(f.get("warmup_steps_skipped")) or 0)
    if p10 is None or p90 is None or not med or n < 3:
        return None, "not estimated (fewer than 3 steady values)"
    return (100.0 * MEDIAN_SE_FACTOR * ((p90 - p10) / P10_P90_TO_SIGMA) / med / math.sqrt(n),
            f"p10-p90 of the {n} steady step times (foms.json; {s.steps_note})")


def _num(v: Any) -> float | None:
    """A finite number as a float, else None (a bool, a string, an integer beyond the float range)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return f if math.isfinite(f) else None


def _guard_fom(s: Side) -> dict[str, Any]:
    f = dict(s.foms)
    for k in ("global_batch_size", "hbm_reserved_bytes", "peak_rss_bytes"):
        if f.get(k) is None and s.manifest.get(k) is not None:
            f[k] = s.manifest[k]
    if s.perf_run is not None:
        for k, v in memory_from_telemetry(s.perf_run).items():
            f.setdefault(k, v)
    return f


#: Bytes per element of each precision a manifest names (``manifest.precision``), for the memory
#: direction of a precision pair (IEEE 754 binary64/32/16, bfloat16, TF32 stored in 4 bytes, FP8).
PRECISION_BYTES = {"fp64": 8, "float64": 8, "fp32": 4, "float32": 4, "tf32": 4, "bf16": 2, "bfloat16": 2,
                   "fp16": 2, "float16": 2, "fp8": 1}


def precision_memory(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The ``memory`` direction (:class:`~ai4s_graph.state.loop.MemoryEffect` value) of B against A
    from their manifests' ``precision``: a wider dtype in B ``grows`` its memory on purpose, a narrower
    one ``saves`` it (issue 27 report 5 point 6: the precision pair 92001 fp32 / 92004 fp64 was held
    to "same memory"); ``same`` when the precisions are equal or either is unknown."""
    pa = PRECISION_BYTES.get(str(a.get("precision") or "").lower())
    pb = PRECISION_BYTES.get(str(b.get("precision") or "").lower())
    if pa is None or pb is None or pa == pb:
        return "same"
    return "grows" if pb > pa else "saves"


def comparability(a: Side, b: Side) -> tuple[bool, list[str], list[dict[str, Any]], dict[str, Any]]:
    """(comparable, reasons refused, guard checks, placement). Same model and nominal batch, and
    the optimizer's integrity guards (B checked against A; memory in the direction of a precision
    pair, :func:`precision_memory`)."""
    reasons = []
    ma = a.manifest.get("workload_model") or a.manifest.get("model") or a.report.get("model")
    mb = b.manifest.get("workload_model") or b.manifest.get("model") or b.report.get("model")
    if ma != mb:
        reasons.append(f"different models ({ma} vs {mb})")
    fa, fb = _guard_fom(a), _guard_fom(b)
    ga, gb = _num(fa.get("global_batch_size")), _num(fb.get("global_batch_size"))
    if ga != gb:
        reasons.append(f"different nominal batch ({ga} vs {gb}): a throughput or epoch-time delta is not like for like")
    g = integrity_guard({"fom": fb, "nodes_list": b.manifest.get("nodes_list") or []},
                        {"fom": fa, "nodes_list": a.manifest.get("nodes_list") or []}, FomSpec(),
                        memory=precision_memory(a.manifest, b.manifest))
    reasons += [c.why for c in g.checks if not c.passed]
    na, nb = sorted(a.manifest.get("nodes_list") or []), sorted(b.manifest.get("nodes_list") or [])
    placement = {"a": na, "b": nb, "same": na == nb,
                 "note": ("same nodes" if na == nb else
                          "different nodes: placement noted; no node-class conclusion (lessons 10, 18)")}
    checks = [{"name": c.name, "verdict": c.verdict, "why": c.why} for c in g.checks]
    return not reasons, reasons, checks, placement


def _claim_rows(a: Side, b: Side, band: float) -> list[dict[str, Any]]:
    rows = []
    for cid in sorted(set(a.claims) & set(b.claims)):
        ca, cb = a.claims[cid], b.claims[cid]
        va, vb = _num(ca["value"]), _num(cb["value"])
        row = {"id": cid, "metric": ca.get("metric"), "unit": ca.get("unit"), "a": ca["value"], "b": cb["value"],
               "verdict_a": ca.get("verdict"), "verdict_b": cb.get("verdict")}
        if va is not None and vb is not None:
            if ca.get("unit") == "%":
                row["change"] = vb - va
                row["change_unit"] = "pp"
            else:
                row["change"] = 100.0 * (vb - va) / abs(va) if va else (0.0 if vb == va else math.inf)
                row["change_unit"] = "%"
            both = ca.get("verdict") == "confirmed" and cb.get("verdict") == "confirmed"
            row["moved"] = bool(both and abs(row["change"]) > band)
        else:
            row["moved"] = ca["value"] != cb["value"] and ca.get("verdict") == cb.get("verdict") == "confirmed"
        rows.append(row)
    return rows


def _top_kernels(s: Side, top: int) -> tuple[dict[str, float], str | None]:
    """Kernel name -> µs per profiled step (rank 0's trace), or ({}, why not)."""
    if s.perf_run is None:
        return {}, "run directory unknown"
    traces = sorted(s.perf_run.glob("traces/*rank0*.json*")) or sorted(s.perf_run.glob("traces/*.json*"))
    if not traces:
        return {}, "no trace"
    from ..trace.stream import kernel_counts, scan_trace

    scan = scan_trace(traces[0])
    steps = max(1, len(scan.steps))
    return {r["name"]: r["total_us"] / steps for r in kernel_counts(scan, top=top)}, None


def _slowest(s: Side) -> dict[str, Any] | None:
    if not s.steps:
        return None
    m = max(s.steps)
    return {"slowest_step_s": m, "share_of_steady_time_pct": 100.0 * m / sum(s.steps)}


def _figures(a: Side, b: Side, name: str | None, imp: float | None,
             band: float, verdict_words: str = "") -> tuple[list[dict[str, Any]], list[str]]:
    """Every FOM both runs have, with its change and whether it is free of warm-up; and the
    contradictions: a warm-up-free FOM that moves beyond noise against the verdict FOM (or beyond
    noise while the verdict FOM does not); ``verdict_words``: the verdict FOM's change in words."""
    rows, contra = [], []
    verdict_moved = imp is not None and abs(imp) > band
    for n, d in FOM_DEFINITIONS.items():
        va, vb = _num(a.foms.get(n)), _num(b.foms.get(n))
        if va is None or vb is None or not va:
            continue
        wa, wb = warmup_reason(n, a.foms), warmup_reason(n, b.foms)
        ch = improvement_pct(vb, va, d.direction)
        row = {"name": n, "a": va, "b": vb, "unit": d.unit, "direction": d.direction, "statistic": d.statistic,
               "improvement_pct": ch, "change": change_words(va, vb, d), "verdict_fom": n == name,
               "warmup": {"a": wa, "b": wb}}
        if d.statistic == "ratio of sums":
            row["slowest"] = {"a": _slowest(a), "b": _slowest(b)}
        rows.append(row)
        if n == name or wa or wb or imp is None or abs(ch) <= band:
            continue
        if verdict_moved and (ch > 0) == (imp > 0):
            continue
        what = (f"{n} ({d.meaning}) is {row['change']['text']} while {name} is {verdict_words} (noise band "
                f"{band:.2f}%)")
        if d.statistic == "ratio of sums":
            sa, sb = row["slowest"]["a"], row["slowest"]["b"]
            what += (": a ratio of sums weighs the slowest steady steps in full" +
                     (f" (A {sa['slowest_step_s']:.4g} s = {sa['share_of_steady_time_pct']:.0f}% of its steady time, "
                      f"B {sb['slowest_step_s']:.4g} s = {sb['share_of_steady_time_pct']:.0f}%)" if sa and sb else "") +
                     "; look at those steps (a trace export, a checkpoint, a data wait)")
        contra.append(what)
    return rows, contra


def compare(a: Side, b: Side, *, noise_pct: float | None = None, top: int = 10) -> dict[str, Any]:
    """The diff of B against A as a JSON-able dict (see module doc); ``verdict`` is
    ``improvement``, ``within-noise``, ``regression`` or ``not-comparable``; ``exit_code`` 0/1."""
    floor = noise_pct if noise_pct is not None else FomSpec().min_noise_pct
    name, notes = verdict_fom(a.foms, b.foms)
    (sem_a, how_a), (sem_b, how_b) = _sem_pct(a, name), _sem_pct(b, name)
    sems = [x for x in (sem_a, sem_b) if x is not None]
    band = max(floor, 2.0 * math.sqrt(sum(x * x for x in sems))) if len(sems) == 2 else floor
    comparable, reasons, checks, placement = comparability(a, b)
    fom: dict[str, Any] = {"name": name, "noise_pct": band, "noise_floor_pct": floor,
                           "sem_pct": {"a": sem_a, "b": sem_b}, "noise_method": {"a": how_a, "b": how_b},
                           "declared": {"a": a.foms.get("primary_fom_name"), "b": b.foms.get("primary_fom_name")},
                           "why": notes}
    verdict = "within-noise"
    if name:
        d = FOM_DEFINITIONS[name]
        va, vb = float(a.foms[name]), float(b.foms[name])
        imp = improvement_pct(vb, va, d.direction) if va else 0.0
        fom.update(a=va, b=vb, direction=d.direction, unit=d.unit, meaning=d.meaning, improvement_pct=imp,
                   beyond_noise=abs(imp) > band, change=change_words(va, vb, d) if va and vb else None)
        if abs(imp) > band:
            verdict = "improvement" if imp > 0 else "regression"
    elif any(_num(x.foms.get(k)) is not None for x in (a, b) for k in FOM_DEFINITIONS):
        warm = all("warm-up" in n or "steady state" in n for n in notes)
        reasons.append(("dominated by warm-up: no figure of merit is free of warm-up in both runs (" if warm else
                        "no steady-state figure of merit in both runs (") + "; ".join(notes) + ")")
        comparable = False
    else:
        reasons.append("no figure of merit in both runs")
        comparable = False
    if not comparable:
        verdict = "not-comparable"
    figures, contradictions = _figures(a, b, name, fom.get("improvement_pct"), band,
                                       (fom.get("change") or {}).get("words", ""))
    if not comparable:  # an unlike pair is refused: nothing is read off it, not even a contradiction
        contradictions = []
    rows = _claim_rows(a, b, band)
    tk_a, why_a = _top_kernels(a, top)
    tk_b, why_b = _top_kernels(b, top)
    kernels = []
    for k in list(dict.fromkeys([*tk_a, *tk_b]))[: 2 * top]:
        x, y = tk_a.get(k), tk_b.get(k)
        kernels.append({"name": k, "a_us_per_step": x, "b_us_per_step": y,
                        "change_pct": (100.0 * (y - x) / x) if x and y is not None else None})
    ba, bb = (a.report.get("bottleneck") or {}).get("klass"), (b.report.get("bottleneck") or {}).get("klass")
    return {
        "a": {"dir": str(a.path), "jobid": a.jobid, "nodes_list": placement["a"], "perf_run": str(a.perf_run or "")},
        "b": {"dir": str(b.path), "jobid": b.jobid, "nodes_list": placement["b"], "perf_run": str(b.perf_run or "")},
        "comparable": comparable, "refused": reasons, "guards": checks, "placement": placement,
        "fom": fom, "figures": figures, "contradictions": contradictions,
        "bottleneck": {"a": ba, "b": bb, "moved": ba != bb},
        "timeline": [r for r in rows if str(r.get("metric") or "").startswith("gpu_timeline.")],
        "collectives": [r for r in rows if str(r.get("metric") or "").startswith(("collectives.", "busbw", "comm"))],
        "telemetry": [r for r in rows if str(r.get("metric") or "").startswith("telemetry.")],
        "claims_moved": [r for r in rows if r.get("moved")],
        "claims": rows,
        "top_kernels": kernels, "top_kernels_missing": {"a": why_a, "b": why_b},
        "verdict": verdict, "exit_code": 1 if verdict in ("regression", "not-comparable") else 0,
    }


def status_reason(d: dict[str, Any]) -> tuple[str, str]:
    """(STATUS outcome, reason) of a diff: a refused pair says only that it was refused and the
    heads of its reasons (each reason up to its first ``": "``; diff.md has them whole); else the
    verdict, the verdict FOM's change in words (:func:`change_words`) and the noise band."""
    if d["verdict"] == "not-comparable":
        heads = "; ".join(dict.fromkeys(r.split(": ", 1)[0] for r in d["refused"]))
        return "partial", f"not comparable, no regression claimed: {heads}"
    f = d["fom"]
    head = (f"{f['name']} {f['change']['text']}, noise band {f['noise_pct']:.2f}%" if f.get("change") else "no FOM")
    return ("ok" if d["exit_code"] == 0 else "fail"), (f"{d['verdict']}: {head}; {len(d['claims_moved'])} claims "
                                                       "moved beyond noise")


def _f(v: Any, nd: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)


def render_md(d: dict[str, Any]) -> str:
    """``diff.md`` from the jinja2 template ``templates/diff.md.j2``: verdict first, then the FOM,
    the other figures of merit, contradictions, comparability, bottleneck, moved claims, the
    timeline, top kernels, collectives and telemetry tables. Every string from the two reports is
    made one line first (:func:`ai4s_graph.state.status.one_line`: control characters escaped).
    Raises ``jinja2.TemplateError`` for a broken template."""
    from .templating import render

    return render("diff.md.j2", d=one_line_all(d), f=_f)


def default_out(b: Side, a: Side) -> Path:
    """``<B>/diff-<A's job id>``, the id cut to the characters of a file name (a report's
    ``jobid`` is the user's data: ``../..`` must not lead outside B)."""
    return b.path / ("diff-" + (re.sub(r"[^A-Za-z0-9._-]", "_", a.jobid).lstrip(".") or "run"))


def write_diff(d: dict[str, Any], out: str | Path, root: str | Path | None = None) -> tuple[Path, Path]:
    """Write ``diff.md`` and ``diff.json`` into ``out`` together and atomically, refusing links
    (:func:`ai4s_graph.state.publish.publish_many`; ``root``: the folder ``out`` lies under, whose
    sub-folders are checked too). Returns their paths. Raises
    :class:`~ai4s_graph.state.publish.UnsafePathError` or ``OSError``."""
    o = Path(out)
    ensure_dir(o, root if root is not None else o)
    publish_many([(o / "diff.json", json.dumps(d, indent=1, default=str) + "\n"), (o / "diff.md", render_md(d))],
                 root=root if root is not None else o)
    return o / "diff.md", o / "diff.json"
