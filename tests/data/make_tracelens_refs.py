"""Regenerate ``tests/data/tracelens-ref/``: TraceLens's perf report of each bundled example trace.

Needs TraceLens (``pip install 'ai4s-graph[tracelens]'``; the references were made with AMD-AGI/TraceLens
main at commit 171dd747). Usage, from the repository root::

    python tests/data/make_tracelens_refs.py

Each ``<job>_rank<r>_perf_report_csvs/`` keeps the six CSVs the tests compare against:
gpu_timeline, kernel_summary, ops_summary, ops_summary_by_category, short_kernels_summary,
ops_unique_args (the other sheets TraceLens writes are dropped to keep the repository small).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "tracelens-ref"
TRACES = [("92001", 0), ("92002", 0), ("92003", 0), ("92004", 0),
          ("93001", 0), ("93001", 1), ("93004", 1), ("93005", 0)]
KEEP = ("gpu_timeline", "kernel_summary", "ops_summary", "ops_summary_by_category",
        "short_kernels_summary", "ops_unique_args")


def main() -> None:
    """Write the references; raises ImportError when TraceLens is not installed."""
    from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch

    for job, rank in TRACES:
        trace = REPO / "examples" / "perf-runs" / job / "traces" / f"trace_rank{rank}.json.gz"
        dest = OUT / f"{job}_rank{rank}_perf_report_csvs"
        with tempfile.TemporaryDirectory() as tmp:
            generate_perf_report_pytorch(str(trace), output_csvs_dir=tmp,
                                         kernel_summary=True, short_kernel_study=True)
            dest.mkdir(parents=True, exist_ok=True)
            for name in KEEP:
                shutil.copy(Path(tmp) / f"{name}.csv", dest / f"{name}.csv")
        print(f"{dest.relative_to(REPO)}")


if __name__ == "__main__":
    try:
        main()
    except ImportError as e:  # one line, not a traceback: the script's one prerequisite
        raise SystemExit(f"error: TraceLens is not installed ({e}); pip install 'ai4s-graph[tracelens]'") from None
