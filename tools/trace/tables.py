"""The engine's tables as CSVs named and shaped like the sheets of TraceLens's perf report
(``generate_perf_report_pytorch(..., output_csvs_dir=D)``), so spreadsheets and TraceLens's compare
tools read them: ``gpu_timeline.csv``, ``ops_summary_by_category.csv``, ``kernel_summary.csv``,
``short_kernels_summary.csv`` (column names and order as TraceLens writes them; checked against the
reports in ``tests/data/tracelens-ref`` and bench/tracelens_agreement.py).

The engine keeps no input shapes, so ``short_kernels_summary.csv``'s ``Input dims`` / ``Input strides``
/ ``Concrete Inputs`` columns are empty; its rows group by parent op and kernel name.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...state.publish import ensure_dir, publish_many
from .categories import TIMELINE_ROWS
from .models import TraceAnalysis
from .scan import grouped
from .stream import KIND_KERNEL, TraceScan

TABLE_FILES = ("gpu_timeline.csv", "ops_summary_by_category.csv", "kernel_summary.csv", "short_kernels_summary.csv")

KERNEL_SUMMARY_COLUMNS = ("Parent op category", "Parent cpu_op", "Kernel name", "Kernel stream",
                          "Kernel duration (µs)_sum", "Kernel duration (µs)_count", "Kernel duration (µs)_mean",
                          "Kernel duration (µs)_min", "Kernel duration (µs)_max", "Percent of kernels time (%)",
                          "Percent of total time (%)")
SHORT_COLUMNS = ("Parent cpu_op", "Input dims", "Input strides", "Concrete Inputs", "Kernel name",
                 "Short Kernel duration (µs) sum", "Short Kernel count", "Short Kernel duration (µs) mean",
                 "Short Kernel duration (µs) percent of total time")


def kernel_tables(scan: TraceScan, keep: dict[str, Any], total_us: float,
                  short_kernel_us: float = 10.0) -> dict[str, list[dict[str, Any]]]:
    """``{"kernel_summary": rows, "short_kernels_summary": rows}`` (TraceLens's columns) from a scan
    and the ``keep`` dict filled by :func:`~ai4s_graph.tools.trace.engine.analyze_scan`.

    kernel_summary: every kernel event grouped by (parent op category, parent cpu_op, kernel name,
    stream), largest summed duration first; kernels without a launcher op have empty parent columns.
    short_kernels_summary: kernels shorter than ``short_kernel_us`` with a launcher op, grouped by
    (parent cpu_op, kernel name). Durations are as recorded (``scan.dur_raw``; TraceLens's
    ``Kernel duration (µs)``), not clipped at the next event's start on the stream as the analysis's
    timeline and kernel figures are: where kineto recorded overlaps on a stream (splitK GEMMs running
    ~0.15 µs into their reduce kernel on the bundled 92003) the sheet still sums to TraceLens's."""
    launcher = keep["launcher"]
    codes, labels = keep["category_codes"], keep["category_labels"]
    ki = np.flatnonzero(scan.kind == KIND_KERNEL)
    dur = scan.dur_raw if scan.dur_raw is not None else scan.dur
    ktime = float(dur[ki].sum())
    d = dur[ki]
    op = launcher[ki]
    has = op >= 0
    opn = np.where(has, scan.op_name[np.maximum(op, 0)] if scan.op_name.size else -1, -1)
    name_k = scan.name_id[ki]

    def op_name(code: int) -> str:
        return scan.cpu_names[code] if code >= 0 else ""

    # groups by the codes, then by the strings they name (two codes may spell one name), numbered
    # in the order of their first kernel as a dict filled kernel after kernel would be
    grp, first = grouped([codes[ki], opn, name_k, scan.stream[ki]])
    canon: dict[tuple, int] = {}
    remap = np.array([canon.setdefault((labels[int(codes[ki[f]])], op_name(int(opn[f])), scan.names[int(name_k[f])],
                                        scan.stream_id(int(ki[f]))), len(canon)) for f in first.tolist()],
                     dtype=np.int64)
    gc = remap[grp] if grp.size else grp
    ng = len(canon)
    tot = np.bincount(gc, weights=d, minlength=ng)  # np.bincount adds in kernel order, as the loop did
    cnt = np.bincount(gc, minlength=ng)
    mn, mx = np.full(ng, np.inf), np.full(ng, -np.inf)
    np.minimum.at(mn, gc, d)
    np.maximum.at(mx, gc, d)
    tot_l, cnt_l, mn_l, mx_l = tot.tolist(), cnt.tolist(), mn.tolist(), mx.tolist()
    gkeys = list(canon)
    ks = []
    for j in sorted(range(ng), key=lambda j: -tot_l[j]):
        (cat, opname, name, stream), t, n = gkeys[j], tot_l[j], cnt_l[j]
        ks.append(dict(zip(KERNEL_SUMMARY_COLUMNS, (
            cat, opname, name, stream, t, n, t / n, mn_l[j], mx_l[j],
            t / ktime * 100.0 if ktime else 0.0, t / total_us * 100.0 if total_us else 0.0))))
    short = np.flatnonzero(has & (d < short_kernel_us))
    sgrp, sfirst = grouped([opn[short], name_k[short]])
    scanon: dict[tuple, int] = {}
    sremap = np.array([scanon.setdefault((op_name(int(opn[short[f]])), scan.names[int(name_k[short[f]])]), len(scanon))
                       for f in sfirst.tolist()], dtype=np.int64)
    sc = sremap[sgrp] if sgrp.size else sgrp
    stot = np.bincount(sc, weights=d[short], minlength=len(scanon)).tolist()
    scnt = np.bincount(sc, minlength=len(scanon)).tolist()
    skeys = list(scanon)
    sk = []
    for j in sorted(range(len(skeys)), key=lambda j: -stot[j]):
        (opname, name), t, n = skeys[j], stot[j], scnt[j]
        sk.append(dict(zip(SHORT_COLUMNS, (opname, "", "", "", name, t, n, t / n,
                                           t / total_us * 100.0 if total_us else 0.0))))
    return {"kernel_summary": ks, "short_kernels_summary": sk}


def timeline_table(analysis: TraceAnalysis) -> list[dict[str, Any]]:
    """gpu_timeline.csv rows: ``type``, ``time ms``, ``percent``."""
    return [{"type": k, "time ms": analysis.timeline[k].time_ms, "percent": analysis.timeline[k].percent}
            for k in TIMELINE_ROWS if k in analysis.timeline]


def ops_table(analysis: TraceAnalysis) -> list[dict[str, Any]]:
    """ops_summary_by_category.csv rows: ``op category``, ``Count``, ``total_direct_kernel_time_ms``,
    ``Percentage (%)``, ``Cumulative Percentage (%)``."""
    rows, cum = [], 0.0
    for r in analysis.ops_by_category:
        cum += r.percent
        rows.append({"op category": r.category, "Count": r.count, "total_direct_kernel_time_ms": r.kernel_time_ms,
                     "Percentage (%)": r.percent, "Cumulative Percentage (%)": cum})
    return rows


def write_tables(out_dir: str | os.PathLike, analysis: TraceAnalysis,
                 kernel_rows: dict[str, list[dict[str, Any]]] | None, *,
                 root: str | os.PathLike | None = None) -> list[Path]:
    """Write the four CSVs into ``out_dir`` (created); ``kernel_rows`` from :func:`kernel_tables`
    (None: only gpu_timeline.csv and ops_summary_by_category.csv). Returns the paths written.
    The files are published together and atomically, refusing links at them and at every folder
    from ``root`` (default ``out_dir`` itself) down (:func:`ai4s_graph.state.publish.publish_many`:
    raises its ``UnsafePathError``, an ``OSError``)."""
    d = Path(out_dir)
    base = Path(root) if root is not None else d
    ensure_dir(d, base)
    tables: list[tuple[str, tuple[str, ...], list[dict[str, Any]]]] = [
        ("gpu_timeline.csv", ("type", "time ms", "percent"), timeline_table(analysis)),
        ("ops_summary_by_category.csv", ("op category", "Count", "total_direct_kernel_time_ms", "Percentage (%)",
                                         "Cumulative Percentage (%)"), ops_table(analysis)),
    ]
    if kernel_rows is not None:
        tables.append(("kernel_summary.csv", KERNEL_SUMMARY_COLUMNS, kernel_rows.get("kernel_summary") or []))
        tables.append(("short_kernels_summary.csv", SHORT_COLUMNS, kernel_rows.get("short_kernels_summary") or []))
        # the other TraceLens sheets (:mod:`.tracelens_sheets`: ops_summary, ops_unique_args, roofline, ...)
        tables += [(f"{n}.csv", tuple(sh["columns"]), sh["rows"]) for n, sh in (kernel_rows.get("sheets") or {}).items()]
    files = []
    for name, cols, rows in tables:
        fh = io.StringIO(newline="")
        w = csv.DictWriter(fh, fieldnames=list(cols))
        w.writeheader()
        w.writerows(rows)
        files.append((d / name, fh.getvalue()))
    return publish_many(files, root=base)
