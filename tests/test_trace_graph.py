"""`ai4s-graph run` on trace-only run folders (no telemetry): the handed trace cases and other members
of their kinds give the right claims, the verifier confirms them by its own path (never refutes a
right claim, never leaves one inconclusive for lack of a path), and the engine's tables are written
beside the report."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report

from test_trace_hygiene import _steps_trace, hipgraph_no_kernels_case, overflow_dur_case, partial_ac2g_case
from slurm_faults import UNKNOWN_JOBID

runner = CliRunner()


def _run(run_dir: Path, out: Path, job: str = UNKNOWN_JOBID) -> tuple[Report, str]:
    r = runner.invoke(app, ["run", "--job", job, "--perf-run", str(run_dir), "--out", str(out),
                            "--checkpoint", str(out.parent / f"{out.name}.sqlite")])
    assert (out / "report.json").is_file(), r.output
    return Report.model_validate_json((out / "report.json").read_text()), r.output


def _traces_only(build, dst: Path) -> Path:
    """A trace-only run folder ``dst`` whose ``traces/trace_rank0.json`` ``build`` writes (one of the
    case builders of test_trace_hygiene, each the kind of a handed case with its right answer)."""
    build(dst / "traces" / "trace_rank0.json")
    return dst


def _csv_timeline(d: Path) -> dict[str, dict[str, float]]:
    with open(d / "gpu_timeline.csv") as fh:
        return {r["type"]: {"time_ms": float(r["time ms"]), "percent": float(r["percent"])} for r in csv.DictReader(fh)}


def _claims(rep: Report) -> dict[str, object]:
    return {v.claim.id: v for v in rep.claims}


def test_partial_ac2g_run_confirms_the_right_idle(tmp_path):
    rep, _ = _run(_traces_only(partial_ac2g_case, tmp_path / "in"), tmp_path / "out")
    c = _claims(rep)
    assert c["tl.r0.idle_time"].claim.value == pytest.approx(16.67, abs=0.01)
    assert c["tl.r0.idle_time"].verdict.value == "confirmed"
    assert not [k for k, v in c.items() if k.startswith("tl.") and v.verdict.value != "confirmed"]
    rows = {r["type"]: r for r in csv.DictReader(open(tmp_path / "out" / "perf_report_csvs" / "rank0" / "gpu_timeline.csv"))}
    assert float(rows["busy_time"]["time ms"]) == pytest.approx(0.5)
    assert (tmp_path / "out" / "perf_report_csvs" / "rank0" / "kernel_summary.csv").is_file()


def test_hipgraph_no_kernels_report_says_how_to_record(tmp_path):
    rep, _ = _run(_traces_only(hipgraph_no_kernels_case, tmp_path / "in"), tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text() + (tmp_path / "out" / "report.json").read_text()
    assert "graph-replayed kernels were not recorded: 8 graph launches (hipGraphLaunch x8) and 0 GPU events" in text
    assert "_init_for_cuda_graphs" in text and "CPU-only" not in text


def test_overflow_dur_run_clips_and_names_the_overlap(tmp_path):
    rep, _ = _run(_traces_only(overflow_dur_case, tmp_path / "in"), tmp_path / "out")
    c = _claims(rep)
    assert c["tl.r0.idle_time"].claim.value == pytest.approx(20.0) and c["tl.r0.idle_time"].verdict.value == "confirmed"
    assert any("'gemm_A'" in m and "'elementwise_B'" in m and "clipped" in m for m in rep.missing)


def test_duplicate_ranks_kept_apart_each_checked_against_its_own_file(perf_runs, tracelens_refs, tmp_path):
    """93001's two ranks, both rewritten to say rank 0: each keeps its own figures (idle as
    TraceLens's gpu_timeline of that rank's file: 49.11 % and 22.58 %)."""
    d = tmp_path / "in" / "traces"
    d.mkdir(parents=True)
    for name, r in (("hosta_MI300X.json", 0), ("hostb_MI300X.json", 1)):
        doc = json.load(gzip.open(perf_runs / "93001" / "traces" / f"trace_rank{r}.json.gz"))
        doc["distributedInfo"]["rank"] = 0
        (d / name).write_text(json.dumps(doc))
    rep, _ = _run(tmp_path / "in", tmp_path / "out")
    c = _claims(rep)
    a, b = c["tl.r0.idle_time"], c["tl.r0-dup1.idle_time"]
    idle = [_csv_timeline(tracelens_refs / f"93001_rank{r}_perf_report_csvs")["idle_time"]["percent"] for r in (0, 1)]
    assert a.claim.value == pytest.approx(idle[0], abs=0.01) and b.claim.value == pytest.approx(idle[1], abs=0.01)
    assert a.verdict.value == b.verdict.value == "confirmed"
    assert not any("rank 300" in m for m in rep.missing)
    assert any("both say rank 0" in m and "kept apart" in m for m in rep.missing)
    assert not [k for k, v in c.items() if v.verdict.value != "confirmed"]


def test_gpu_work_in_one_of_eight_steps_is_not_compute_bound(tmp_path):
    (tmp_path / "in" / "traces").mkdir(parents=True)
    _steps_trace({3}).write(tmp_path / "in" / "traces" / "trace_rank0.json")
    rep, _ = _run(tmp_path / "in", tmp_path / "out")
    c = _claims(rep)
    assert c["tl.r0.idle_time"].claim.value == pytest.approx(0.0)  # TraceLens's window: the busy step only
    b = c["tl.r0.bottleneck"]
    assert b.claim.value == "unknown" and b.verdict.value == "confirmed"
    assert "1 of 8 profiled steps" in b.claim.statement
    assert rep.bottleneck.klass.value != "compute-bound"
    assert any("1 of 8 profiled steps" in m for m in rep.missing)


@pytest.fixture(scope="module")
def make_traces(repo_root):
    spec = importlib.util.spec_from_file_location("make_traces", repo_root / "bench" / "make_traces.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_multi_rank_straggler_and_busbw_confirmed_by_the_independent_path(make_traces, perf_runs, tmp_path):
    """4 ranks made (bench/make_traces.py) from 93001 rank 0, a real trace whose all-reduce kernels
    carry their message sizes; rank 2's collectives start 500 µs late."""
    files = make_traces.make_set(tmp_path / "in" / "traces", size_mb=1, ranks=4,
                                 source=perf_runs / "93001" / "traces" / "trace_rank0.json.gz",
                                 straggler_rank=2, delay_us=500.0)
    for extra in (tmp_path / "in" / "traces").glob("set.json"):
        extra.unlink()
    assert len(files) == 4
    rep, _ = _run(tmp_path / "in", tmp_path / "out")
    c = _claims(rep)
    s = c["tl.multi.straggler"]
    assert s.claim.value == 2 and s.verdict.value == "confirmed" and s.rederived_value == 2
    assert "arrival order" in s.method
    bw = [v for k, v in c.items() if k.startswith("tl.multi.busbw.")]
    assert bw and all(v.verdict.value == "confirmed" for v in bw)
    assert all("nccl-tests" in v.method for v in bw)
    assert not [k for k, v in c.items() if v.verdict.value == "inconclusive"]


@pytest.mark.slow
def test_largest_real_trace_rank_ok_with_hta_installed(perf_runs, tmp_path):
    """The largest real trace bundled (93005 rank 0, FSDP: 55,018 events, 17 MB of JSON): the rank
    is ok whatever the cross-checks (HTA, TraceLens) say."""
    pytest.importorskip("hta")
    src = perf_runs / "93005" / "traces" / "trace_rank0.json.gz"
    (tmp_path / "in" / "traces").mkdir(parents=True)
    shutil.copy(src, tmp_path / "in" / "traces" / "trace_rank0.json.gz")
    rep, out = _run(tmp_path / "in", tmp_path / "out")
    assert "trace_rank           STATUS=ok; reason=rank 0: engine (stream)" in out
    c = _claims(rep)
    assert not [k for k, v in c.items() if k.startswith("tl.") and v.verdict.value != "confirmed"]


def test_a_path_that_cannot_read_the_trace_is_inconclusive_never_refuted(tmp_path):
    """The trace changed under the verifier (here: truncated after the engine's pass): every
    re-derived claim is inconclusive with the reason, none refuted."""
    from ai4s_graph.graph.analysis.nodes import trace_analyst as TA
    from ai4s_graph.graph.analysis.nodes import trace_verifier as TV
    from ai4s_graph.tools.trace import rank_analysis

    p = partial_ac2g_case(tmp_path / "trace_rank0.json")
    res = TA.as_rank_result(rank_analysis.analyze_rank(str(p), 0, str(tmp_path / "c"), cross_check=False))
    claims = TA.claims_for_rank(res)
    p.write_text(p.read_text()[:200])  # truncated
    verdicts = TV.verify_trace_claims(claims, [res])
    assert verdicts and all(v.verdict.value == "inconclusive" for v in verdicts)
    assert all("could not read the trace" in v.note and "truncated" in v.note for v in verdicts)
    res["reader_error"] = "trace_rank0.json: truncated or not valid JSON (x)"
    assert all(v.verdict.value == "inconclusive" for v in TV.verify_trace_claims(claims, [res]))
