"""tools/tracelens.py and `ai4s-graph trace timeline` on real traces.

References: TraceLens's own CSV reports beside the five H100 traces in
../shared/data/traces/tracelens-h100 (gpu_timeline.csv, ops_summary_by_category.csv,
kernel_summary.csv); the three profiled H200 runs in ../shared/data/perf-runs/9100{1,2,3}.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ai4s_graph.tools.trace import backends as tl
from ai4s_graph.tools.errors import InputError, NoGpuEventsError

H100 = [
    "Falconsai_nsfw_image_detection__1016002",
    "Qwen_Qwen1.5-0.5B-Chat__1016005",
    "facebook_timesformer-base-finetuned-k400__1016002",
    "gaunernst_bert-small-uncased__1016001",
    "google_owlv2-large-patch14-ensemble__1016001",
]


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _ref_timeline(shared_data: Path, name: str) -> dict[str, float]:
    d = shared_data / "traces" / "tracelens-h100" / f"{name}_perf_report_csvs"
    return {r["type"]: float(r["time ms"]) for r in _csv(d / "gpu_timeline.csv")}


_CACHE: dict = {}


@pytest.fixture(scope="session")
def analyzed(shared_data):
    """analyze_trace(path, backend=b), computed once per session."""

    def get(path: Path, backend: str):
        key = (str(path), backend)
        if key not in _CACHE:
            _CACHE[key] = tl.analyze_trace(path, backend=backend)
        return _CACHE[key]

    return get


def _h100(shared_data, name):
    return shared_data / "traces" / "tracelens-h100" / f"{name}.json.gz"


# ---------------------------------------------------------------------------------------
# GPU timeline vs TraceLens's gpu_timeline.csv
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", H100)
@pytest.mark.parametrize("backend", ["stream", "hta", "kineto"])
def test_timeline_matches_tracelens_csv(shared_data, analyzed, name, backend):
    ref = _ref_timeline(shared_data, name)
    a = analyzed(_h100(shared_data, name), backend)
    assert a.backend == backend
    assert set(a.timeline) == set(tl.TIMELINE_ROWS)
    tol = 0.01 * ref["total_time"]  # 1 % of total time (the brief's tolerance)
    for row, ref_ms in ref.items():
        assert a.timeline[row].time_ms == pytest.approx(ref_ms, abs=tol), row
        # Measured: both paths agree within 0.1 µs (float rounding of µs timestamps ~1e12),
        # far inside the tolerance.
        assert a.timeline[row].time_ms == pytest.approx(ref_ms, abs=1e-4), row


@pytest.mark.parametrize("name", H100)
def test_auto_is_the_engine_and_csvs_are_a_cross_check(shared_data, analyzed, name):
    """auto = the engine (stream); TraceLens's CSVs beside the trace are read verbatim by the
    tracelens-csv backend and, as a cross-check, agree with the engine within 0.1% of total time."""
    a = analyzed(_h100(shared_data, name), "auto")
    assert a.backend == "stream"
    c = analyzed(_h100(shared_data, name), "tracelens-csv")
    ref = _ref_timeline(shared_data, name)
    for row, ref_ms in ref.items():
        assert c.timeline[row].time_ms == ref_ms  # the CSV numbers, verbatim
    assert c.timeline["total_time"].percent == pytest.approx(100.0)
    checks = {x["tool"]: x for x in tl.cross_checks(_h100(shared_data, name), a, tools=("tracelens-csv",))}
    assert checks["tracelens-csv"]["status"] == "agrees"
    assert checks["tracelens-csv"]["max_row_diff_ms"] < 1e-4


# ---------------------------------------------------------------------------------------
# Kernels, short kernels, op categories vs TraceLens's CSVs
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", H100)
@pytest.mark.parametrize("backend", ["stream", "hta", "kineto"])
def test_kernel_counts_match_kernel_summary(shared_data, analyzed, name, backend):
    """kernel_summary.csv groups every kernel (dropna=False): its counts sum to the kernel
    count and its µs sums to the kernel time exactly."""
    d = shared_data / "traces" / "tracelens-h100" / f"{name}_perf_report_csvs"
    rows = _csv(d / "kernel_summary.csv")
    a = analyzed(_h100(shared_data, name), backend)
    assert a.kernel_count == sum(int(r["Kernel duration (µs)_count"]) for r in rows)
    ref_us = sum(float(r["Kernel duration (µs)_sum"]) for r in rows)
    assert sum(k.total_us for k in a.top_kernels) <= ref_us + 1e-3
    top = max(rows, key=lambda r: float(r["Kernel duration (µs)_sum"]))
    # The biggest kernel-summary row is (a part of) our top kernel.
    assert a.top_kernels[0].total_us >= float(top["Kernel duration (µs)_sum"]) - 1e-3
    assert a.top_kernels[0].percent == pytest.approx(a.top_kernels[0].total_us / ref_us * 100, rel=1e-6)


@pytest.mark.parametrize("name", H100)
@pytest.mark.parametrize("backend", ["stream", "hta", "kineto"])
def test_short_kernels_vs_short_kernels_summary(shared_data, analyzed, name, backend):
    """short_kernels_summary.csv groups by parent cpu_op and (pandas dropna) drops kernels
    without one. What matches: its summed count/time equal our count/time of short kernels
    launched under a cpu_op (kineto path), and never exceed our all-kernel count/time.
    Measured: equal on 4 traces; Qwen has 42 short kernels with no parent cpu_op (152 vs 110)."""
    from ai4s_graph.tools.trace import kineto

    d = shared_data / "traces" / "tracelens-h100" / f"{name}_perf_report_csvs"
    rows = _csv(d / "short_kernels_summary.csv")
    ref_count = sum(int(r["Short Kernel count"]) for r in rows)
    ref_us = sum(float(r["Short Kernel duration (µs) sum"]) for r in rows)
    a = analyzed(_h100(shared_data, name), backend)
    assert a.short_kernels.threshold_us == 10.0
    assert a.short_kernels.count >= ref_count
    assert a.short_kernels.time_ms * 1e3 >= ref_us - 1e-3
    sk = kineto.count_kernels(_h100(shared_data, name))["short_kernels"]
    assert sk["count_with_cpu_op"] == ref_count
    assert sk["time_us_with_cpu_op"] == pytest.approx(ref_us, abs=1e-3)
    assert sk["count"] == a.short_kernels.count
    if name.startswith("Qwen"):
        assert (a.short_kernels.count, ref_count) == (152, 110)
    else:
        assert a.short_kernels.count == ref_count


@pytest.mark.parametrize("name", H100)
@pytest.mark.parametrize("backend", ["stream", "hta", "kineto"])
def test_ops_by_category_matches_csv(shared_data, analyzed, name, backend):
    """Our categories (GEMM, CONV_fwd, NORM_fwd, elementwise, reduce, other, ...) reproduce
    ops_summary_by_category.csv exactly on all five traces: same categories, same launcher
    counts, same kernel time (ms). kineto finds launchers by TraceLens's host call-stack rule,
    hta by the kernels' External id."""
    d = shared_data / "traces" / "tracelens-h100" / f"{name}_perf_report_csvs"
    ref = {r["op category"]: (int(r["Count"]), float(r["total_direct_kernel_time_ms"]))
           for r in _csv(d / "ops_summary_by_category.csv")}
    a = analyzed(_h100(shared_data, name), backend)
    got = {r.category: (r.count, r.kernel_time_ms) for r in a.ops_by_category}
    assert set(got) == set(ref)
    for cat, (count, ms) in ref.items():
        assert got[cat][0] == count, cat
        assert got[cat][1] == pytest.approx(ms, abs=1e-4), cat
    assert sum(r.percent for r in a.ops_by_category) == pytest.approx(100.0)


def test_tracelens_csv_backend_reads_categories(shared_data, analyzed):
    name = H100[0]
    a = analyzed(_h100(shared_data, name), "tracelens-csv")
    assert a.sources["ops_by_category"] == "tracelens-csv"
    assert [r.category for r in a.ops_by_category] == ["GEMM", "other", "CONV_fwd", "elementwise", "NORM_fwd"]
    assert a.ops_by_category[0].count == 73
    assert a.kernel_count == 154


# ---------------------------------------------------------------------------------------
# The three profiled H200 runs
# ---------------------------------------------------------------------------------------

RUN_TRACE = "perf-runs/{}/traces/trace_rank0.json.gz"


@pytest.mark.parametrize("backend", ["stream", "hta", "kineto"])
def test_91001_is_launch_bound(shared_data, analyzed, backend):
    a = analyzed(shared_data / RUN_TRACE.format(91001), backend)
    t = a.timeline
    assert t["idle_time"].percent == pytest.approx(89.487, abs=0.01)
    assert t["busy_time"].percent == pytest.approx(10.513, abs=0.01)
    assert t["total_time"].time_ms == pytest.approx(62.7366, abs=1e-3)
    assert a.n_steps == 3
    assert a.kernel_count == 2133 and a.kernels_per_step == 711
    # Dispatch-bound signature: tiny kernels, most of them short, gaps >> kernels.
    assert a.launch.mean_kernel_us == pytest.approx(2.992, abs=0.01)
    assert a.launch.median_gap_us == pytest.approx(17.02, abs=0.01)
    assert a.launch.launch_calls == 2133
    assert a.short_kernels.count == 2055
    assert a.short_kernels.percent == pytest.approx(82.54, abs=0.01)
    assert a.step_time_ms == pytest.approx(21.030, abs=0.01)
    assert a.dataloader_ms_per_step == 0.0  # synthetic batches: no DataLoader ops
    assert a.gpu_ids == [0]


@pytest.mark.parametrize("backend", ["stream", "hta", "kineto"])
def test_91002_fp64_also_launch_bound(shared_data, analyzed, backend):
    a = analyzed(shared_data / RUN_TRACE.format(91002), backend)
    assert a.timeline["idle_time"].percent == pytest.approx(88.23, abs=0.01)
    assert a.n_steps == 3
    assert a.step_time_ms == pytest.approx(18.857, abs=0.01)


@pytest.mark.parametrize("backend", ["stream", "hta", "kineto"])
def test_91003_is_compute_bound(shared_data, analyzed, backend):
    a = analyzed(shared_data / RUN_TRACE.format(91003), backend)
    t = a.timeline
    assert t["busy_time"].percent == pytest.approx(91.95, abs=0.01)
    assert t["computation_time"].percent == pytest.approx(90.83, abs=0.01)
    assert t["exposed_memcpy_time"].percent == pytest.approx(1.12, abs=0.01)
    assert a.n_steps == 3 and a.step_time_ms == pytest.approx(59.044, abs=0.01)
    cats = {r.category: r for r in a.ops_by_category}
    assert cats["GEMM"].count == 447
    assert a.launch.mean_kernel_us == pytest.approx(56.83, abs=0.01)


@pytest.mark.parametrize("run", [91001, 91002, 91003])
def test_hta_and_kineto_agree_on_runs(shared_data, analyzed, run):
    h = analyzed(shared_data / RUN_TRACE.format(run), "hta")
    k = analyzed(shared_data / RUN_TRACE.format(run), "kineto")
    for row in tl.TIMELINE_ROWS:
        assert h.timeline[row].time_ms == pytest.approx(k.timeline[row].time_ms, abs=1e-3), row
    assert (h.kernel_count, h.n_steps, h.short_kernels.count) == (k.kernel_count, k.n_steps, k.short_kernels.count)
    assert {r.category: r.count for r in h.ops_by_category} == {r.category: r.count for r in k.ops_by_category}
    assert h.launch.launch_calls == k.launch.launch_calls


def test_find_rank_traces_and_pool(shared_data, tmp_path):
    run = shared_data / "perf-runs" / "91001"
    assert tl.find_rank_traces(run) == [run / "traces" / "trace_rank0.json.gz"]
    # Two ranks of one distributed job (HTA's test data): sorted by rank, analyzed in a pool.
    hta_dir = shared_data / "traces" / "hta"
    paths = [hta_dir / "sampled_rank-1.json.gz", hta_dir / "sampled_rank-0.json.gz"]
    res = tl.analyze_traces(sorted(paths), workers=2, backend="kineto")
    assert [r.rank for r in res] == [0, 1]
    assert res[0].timeline["exposed_comm_time"].percent == pytest.approx(27.56, abs=0.01)
    with pytest.raises(InputError):
        tl.find_rank_traces(tmp_path)


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------


def _one_line(err: Exception) -> str:
    msg = str(err)
    assert "\n" not in msg and msg
    return msg


@pytest.fixture
def truncated_gz(shared_data, tmp_path) -> Path:
    raw = (shared_data / "traces/tracelens-h100" / f"{H100[3]}.json.gz").read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(raw[: len(raw) // 2])
    return p


@pytest.fixture
def cpu_only(shared_data, tmp_path) -> Path:
    import orjson

    src = shared_data / "traces/tracelens-h100" / f"{H100[3]}.json.gz"
    data = orjson.loads(gzip.decompress(src.read_bytes()))
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    p = tmp_path / "cpu_only.json.gz"
    p.write_bytes(gzip.compress(orjson.dumps(data)))
    return p


@pytest.mark.parametrize("backend", ["auto", "hta", "kineto"])
def test_bad_inputs(tmp_path, truncated_gz, cpu_only, backend):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    notjson = tmp_path / "notjson.json"
    notjson.write_text("this is not json {")
    noevents = tmp_path / "noevents.json"
    noevents.write_text('{"schemaVersion": 1}')
    for path, word in ((truncated_gz, "truncated"), (empty, "empty"), (notjson, "not valid JSON"),
                       (noevents, "traceEvents")):
        with pytest.raises(InputError) as ei:
            tl.analyze_trace(path, backend=backend)
        msg = _one_line(ei.value)
        assert path.name in msg and word in msg
        assert not isinstance(ei.value, NoGpuEventsError)
    with pytest.raises(NoGpuEventsError) as ei:
        tl.analyze_trace(cpu_only, backend=backend)
    assert "cpu_only.json.gz" in _one_line(ei.value)
    with pytest.raises(InputError):
        tl.analyze_trace(tmp_path / "missing.json", backend=backend)


def test_unknown_backend(shared_data):
    with pytest.raises(InputError, match="unknown backend"):
        tl.analyze_trace(_h100(shared_data, H100[0]), backend="nsys")


# ---------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_app():
    from ai4s_graph.cli import app

    return app


def test_cli_timeline_json(shared_data, cli_app):
    name = H100[0]
    res = CliRunner().invoke(cli_app, ["trace", "timeline", str(_h100(shared_data, name)), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert list(data) == [*tl.MAIN_TIMELINE_ROWS, "notes"] and isinstance(data.pop("notes"), list)
    ref = _ref_timeline(shared_data, name)
    for row, v in data.items():
        assert set(v) == {"time_ms", "percent"}
        assert v["time_ms"] == pytest.approx(ref[row], abs=1e-4)  # the engine: within 0.1 µs of TraceLens


def test_cli_timeline_json_kineto_run(shared_data, cli_app):
    res = CliRunner().invoke(cli_app, ["trace", "timeline", str(shared_data / RUN_TRACE.format(91003)),
                                       "--json", "--backend", "kineto"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["busy_time"]["percent"] == pytest.approx(91.95, abs=0.01)


def test_cli_timeline_table(shared_data, cli_app):
    res = CliRunner().invoke(cli_app, ["trace", "timeline", str(shared_data / RUN_TRACE.format(91001)),
                                       "--backend", "kineto"])
    assert res.exit_code == 0, res.output
    assert "idle_time" in res.stdout and "89.49" in res.stdout and "backend: kineto" in res.stdout
    assert res.stdout.strip().splitlines()[-1].startswith("STATUS=ok; reason=backend=kineto")


def test_cli_timeline_error(tmp_path, cli_app):
    bad = tmp_path / "empty.json.gz"
    bad.write_bytes(b"")
    res = CliRunner().invoke(cli_app, ["trace", "timeline", str(bad), "--json"])
    assert res.exit_code == 2  # a refused input (README: a refused invocation exits 2)
    assert res.stderr.strip() == "error: empty.json.gz: trace file is empty"
    # under --json the refusal is one JSON object (issue 27 report 5 point 4)
    out = json.loads(res.stdout)
    assert out["status"] == "STATUS=fail; reason=empty.json.gz: trace file is empty"
    assert (out["outcome"], out["reason"], out["exit_code"]) == ("fail", "empty.json.gz: trace file is empty", 2)
    plain = CliRunner().invoke(cli_app, ["trace", "timeline", str(bad)])
    assert plain.exit_code == 2 and plain.stdout.strip() == "STATUS=fail; reason=empty.json.gz: trace file is empty"


# ---------------------------------------------------------------------------------------
# ops_summary / short_kernels_summary in TraceLens's current layout (tools/trace/tracelens_sheets.py)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", H100)
def test_ops_and_short_kernel_sheets_match_tracelens(shared_data, tmp_path, name):
    """Our ops_summary.csv and short_kernels_summary.csv (grouped by input shapes) against TraceLens's
    own, row for row: same columns in the same order, same keys, numbers within 1e-6 relative."""
    from ai4s_graph.tools.trace import tables, tracelens_sheets

    analysis, rows = tracelens_sheets.analyze_with_sheets(_h100(shared_data, name))
    tables.write_tables(tmp_path, analysis, rows)
    ref = shared_data / "traces" / "tracelens-h100" / f"{name}_perf_report_csvs"
    for sheet, keys, nums in (
            ("ops_summary", ("name",), ("total_direct_kernel_time_sum", "total_subtree_kernel_time_sum", "Count",
                                        "Percentage (%)")),
            ("short_kernels_summary", ("Parent cpu_op", "Input dims", "Input strides", "Concrete Inputs", "Kernel name"),
             ("Short Kernel duration (µs) sum", "Short Kernel count",
              "Short Kernel duration (µs) percent of total time"))):
        with open(tmp_path / f"{sheet}.csv", newline="") as fh:
            ours_cols = next(csv.reader(fh))
        with open(ref / f"{sheet}.csv", newline="") as fh:
            assert ours_cols == next(csv.reader(fh)), sheet
        ours = {tuple(r[k] for k in keys): r for r in _csv(tmp_path / f"{sheet}.csv")}
        theirs = {tuple(r[k] for k in keys): r for r in _csv(ref / f"{sheet}.csv")}
        assert set(ours) == set(theirs), sheet
        for k, r in theirs.items():
            for c in nums:
                assert float(ours[k][c]) == pytest.approx(float(r[c]), rel=1e-6, abs=1e-9), (sheet, k, c)
        if sheet == "ops_summary":
            assert all(ours[k]["Categories"] == r["Categories"] for k, r in theirs.items())
