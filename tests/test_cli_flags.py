"""The command line's common habits (issue 27, item 6): ``--version``; ``-q`` (only STATUS lines and
errors); ``--json`` on ``run``, ``diff`` (tests/test_diff_bundled.py), ``eval-cluster --check`` and
``trace timeline`` (the input notes inside the JSON, not on stderr); progress of a multi-rank ``run``
and of the accuracy benchmark; ``--llm-model`` for the LLM of ``run`` (``--model`` kept, deprecated);
the cross-checks opt-in (``--cross-check hta|tracelens``, none by default)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ai4s_graph import REPO_ROOT, __version__

ROOT = Path(REPO_ROOT or Path(__file__).resolve().parent.parent)
NOTES_TRACE = ROOT / "examples" / "perf-runs" / "92003" / "traces" / "trace_rank0.json.gz"  # 39 sub-µs cuBLASLt clips


@pytest.fixture(scope="module")
def app():
    from ai4s_graph.cli import app

    return app


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    return e


def test_version():
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "--version"], env=_env(), capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 0 and cp.stdout == f"ai4s-graph {__version__}\n"


def test_trace_timeline_quiet_and_json_notes(app):
    loud = CliRunner().invoke(app, ["trace", "timeline", str(NOTES_TRACE)])
    assert loud.exit_code == 0 and loud.stderr.count("warning: ") == 4  # 3 named, then "... and 36 more"
    for args in (["trace", "timeline", str(NOTES_TRACE), "-q"], ["-q", "trace", "timeline", str(NOTES_TRACE)]):
        q = CliRunner().invoke(app, args)
        assert q.exit_code == 0 and q.stderr == ""
        assert q.stdout.splitlines() == [loud.stdout.strip().splitlines()[-1].split("; 4 input")[0]]
    js = CliRunner().invoke(app, ["trace", "timeline", str(NOTES_TRACE), "--json"])
    data = json.loads(js.stdout)
    assert js.stderr == "" and len(data["notes"]) == 4 and all("clipped" in n for n in data["notes"])
    again = CliRunner().invoke(app, ["trace", "timeline", str(NOTES_TRACE)])  # -q does not outlive its call
    assert again.stderr.count("warning: ") == 4


def test_eval_cluster_check_json(app, tmp_path):
    bad = tmp_path / "REPORT.md"
    bad.write_text("# not a report\n\nno sections here\n")
    res = CliRunner().invoke(app, ["eval-cluster", "--check", str(bad), "--json"])
    out = json.loads(res.stdout)
    assert res.exit_code == 1 and out["command"] == "eval-cluster --check" and out["exit_code"] == 1
    assert out["violations"][0]["rule"] == "structure" and out["status"].startswith("STATUS=fail")
    res = CliRunner().invoke(app, ["eval-cluster", "--check", str(tmp_path / "none.md"), "--json"])
    assert res.exit_code == 2 and json.loads(res.stdout)["violations"] is None


def test_run_model_is_a_deprecated_alias_and_cross_check_is_checked(app):
    res = CliRunner().invoke(app, ["run", "--model", "claude-x"])
    assert res.exit_code == 2 and "`run --model` is deprecated" in res.stderr and "--llm-model" in res.stderr
    res = CliRunner().invoke(app, ["run", "--perf-run", str(ROOT / "examples" / "perf-runs" / "93001"),
                                   "--cross-check", "nsys", "--out", "/nonexistent/x"])
    assert res.exit_code == 2 and "--cross-check must be hta or tracelens" in res.stdout


def test_accuracy_bench_progress_lines():
    from bench.accuracy import score as S

    p = S._Progress(2)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        p.case_done({"case": "ddp-straggler", "class": "compute-bound", "class_ok": True, "cause_ok": True, "error": ""})
        p.case_done({"case": "dl-stall", "error": "timed out after 600 s"})
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("[1/2] ddp-straggler: class compute-bound (right), cause right, ")
    assert lines[1].startswith("[2/2] dl-stall: failed: timed out after 600 s")
    quiet = S._Progress(1, quiet=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        quiet.case_done({"case": "x", "error": ""})
    assert err.getvalue() == ""


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", "--job", "93001", "--perf-run",
                           str(ROOT / "examples" / "perf-runs" / "93001"), "--out", str(out), "--llm", "none",
                           "--checkpoint", str(out.parent / f"{out.name}.sqlite"), *extra],
                          env=_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_run_json_progress_and_cross_check_opt_in(tmp_path):
    cp = _run(tmp_path / "plain", "--json")
    assert cp.returncode == 0, cp.stderr[-2000:]
    out = json.loads(cp.stdout)  # one JSON object on stdout; the node lines went to stderr
    assert out["schema_version"] == 1 and out["command"] == "run" and out["jobid"] == "93001"
    assert out["bottleneck"]["class"] == "communication-bound" and out["claims"]["confirmed"] > 0
    assert Path(out["files"]["report_json"]).is_file() and out["exit_code"] == 0
    ranks = [s["status"] for s in out["statuses"] if s["node"] == "trace_rank"]
    assert len(ranks) == 2 and not any("cross-checks" in s for s in ranks)  # none unless asked
    assert "progress: 1/2 rank traces analysed" in cp.stderr and "progress: 2/2 rank traces analysed" in cp.stderr
    q = _run(tmp_path / "q", "-q", "--cross-check", "hta")
    assert q.returncode == 0
    lines = q.stdout.splitlines()
    assert all("STATUS=" in ln for ln in lines) and "progress" not in q.stderr
    hta = [ln for ln in lines if ln.startswith("trace_rank") and "cross-checks: hta" in ln]
    assert len(hta) == 2, lines


# ---- issue 27 report 5 point 4: with --json a refusal is a JSON object too, its exit code unchanged

def _refusal(res, code: int, *needles: str) -> dict:
    assert res.exit_code == code, res.output
    out = json.loads(res.stdout)  # the whole of stdout is one JSON object, no plain STATUS line
    assert out["outcome"] == "fail" and out["exit_code"] == code and out["status"].startswith("STATUS=fail; reason=")
    for n in needles:
        assert n in out["reason"], (n, out["reason"])
    assert out["status"] == f"STATUS=fail; reason={out['reason']}"
    return out


@pytest.mark.parametrize("args, needle", [
    (["--job", "92001", "--perf-run", "/nonexistent/92001"], "no such directory"),
    (["--job", "92001", "--perf-run", str(ROOT / "examples/perf-runs/92001"), "--out", ""], "--out is empty"),
    ([], "no job given"),
    (["--job", "92001", "--llm", "gpt"], "bad --llm"),
])
def test_run_json_refusal_is_json(app, args, needle):
    res = CliRunner().invoke(app, ["run", *args, "--json"])
    _refusal(res, 2, needle)
    plain = CliRunner().invoke(app, ["run", *args])
    assert plain.exit_code == 2 and plain.stdout.strip().startswith("STATUS=fail; reason=")


def test_trace_timeline_json_refusal_is_json(app, tmp_path):
    bad = tmp_path / "trace_rank0.json"
    bad.write_text('{"traceEvents": [')  # truncated
    _refusal(CliRunner().invoke(app, ["trace", "timeline", str(bad), "--json"]), 2, "trace_rank0.json")
    _refusal(CliRunner().invoke(app, ["trace", "timeline", str(tmp_path / "none.json"), "--json"]), 2)
    _refusal(CliRunner().invoke(app, ["trace", "timeline", str(NOTES_TRACE), "--json", "--backend", "nope"]), 2,
             "unknown backend")


@pytest.mark.parametrize("sub", ["steps", "comm"])
def test_trace_steps_and_comm_json_refusal_is_json(app, tmp_path, sub):
    """``trace steps --json`` and ``trace comm --json`` refuse a truncated or missing trace with one
    JSON object naming the command, exit 2, as ``trace timeline`` does."""
    bad = tmp_path / "trace_rank0.json"
    bad.write_text('{"traceEvents": [')  # truncated
    out = _refusal(CliRunner().invoke(app, ["trace", sub, str(bad), "--json"]), 2, "trace_rank0.json")
    assert out["command"] == f"trace {sub}"
    _refusal(CliRunner().invoke(app, ["trace", sub, str(tmp_path / "none.json"), "--json"]), 2)
    plain = CliRunner().invoke(app, ["trace", sub, str(bad)])
    assert plain.exit_code == 2 and plain.stdout.strip().startswith("STATUS=fail; reason=")


@pytest.mark.parametrize("flag", ["--perf-run", "--out"])
def test_a_path_through_a_symlink_loop_is_refused_in_one_line(app, tmp_path, flag):
    """A ``--perf-run`` or ``--out`` through a symlink loop: one ``error:`` line and ``STATUS=fail``,
    exit 2 (``Path.resolve`` raised RuntimeError before, a traceback)."""
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    other = {"--perf-run": ["--out", str(tmp_path / "o")], "--out": ["--perf-run", str(ROOT / "examples/perf-runs/92001")]}
    args = ["run", "--job", "92001", flag, str(tmp_path / "l1" / "x"), *other[flag], "--checkpoint", str(tmp_path / "c.db")]
    out = _refusal(CliRunner().invoke(app, [*args, "--json"]), 2, flag, "ymlink loop")
    assert "\n" not in out["reason"]
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 2 and plain.stdout.strip().startswith("STATUS=fail; reason=")
    assert not (tmp_path / "o").exists()
