"""The step's time budget per rank (issue 34 point 6) and its critical path (point 2) in report.md and
report.json. Known answers are worked out by hand from the hand-built traces
(tests/test_step_accounting_traces.py:every_category; tests/verdict_traces.py for two ranks)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.tools.report import budget as B
from ai4s_graph.tools.trace import host_timeline
from test_step_accounting_traces import every_category

import verdict_traces as vt


@pytest.fixture(scope="module")
def every(tmp_path_factory):
    p = every_category().write(tmp_path_factory.mktemp("b") / "t.json")
    return B.rank_budget(host_timeline.step_breakdown(p).model_dump(mode="json"), 0)


def test_budget_numbers_of_a_known_step(every):
    b = every
    assert (b["rank"], b["steps"], b["step_ms"], b["unit"]) == (0, 1, 1.0, "ms")
    # GPU: K1 215-400 and K2 472-520 (computation 233 µs), the copy 402-410 (exposed memcpy 8), idle 759
    assert b["gpu"] == pytest.approx({"computation": 0.233, "exposed communication": 0.0, "exposed memcpy": 0.008,
                                      "idle": 0.759})
    # host over the step and while the GPU idled (tests/test_step_accounting.py works both out)
    assert b["host"] == pytest.approx({"launch": 0.020, "allocator": 0.020, "sync": 0.057, "dataloader": 0.100,
                                       "optimizer": 0.165, "runtime_other": 0.005, "op": 0.163, "outside_ops": 0.470})
    assert b["host_while_gpu_idle"]["outside_ops"] == pytest.approx(0.450)
    assert b["host_while_gpu_idle"]["allocator"] == 0.0
    cp = b["critical_path"]
    # the path: dataloader 100, outside 50 + 400, op 50 + 8, launch delay 15, K1 185, gap 2, copy 8,
    # sync return 2, optimizer 40 + 60 + 65, launch 10, event record 5: 1000 µs
    assert cp["length_ms"] == pytest.approx(1.0)
    assert cp["by_category"] == pytest.approx({"dataloader": 0.1, "outside_ops": 0.45, "op": 0.058, "launch_delay": 0.015,
                                               "gpu:computation": 0.185, "gpu_gap": 0.002, "gpu:memcpy": 0.008,
                                               "sync_return": 0.002, "optimizer": 0.165, "launch": 0.01,
                                               "runtime_other": 0.005})
    # by op: outside every op 450; aten::linear's host 50 + its launch delay 15 + K1 185 = 250
    assert [(x["key"], x["ms"]) for x in cp["top_ops"][:2]] == [("(outside ops)", pytest.approx(0.45)),
                                                                ("aten::linear", pytest.approx(0.25))]
    assert cp["top_ops"][0]["share"] == pytest.approx(0.45)
    assert cp["top_sites"] == [] and cp["has_python_stacks"] is False


def test_both_sides_of_the_table_add_up_to_the_step(every):
    rows = B.budget_rows(every)
    gpu = [r for r in rows if r["side"] == "GPU"]
    host = [r for r in rows if r["side"] == "host"]
    assert [r["what"] for r in gpu] == ["computation", "exposed communication", "exposed memcpy", "idle"]
    assert sum(r["ms"] for r in gpu) == pytest.approx(1.0) and sum(r["ms"] for r in host) == pytest.approx(1.0)
    assert sum(r["idle_ms"] for r in host) == pytest.approx(every["gpu"]["idle"])
    assert sum(r["pct"] for r in host) == pytest.approx(100.0)
    out = next(r for r in host if r["what"] == "outside any recorded op")
    assert (out["ms"], out["pct"], out["idle_ms"], out["path_ms"]) == pytest.approx((0.47, 47.0, 0.45, 0.45))


def test_path_sentence_names_the_top_ops_and_says_why_no_call_site(every):
    s = B.path_text(every)
    assert s.startswith("Critical path (1 ms per step): top ops `(outside ops)` 45%, `aten::linear` 25%")
    assert "no Python call site: the trace holds no Python stacks (profile with with_stack=True)" in s
    assert "also on the path: launch to kernel start 0.015 ms, gaps on a stream 0.002 ms, sync returns 0.002 ms." in s


def test_no_steps_no_budget():
    assert B.rank_budget(None, 0) is None and B.rank_budget({"steps": []}, 1) is None


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    d = tmp_path_factory.mktemp("budget")
    # 10 ms steps: 3 ms of GEMM, then a 6 ms all-reduce together (rank 1 arrives 1 µs late)
    steps = {r: [[("gemm", 0.0, 3.0), ("allreduce", 3.0 + 0.001 * r, 6.0 - 0.001 * r)] for _ in range(4)]
             for r in (0, 1)}
    run = vt.write_run(d / "run", "95103", steps, 10.0)
    r = CliRunner().invoke(app, ["run", "--job", "95103", "--perf-run", str(run), "--out", str(d / "o"), "-q"])
    assert r.exit_code == 0, r.output
    return json.loads((d / "o" / "report.json").read_text()), (d / "o" / "report.md").read_text()


def test_one_budget_per_rank_in_both_files(two_ranks):
    rep, md = two_ranks
    by_rank = {b["rank"]: b for b in rep["step_budget"]}
    assert sorted(by_rank) == [0, 1]
    # rank 0: computation 3 ms, all-reduce 3-9 ms exposed (6 ms), idle 1 ms; rank 1's all-reduce 3.001-9
    assert by_rank[0]["gpu"] == pytest.approx({"computation": 3.0, "exposed communication": 6.0, "exposed memcpy": 0.0,
                                               "idle": 1.0}, abs=1e-6)
    assert by_rank[1]["gpu"]["exposed communication"] == pytest.approx(5.999, abs=1e-6)
    assert by_rank[0]["step_ms"] == pytest.approx(10.0)
    assert "## Step time budget" in md and md.count("| side | state | ms per step |") == 2
    assert "### Rank 0" in md and "### Rank 1" in md
    assert "| GPU | exposed communication | 6.000 | 60.0 |" in md
    assert md.count("Critical path (10 ms per step): top ops") == 2
    # the step picture's bars: every rank, every profiled step (steps 10-13 of the hand-built trace)
    for r in (0, 1):
        assert [x["step"] for x in by_rank[r]["per_step"]] == [10, 11, 12, 13]
        assert all(x["wall_ms"] == pytest.approx(10.0) and x["computation_ms"] == pytest.approx(3.0)
                   for x in by_rank[r]["per_step"])
    assert by_rank[0]["per_step"][2]["exposed_comm_ms"] == pytest.approx(6.0)
    assert any(p.endswith("step_time_breakdown.png") for p in rep["plots"])


def test_a_slow_all_reduce_is_named_and_takes_the_lead_line(two_ranks):
    # the 6 ms all-reduce of 64 Mi fp32 elements (256 MiB) between the two ranks runs at ~45 GB/s of bus bandwidth,
    # 0.1 of the H200's 450 GB/s NVLink (slow_link.SLOW_LINK_FRAC = 0.2): the slow link is the cause, so the
    # headline names it and no lead is needed (tests/test_report_lead.py covers the lead on causeless runs)
    rep, _ = two_ranks
    b = rep["bottleneck"]
    assert b["cause"] == "slow-link" and b.get("lead") is None
    assert not rep["headline"][1].startswith("**Lead (no cause named):**")