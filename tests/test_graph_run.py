"""The main job end to end on the real shared runs (issue 2's 'Done when')."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.graph.runtime import read_journal
from ai4s_graph.state import Report, StatusLine

pytestmark = pytest.mark.vm
runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["run", *args])
    return r.exit_code, r.output


def _report(out: Path) -> Report:
    return Report.model_validate_json((out / "report.json").read_text())


def _verdict(rep: Report, cid: str):
    return next(v for v in rep.claims if v.claim.id == cid)


@pytest.fixture(scope="module")
def r91001(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("r91001")
    code, text = _run("--job", "91001", "--perf-run", str(shared_data / "perf-runs/91001"), "--out", str(out),
                      "--checkpoint", str(out / "ck.sqlite"))
    assert code == 0, text
    return out, text


def test_91001_is_dispatch_bound_with_confirmed_trace_numbers(r91001):
    out, text = r91001
    rep = _report(out)
    assert rep.bottleneck.klass.value == "dispatch-bound"
    assert rep.nodes_list == ["vm"]
    idle = _verdict(rep, "tl.r0.idle_time")
    assert idle.verdict.value == "confirmed"
    assert idle.claim.value == pytest.approx(89.49, abs=0.05)          # GPU idle ~89% (data README)
    assert idle.rederived_value == pytest.approx(idle.claim.value, abs=0.01)
    mk = _verdict(rep, "tl.r0.mean_kernel_us")
    assert mk.verdict.value == "confirmed" and mk.claim.value < 5.0   # kernels of ~3 µs: launch overhead
    step = _verdict(rep, "om.fom.steady_step_time_s")
    assert step.verdict.value == "confirmed" and step.claim.value == pytest.approx(0.0152, abs=2e-4)
    util = _verdict(rep, "om.tel.gpu_util.avg")
    assert util.verdict.value == "confirmed" and util.claim.value < 30
    # every node printed its STATUS line, and it parses strictly
    for node in ("launcher", "trace_rank", "trace_analyst", "telemetry_analyst", "trace_verifier",
                 "telemetry_verifier", "synthesizer"):
        assert StatusLine.parse(rep.statuses[node])
        assert f"{node}" in text
    md = (out / "report.md").read_text()
    assert md.index("**Nodes:** vm") < md.index("## Executive summary") < md.index("## Bottleneck: dispatch-bound")
    assert (out / "gpu_time_breakdown.png").stat().st_size > 1000 and (out / "telemetry.png").exists()
    assert json.loads((out / "foms.json").read_text())["steady_step_time_s"] == pytest.approx(0.0152, abs=2e-4)


def test_91003_is_compute_bound(shared_data, tmp_path):
    code, text = _run("--job", "91003", "--perf-run", str(shared_data / "perf-runs/91003"), "--out", str(tmp_path))
    assert code == 0, text
    rep = _report(tmp_path)
    assert rep.bottleneck.klass.value == "compute-bound"
    comp = _verdict(rep, "tl.r0.computation_time")
    assert comp.verdict.value == "confirmed" and comp.claim.value == pytest.approx(90.83, abs=0.05)
    assert _verdict(rep, "tl.r0.bottleneck").claim.value == "compute-bound"
    tel = _verdict(rep, "om.tel.gpu_util.avg")
    assert tel.verdict.value == "confirmed" and tel.claim.value == pytest.approx(89.4, abs=0.2)  # notes: 89.4 %
    assert all(v.verdict.value == "confirmed" for v in rep.claims), [
        (v.claim.id, v.verdict.value, v.note) for v in rep.claims if v.verdict.value != "confirmed"]


def test_91001_compare_91002_applies_the_precision_discriminator(shared_data, tmp_path):
    code, text = _run("--job", "91001", "--perf-run", str(shared_data / "perf-runs/91001"),
                      "--compare", str(shared_data / "perf-runs/91002"), "--out", str(tmp_path))
    assert code == 0, text
    rep = _report(tmp_path)
    sp = _verdict(rep, "om.compare.speedup")
    assert sp.verdict.value == "confirmed" and sp.claim.value == pytest.approx(1.0066, abs=0.01)
    cls = _verdict(rep, "om.compare.bottleneck")
    assert cls.verdict.value == "confirmed" and cls.claim.value == "dispatch-bound"
    assert rep.bottleneck.klass.value == "dispatch-bound"
    assert "om.compare.bottleneck" in rep.bottleneck.supporting_claims
    assert "lesson 13" in rep.bottleneck.rationale
    assert "(seed 000 lesson 13))." in rep.bottleneck.rationale and ".)." not in rep.bottleneck.rationale


def test_rerun_of_a_finished_run_does_not_run_nodes_again(r91001, shared_data):
    out, _ = r91001
    before = len(read_journal(out))
    code, text = _run("--job", "91001", "--perf-run", str(shared_data / "perf-runs/91001"), "--out", str(out),
                      "--checkpoint", str(out / "ck.sqlite"))
    assert code == 0 and "already complete" in text
    assert len(read_journal(out)) == before


def _cli(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_killed_after_the_analysts_resumes_without_rerunning_them(shared_data, tmp_path):
    env = {**os.environ, "AI4S_STATE_DIR": str(tmp_path / "state"), "AI4S_FAULT": "exit-before:trace_verifier"}
    args = ["--job", "91003", "--perf-run", str(shared_data / "perf-runs/91003"), "--out", str(tmp_path / "out")]
    first = _cli(args, env)
    assert first.returncode == 137, first.stdout + first.stderr        # died like a SIGKILL, mid-graph
    j = read_journal(tmp_path / "out")
    ended = [r["node"] for r in j if r["event"] == "end"]
    assert {"launcher", "trace_rank", "trace_analyst", "telemetry_analyst"} <= set(ended)
    assert not (tmp_path / "out" / "report.md").exists()
    env.pop("AI4S_FAULT")
    second = _cli(args, env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resuming at" in second.stdout
    starts: dict[str, int] = {}
    for r in read_journal(tmp_path / "out"):
        if r["event"] == "start":
            starts[r["node"]] = starts.get(r["node"], 0) + 1
    assert starts["launcher"] == starts["trace_analyst"] == starts["telemetry_analyst"] == 1
    assert starts["trace_rank"] == 1
    assert starts["trace_verifier"] == 1 and starts["synthesizer"] == 1   # killed before its first start
    assert _report(tmp_path / "out").bottleneck.klass.value == "compute-bound"


def test_a_node_that_raises_is_resumed_at_that_node(shared_data, tmp_path):
    env = {**os.environ, "AI4S_STATE_DIR": str(tmp_path / "state"), "AI4S_FAULT": "raise-before:synthesizer"}
    args = ["--job", "91003", "--perf-run", str(shared_data / "perf-runs/91003"), "--out", str(tmp_path / "out")]
    first = _cli(args, env)
    assert first.returncode == 1 and "re-run to resume" in first.stdout
    env.pop("AI4S_FAULT")
    second = _cli(args, env)
    assert second.returncode == 0 and "resuming at synthesizer" in second.stdout
    starts = [r["node"] for r in read_journal(tmp_path / "out") if r["event"] == "start"]
    assert starts.count("telemetry_verifier") == 1 and starts.count("trace_analyst") == 1
    assert starts.count("synthesizer") == 1  # raised before it started the first time


# ---- bad input: one-line error, a fail/partial STATUS for that branch, and a report naming what is missing


def _copy_run(shared_data: Path, jobid: str, dst: Path) -> Path:
    run = dst / jobid
    shutil.copytree(shared_data / "perf-runs" / jobid, run)
    for p in run.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    run.chmod(0o755)
    return run


def test_truncated_trace(shared_data, tmp_path):
    run = _copy_run(shared_data, "91003", tmp_path)
    tr = run / "traces/trace_rank0.json.gz"
    tr.write_bytes(tr.read_bytes()[: tr.stat().st_size // 3])
    code, text = _run("--job", "91003", "--perf-run", str(run))
    rep = _report(run)
    assert rep.statuses["trace_rank"].startswith("STATUS=fail")
    assert rep.statuses["trace_analyst"].startswith("STATUS=fail")
    assert any("trace_rank0.json.gz" in m and ("truncated" in m or "corrupt" in m) for m in rep.missing), rep.missing
    assert all("\n" not in m for m in rep.missing)
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=ok")       # the other branch still reports
    assert _verdict(rep, "om.fom.steady_step_time_s").verdict.value == "confirmed"
    assert "## What was missing" in (run / "report.md").read_text()
    assert rep.statuses["synthesizer"].startswith("STATUS=partial")


def test_trace_with_no_gpu_events(shared_data, tmp_path):
    import gzip

    run = _copy_run(shared_data, "91001", tmp_path)
    tr = run / "traces/trace_rank0.json.gz"
    data = json.loads(gzip.decompress(tr.read_bytes()))
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")]
    tr.write_bytes(gzip.compress(json.dumps(data).encode()))
    code, text = _run("--job", "91001", "--perf-run", str(run))
    rep = _report(run)
    assert rep.statuses["trace_analyst"].startswith("STATUS=partial")
    assert "no GPU events" in rep.statuses["trace_analyst"]
    assert any("no GPU" in m for m in rep.missing)
    assert _verdict(rep, "om.tel.gpu_util.avg").verdict.value == "confirmed"   # telemetry still reported
    assert _verdict(rep, "om.fom.epoch_time_s").verdict.value == "confirmed"   # and the FOM


def test_empty_log(shared_data, tmp_path):
    run = _copy_run(shared_data, "91003", tmp_path)
    (run / "train.log").write_text("")
    code, text = _run("--job", "91003", "--perf-run", str(run))
    rep = _report(run)
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")
    assert any("train.log" in m and "empty" in m for m in rep.missing), rep.missing
    assert rep.bottleneck.klass.value == "compute-bound"                     # the trace still decides


def test_unreachable_tsdb(shared_data, tmp_path):
    code, text = _run("--job", "91003", "--perf-run", str(shared_data / "perf-runs/91003"), "--out", str(tmp_path),
                      "--tsdb-url", "http://127.0.0.1:9")
    rep = _report(tmp_path)
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")
    miss = [m for m in rep.missing if "telemetry" in m]
    assert miss and "unreachable" in miss[0] and "\n" not in miss[0]
    assert not any(v.claim.metric.startswith("telemetry.") for v in rep.claims)
    assert _verdict(rep, "tl.r0.idle_time").verdict.value == "confirmed"


def test_unknown_job_id_is_one_line(tmp_path):
    # a --perf-run that does not exist is refused before anything runs (issue 26: it used to end in a
    # "Nothing was analysed" report over the earlier one); tests/hostile/test_out_dirs.py has the kind
    code, text = _run("--job", "424242", "--perf-run", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert code == 2
    lines = [ln for ln in text.splitlines() if ln.startswith("STATUS=")]
    assert len(lines) == 1 and lines[0].startswith("STATUS=fail") and "no such directory" in lines[0]
    assert not (tmp_path / "o").exists()


def test_malformed_manifest_is_refused_and_nothing_written(shared_data, tmp_path):
    # refused before anything runs (issue 26: with --fresh it replaced a good report);
    # tests/hostile/test_manifests.py has the kind
    run = _copy_run(shared_data, "91001", tmp_path)
    (run / "manifest.json").write_text('{"jobid": "91001", "global_batch_size": "sixteen"}')
    code, text = _run("--job", "91001", "--perf-run", str(run))
    lines = [ln for ln in text.splitlines() if ln.startswith("STATUS=")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("STATUS=fail; reason=malformed")
    assert "global_batch_size" in lines[0] and not (run / "report.json").exists()
    assert (run / "manifest.json").read_text() == '{"jobid": "91001", "global_batch_size": "sixteen"}'


def test_nan_losses_do_not_abort_the_run(shared_data, tmp_path):
    import re

    run = _copy_run(shared_data, "91001", tmp_path)
    log = run / "train.log"
    log.write_text(re.sub(r"loss [0-9.]+", "loss nan", log.read_text()))
    code, text = _run("--job", "91001", "--perf-run", str(run))
    assert code == 0, text
    rep = _report(run)
    assert _verdict(rep, "om.fom.steady_step_time_s").verdict.value == "confirmed"
    foms = json.loads((run / "foms.json").read_text())
    # epoch losses are means of finite values (none here); the NaN losses make a diverged run
    assert foms["epoch_losses"] == [] and foms["loss_diverged"] is True
    assert _verdict(rep, "om.fom.loss_diverged").verdict.value == "confirmed"
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")


def test_trace_with_non_numeric_timestamps_is_one_line(shared_data, tmp_path):
    import gzip

    run = _copy_run(shared_data, "91001", tmp_path)
    tr = run / "traces/trace_rank0.json.gz"
    data = json.loads(gzip.decompress(tr.read_bytes()))
    k = next(e for e in data["traceEvents"] if e.get("cat") == "kernel")
    k["ts"] = "abc"
    tr.write_bytes(gzip.compress(json.dumps(data).encode()))
    code, text = _run("--job", "91001", "--perf-run", str(run))
    rep = _report(run)
    # the one kernel without a numeric ts is dropped by both readers and said, in one line; the rest is read
    assert rep.statuses["trace_rank"].startswith("STATUS=ok") and "1 input warning" in rep.statuses["trace_rank"]
    assert any("trace_rank0.json.gz" in m and "1 GPU event(s) without a numeric, finite ts or dur dropped" in m
               and "\n" not in m for m in rep.missing), rep.missing
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=ok")


def test_broken_telemetry_line_is_named(shared_data, tmp_path):
    run = _copy_run(shared_data, "91003", tmp_path)
    exp = run / "telemetry/export.jsonl"
    lines = exp.read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]
    exp.write_text("\n".join(lines) + "\n")
    code, text = _run("--job", "91003", "--perf-run", str(run))
    rep = _report(run)
    assert rep.statuses["telemetry_analyst"].startswith("STATUS=partial")
    assert any("export.jsonl: 1 line(s) dropped (line 3: not JSON)" in m for m in rep.missing), rep.missing


def test_read_only_run_dir_is_never_written(shared_data, tmp_path, monkeypatch):
    run = _copy_run(shared_data, "91003", tmp_path)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    run.chmod(0o555)
    monkeypatch.chdir(tmp_path)
    try:
        code, text = _run("--job", "91003", "--perf-run", str(run))
    finally:
        run.chmod(0o755)
    assert code == 0, text
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert (tmp_path / "ai4s-reports/91003/report.md").exists()


def test_a_deleted_report_is_written_again(r91001, shared_data):
    out, _ = r91001
    (out / "report.md").unlink()
    code, text = _run("--job", "91001", "--perf-run", str(shared_data / "perf-runs/91001"), "--out", str(out),
                      "--checkpoint", str(out / "ck.sqlite"))
    assert code == 0 and "report.md is gone" in text
    assert "## Bottleneck: dispatch-bound" in (out / "report.md").read_text()


def test_usage_errors_end_with_a_status_line():
    import subprocess

    cp = subprocess.run([sys.executable, "-c", "from ai4s_graph.cli import main; main()", "run", "--bogus"],
                        capture_output=True, text=True)
    assert cp.returncode == 2
    assert cp.stdout.strip().splitlines()[-1].startswith("STATUS=fail; reason=No such option: --bogus")
    cp = subprocess.run([sys.executable, "-c", "from ai4s_graph.cli import main; main()", "run", "--job", "1",
                         "--tsdb-url", "garbage"], capture_output=True, text=True)
    assert cp.returncode == 2 and "must be an http(s)://host:port URL" in cp.stdout


def test_a_rerun_takes_rank_results_from_the_trace_cache(shared_data, tmp_path):
    args = ("--job", "91003", "--perf-run", str(shared_data / "perf-runs/91003"), "--out", str(tmp_path))
    code, first = _run(*args)
    assert code == 0 and "from the trace cache" not in first
    code, second = _run(*args, "--fresh")
    assert code == 0 and "rank 0: engine (stream), 2805 kernels (from the trace cache: same content hash)" in second
    assert _report(tmp_path).bottleneck.klass.value == "compute-bound"
