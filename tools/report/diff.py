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

The FOM is the one the runs' parser declared (``foms.json`` ``primary_fom_name``: epoch time
for latency work, throughput otherwise; lessons 5, 31). Noise band of the FOM:
``max(floor, 2 * sqrt(semA**2 + semB**2))`` where sem is each run's standard error of that FOM in
percent (:func:`_sem_pct`); floor = ``FomSpec().min_noise_pct`` (2 %, the seed's noise-level deltas of +-1-3 %,
lessons 22 and 24) or ``--noise-pct`` (e.g. a loop's measured baseline spread).

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

from ...state.loop import FOM_DIRECTIONS, FomSpec
from ...state.publish import ensure_dir, publish_many
from ...state.status import one_line_all
from ..errors import InputError
from ..jsonguard import load_file
from ..levers.guards import integrity_guard, memory_from_telemetry

FOM_ORDER = ("epoch_time_s", "steady_step_time_s", "throughput_samples_per_s")


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

    @property
    def jobid(self) -> str:
        return str(self.report.get("jobid") or self.manifest.get("jobid") or "?")


def _read(p: Path) -> dict[str, Any]:
    d = load_file(p)  # size, depth and string bounds first (tools/jsonguard.py); InputError otherwise
    if not isinstance(d, dict):
        raise InputError(f"{p}: expected a JSON object")
    return d


def load_side(path: str | Path) -> Side:
    """Read one analysed run. Raises :class:`InputError` when ``report.json`` is missing (run
    ``ai4s-graph run`` on it first) or unreadable."""
    d = Path(path)
    if not (d / "report.json").is_file():
        raise InputError(f"{d} is not an analysed run (no report.json): run `ai4s-graph run --perf-run ... --out {d}` first")
    rep = _read(d / "report.json")
    foms = _read(d / "foms.json") if (d / "foms.json").is_file() else {}
    man = _read(d / "manifest.json") if (d / "manifest.json").is_file() else {}
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
    return Side(d, rep, foms, man, perf, claims)


def _sem_pct(foms: dict[str, Any], name: str | None = "epoch_time_s") -> float | None:
    """Standard error of the FOM in percent: for ``epoch_time_s`` from the steady epochs' times
    (first epoch skipped); for the step-based FOMs (steady step time, throughput = batch / median
    step time) from the step-time spread: sigma ~ (p90 - p10) / 2.563 (normal quantiles), the
    median's standard error ~ 1.253 sigma / sqrt(n) (asymptotic efficiency of the median)."""
    if name == "epoch_time_s":
        ep = [float(x) for x in (foms.get("epoch_times_s") or []) if isinstance(x, (int, float))][1:]
        if len(ep) >= 3:
            m = statistics.fmean(ep)
            return 100.0 * statistics.stdev(ep) / m / math.sqrt(len(ep)) if m else None
    p10, p90, med = (_num(foms.get(k)) for k in ("step_time_p10_s", "step_time_p90_s", "steady_step_time_s"))
    n = (_num(foms.get("n_timed_steps")) or 0) - (_num(foms.get("warmup_steps_skipped")) or 0)
    if p10 is None or p90 is None or not med or n < 3:
        return None
    return 100.0 * 1.253 * ((p90 - p10) / 2.563) / med / math.sqrt(n)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _guard_fom(s: Side) -> dict[str, Any]:
    f = dict(s.foms)
    for k in ("global_batch_size", "hbm_reserved_bytes", "peak_rss_bytes"):
        if f.get(k) is None and s.manifest.get(k) is not None:
            f[k] = s.manifest[k]
    if s.perf_run is not None:
        for k, v in memory_from_telemetry(s.perf_run).items():
            f.setdefault(k, v)
    return f


def comparability(a: Side, b: Side) -> tuple[bool, list[str], list[dict[str, Any]], dict[str, Any]]:
    """(comparable, reasons refused, guard checks, placement). Same model and nominal batch, and
    the optimizer's integrity guards (B checked against A)."""
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
                        {"fom": fa, "nodes_list": a.manifest.get("nodes_list") or []}, FomSpec())
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


def compare(a: Side, b: Side, *, noise_pct: float | None = None, top: int = 10) -> dict[str, Any]:
    """The diff of B against A as a JSON-able dict (see module doc); ``verdict`` is
    ``improvement``, ``within-noise``, ``regression`` or ``not-comparable``; ``exit_code`` 0/1."""
    floor = noise_pct if noise_pct is not None else FomSpec().min_noise_pct
    declared = a.foms.get("primary_fom_name")
    if declared in FOM_DIRECTIONS and declared == b.foms.get("primary_fom_name") and \
            _num(a.foms.get(declared)) is not None and _num(b.foms.get(declared)) is not None:
        name = declared  # the FOM the runs' own parser chose (lessons 5, 31)
    else:
        name = next((k for k in FOM_ORDER if _num(a.foms.get(k)) is not None and _num(b.foms.get(k)) is not None), None)
    sems = [x for x in (_sem_pct(a.foms, name), _sem_pct(b.foms, name)) if x is not None]
    band = max(floor, 2.0 * math.sqrt(sum(x * x for x in sems))) if len(sems) == 2 else floor
    comparable, reasons, checks, placement = comparability(a, b)
    fom: dict[str, Any] = {"name": name, "noise_pct": band, "noise_floor_pct": floor,
                           "sem_pct": {"a": _sem_pct(a.foms, name), "b": _sem_pct(b.foms, name)}}
    verdict = "within-noise"
    if name:
        va, vb = float(a.foms[name]), float(b.foms[name])
        better = (va - vb) if FOM_DIRECTIONS[name] == "lower" else (vb - va)
        imp = 100.0 * better / abs(va) if va else 0.0
        fom.update(a=va, b=vb, direction=FOM_DIRECTIONS[name], improvement_pct=imp,
                   beyond_noise=abs(imp) > band)
        if abs(imp) > band:
            verdict = "improvement" if imp > 0 else "regression"
    else:
        reasons.append("no figure of merit in both runs")
        comparable = False
    if not comparable:
        verdict = "not-comparable"
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
        "fom": fom, "bottleneck": {"a": ba, "b": bb, "moved": ba != bb},
        "timeline": [r for r in rows if str(r.get("metric") or "").startswith("gpu_timeline.")],
        "collectives": [r for r in rows if str(r.get("metric") or "").startswith(("collectives.", "busbw", "comm"))],
        "telemetry": [r for r in rows if str(r.get("metric") or "").startswith("telemetry.")],
        "claims_moved": [r for r in rows if r.get("moved")],
        "claims": rows,
        "top_kernels": kernels, "top_kernels_missing": {"a": why_a, "b": why_b},
        "verdict": verdict, "exit_code": 1 if verdict in ("regression", "not-comparable") else 0,
    }


def _f(v: Any, nd: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)


def render_md(d: dict[str, Any]) -> str:
    """``diff.md``: verdict first, then the FOM, comparability, bottleneck, moved claims, the
    timeline, top kernels, collectives and telemetry tables. Every string from the two reports is
    made one line first (:func:`ai4s_graph.state.status.one_line`: control characters escaped)."""
    d = one_line_all(d)
    a, b, f = d["a"], d["b"], d["fom"]
    lines = [f"# Diff: job {b['jobid']} (B) against job {a['jobid']} (A)", "",
             f"**Verdict: {d['verdict']}** (exit {d['exit_code']})", ""]
    if not d["comparable"]:
        lines += ["Refused: these runs are not like for like, so no difference between them is called a regression:", ""]
        lines += [f"- {r}" for r in d["refused"]] + [""]
    if f.get("name"):
        lines += [f"- FOM `{f['name']}` ({f['direction']} is better): A {_f(f['a'])}, B {_f(f['b'])}; "
                  f"B is {f['improvement_pct']:+.2f}% {'better' if f['improvement_pct'] > 0 else 'worse'}; noise band "
                  f"{f['noise_pct']:.2f}% (floor {f['noise_floor_pct']:g}%, standard errors of the FOM "
                  f"{_f(f['sem_pct']['a'], 3)}% / {_f(f['sem_pct']['b'], 3)}%)"]
    lines += [f"- Placement: A {','.join(a['nodes_list']) or '?'}; B {','.join(b['nodes_list']) or '?'} -- "
              f"{d['placement']['note']}",
              f"- Bottleneck: A {d['bottleneck']['a']}, B {d['bottleneck']['b']}"
              f"{' (moved)' if d['bottleneck']['moved'] else ''}",
              "- Guards: " + "; ".join(f"{g['name']} {g['verdict']}" for g in d["guards"]), ""]

    def table(title: str, rows: list[dict[str, Any]]) -> None:
        lines.extend([f"## {title}", ""])
        if not rows:
            lines.extend(["(none in both reports)", ""])
            return
        lines.extend(["| claim | metric | A | B | change | moved beyond noise |", "|---|---|---:|---:|---:|---|"])
        for r in rows:
            ch = f"{r['change']:+.2f} {r['change_unit']}" if r.get("change") is not None else "-"
            lines.append(f"| {r['id']} | {r['metric']} | {_f(r['a'])} | {_f(r['b'])} | {ch} | {'yes' if r['moved'] else 'no'} |")
        lines.append("")

    table("Claims that moved beyond noise", d["claims_moved"])
    table("GPU timeline", d["timeline"])
    lines += ["## Top kernels (µs per profiled step, rank 0)", ""]
    if d["top_kernels"]:
        lines += ["| kernel | A | B | change % |", "|---|---:|---:|---:|"]
        for k in d["top_kernels"]:
            lines.append(f"| `{k['name'][:80].replace('|', '/')}` | {_f(k['a_us_per_step'])} | {_f(k['b_us_per_step'])} | "
                         f"{_f(k['change_pct'], 3)} |")
    else:
        lines.append(f"(not available: A {d['top_kernels_missing']['a']}, B {d['top_kernels_missing']['b']})")
    lines.append("")
    table("Collectives", d["collectives"])
    table("Telemetry", d["telemetry"])
    return "\n".join(lines)


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
