"""The LLM verifiers on the real 92003 run (``examples/perf-runs/92003``, ViT bf16 on one H200), replayed from cassettes: re-derivation tools only, a
sub-window claim judged over its own window, the 1-node probe, and the forced final answer when the
tool-call cap is reached. Plus the deterministic telemetry verifier on a sub-window claim, and the
probe itself on the local SLURM cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tenacity import wait_none

sys.path.insert(0, str(Path(__file__).resolve().parent / "cassettes"))
import harness  # noqa: E402

from ai4s_graph.graph.agents import llm  # noqa: E402
from ai4s_graph.state import Claim, Evidence, Tolerance, Verdict, VerifiedClaim  # noqa: E402
from ai4s_graph.state.status import Outcome  # noqa: E402

#: time-weighted raw-sample averages of job 92003's power (``DCGM_FI_DEV_POWER_USAGE`` in
#: telemetry/export.jsonl), by the hand computation :func:`_hand_power_avg` below (checked in
#: ``test_raw_subwindow_stat_known_answers``): over seconds 0-5 after the manifest's SLURM start
#: (start-up: the GPU ramps from 116 W to 590 W over 20 samples) and over the whole 27.9 s SLURM
#: window (113 samples), in W (the plain sample mean of the window is 518.615)
POWER_0_5_W = 332.721
POWER_JOB_W = 517.213
#: 92003's steady step (s): the median of the 380 ``tic4-tic1`` times of train.log after its first
#: epoch of 20 steps (checked by ``_hand_steady_step``)
STEP_S = 0.0621


def _hand_power_avg(run: Path, start_offset_s: float, end_offset_s: float | None) -> tuple[float, int]:
    """Hand computation over the raw JSON: the power samples in the window ``[start, end]`` (whole
    milliseconds, as the export stores them; offsets from the manifest's ``start_unix``), each
    value held until the next sample and the last until ``end``, divided by the time from the first
    sample in the window to ``end``. Returns (W, samples in the window)."""
    m = json.loads((run / "manifest.json").read_text())
    a = round((m["start_unix"] + start_offset_s) * 1000)
    b = round((m["start_unix"] + end_offset_s) * 1000) if end_offset_s is not None else round(m["end_unix"] * 1000)
    for line in (run / "telemetry" / "export.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["metric"]["__name__"] == "DCGM_FI_DEV_POWER_USAGE":
            pts = [(t, v) for t, v in zip(d["timestamps"], d["values"]) if a <= t <= b]
            ends = [t for t, _ in pts[1:]] + [b]
            return sum(v * (e - t) for (t, v), e in zip(pts, ends)) / (b - pts[0][0]), len(pts)
    raise AssertionError("no DCGM_FI_DEV_POWER_USAGE series in the export")


def _hand_steady_step(run: Path) -> float:
    """The median of train.log's per-step ``tic4-tic1`` times after the first epoch (20 steps)."""
    import re
    import statistics

    times = [float(x) for x in re.findall(r"tic4-tic1 in ([0-9.]+) seconds", (run / "train.log").read_text())]
    assert len(times) == 400
    return statistics.median(times[20:])


@pytest.fixture
def record_mode(request) -> str:
    return request.config.getoption("--record-mode", default="none") or "none"


@pytest.fixture(autouse=True)
def _no_retry_wait(monkeypatch):
    from ai4s_graph.graph.agents import runner

    monkeypatch.setattr(runner, "RETRY_WAIT", wait_none())


@pytest.fixture
def run92003(perf_runs) -> dict:
    run = perf_runs / "92003"
    man = json.loads((run / "manifest.json").read_text())
    man["artifacts"] = {"traces": ["traces/trace_rank0.json.gz"], "telemetry": ["telemetry/export.jsonl"],
                        "train_log": "train.log"}
    return {"dir": run, "manifest": man}


def _req(run: dict, out: Path) -> dict:
    return {"perf_run": str(run["dir"]), "out_dir": str(out), "llm": "anthropic", "llm_model": llm.DEFAULT_MODEL,
            "jobid": "92003"}


def _tel_claim(cid: str, metric: str, stat: str, value: float, unit: str, **window) -> Claim:
    key = f"telemetry.{metric}.{stat}"
    return Claim(id=cid, analyst="telemetry_analyst", statement=f"{metric} {stat}", unit=unit, value=value,
                 metric=key + (".warmup" if window else ""),
                 evidence=[Evidence(tool="promql.job_stat", query="avg_over_time(...)", returned={key: value},
                                    args={"metric": metric, "stat": stat, **window})])


def _vc(c: Claim, verdict: Verdict) -> dict:
    return VerifiedClaim(claim=c, verdict=verdict, verifier="telemetry_verifier", tolerance=Tolerance(abs=2.0, rel=0.05),
                         method="deterministic").model_dump(mode="json")


def test_raw_subwindow_stat_known_answers(perf_runs):
    from ai4s_graph.tools.telemetry import export, rawstats
    from ai4s_graph.tools.telemetry.subwindow import raw_subwindow_stat

    run = perf_runs / "92003"
    hand_sub, n_sub = _hand_power_avg(run, 0.0, 5.0)
    hand_full, n_full = _hand_power_avg(run, 0.0, None)
    assert (n_sub, n_full) == (20, 113)
    assert hand_sub == pytest.approx(POWER_0_5_W, abs=0.001) and hand_full == pytest.approx(POWER_JOB_W, abs=0.001)
    s = export.load_export(run / "telemetry" / "export.jsonl")
    m = json.loads((run / "manifest.json").read_text())
    base = (m["start_unix"], m["end_unix"])
    sub, win = raw_subwindow_stat(s, "power", "92003", "avg", 0, 5, base)
    full, _ = raw_subwindow_stat(s, "power", "92003", "avg", None, None, base)
    assert win == (0.0, 5.0) and sub.value == pytest.approx(POWER_0_5_W, abs=0.01) and sub.sample_count == 20
    assert full.value == pytest.approx(rawstats.raw_job_stat(s, "power", "92003", "avg", window=base)) \
        == pytest.approx(POWER_JOB_W, abs=0.01)


def test_deterministic_verifier_judges_a_subwindow_claim_over_its_window(run92003, tmp_path):
    from ai4s_graph.graph.analysis.nodes import telemetry_verifier as TV

    from ai4s_graph.graph.analysis.configuration import RunRequest
    from ai4s_graph.state import Manifest

    c = _tel_claim("llm.telemetry.power_avg_warmup", "power", "avg", POWER_0_5_W, "W", start_offset_s=0, end_offset_s=5.0)
    state = {"request": RunRequest(perf_run=str(run92003["dir"]), out_dir=str(tmp_path)),
             "manifest": Manifest.model_validate(run92003["manifest"]), "findings": {}}
    (v,) = TV._verify_telemetry([c], state)
    v = v.model_dump(mode="json")
    assert v["verdict"] == "confirmed"                  # against the full-window 517 W it would be refuted
    assert v["rederived_value"] == pytest.approx(POWER_0_5_W, abs=0.01)


def test_telemetry_verifier_rederives_over_the_claims_window_and_probes(run92003, tmp_path, monkeypatch, record_mode):
    warm = _tel_claim("llm.telemetry.power_avg_warmup", "power", "avg", POWER_0_5_W, "W", start_offset_s=0, end_offset_s=5.0)
    job = _tel_claim("om.tel.power.avg", "power", "avg", POWER_JOB_W, "W")
    assert _hand_steady_step(run92003["dir"]) == pytest.approx(STEP_S, abs=1e-9)
    step = Claim(id="om.fom.steady_step_time_s", analyst="telemetry_analyst", statement="steady step", unit="s",
                 metric="fom.steady_step_time_s", value=STEP_S,
                 evidence=[Evidence(tool="fom.parse_log", query="train.log", returned=STEP_S)])
    verdicts = [_vc(warm, Verdict.inconclusive), _vc(job, Verdict.confirmed), _vc(step, Verdict.inconclusive)]
    ctx = {"manifest": run92003["manifest"], "findings": {}}
    with harness.anthropic_cassette("telemetry_verifier", record_mode, monkeypatch):
        res = llm.verifier_pass("telemetry_verifier", _req(run92003, tmp_path), ctx, verdicts)
    assert res.status.status is Outcome.ok, res.status.format()
    assert {r["tool"] for r in res.evidence} <= {"telemetry.raw_samples", "trainlog.reread", "slurm.srun_probe"}
    by = {v["claim"]["id"]: v for v in res.verdicts}
    assert by[warm.id]["verdict"] == "confirmed"
    assert by[warm.id]["rederived_value"] == pytest.approx(POWER_0_5_W, abs=0.01)
    # the re-derivation it rests on covers the claim's window, not the whole job
    ev = [e for e in by[warm.id]["evidence"] if e["tool"] == "telemetry.raw_samples"]
    assert ev and ev[0]["args"].get("end_offset_s") == 5.0 and ev[0]["returned"]["window_s"] == [0.0, 5.0]
    assert by[step.id]["verdict"] == "confirmed" and by[step.id]["evidence"][-1]["tool"] == "trainlog.reread"
    probe = [r for r in res.evidence if r["tool"] == "slurm.srun_probe"]
    assert probe and probe[0]["returned"]["reason"] == "not run: no cluster"
    from ai4s_graph.graph.agents.tracing import check_text, claim_sources

    src = {**claim_sources(verdicts), **{r["id"]: r["returned"] for r in res.evidence}}
    for text in [res.prose or "", *(v["note"] for v in res.verdicts)]:
        assert check_text(text, res.numbers, src) == [], text


def test_tool_call_cap_forces_the_final_answer(run92003, tmp_path, monkeypatch, record_mode):
    """Eleven telemetry claims need more re-derivations than the cap allows: after
    MAX_TOOL_CALLS calls the final tool is forced (tool_choice) and the answer still merges."""
    claims = [_tel_claim(f"om.tel.{m}.{s}", m, s, 1.0, u) for m, u in (("power", "W"), ("gpu_util", "%"),
                                                                        ("sm_clock", "MHz"))
              for s in ("avg", "max", "min", "p50")][:11]
    verdicts = [_vc(c, Verdict.inconclusive) for c in claims]
    with harness.anthropic_cassette("telemetry_verifier_cap", record_mode, monkeypatch) as cass:
        res = llm.verifier_pass("telemetry_verifier", _req(run92003, tmp_path), {"manifest": run92003["manifest"]},
                                verdicts)
        last = json.loads(cass.requests[-1].body)
    assert res.status.status is Outcome.ok, res.status.format()
    assert res.tool_calls == llm.MAX_TOOL_CALLS and res.forced_final
    assert last["tool_choice"] == {"type": "tool", "name": "submit_review"}
    # each verdict it changed follows the tolerance on the value it re-derived (1.0 is far off most stats)
    changed = [v for v in res.verdicts if v["verdict"] != "inconclusive"]
    tol = Tolerance(abs=2.0, rel=0.05)
    assert sum(v["verdict"] == "refuted" for v in changed) >= 5
    for v in changed:
        assert (v["verdict"] == "confirmed") == tol.agrees(1.0, v["rederived_value"]), v["claim"]["id"]


@pytest.mark.slurm
def test_probe_runs_one_named_check_on_one_of_the_jobs_nodes(local_cluster):
    from ai4s_graph.tools.slurm import probe

    got = probe.run_probe("matmul", ["not-a-node", "node1"])
    assert got["ran"] and got["node"] == "node1", got
    assert "-N1" in got["command"] and "--time=00:05:00" in got["command"] and "--nodelist=node1" in got["command"]
    assert got["result"]["check"] == "matmul" and got["result"]["tflops"] > 0
    assert probe.run_probe("stream", ["node2"])["result"]["triad_gbps"] > 0
    assert probe.run_probe("matmul", ["vm"]) == {"ran": False, "check": "matmul", "reason": probe.NO_CLUSTER}


def _max_verdicts(nodes_value: float = 1980.0) -> list[VerifiedClaim]:
    out = []
    for metric, stat, v, u in (("sm_clock", "max", nodes_value, "MHz"), ("power", "max", 688.1, "W"),
                               ("gpu_util", "avg", 89.4, "%")):
        c = _tel_claim(f"om.tel.{metric}.{stat}", metric, stat, v, u)
        out.append(VerifiedClaim(claim=c, verdict=Verdict.confirmed, verifier="telemetry_verifier",
                                 tolerance=Tolerance(abs=2.0, rel=0.05), method="raw samples"))
    return out


def test_deterministic_probe_without_a_cluster_says_so():
    from ai4s_graph.tools.slurm import probe

    got = probe.probe_verdicts(_max_verdicts(), ["vm"])
    assert [v.verdict for v in got] == [Verdict.confirmed] * 3              # the probe never changes a verdict
    assert got[0].note == got[1].note == "node probe: not run: no cluster"
    assert got[0].evidence[-1].tool == "slurm.srun_probe" and got[2].evidence == []  # only the probed metrics


@pytest.mark.slurm
def test_deterministic_probe_on_the_local_cluster(local_cluster):
    """The local cluster's nodes have no GPU: the probe runs (srun -N1 on node1) and says so."""
    from ai4s_graph.tools.slurm import probe

    got = probe.probe_verdicts(_max_verdicts(), ["node1"])
    ev = got[0].evidence[-1]
    assert ev.returned["ran"] and ev.returned["node"] == "node1" and "--time=00:05:00" in ev.query
    assert got[0].note.startswith("node probe on node1: ") and "no nvidia-smi or rocm-smi" in got[0].note


def test_run_cli_has_the_probe_flag():
    from typer.testing import CliRunner

    from ai4s_graph.cli import app

    out = CliRunner().invoke(app, ["run", "--help"]).output
    assert "--probe" in out
