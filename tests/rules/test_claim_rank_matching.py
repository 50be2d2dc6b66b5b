"""A trace-analyst claim is matched to its rank trace by the path ANY evidence item cites, else by
its label or (when only one file has it) its rank (graph/rules/verdict.py:rank_result_of): a claim
whose first evidence cites no path (a manifest count, a PromQL statistic first) was never matched,
so its cause's re-derivation had no rank tables. Hand-built claim lists with known matches."""

from __future__ import annotations

from ai4s_graph.graph.analysis.nodes.trace_verifier import verify_trace_claims
from ai4s_graph.graph.rules import verdict
from ai4s_graph.state import Claim, Evidence

# two files claiming rank 0 (the second labelled 0-dup1) and rank 1
RESULTS = [{"path": "/r/trace_rank0.json", "rank": 0, "label": "0"},
           {"path": "/r/trace_rank0_dup.json", "rank": 0, "label": "0-dup1"},
           {"path": "/r/trace_rank1.json", "rank": 1, "label": "1"}]


def _claim(*args: dict, cid: str = "tl.r1.idle_time", metric: str = "gpu_timeline.idle_time.percent",
           value: float = 50.0) -> Claim:
    return Claim(id=cid, analyst="trace_analyst", statement="s", metric=metric, value=value, unit="%",
                 evidence=[Evidence(tool="t", query="q", returned=value, args=a) for a in args])


def test_the_path_of_any_evidence_item_matches():
    c = _claim({"cores": 16}, {"metric": "cpu_util"}, {"path": "/r/trace_rank1.json"})
    assert verdict.rank_result_of(c, RESULTS) is RESULTS[2]
    # a path no result has does not match by itself; the rank beside it then decides
    assert verdict.rank_result_of(_claim({"path": "/elsewhere.json", "rank": 1}), RESULTS) is RESULTS[2]
    # the first item's path wins over a later rank
    assert verdict.rank_result_of(_claim({"path": "/r/trace_rank0_dup.json"}, {"rank": 1}), RESULTS) is RESULTS[1]


def test_a_label_names_one_file_and_a_rank_only_when_one_file_has_it():
    assert verdict.rank_result_of(_claim({}, {"label": "0-dup1"}), RESULTS) is RESULTS[1]
    assert verdict.rank_result_of(_claim({"rank": "0-dup1"}), RESULTS) is RESULTS[1]
    assert verdict.rank_result_of(_claim({}, {"rank": 1}), RESULTS) is RESULTS[2]
    assert verdict.rank_result_of(_claim({"rank": "1"}), RESULTS) is RESULTS[2]
    # rank 0 is claimed by two files: without a path or label the claim is not matched (never swapped)
    assert verdict.rank_result_of(_claim({"rank": 0}), RESULTS) is None
    assert verdict.rank_result_of(_claim({"rank": 0}), RESULTS[:1]) is RESULTS[0]
    # nothing names a rank (a cross-rank claim), or a boolean that is no rank
    assert verdict.rank_result_of(_claim({"metric": "x"}), RESULTS) is None
    assert verdict.rank_result_of(_claim({"rank": True}), RESULTS) is None


def test_the_verifier_re_derives_a_cause_claim_whose_first_evidence_cites_no_path():
    # the DataLoader share claim of rank 1, its first evidence a manifest count (no path), its second the
    # rank: re-derived from rank 1's reader tables (36.4 of 62.9 ms = 0.5787 vs the claimed 0.5803: confirmed);
    # rank 0's tables (12 ms) would refute it; unmatched it would be inconclusive
    results = [{**RESULTS[0], "raw_counts": {}, "reader": {"dataloader_ms_per_step": 12.0, "step_time_ms": 62.9}},
               {**RESULTS[2], "raw_counts": {}, "reader": {"dataloader_ms_per_step": 36.4, "step_time_ms": 62.9}}]
    c = _claim({"num_workers": 1}, {"rank": 1}, cid="triage.t8.dataloader_stall", metric="dataloader.step_share",
               value=round(36.5 / 62.9, 6))
    [v] = verify_trace_claims([c], results)
    assert v.verdict.value == "confirmed" and v.rederived_value == round(36.4 / 62.9, 6)
    c0 = _claim({"num_workers": 1}, {"rank": 0}, cid="triage.t8.dataloader_stall", metric="dataloader.step_share",
                value=round(36.5 / 62.9, 6))
    assert verify_trace_claims([c0], results)[0].verdict.value == "refuted"
    cx = _claim({"num_workers": 1}, cid="triage.t8.dataloader_stall", metric="dataloader.step_share",
                value=round(36.5 / 62.9, 6))
    assert verify_trace_claims([cx], results)[0].verdict.value == "inconclusive"
