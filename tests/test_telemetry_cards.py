"""Two jobs on one node (issue 25, Omnistat PR#111): GPU series joined to the job by host AND
card where ``rmsjob_info`` names cards, in the analyst's PromQL (a real VictoriaMetrics) and in
the verifier's raw-sample path, each by its own code. Right values computed by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.telemetry import export as E, gpujoin as G, promql as P, rawstats as R

from telemetry_builders import T0, dcgm_gpu, grid, line, perf_run, rms

pytestmark = pytest.mark.vm
runner = CliRunner()


def util_of(gpu: int) -> float:
    """GPU ``gpu`` runs at 10 * (gpu + 1) % all job long: its own GPUs' mean is known by hand."""
    return 10.0 * (gpu + 1)


def _both(vm, tmp_path: Path, text: str, jobid: str, window: tuple[float, float], metric: str = "gpu_util",
          stat: str = "avg") -> tuple[float | None, float | None]:
    p = tmp_path / f"{jobid}.jsonl"
    p.write_text(text)
    vm.import_export(p)
    promql = P.PromQL(vm.url).job_stat(metric, jobid, window, stat).value
    raw = R.raw_job_stat(E.load_export(p), metric, jobid, stat, window=window)
    return promql, raw


@pytest.mark.parametrize("cards", [[0], [1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 7], [6, 7]])
def test_one_to_eight_cards_of_an_eight_gpu_node(vm_server, tmp_path, cards):
    """8 GPUs on the node, the job on ``cards`` (one rmsjob_info series per card, as Omnistat
    writes them), another job on the rest."""
    jobid, host, t0 = f"97{len(cards)}{cards[0]}", f"c8n{len(cards)}{cards[0]}", T0 + 1000 * len(cards) + cards[0]
    ts = grid(t0, t0 + 20)
    text = "".join(dcgm_gpu(host, g, ts, lambda t, g=g: util_of(g)) for g in range(8))
    text += "".join(rms(host, jobid, ts, card=str(c)) for c in cards)
    text += "".join(rms(host, "99999", ts, card=str(c)) for c in range(8) if c not in cards)
    want = sum(util_of(c) for c in cards) / len(cards)  # e.g. cards 1,2,3: (20 + 30 + 40) / 3 = 30
    promql, raw = _both(vm_server, tmp_path, text, jobid, (t0, t0 + 20))
    assert promql == pytest.approx(want) and raw == pytest.approx(want)


@pytest.mark.parametrize("label, want_cards", [("0,2", {0, 2}), ("1-3", {1, 2, 3}), ("[0-1,3]", {0, 1, 3}),
                                               ("IDX:2-3", {2, 3})])
def test_cards_given_as_a_list_or_range_in_one_label(vm_server, tmp_path, label, want_cards):
    """One rmsjob_info series whose card label is SLURM's index list (``scontrol show job -d``)."""
    k = sorted(want_cards)
    jobid, host, t0 = f"971{k[0]}{len(k)}", f"clst{k[0]}{len(k)}", T0 + 20000 + 100 * k[0] + len(k)
    ts = grid(t0, t0 + 20)
    text = "".join(dcgm_gpu(host, g, ts, lambda t, g=g: util_of(g)) for g in range(4)) + rms(host, jobid, ts, card=label)
    promql, raw = _both(vm_server, tmp_path, text, jobid, (t0, t0 + 20))
    want = sum(util_of(c) for c in want_cards) / len(want_cards)  # "0,2": (10 + 30) / 2 = 20
    assert promql == pytest.approx(want) and raw == pytest.approx(want)
    assert {int(c) for c in G.parse_cards(label)} == want_cards
    assert {h: {int(c) for c in cs} for h, cs in R.job_cards(E.load_export(tmp_path / f"{jobid}.jsonl"), jobid).items()} \
        == {host: want_cards}


def test_a_job_over_two_nodes_with_different_cards(vm_server, tmp_path):
    """node A: cards 0,1 (10, 20 %); node B: card 3 (40 %); the other GPUs of both run at their
    own levels for another job. Per-series mean over the job's 3 GPUs: (10 + 20 + 40) / 3."""
    t0 = T0 + 30000
    ts = grid(t0, t0 + 20)
    text = "".join(dcgm_gpu(h, g, ts, lambda t, g=g: util_of(g)) for h in ("twoA", "twoB") for g in range(4))
    text += rms("twoA", "97201", ts, card="0") + rms("twoA", "97201", ts, card="1") + rms("twoB", "97201", ts, card="3")
    promql, raw = _both(vm_server, tmp_path, text, "97201", (t0, t0 + 20))
    assert promql == pytest.approx(70 / 3) and raw == pytest.approx(70 / 3)
    gpus = P.PromQL(vm_server.url).job_gpus("97201", (t0, t0 + 20))
    assert gpus.describe() == "GPUs of this job only (twoA: cards 0,1; twoB: cards 3)"


def test_no_card_label_joins_by_host_and_says_so_when_the_node_is_shared(vm_server, tmp_path):
    """rmsjob_info without card labels (Omnistat before PR#111): all four GPUs of the node count,
    (10 + 20 + 30 + 40) / 4 = 25, and the other job seen on the node is named."""
    t0 = T0 + 40000
    ts = grid(t0, t0 + 20)
    text = "".join(dcgm_gpu("plain1", g, ts, lambda t, g=g: util_of(g)) for g in range(4))
    text += rms("plain1", "97301", ts) + rms("plain1", "97302", ts)
    promql, raw = _both(vm_server, tmp_path, text, "97301", (t0, t0 + 20))
    assert promql == pytest.approx(25.0) and raw == pytest.approx(25.0)
    gpus = P.PromQL(vm_server.url).job_gpus("97301", (t0, t0 + 20))
    assert not gpus.by_card and gpus.host_only == ["plain1"] and gpus.others == {"plain1": ["97302"]}
    assert gpus.problems() == ["plain1 also ran job 97302 in the window and rmsjob_info carries no card label there: "
                               "its statistics cover every GPU of the node, the other job's included"]


def test_omnistat_card_labels_join_amd_series(vm_server, tmp_path):
    """Omnistat names the GPU in ``card`` on both rmsjob_info and rocm_* series."""
    t0 = T0 + 50000
    ts = grid(t0, t0 + 20)
    text = "".join(_rocm("amd1", g, ts, util_of(g)) for g in range(4))
    text += rms("amd1", "97401", ts, card="2") + rms("amd1", "97401", ts, card="3")
    promql, raw = _both(vm_server, tmp_path, text, "97401", (t0, t0 + 20))
    assert promql == pytest.approx(35.0) and raw == pytest.approx(35.0)  # (30 + 40) / 2


def _rocm(host: str, card: int, ts: list[float], util: float) -> str:
    lab = {"card": str(card), "instance": host}
    return (line("rocm_utilization_percentage", lab, [(t, util) for t in ts])
            + line("rocm_average_socket_power_watts", lab, [(t, 500.0) for t in ts]))


@pytest.mark.parametrize("bad", ["a-b", "3-1", "0,x", ""])
def test_a_card_label_that_is_no_index_list_is_refused(bad):
    with pytest.raises(InputError, match="card label"):
        G.parse_cards(bad)


def _shared_node_two_jobs(perf_runs: Path, tmp_path: Path) -> Path:
    """The handed case, built here: one node with 4 GPUs runs two jobs for 30 s (4 Hz): job 93012
    on GPUs 0,1 (90 %, 600 W), job 93013 on GPUs 2,3 (10 %, 150 W); Omnistat's rmsjob_info carries
    a ``card`` label per GPU of each job. 92001's train.log and trace stand for the job's own."""
    t0 = T0 + 70000
    ts = grid(t0, t0 + 30)
    mine = {0, 1}
    text = "".join(dcgm_gpu("node1", g, ts, lambda t, g=g: 90.0 if g in mine else 10.0,
                            power=lambda t, g=g: 600.0 if g in mine else 150.0) for g in range(4))
    text += "".join(rms("node1", "93012" if c in mine else "93013", ts, card=str(c)) for c in range(4))
    run = perf_run(tmp_path, "93012", text, start=t0, end=t0 + 30, nodes=["node1"], gpus_per_node=2,
                   log=(perf_runs / "92001" / "train.log").read_text())
    (run / "traces").mkdir()
    shutil.copy(perf_runs / "92001" / "traces" / "trace_rank0.json.gz", run / "traces" / "trace_rank0.json.gz")
    return run


def test_handed_case_two_jobs_on_one_node(perf_runs, tmp_path):
    run = _shared_node_two_jobs(perf_runs, tmp_path)
    out = tmp_path / "o"
    r = runner.invoke(app, ["run", "--job", "93012", "--perf-run", str(run), "--out", str(out)])
    rep = Report.model_validate_json((out / "report.json").read_text())
    got = {v.claim.metric: v for v in rep.claims}
    # job 93012's own GPUs 0,1 run at 90 % and 600 W; the node's average (with 93013's 10 %, 150 W) is 50 %, 375 W
    assert got["telemetry.gpu_util.avg"].claim.value == 90.0 and got["telemetry.gpu_util.avg"].verdict.value == "confirmed"
    assert got["telemetry.power.avg"].claim.value == 600.0 and got["telemetry.power.avg"].verdict.value == "confirmed"
    assert "GPUs of this job only (node1: cards 0,1); node shared with job 93013 on node1" in \
        got["telemetry.gpu_util.avg"].claim.statement
    assert "node shared with job 93013" in rep.statuses["telemetry_analyst"] and "joined by host and card" in \
        got["telemetry.power.avg"].method
    assert r.exit_code == 0


def test_perf_run_with_cards_through_the_cli(tmp_path):
    """A job on cards 1,2 of a 4-GPU node, end to end: 25 % ((20 + 30) / 2), power of its own GPUs."""
    ts = grid(T0 + 60000, T0 + 60020)
    text = "".join(dcgm_gpu("cli1", g, ts, lambda t, g=g: util_of(g), power=lambda t, g=g: 100.0 * (g + 1))
                   for g in range(4))
    text += rms("cli1", "97501", ts, card="1,2") + rms("cli1", "97502", ts, card="0")
    run = perf_run(tmp_path, "97501", text, start=T0 + 60000, end=T0 + 60020, nodes=["cli1"], gpus_per_node=2)
    out = tmp_path / "o"
    runner.invoke(app, ["run", "--job", "97501", "--perf-run", str(run), "--out", str(out)])
    rep = Report.model_validate_json((out / "report.json").read_text())
    got = {v.claim.metric: v for v in rep.claims}
    assert got["telemetry.gpu_util.avg"].claim.value == pytest.approx(25.0)
    assert got["telemetry.power.avg"].claim.value == pytest.approx(250.0)  # (200 + 300) / 2
    assert got["telemetry.gpu_util.avg"].verdict.value == "confirmed"
    assert "cli1: cards 1,2" in got["telemetry.gpu_util.avg"].claim.statement
