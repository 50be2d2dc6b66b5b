"""The engine against TraceLens's own perf reports, every row: gpu_timeline, ops_summary_by_category,
kernel_summary, ops_summary and short_kernels_summary.

Default input: TraceLens's five H100 traces with the CSV reports TraceLens wrote beside them
(``<data>/traces/tracelens-h100/<name>.json.gz`` and ``<name>_perf_report_csvs/``; their owner does not
allow copying them into the repository, so this is a bench, not a test). ``--in-repo`` compares the
bundled traces against ``tests/data/tracelens-ref`` instead (what tests/test_tracelens.py holds).

Usage, from the repository root::

    python bench/tracelens_agreement.py --data ../shared/data
    python bench/tracelens_agreement.py --in-repo

Tolerances (the tests' own): a gpu_timeline row within 1e-4 ms (0.1 µs); an ops_summary_by_category
row with the same launcher count and its kernel time within 1e-4 ms; every number of a kernel_summary,
ops_summary or short_kernels_summary row within 1e-6 relative (1e-9 absolute), the same set of row
keys, the same columns in the same order. A trace recorded without ``record_shapes`` gets from TraceLens
an empty short_kernels_summary with a two-level header (pandas drops every row whose group key is NaN);
ours has no row either, and that counts as agreement.

Prints one markdown table (a row per trace) and ``STATUS=ok|fail; reason=...``. Exit status: 0 when
every row of every trace agrees, 1 on a disagreement (the first differing row of each sheet is
printed), 2 when the input is missing or unreadable.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's ai4s_graph, as bench/bench_parse.py

TIMELINE_TOL_MS = 1e-4
REL, ABS = 1e-6, 1e-9
SHEETS = {
    "kernel_summary": (("Parent op category", "Parent cpu_op", "Kernel name", "Kernel stream"),
                       ("Kernel duration (µs)_sum", "Kernel duration (µs)_count", "Kernel duration (µs)_mean",
                        "Kernel duration (µs)_min", "Kernel duration (µs)_max", "Percent of kernels time (%)",
                        "Percent of total time (%)")),
    "ops_summary": (("name",), ("total_direct_kernel_time_sum", "total_subtree_kernel_time_sum", "Count",
                                "Percentage (%)")),
    "short_kernels_summary": (("Parent cpu_op", "Input dims", "Input strides", "Concrete Inputs", "Kernel name"),
                              ("Short Kernel duration (µs) sum", "Short Kernel count",
                               "Short Kernel duration (µs) percent of total time")),
}


def _read(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


def _close(a: str, b: str) -> bool:
    x, y = float(a), float(b)
    return abs(x - y) <= REL * abs(y) + ABS


def compare_sheet(ours: Path, theirs: Path, sheet: str) -> tuple[int, int, str | None]:
    """(rows agreeing, TraceLens's rows, first difference or None) for one sheet."""
    keys, nums = SHEETS[sheet]
    ocols, orows = _read(ours / f"{sheet}.csv")
    tcols, trows = _read(theirs / f"{sheet}.csv")
    if sheet == "short_kernels_summary" and tcols[:1] == ["Kernel duration (µs)"] and not trows[1:]:
        # TraceLens's empty frame (no shapes recorded): its second header line is read as one row
        return (0, 0, None) if not orows else (0, 0, f"TraceLens has no row, ours {len(orows)}")
    if ocols != tcols:
        return 0, len(trows), f"columns differ: {ocols} vs {tcols}"
    o = {tuple(r[k] for k in keys): r for r in orows}
    t = {tuple(r[k] for k in keys): r for r in trows}
    first = None
    if set(o) != set(t):
        extra, missing = sorted(set(o) - set(t))[:1], sorted(set(t) - set(o))[:1]
        first = f"row keys differ (only ours {extra}, only TraceLens {missing})"
    good = 0
    for k, r in t.items():
        if k not in o:
            continue
        bad = [c for c in nums if not _close(o[k][c], r[c])]
        if sheet == "ops_summary" and o[k]["Categories"] != r["Categories"]:
            bad.append("Categories")
        if bad:
            first = first or f"{k[:2]} {bad[0]}: ours {o[k][bad[0]]}, TraceLens {r[bad[0]]}"
        else:
            good += 1
    return good, len(t), first


def compare_trace(trace: Path, ref: Path) -> dict:
    """Every sheet of one trace: a dict of the table's cells plus ``ok`` and ``diffs``."""
    from ai4s_graph.tools.trace import tables, tracelens_sheets

    analysis, rows = tracelens_sheets.analyze_with_sheets(trace)
    out: dict = {"trace": ref.name.replace("_perf_report_csvs", ""), "diffs": []}
    _, tl_rows = _read(ref / "gpu_timeline.csv")
    tl = {r["type"]: float(r["time ms"]) for r in tl_rows}
    worst = max(abs(analysis.timeline[k].time_ms - v) for k, v in tl.items())
    out["timeline"] = f"{len(tl)} rows, max {worst * 1e3:.3f} µs"
    if worst > TIMELINE_TOL_MS or set(tl) - set(analysis.timeline):
        out["diffs"].append(f"gpu_timeline: max row difference {worst * 1e3:.3f} µs")
    _, cat_rows = _read(ref / "ops_summary_by_category.csv")
    cats = {r["op category"]: (int(r["Count"]), float(r["total_direct_kernel_time_ms"])) for r in cat_rows}
    got = {r.category: (r.count, r.kernel_time_ms) for r in analysis.ops_by_category}
    cat_ok = sum(1 for c, (n, ms) in cats.items()
                 if c in got and got[c][0] == n and abs(got[c][1] - ms) <= TIMELINE_TOL_MS)
    out["ops_summary_by_category"] = f"{cat_ok}/{len(cats)}"
    if cat_ok != len(cats) or set(got) != set(cats):
        out["diffs"].append(f"ops_summary_by_category: ours {got}, TraceLens {cats}")
    with tempfile.TemporaryDirectory() as tmp:
        tables.write_tables(tmp, analysis, rows)
        for sheet in SHEETS:
            good, n, first = compare_sheet(Path(tmp), ref, sheet)
            out[sheet] = f"{good}/{n}"
            if first:
                out["diffs"].append(f"{sheet}: {first}")
    out["ok"] = not out["diffs"]
    return out


def cases(args) -> list[tuple[Path, Path]]:
    """(trace, TraceLens's CSV folder) pairs; raises FileNotFoundError naming what is missing."""
    if args.in_repo:
        refs = REPO / "tests" / "data" / "tracelens-ref"
        out = []
        for d in sorted(refs.glob("*_rank*_perf_report_csvs")):
            job, rank = d.name.split("_perf_report_csvs")[0].split("_rank")
            out.append((REPO / "examples" / "perf-runs" / job / "traces" / f"trace_rank{rank}.json.gz", d))
    else:
        d = Path(args.data) / "traces" / "tracelens-h100"
        if not d.is_dir():
            raise FileNotFoundError(f"{d} not found (pass --data <shared data folder>)")
        out = [(t, d / f"{t.name[:-len('.json.gz')]}_perf_report_csvs") for t in sorted(d.glob("*.json.gz"))]
    if not out:
        raise FileNotFoundError("no trace with a TraceLens report found")
    for t, r in out:
        if not t.is_file() or not (r / "gpu_timeline.csv").is_file():
            raise FileNotFoundError(f"{t if not t.is_file() else r / 'gpu_timeline.csv'} not found")
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns the exit status (0 agree, 1 disagree, 2 bad input)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"),
                    help="shared data folder holding traces/tracelens-h100 (default ../shared/data)")
    ap.add_argument("--in-repo", action="store_true",
                    help="compare the bundled traces with tests/data/tracelens-ref instead")
    args = ap.parse_args(argv)
    try:
        todo = cases(args)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"STATUS=fail; reason={e}")
        return 2
    cols = ["trace", "timeline", "ops_summary_by_category", *SHEETS, "agrees"]
    print("| " + " | ".join(cols) + " |")
    print("| " + " | ".join("---" for _ in cols) + " |")
    results = []
    for trace, ref in todo:
        try:
            r = compare_trace(trace, ref)
        except Exception as e:  # noqa: BLE001 - one line per unreadable input
            print(f"error: {trace.name}: {type(e).__name__}: {e}", file=sys.stderr)
            print(f"STATUS=fail; reason={trace.name} unreadable")
            return 2
        results.append(r)
        print("| " + " | ".join([r["trace"], r["timeline"], r["ops_summary_by_category"],
                                 *(r[s] for s in SHEETS), "yes" if r["ok"] else "NO"]) + " |")
    bad = [r for r in results if not r["ok"]]
    for r in bad:
        for d in r["diffs"]:
            print(f"  {r['trace']}: {d}")
    if bad:
        print(f"STATUS=fail; reason={len(bad)} of {len(results)} traces disagree with TraceLens")
        return 1
    print(f"STATUS=ok; reason=all {len(results)} traces agree with TraceLens on every row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
