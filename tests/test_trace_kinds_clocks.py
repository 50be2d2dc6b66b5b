"""Clock skew between ranks (issue 25; dftracer#160, TraceLens PR#599): each rank's trace has its own
clock. Hand-built ranks with a known straggler and known clock offsets: the analyst (collectives,
TraceLens's straggler summary on aligned clocks) and the verifier (crossrank_check, its own
alignment and arrival order) must both name the true straggler, or say that the clocks cannot
resolve the arrival order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import trace_build as tb  # noqa: E402

from ai4s_graph.cli import app  # noqa: E402
from ai4s_graph.graph.analysis.nodes import trace_analyst as TA  # noqa: E402
from ai4s_graph.graph.analysis.nodes.trace_verifier import verify_trace_claims  # noqa: E402
from ai4s_graph.state import Report  # noqa: E402
from ai4s_graph.tools.trace import crossrank_check, rank_analysis  # noqa: E402
from slurm_faults import UNKNOWN_JOBID  # noqa: E402

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _rank(rank: int, world: int, clock, late: dict[int, float], ends=lambda c, r: 0.0, n: int = 6) -> dict:
    """Rank ``rank``'s trace of ``n`` all-reduces: collective c starts at T = 10000 + 1000 c on the true
    clock; rank r arrives at T + late[r] after a GEMM from T - 300; every rank leaves at T + 150 +
    ends(c, r). The rank's clock reads true time + clock(c)."""
    ev = []
    for c in range(n):
        t, off = 10_000.0 + 1000.0 * c, clock(c)
        arrive, leave = t + late.get(rank, 0.0), t + 150.0 + ends(c, rank)
        for corr, name, s, e, st, extra in (
                (2 * c + 1, "sm90_gemm", t - 300.0, arrive, 7, {}),
                (2 * c + 2, AR, arrive, leave, 20, {"Collective name": "allreduce", "In msg nelems": 1 << 20,
                                                     "Out msg nelems": 1 << 20, "dtype": "Float", "Group size": world,
                                                     "Process Group Name": "0"})):
            ev += [tb.op("aten::mm" if st == 7 else "c10d::allreduce_", t - 400.0 + off + corr, 6.0),
                   tb.launch(corr, t - 399.0 + off + corr),
                   tb.kernel(name, s + off, e - s, corr, stream=st, **extra)]
    return tb.doc(ev, rank, world_size=world)


def _analyse(tmp: Path, docs: dict[int, dict]):
    """The analyst's cross-rank report and claims, and the verifier's verdict on the straggler claim."""
    paths = {r: str(tb.write(tmp / f"trace_rank{r}.json", d)) for r, d in docs.items()}
    recs = rank_analysis.analyze_ranks(paths, cache_dir=str(tmp / "cache"), workers=1)
    good = [dict(TA.as_rank_result(r), path=paths[r["rank"]]) for r in recs]
    multi = TA._multi_rank(good)
    claims = [c for c in multi.pop("claims") if c.metric == "collectives.straggler_rank"]
    verdicts = verify_trace_claims(claims, good)
    return multi["collectives"], claims, verdicts, crossrank_check.arrival_straggler(paths)


OFFSETS = {
    # name: ({rank: clock offset us}, true straggler, its lateness us)
    "rank 0's clock 400 us ahead (the issue)": ({0: 400.0, 1: 0.0}, 1, 100.0),
    "rank 0's clock 400 us behind": ({0: -400.0, 1: 0.0}, 1, 100.0),
    "rank 1's clock 5 ms ahead": ({0: 0.0, 1: 5000.0}, 0, 100.0),
    "an offset just above the lateness": ({0: 130.0, 1: 0.0}, 1, 100.0),
    "4 ranks, offsets of either sign": ({0: 0.0, 1: 250.0, 2: -700.0, 3: 40.0}, 2, 100.0),
    "one clock, no offset": ({0: 0.0, 1: 0.0}, 1, 100.0),
}


@pytest.mark.parametrize("member", list(OFFSETS))
def test_the_true_straggler_is_named_whatever_the_clock_offsets(tmp_path, member):
    offsets, straggler, late = OFFSETS[member]
    world = len(offsets)
    coll, claims, verdicts, indep = _analyse(
        tmp_path, {r: _rank(r, world, lambda c, o=o: o, {straggler: late}) for r, o in offsets.items()})
    # each rank's offset from rank 0's clock, found from the collectives' ends
    assert {int(r): v for r, v in coll["clock_offsets_us"].items()} == pytest.approx(
        {r: o - offsets[0] for r, o in offsets.items()})
    assert indep["offsets_us"] == pytest.approx({r: o - offsets[0] for r, o in offsets.items()})
    assert [c.value for c in claims] == [straggler]
    assert [v.verdict.value for v in verdicts] == ["confirmed"]
    assert indep["rank"] == straggler and indep["times_last"] == indep["n_resolved"] == 6
    rows = {r["rank"]: r for r in coll["stragglers"]["rows"]}
    assert rows[straggler]["total_wait_us"] == pytest.approx(0.0, abs=1e-6)
    for r in offsets:
        if r != straggler:
            assert rows[r]["mean_wait_us"] == pytest.approx(late)  # the others wait its lateness, no more
    aligned = [n for n in coll["notes"] if n.startswith("ranks' clocks aligned")]
    assert bool(aligned) == any(offsets.values())
    if aligned:
        for r, o in offsets.items():
            if r != 0:
                assert f"rank {r} {o - offsets[0]:+.1f} us" in aligned[0]


def test_clocks_that_jitter_more_than_the_arrival_differences_name_no_straggler(tmp_path):
    # rank 1 arrives 5 us after rank 0 at every all-reduce, but the ranks' ends differ by 20 us, one
    # way then the other (a clock that jitters): the start spread (5 us) is within the end spread
    # (20 us) at every collective, so the arrival order is not resolved; compared raw (TraceLens),
    # rank 1 arrives last at all 6 and would be named
    coll, claims, _v, indep = _analyse(tmp_path, {r: _rank(r, 2, lambda c: 0.0, {1: 5.0},
                                                         ends=lambda c, r: 20.0 * r * (1 if c % 2 else -1))
                                                 for r in (0, 1)})
    assert claims == [] and coll["stragglers"]["claim"] is None
    note = next(n for n in coll["notes"] if n.startswith("the arrival order is resolved"))
    assert note.startswith("the arrival order is resolved at 0 of 6 synchronising collectives")
    assert "exceeds what the arrival order can resolve" in note
    assert indep["rank"] is None and indep["n_resolved"] == 0


def test_a_drifting_clock_is_said_not_guessed(tmp_path):
    # rank 0's clock drifts 60 us per collective (0 .. 300 us) while rank 1 is 100 us late: one
    # offset (the median, -150 us) leaves the ends 30 to 150 us apart; the arrival order is resolved
    # at 4 of 6 collectives (rank 1 last at all 4: 67 % < the 75 % a claim needs with 2 ranks)
    coll, claims, _v, indep = _analyse(tmp_path, {0: _rank(0, 2, lambda c: 60.0 * c, {1: 100.0}),
                                                 1: _rank(1, 2, lambda c: 0.0, {1: 100.0})})
    assert claims == [] and coll["clock_offsets_us"]["1"] == pytest.approx(-150.0)
    assert any(n.startswith("the arrival order is resolved at 4 of 6") for n in coll["notes"])
    assert indep["n_resolved"] == 4 and indep["last_counts"] == {0: 0, 1: 4}


def test_run_names_the_true_straggler_and_says_the_clocks_were_aligned(tmp_path):
    (tmp_path / "in" / "traces").mkdir(parents=True)
    for r, o in {0: 400.0, 1: 0.0}.items():
        tb.write(tmp_path / "in" / "traces" / f"trace_rank{r}.json", _rank(r, 2, lambda c, o=o: o, {1: 100.0}))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", "--job", UNKNOWN_JOBID, "--perf-run", str(tmp_path / "in"), "--out", str(out),
                                   "--checkpoint", str(tmp_path / "c.sqlite")])
    rep = Report.model_validate_json((out / "report.json").read_text())
    s = {v.claim.id: v for v in rep.claims}["tl.multi.straggler"]
    assert s.claim.value == 1 and s.verdict.value == "confirmed", res.output
    assert "ranks' clocks aligned on the ends of 6 synchronising collectives" in (out / "report.md").read_text()
