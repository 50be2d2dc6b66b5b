"""The accuracy benchmark (bench/accuracy): the bundled cases carry a valid truth, the judge
scores hand-built reports with known answers, and the scorer on the bundled subset does not drop
below the recorded floor (bench/accuracy/floor.json, written from a measured score)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.accuracy import score as S
from bench.accuracy.cases import CASES, CAUSES

CLASSES = {"compute-bound", "dispatch-bound", "memory-bound", "data-loader-bound", "communication-bound"}
FAULT_KINDS = {"dataloader-stall", "straggler", "slow-link", "exposed-communication", "host-sync",
               "kernel-launch-overhead", "memory-bound-elementwise", "compute-bound-gemm", "sdpa-math-fallback",
               "recompilation", "cuda-launch-blocking", "gpu-contention"}


def test_bundled_cases_cover_the_twelve_fault_kinds_with_a_valid_truth():
    cases = S.load_cases(S.CASES_DIR)
    causes = {t["cause"] for _, t in cases}
    assert FAULT_KINDS <= causes and causes <= set(CAUSES)
    for d, t in cases:
        man = json.loads((d / "manifest.json").read_text())
        assert man["jobid"] == t["jobid"] and man["state"] == "COMPLETED" and man["gpu"] == "NVIDIA H200"
        assert t["class"] is None or t["class"] in CLASSES
        assert t["rank"] is None or 0 <= t["rank"] < man["ranks"]
        traces = sorted(p.name for p in (d / "traces").glob("trace_rank*.json.gz"))
        assert traces == [f"trace_rank{r}.json.gz" for r in range(man["ranks"])]
        assert (d / "telemetry" / "export.jsonl").stat().st_size > 0
        assert any(ln.startswith("Batch ") for ln in (d / "train.log").read_text().splitlines())
    assert sum(p.stat().st_size for p in S.CASES_DIR.rglob("*") if p.is_file()) < 15 * 2**20
    # every case of cases.py that goes into the benchmark is bundled, with the same truth
    want = {c["jobid"]: c["truth"] for c in CASES if c["bench"]}
    got = {t["jobid"]: t for _, t in cases}
    assert set(got) == set(want)
    for jid, t in want.items():
        assert (got[jid]["cause"], got[jid]["rank"]) == (t["cause"], t["rank"])


def _report(klass, rationale="", claims=(), **extra):
    return {"bottleneck": {"klass": klass, "rationale": rationale, **extra},
            "claims": [{"claim": c, "verdict": v} for c, v in claims]}


def test_judge_right_answer_with_a_structured_cause_and_rank():
    truth = {"cause": "straggler", "class": None, "rank": 1}
    r = S.judge(truth, _report("compute-bound", cause="straggler", rank=1,
                               claims=[({"metric": "x"}, "confirmed"), ({"metric": "y"}, "refuted")]))
    assert r["cause_ok"] and r["rank_ok"] and r["class_ok"] is None
    assert (r["claims"], r["confirmed"], r["wrong_confident"], r["unknown"]) == (2, 1, False, False)


def test_judge_cause_from_the_rationale_and_rank_from_a_straggler_claim():
    truth = {"cause": "straggler", "class": None, "rank": 1}
    rep = _report("communication-bound", "rank 1 is a straggler: it arrives last at 56 of 57 collectives",
                  claims=[({"metric": "collectives.straggler_rank", "value": 1, "statement": "rank 1"}, "confirmed")])
    r = S.judge(truth, rep)
    assert r["named_cause"] == "straggler" and r["cause_ok"] and r["named_rank"] == 1 and r["rank_ok"]


def test_judge_counts_a_wrong_class_apart_from_unknown():
    truth = {"cause": "dataloader-stall", "class": "data-loader-bound", "rank": None}
    wrong = S.judge(truth, _report("dispatch-bound", "GPU idle 83% with mean kernel 9 us: kernel launch overhead"))
    assert wrong["wrong_confident"] and not wrong["unknown"] and wrong["class_ok"] is False
    assert wrong["named_cause"] == "kernel-launch-overhead" and wrong["cause_ok"] is False
    unk = S.judge(truth, _report("unknown", "no GPU timeline"))
    assert unk["unknown"] and not unk["wrong_confident"] and unk["named_cause"] is None
    failed = S.judge(truth, None, "exit 1")
    assert failed["class_ok"] is False and failed["error"] == "exit 1" and not failed["wrong_confident"]


def test_summary_and_floor_check_on_known_rows():
    truth_a = {"cause": "host-sync", "class": "dispatch-bound", "rank": None}
    truth_b = {"cause": "straggler", "class": None, "rank": 1}
    rows = [{"case": "a", **S.judge(truth_a, _report("dispatch-bound", "a host sync (.item()) every layer"))},
            {"case": "b", **S.judge(truth_b, _report("compute-bound", "GEMMs dominate"))}]
    res = S.summarize(rows)
    o = res["overall"]
    assert o["class"] == {"right": 1, "of": 1, "accuracy": 1.0}
    assert o["cause"] == {"right": 1, "of": 2, "accuracy": 0.5}
    assert o["rank"] == {"right": 0, "of": 1, "accuracy": 0.0}
    assert res["by_cause"]["host-sync"]["cause"]["right"] == 1
    floor = S.floor_from(res)
    assert S.check_floor(res, floor) == []
    assert S.check_floor(res, {**floor, "cause_right": 2}) == ["cause_right: 1 < floor 2"]
    assert "| host-sync | 1 | 1/1 | 1/1 | n/a |" in S.markdown(res, S.CASES_DIR)


@pytest.mark.slow
def test_scorer_on_the_bundled_subset_stays_above_the_floor(tmp_path):
    floor = json.loads(S.FLOOR.read_text())
    res = S.score(S.CASES_DIR, workers=2, work=tmp_path)
    o = res["overall"]
    assert o["cases"] == floor["cases"] and o["failed_runs"] == 0, [r["error"] for r in res["cases"] if r["error"]]
    assert S.check_floor(res, floor) == []
