"""TraceLens's own CSV report as input (``--backend tracelens-csv``): every layout its
``generate_perf_report_pytorch(..., output_csvs_dir=D)`` writes (AMD-AGI/TraceLens,
``TraceLens/Reporting/generate_perf_report_pytorch.py`` writes each sheet with ``df.to_csv``;
``TraceLens/TreePerf/tree_perf.py`` and ``gpu_event_analyser.py`` build them), or a refusal that says why.

* An empty sheet is written as a 1-byte file (pandas writes a DataFrame with no columns as ``"\\n"``:
  TraceLens's ``tests/traces/torch_compile_triton`` folder holds such a ``short_kernels_summary.csv``);
  a sheet with its header only has no rows. Either is an empty table: an optional table
  (ops_summary_by_category, kernel_summary, short_kernels_summary) is then left out and its
  figures come from the kineto reader, with a note; an empty gpu_timeline is refused.
* ``gpu_timeline.csv``: ``type, time ms, percent`` with TraceLens's eight rows; with
  ``--micro_idle_thresh_us`` ``idle_time`` is written as ``micro_idle_time`` + ``macro_idle_time``
  (``GPUEventAnalyser.compute_metrics_dict``), read as their sum; with ``--detect_recompute`` an
  ``is_recompute`` column and one breakdown per block of kernels (``get_df_gpu_timeline``: the
  non-recompute block, then the recompute one). One block is the whole trace's timeline; two are
  breakdowns of two sets of kernels whose spans overlap, from which the whole trace's total and idle
  time cannot be had: refused with the reason (re-run TraceLens without ``--detect_recompute``).
* ``ops_summary_by_category.csv`` with ``is_recompute``: one row per (category, is_recompute); the
  rows of a category are summed (a launcher is in one block or the other).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from .categories import MAIN_TIMELINE_ROWS, TIMELINE_ROWS

TABLES = ("gpu_timeline", "ops_summary_by_category", "kernel_summary", "short_kernels_summary")
#: Columns each table must have for the figures read from it.
NEEDED = {
    "gpu_timeline": ("type", "time ms"),
    "ops_summary_by_category": ("op category", "Count", "total_direct_kernel_time_ms", "Percentage (%)"),
    "kernel_summary": ("Kernel name", "Parent op category", "Kernel duration (µs)_count", "Kernel duration (µs)_sum"),
    "short_kernels_summary": (),
}


def read_report_dir(d: Path) -> tuple[dict[str, Any], dict[str, float], list[str]]:
    """``(frames, timeline_ms, notes)`` of a TraceLens CSV folder: the optional tables that hold rows
    (pandas DataFrames keyed by sheet name), the gpu_timeline rows in ms (:func:`timeline_ms`), and
    one note per table left out (missing, empty, lacking a column). Raises InputError (one line)
    when gpu_timeline.csv is missing, empty, unreadable or in a layout without the whole trace's
    timeline."""
    frames: dict[str, Any] = {}
    notes: list[str] = []
    for name in TABLES:
        f = d / f"{name}.csv"
        why, df = _read(f, NEEDED[name])
        if not why:
            frames[name] = df
        elif name == "gpu_timeline":
            raise InputError(f"{d.name}/{f.name} {why}: no GPU timeline to read")
        elif name != "short_kernels_summary":  # its figures come from the kineto reader in any case
            notes.append(f"TraceLens CSV {f.name} {why}: its figures come from the kineto reader")
    cat = frames.get("ops_summary_by_category")
    if cat is not None and "is_recompute" in cat.columns:
        frames["ops_summary_by_category"] = _sum_recompute_blocks(cat)
        notes.append("TraceLens CSV ops_summary_by_category.csv was written with --detect_recompute: each "
                     "category's recompute and non-recompute rows are summed")
    tl, tl_notes = timeline_ms(frames["gpu_timeline"], f"{d.name}/gpu_timeline.csv")
    return frames, tl, notes + tl_notes


def _read(f: Path, needed: tuple[str, ...]) -> tuple[str, Any]:
    """``(why not, DataFrame)``: why is empty when the table was read with rows and every needed column."""
    import pandas as pd

    if not f.is_file():
        return "is missing", None
    if not f.read_bytes().strip():
        return "is empty (TraceLens writes an empty table as a 1-byte file)", None
    try:
        df = pd.read_csv(f)
    except Exception as e:  # noqa: BLE001 - any parse failure: the reason, one line
        return f"cannot be read as CSV ({type(e).__name__}: {' '.join(str(e).split())[:100]})", None
    lacking = [c for c in needed if c not in df.columns]
    if lacking:
        return f"has no column {', '.join(repr(c) for c in lacking)} (columns: {', '.join(map(str, df.columns))[:160]})", None
    if not len(df):
        return "has a header and no rows", None
    return "", df


def timeline_ms(df, where: str) -> tuple[dict[str, float], list[str]]:
    """The gpu_timeline rows in ms from TraceLens's sheet (``type``, ``time ms``), in every layout of
    the module docstring; ``(rows, notes)``. Raises InputError for two recompute blocks, a row that
    is not a number, or a missing main row."""
    notes = []
    if "is_recompute" in df.columns:
        blocks = {str(v): g for v, g in df.groupby(df["is_recompute"].astype(str), sort=False)}
        if len(blocks) > 1:
            comp = {k: _rows(g, where).get("computation_time") for k, g in blocks.items()}
            raise InputError(
                f"{where} was written with --detect_recompute: {len(blocks)} breakdowns, one per block of kernels "
                f"(computation {', '.join(f'is_recompute={k}: {v:.4g} ms' for k, v in comp.items())}), whose spans "
                "overlap; the whole trace's total and idle time are not in it. Re-run TraceLens without "
                "--detect_recompute")
        notes.append(f"{where} has an is_recompute column with one block (is_recompute={next(iter(blocks))}): "
                     "read as the whole trace's timeline")
    vals = _rows(df, where)
    if "idle_time" not in vals and "micro_idle_time" in vals and "macro_idle_time" in vals:
        vals["idle_time"] = vals["micro_idle_time"] + vals["macro_idle_time"]
        notes.append(f"{where} splits idle time into micro_idle_time and macro_idle_time (--micro_idle_thresh_us): "
                     "idle_time is their sum")
    missing = [k for k in MAIN_TIMELINE_ROWS if k not in vals]
    if missing:
        raise InputError(f"{where} lacks rows {', '.join(missing)}")
    return {k: vals[k] for k in TIMELINE_ROWS if k in vals}, notes


def _rows(df, where: str) -> dict[str, float]:
    out = {}
    for t, v in zip(df["type"], df["time ms"]):
        try:
            out[str(t)] = float(v)
        except (TypeError, ValueError):
            raise InputError(f"{where}: row {t!r} is not a number of ms ({v!r})") from None
    return out


def _sum_recompute_blocks(df):
    """ops_summary_by_category rows summed per category (Count, time; percent recomputed)."""
    g = df.groupby("op category", sort=False, dropna=False).agg(
        Count=("Count", "sum"), total_direct_kernel_time_ms=("total_direct_kernel_time_ms", "sum")).reset_index()
    tot = float(g["total_direct_kernel_time_ms"].sum())
    g["Percentage (%)"] = g["total_direct_kernel_time_ms"] / tot * 100.0 if tot else 0.0
    return g.sort_values("total_direct_kernel_time_ms", ascending=False)
