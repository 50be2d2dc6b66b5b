"""TraceLens's perf-report sheets beside the engine's (ops_summary, ops_unique_args, unified_perf_summary,
the roofline sheets, short_kernels_summary by input shapes): :mod:`ai4s_graph.tools.trace.tracelens_sheets`.

- Layout (runs everywhere): a trace built here, with hand-computed answers; the column names and
  their order are written out below as AMD-AGI/TraceLens writes them (commit 171dd747:
  ``TreePerf/tree_perf.py`` ``get_df_kernel_launchers_summary``, ``get_df_kernel_launchers_unique_args``,
  ``summarize_df_perf_metrics``; ``Reporting/generate_perf_report_pytorch.py`` ``get_dfs_short_kernels``;
  ``PerfModel/perf_model.py`` ``aten_addmm.get_param_details``), not taken from the module.
- Against TraceLens (where it is installed, ``pip install 'ai4s-graph[tracelens]'``; skipped with the
  reason otherwise): TraceLens's own report of the bundled 93003 rank-0 trace and ours, compared with
  ``TraceLens_compare_perf_reports_pytorch --sheets all`` in both orders; the roofline and ops sheets
  agree row for row.
- Against TraceLens's reports of the bundled traces in tests/data/tracelens-ref (ops_summary and
  short_kernels_summary, row for row): see tests/test_tracelens.py; of TraceLens's five H100 traces:
  bench/tracelens_agreement.py.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.tools.trace import tables, tracelens_sheets

ROOT = Path(REPO_ROOT or Path(__file__).resolve().parent.parent)
TRACE_93003 = ROOT / "examples" / "perf-runs" / "93003" / "traces" / "trace_rank0.json.gz"

OPS_SUMMARY = ["name", "total_direct_kernel_time_sum", "total_subtree_kernel_time_sum", "total_direct_kernel_time_ms",
               "total_subtree_kernel_time_ms", "Count", "Categories", "Percentage (%)", "Cumulative Percentage (%)"]
OPS_UNIQUE_ARGS = ["name", "op category", "process_name", "process_label", "thread_name", "Input Dims", "Input type",
                   "Input Strides", "Concrete Inputs", "operation_count", "total_direct_kernel_time_mean",
                   "total_subtree_kernel_time_mean", "total_direct_kernel_time_median",
                   "total_subtree_kernel_time_median", "total_direct_kernel_time_std", "total_subtree_kernel_time_std",
                   "total_direct_kernel_time_min", "total_subtree_kernel_time_min", "total_direct_kernel_time_max",
                   "total_subtree_kernel_time_max", "total_direct_kernel_time_sum", "total_subtree_kernel_time_sum",
                   "ex_UID", "kernel_details_summary", "trunc_kernel_details", "Percentage (%)",
                   "Cumulative Percentage (%)"]
GEMM = ["name", "param: M", "param: N", "param: K", "param: bias", "param: stride_A", "param: stride_B",
        "param: dtype_A_B", "param: B", "GFLOPS_first", "Data Moved (MB)_first", "FLOPS/Byte_first", "TB/s_mean",
        "TB/s_median", "TB/s_std", "TB/s_min", "TB/s_max", "TFLOPS/s_mean", "TFLOPS/s_median", "TFLOPS/s_std",
        "TFLOPS/s_min", "TFLOPS/s_max", "process_name_first", "process_label_first", "thread_name_first",
        "Compute Spec", "kernel_details__summarize_kernel_stats", "trunc_kernel_details", "Input Dims_first",
        "Input type_first", "Input Strides_first", "Concrete Inputs_first", "Kernel Time (µs)_mean",
        "Kernel Time (µs)_median", "Kernel Time (µs)_std", "Kernel Time (µs)_min", "Kernel Time (µs)_max",
        "Kernel Time (µs)_sum", "name_count", "UID_first"]
SHORT = ["Parent cpu_op", "Input dims", "Input strides", "Concrete Inputs", "Kernel name",
         "Short Kernel duration (µs) sum", "Short Kernel count", "Short Kernel duration (µs) mean",
         "Short Kernel duration (µs) percent of total time"]

ADDMM_ARGS = {"Input Dims": [[512], [128, 256], [256, 512], [], []],
              "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"],
              "Input Strides": [[1], [256, 1], [1, 256], [], []], "Concrete Inputs": ["", "", "", "1", "1"]}
ADD_ARGS = {"Input Dims": [[128, 512], [128, 512], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"],
            "Input Strides": [[512, 1], [512, 1], []], "Concrete Inputs": ["", "", "1"]}


def _trace(path: Path) -> Path:
    """Two aten::addmm (kernels 5 and 7 µs), one aten::add (2 µs), one aten::copy_ recorded without
    shapes (3 µs), on one thread; a 100 µs ProfilerStep around them; GPU events on stream 7."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}},
          {"ph": "M", "name": "process_labels", "pid": 1, "tid": 0, "args": {"labels": "CPU"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 11, "args": {"name": "thread 11 (python3)"}},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 11, "ts": 0, "dur": 100}]
    ops = [("aten::addmm", ADDMM_ARGS, 5.0, "gemm_kernel_a"), ("aten::add", ADD_ARGS, 2.0, "add_kernel"),
           ("aten::addmm", ADDMM_ARGS, 7.0, "gemm_kernel_a"), ("aten::copy_", None, 3.0, "copy_kernel")]
    t = 10.0
    for corr, (name, args, kdur, kname) in enumerate(ops, start=1):
        op = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 11, "ts": t, "dur": 10}
        if args is not None:
            op["args"] = args
        ev.append(op)
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 11, "ts": t + 2,
                   "dur": 4, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": t + 5, "dur": kdur,
                   "args": {"correlation": corr, "stream": 7, "device": 0}})
        t += 20
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": ev}, fh)
    return path


def _rows(p: Path) -> tuple[list[str], list[dict]]:
    with open(p, newline="", encoding="utf-8") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sheets")
    analysis, rows = tracelens_sheets.analyze_with_sheets(_trace(d / "t.json.gz"))
    tables.write_tables(d / "csv", analysis, rows)
    return d / "csv"


def test_sheet_files(built):
    names = sorted(p.name for p in built.glob("*.csv"))
    assert names == sorted(["gpu_timeline.csv", "ops_summary_by_category.csv", "kernel_summary.csv",
                            "short_kernels_summary.csv", "ops_summary.csv", "ops_unique_args.csv",
                            "unified_perf_summary.csv", "GEMM.csv", "BinaryElementwise.csv", "UnaryElementwise.csv"])


def test_ops_summary_layout_and_values(built):
    cols, rows = _rows(built / "ops_summary.csv")
    assert cols == OPS_SUMMARY
    by = {r["name"]: r for r in rows}
    assert [r["name"] for r in rows] == ["aten::addmm", "aten::copy_", "aten::add"]  # 12, 3, 2 µs
    assert float(by["aten::addmm"]["total_direct_kernel_time_sum"]) == 12.0 and by["aten::addmm"]["Count"] == "2"
    assert by["aten::addmm"]["Categories"] == "['GEMM']" and by["aten::add"]["Categories"] == "['elementwise']"
    assert float(by["aten::addmm"]["Percentage (%)"]) == pytest.approx(100 * 12 / 17)
    assert float(rows[-1]["Cumulative Percentage (%)"]) == pytest.approx(100.0)


def test_ops_unique_args_layout_and_values(built):
    cols, rows = _rows(built / "ops_unique_args.csv")
    assert cols == OPS_UNIQUE_ARGS
    r = rows[0]
    assert (r["name"], r["op category"], r["process_name"], r["process_label"], r["thread_name"]) == (
        "aten::addmm", "GEMM", "python3", "CPU", "thread 11 (python3)")
    assert r["Input Dims"] == "((512,), (128, 256), (256, 512), (), ())"  # nested tuples, as TraceLens writes them
    assert r["Concrete Inputs"] == "('', '', '', '1', '1')"
    assert r["operation_count"] == "2" and float(r["total_direct_kernel_time_mean"]) == 6.0
    assert float(r["total_direct_kernel_time_std"]) == pytest.approx(2 ** 0.5)  # pandas std, ddof 1: (5, 7)
    copy = next(x for x in rows if x["name"] == "aten::copy_")
    assert copy["Input Dims"] == "" and copy["total_direct_kernel_time_std"] == ""  # one value


def test_gemm_roofline_layout_and_values(built):
    cols, rows = _rows(built / "GEMM.csv")
    assert cols == GEMM
    (r,) = rows
    assert (r["param: M"], r["param: N"], r["param: K"], r["param: bias"], r["param: B"]) == ("128", "512", "256",
                                                                                                "True", "1")
    assert r["param: stride_A"] == "(256, 1)" and r["param: dtype_A_B"] == "('c10::BFloat16', 'c10::BFloat16')"
    flops = 2 * 128 * 512 * 256 + 128 * 512  # 2MNK + MN (bias)
    nbytes = (128 * 256 + 256 * 512 + 128 * 512 + 512) * 2  # MK + KN + MN + N, bf16
    assert float(r["GFLOPS_first"]) == pytest.approx(flops / 1e9)
    assert float(r["Data Moved (MB)_first"]) == pytest.approx(nbytes / 2 ** 20)
    assert float(r["TFLOPS/s_max"]) == pytest.approx(flops / 1e12 / 5e-6)  # the 5 µs instance
    assert float(r["Kernel Time (µs)_sum"]) == 12.0 and r["name_count"] == "2" and r["Compute Spec"] == "matrix_bf16"
    _, bin_rows = _rows(built / "BinaryElementwise.csv")
    assert float(bin_rows[0]["Data Moved (MB)_first"]) == pytest.approx(3 * 128 * 512 * 2 / 2 ** 20)
    ucols, urows = _rows(built / "UnaryElementwise.csv")
    assert urows == [] and ucols[:5] == ["name", "param: op_shape", "param: dtype_in_out", "param: stride_input",
                                         "param: stride_output"]  # aten::copy_ without shapes: no model, no row


def test_short_kernels_grouped_by_shapes(built):
    cols, rows = _rows(built / "short_kernels_summary.csv")
    assert cols == SHORT
    # every kernel is < 10 µs; aten::copy_ has no recorded shapes, so (like pandas' groupby) no row
    assert [(r["Parent cpu_op"], r["Short Kernel count"]) for r in rows] == [("aten::addmm", "2"), ("aten::add", "1")]
    assert rows[0]["Input dims"] == "((512,), (128, 256), (256, 512), (), ())"
    assert float(rows[0]["Short Kernel duration (µs) percent of total time"]) == pytest.approx(
        100 * 12 / (float(_rows(built / "gpu_timeline.csv")[1][5]["time ms"]) * 1e3))


def test_collector_from_another_read_is_refused(tmp_path):
    from ai4s_graph.tools.trace.stream import scan_trace

    p = _trace(tmp_path / "t.json.gz")
    scan = scan_trace(p)
    stray = tracelens_sheets.OpArgsCollector()  # fed nothing
    assert "not fed by the same read" in tracelens_sheets.build_sheets(scan, {}, stray)["sheets_error"]


# ------------------------------------------------------------------- TraceLens itself

def _tracelens():
    try:
        from TraceLens.Reporting.compare_perf_reports_pytorch import generate_compare_perf_reports_pytorch
        from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch
    except ImportError as e:
        pytest.skip(f"TraceLens is not installed ({e}); pip install 'ai4s-graph[tracelens]'")
    return generate_perf_report_pytorch, generate_compare_perf_reports_pytorch


@pytest.mark.slow
def test_compare_sheets_all_both_orders_against_tracelens(tmp_path):
    gen, compare = _tracelens()
    import pandas as pd

    theirs = tmp_path / "tracelens"
    gen(str(TRACE_93003), output_csvs_dir=str(theirs), kernel_summary=True, short_kernel_study=True)
    analysis, rows = tracelens_sheets.analyze_with_sheets(TRACE_93003)
    ours = tmp_path / "ours"
    tables.write_tables(ours, analysis, rows)
    for first, second in ((ours, theirs), (theirs, ours)):
        res = compare([str(first), str(second)], output=None, names=["a", "b"], sheets=["all"])
        assert {"gpu_timeline", "ops_summary", "kernel_summary", "GEMM_intersect_b",
                "ops_unique_args_intersect_b"} <= set(res)
    res = compare([str(ours), str(theirs)], output=None, names=["ours", "tl"], sheets=["all"])
    for sheet in ("GEMM", "SDPA_fwd", "bin_eltwise", "un_eltwise"):
        assert res[f"{sheet}_only_baseline_tl"].empty and res[f"{sheet}_only_variant_tl"].empty, sheet
        d = res[f"{sheet}_intersect_tl"]
        assert len(d) > 0
        for c in ("Kernel Time (µs)_sum", "name_count", "TFLOPS/s_mean", "TB/s_mean"):
            assert d[f"{c}__tl_pct"].abs().max() < 1e-6, (sheet, c)
    ops = res["ops_summary"]
    assert ops["total_direct_kernel_time_ms__tl_pct"].abs().max() < 1e-6 and ops["Count__tl_diff"].abs().max() == 0
    # ops_unique_args: every (op, category, thread, argument) group of TraceLens's, with its count and time
    o = pd.read_csv(ours / "ops_unique_args.csv").astype({"Input Dims": str})
    t = pd.read_csv(theirs / "ops_unique_args.csv").astype({"Input Dims": str})
    key = ["name", "op category", "thread_name", "Input Dims", "Input type", "Input Strides", "Concrete Inputs"]
    m = o.astype({k: str for k in key}).merge(t.astype({k: str for k in key}), on=key, how="outer", indicator=True)
    assert (m["_merge"] == "both").all() and len(m) == len(t)
    assert (m["operation_count_x"] == m["operation_count_y"]).all()
    assert ((m["total_direct_kernel_time_sum_x"] - m["total_direct_kernel_time_sum_y"]).abs()
            <= 1e-6 * m["total_direct_kernel_time_sum_y"].abs() + 1e-3).all()
