"""A lead, not a guess (issue 34 point 5): when no cause is named, the headline and the summary
name the step's largest attribution with its numbers and the measurement that would confirm it,
``report.json`` carries it as ``bottleneck.lead``, and the accuracy benchmark scores it. Known
answers are worked out by hand from hand-built traces (tests/test_step_accounting_traces.py,
tests/verdict_traces.py)."""

from __future__ import annotations

import pytest
from ai4s_graph.state import Bottleneck, BottleneckClass as C, Manifest, NamedCause, Report
from ai4s_graph.tools.report import analysis_report as ar
from ai4s_graph.tools.report import lead as L
from ai4s_graph.tools.trace import host_timeline
from bench.accuracy import score as S
from bench.accuracy.cases import CAUSES
from test_step_accounting_traces import TraceBuilder, every_category


def _acc(b: TraceBuilder, tmp_path) -> dict:
    return host_timeline.step_breakdown(b.write(tmp_path / "t.json")).model_dump(mode="json")


def test_host_lead_is_the_largest_idle_attribution_with_its_numbers(tmp_path):
    # every_category: a 1000 µs step; GPU computation 233, exposed memcpy 8; GPU idle 759 of which
    # outside any op 450 (the largest part of the step), optimizer 117, dataloader 100, op 63 ...
    lead = L.step_lead(_acc(every_category(), tmp_path), rank=0)
    assert (lead.category, lead.us, lead.step_us, lead.share) == ("outside_ops", 450, 1000, pytest.approx(0.45))
    assert lead.text.startswith("The host spent 0.45 ms of the 1 ms step outside any recorded op while the GPU was idle")
    assert lead.text.endswith("(no Python stacks in the trace: no call site)")
    assert lead.confirm == L.CONFIRM["outside_ops"] and "with_stack=True" in lead.confirm


def test_gpu_lead_names_the_largest_kernel(tmp_path):
    # one 1000 µs step: a launch at 10-20 whose kernel runs 30-930: computation 900 > idle 100
    b = TraceBuilder()
    b.step(3, 0, 1000)
    b.op("aten::mm", 5, 20)
    b.launch(10, 10, 30, 900, kernel="void big_gemm()")
    top = [{"name": "ncclDevKernel_AllGather_RING_LL", "percent": 60.0}, {"name": "void big_gemm()", "percent": 100.0}]
    lead = L.step_lead(_acc(b, tmp_path), rank=2, top_kernels=top)  # a communication kernel is not computation
    assert (lead.rank, lead.category, lead.us, lead.share) == (2, "gpu:computation", 900, pytest.approx(0.9))
    assert lead.text == ("The GPU spent 0.9 ms of the 1 ms step computing (largest kernel: void big_gemm(), "
                         "100% of kernel time)")
    assert "roofline" in lead.confirm


def test_idle_side_first_when_the_gpu_idles_more_than_it_works(tmp_path):
    # one 1000 µs step: aten::mm 0-10 launching a kernel that runs 10-410 (computation 400, the largest
    # single part), then the DataLoader 410-760 (350) and Python 760-1000: GPU idle 600 > busy 400, so
    # the lead is the idle time's largest host state, the DataLoader's 350 µs, not the 400 µs of GEMM
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::mm", 0, 10)
    b.launch(2, 6, 10, 400, kernel="void gemm()")
    b.ann("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 410, 350)
    lead = L.step_lead(_acc(b, tmp_path), rank=0)
    assert (lead.category, lead.us, lead.step_us) == ("dataloader", 350, 1000)
    assert lead.confirm == L.CONFIRM["dataloader"]


def test_no_steps_no_lead():
    assert L.step_lead(None) is None and L.step_lead({"steps": []}) is None


def test_every_lead_category_has_a_confirming_measurement():
    assert set(L.CONFIRM) == set(L.LEAD_CATEGORIES)


def _report(lead=None, cause=None) -> Report:
    b = Bottleneck(klass=C.dispatch, cause=cause,
                   causes=[NamedCause(id=cause, claim="x", share=0.5)] if cause else [], lead=lead)
    return Report(jobid="1", bottleneck=b)


def test_headline_and_summary_carry_the_lead_when_no_cause_is_named(tmp_path):
    lead = L.step_lead(_acc(every_category(), tmp_path), rank=0)
    rep = _report(lead)
    head = ar.headline(rep)
    assert len(head) == 3
    assert head[1].startswith("**Lead (no cause named):** rank 0: The host spent 0.45 ms of the 1 ms step outside any "
                              "recorded op")
    assert "— to confirm: profile with with_stack=True" in head[1]
    s = ar.executive_summary(rep, Manifest(jobid="1"))
    assert "No cause named; lead: host outside any recorded op, 0.45 of 1 ms per step." in s
    assert len(s.split()) <= ar.SUMMARY_WORDS
    # a named cause takes the line; the lead is not shown
    named = _report(lead, cause="host-sync")
    assert ar.headline(named)[1].startswith("**Cause:** host-sync — 50.0% of the profiled step")


# ------------------------------------------------------------------------------ the benchmark


def test_the_lead_table_covers_every_cause_with_real_categories():
    assert set(S.LEAD_TRUTH) == set(CAUSES) - {"none"}
    cats = set(L.LEAD_CATEGORIES)
    assert all(v and v <= cats for v in S.LEAD_TRUTH.values())
    assert all(v and v <= cats for v in S.LEAD_CLASS.values())


def _rep(cause=None, lead=None) -> dict:
    return {"bottleneck": {"klass": "dispatch-bound", "cause": cause, "lead": {"category": lead} if lead else None}}


def test_lead_scored_only_where_no_cause_is_named():
    t = {"cause": "per-sample-loop", "class": "dispatch-bound"}
    assert S.lead_right(t, _rep(lead="op")) is True
    assert S.lead_right(t, _rep(lead="gpu:computation")) is False
    assert S.lead_right(t, _rep()) is False                       # no lead where one was due
    assert S.lead_right(t, _rep(cause="per-sample-loop", lead="op")) is None
    assert S.lead_right({**t, "score_cause": False}, _rep(lead="op")) is None
    ctl = {"cause": "none", "class": "compute-bound"}
    assert S.lead_right(ctl, _rep(lead="gpu:computation")) is True
    assert S.lead_right(ctl, _rep(lead="outside_ops")) is False
    assert S.lead_right({"cause": "none", "class": None}, _rep(lead="op")) is None
    row = S.judge(t, _rep(lead="launch"))
    assert (row["lead"], row["lead_ok"]) == ("launch", True)
    res = S.summarize([{"case": "a", **row}, {"case": "b", **S.judge(t, _rep(cause="per-sample-loop"))}])
    assert res["overall"]["lead"] == {"right": 1, "of": 1, "accuracy": 1.0}
