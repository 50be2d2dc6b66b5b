"""tools/report/drawing.py: the report's figures drawn in processes of their own give the same PNG,
the same errors and the same filing as drawn in the graph's process (real inputs: the bundled
runs' TraceLens timelines and 92003's telemetry export, and ``run`` over the bundled example both
ways); and cli's fast exit keeps what the interpreter's exit does (threads, atexit, the code)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.report import drawing, plots
from test_plots import telemetry_92003, tracelens_timelines

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def lanes(monkeypatch):
    """Figures drawn in lanes (the switch the 2-core machine needs: its default draws here)."""
    monkeypatch.setenv(drawing.FIGURE_LANES_ENV, "1")


def _inputs(tracelens_refs, perf_runs, out: Path) -> list[tuple[str, tuple, dict]]:
    tls = dict(tracelens_timelines(tracelens_refs))
    series, window = telemetry_92003(perf_runs)
    steps = [{"step": s, "computation_ms": 10.0 + s, "exposed_comm_ms": 1.5 * s, "exposed_memcpy_ms": 0.25,
              "idle_ms": 30.0 - s} for s in range(12)]
    return [
        ("gpu_breakdown", ({"rank 0": tls["92003_rank0"], "rank 1": tls["92001_rank0"]}, out / "gpu.png"), {}),
        ("telemetry", (series, {"DCGM_FI_DEV_GPU_UTIL": "%"}, window, out / "tel.png"), {"title": "job 92003"}),
        ("step_breakdown", ({"0": steps, "1": steps[::-1]}, out / "steps.png"), {"marked": "1"}),
    ]


def test_a_lane_draws_the_same_png_as_this_process(lanes, tmp_path, tracelens_refs, perf_runs, monkeypatch):
    jobs = _inputs(tracelens_refs, perf_runs, tmp_path)
    with plots.staged() as in_lanes:
        started = [drawing.Drawing(name, *args, **kw) for name, args, kw in jobs]
        assert all(d.lane is not None for d in started)  # each started in a process of its own
        paths = [d.result() for d in started]
    monkeypatch.setenv(drawing.FIGURE_LANES_ENV, "0")
    with plots.staged() as here:
        here_paths = [drawing.Drawing(name, *args, **kw).result() for name, args, kw in jobs]
    assert paths == here_paths == [args[-1] for _, args, _ in jobs]
    assert [p for p, _ in in_lanes] == [p for p, _ in here] == paths  # staged in the order started
    for (_, a), (_, b) in zip(in_lanes, here):
        assert a[:8] == b"\x89PNG\r\n\x1a\n"
        assert a == b  # byte for byte
    assert not list(tmp_path.iterdir())  # staged: nothing written yet


def test_figures_take_the_lanes_started_idle(lanes, tmp_path, tracelens_refs, perf_runs, monkeypatch):
    """drawing.prestart: one idle lane per figure; each Drawing hands its figure to one (one that ended
    meanwhile is passed over, a figure with none left starts its own): the same PNGs as drawn here."""
    jobs = _inputs(tracelens_refs, perf_runs, tmp_path)
    try:
        assert drawing.prestart(None) == len(drawing.FIGURES) == len(jobs)
        idle = list(drawing._idle)
        idle[0].proc.kill()
        idle[0].proc.wait()
        with plots.staged() as in_lanes:
            started = [drawing.Drawing(name, *args, **kw) for name, args, kw in jobs]
            assert [d.lane for d in started[:2]] == idle[1:]  # handed the live idle lanes, in order
            assert started[2].lane is not None and started[2].lane not in idle  # none left: its own
            assert drawing._idle == []
            [d.result() for d in started]
    finally:
        drawing.drop_idle()
    monkeypatch.setenv(drawing.FIGURE_LANES_ENV, "0")
    assert drawing.prestart(None) == 0 and drawing._idle == []
    with plots.staged() as here:
        [drawing.Drawing(name, *args, **kw).result() for name, args, kw in jobs]
    assert [p for p, _ in in_lanes] == [p for p, _ in here]
    assert [b for _, b in in_lanes] == [b for _, b in here]  # byte for byte


def test_a_figure_no_lane_can_take_leaves_the_idle_lanes(lanes, tmp_path):
    """A figure whose input does not pickle is drawn here; the idle lanes stay for the others."""
    class Local(dict):  # a local class: its instances do not pickle
        pass

    try:
        assert drawing.prestart(None) == len(drawing.FIGURES)
        idle = list(drawing._idle)
        timeline = Local(computation_time={"time_ms": 1.0, "percent": 100.0})
        d = drawing.Drawing("gpu_breakdown", {"rank 0": timeline}, tmp_path / "g.png")
        assert d.lane is None and d.result() == tmp_path / "g.png"
        assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert drawing._idle == idle and all(lane.proc.poll() is None for lane in idle)
    finally:
        drawing.drop_idle()


def test_idle_lanes_no_figure_took_are_stopped(lanes):
    assert drawing.prestart(None) == len(drawing.FIGURES)
    idle = list(drawing._idle)
    drawing.drop_idle()
    assert drawing._idle == [] and all(lane.proc.returncode is not None for lane in idle)


def test_outside_a_staged_block_the_lanes_png_is_published(lanes, tmp_path, tracelens_refs, perf_runs):
    name, args, kw = _inputs(tracelens_refs, perf_runs, tmp_path)[0]
    got = drawing.Drawing(name, *args, **kw).result()
    assert got == tmp_path / "gpu.png"
    with plots.staged() as files:
        plots.plot_gpu_breakdown(*args, **kw)
    assert got.read_bytes() == files[0][1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.png"]  # no temporary file left


def test_a_figures_error_is_raised_by_result_as_by_the_plain_call(lanes, tmp_path):
    bad = {"rank 0": {"computation_time": {"time_ms": -1.0}}}
    with pytest.raises(InputError) as plain:
        plots.plot_gpu_breakdown(bad, tmp_path / "bad.png")
    d = drawing.Drawing("gpu_breakdown", bad, tmp_path / "bad.png")
    assert d.lane is not None
    with pytest.raises(InputError) as got:
        d.result()
    assert str(got.value) == str(plain.value) == "rank rank 0: computation_time.time_ms is negative (-1.0)"
    assert not (tmp_path / "bad.png").exists()


def test_the_switch_and_an_unknown_figure(monkeypatch, tmp_path, tracelens_refs, perf_runs):
    monkeypatch.setenv(drawing.FIGURE_LANES_ENV, "0")
    name, args, kw = _inputs(tracelens_refs, perf_runs, tmp_path)[2]
    d = drawing.Drawing(name, *args, **kw)
    assert d.lane is None and (tmp_path / "steps.png").is_file()  # drawn at once, here
    monkeypatch.setenv(drawing.FIGURE_LANES_ENV, "1")
    assert drawing.lanes_on()
    with pytest.raises(KeyError):
        drawing.Drawing("os.system", "true")
    with pytest.raises(KeyError):  # a lane is handed a name of FIGURES only
        drawing.draw("os.system", ("true",), {})


def test_figure_lanes_only_beside_a_long_annotated_trace(monkeypatch, tmp_path):
    # unset switch: lanes only while this process writes the annotated copy of a trace long enough
    # for the trace's own lanes (lanes.lanes_for), on MIN_CPUS CPUs or more
    from ai4s_graph.graph.analysis.nodes import synthesizer
    from ai4s_graph.tools.trace import lanes

    monkeypatch.delenv(drawing.FIGURE_LANES_ENV, raising=False)
    monkeypatch.delenv(lanes.LANES_ENV, raising=False)
    monkeypatch.setattr(lanes, "usable_cpus", lambda: 16)
    small = next((REPO / "examples/perf-runs/92001/traces").iterdir())  # a few MB: below the lanes' size
    assert not drawing.lanes_on() and not drawing.lanes_on(None)
    assert not lanes.lanes_for(small) and not drawing.lanes_on(small)
    monkeypatch.setenv(lanes.LANES_ENV, "1")  # the trace's lanes forced on: the figures' follow
    assert drawing.lanes_on(small)
    findings = {"trace": {"ranks": [{"rank": 0, "path": str(small)}]}}
    assert synthesizer.figure_lanes(findings, 0) and synthesizer.figure_lanes(findings, None)
    assert not synthesizer.figure_lanes({"trace": {"ranks": [{"rank": 0}]}}, 0)  # no trace to annotate
    monkeypatch.setattr(lanes, "usable_cpus", lambda: drawing.MIN_CPUS - 1)
    assert not drawing.lanes_on(small)
    monkeypatch.setenv(lanes.LANES_ENV, "0")
    monkeypatch.setattr(lanes, "usable_cpus", lambda: 16)
    assert not drawing.lanes_on(small)
    monkeypatch.setenv(drawing.FIGURE_LANES_ENV, "1")  # the figures' own switch wins
    assert drawing.lanes_on(None) and drawing.lanes_on(small)
    monkeypatch.setenv(drawing.FIGURE_LANES_ENV, "0")
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    assert not drawing.lanes_on(small)
    d = drawing.Drawing("gpu_breakdown", {"rank 0": {"computation_time": {"time_ms": 1.0, "percent": 100.0}}},
                        tmp_path / "g.png", lane=False)
    assert d.lane is None


def _run(out: Path, lanes_env: str, **more: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), AI4S_STATE_DIR=str(out / "state"),
               **{drawing.FIGURE_LANES_ENV: lanes_env}, **more)
    env.pop("AI4S_TRACE_CACHE", None)
    out.mkdir()
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", "--perf-run",
                         str(REPO / "examples/perf-runs/92001"), "--out", str(out / "out"), "--checkpoint",
                         str(out / "ck.sqlite"), "--llm", "none"], env=env, capture_output=True, text=True,
                        cwd=str(out), timeout=600)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    rep = json.loads((out / "out/report.json").read_text())
    return {"status": cp.stdout.strip().splitlines()[-1], "plots": [Path(p).name for p in rep["plots"]],
            "missing": rep["missing"],
            "png": {p.name: p.read_bytes() for p in sorted((out / "out").glob("*.png"))}}


def test_run_draws_the_same_report_figures_in_lanes(tmp_path):
    """Drawn here, in lanes started by the synthesizer, and in the idle lanes ``run`` starts with the
    trace's prefetched lanes (``AI4S_TRACE_LANES=1``: cli/run.py prefetch_trace, drawing.prestart)."""
    here, lanes_ = _run(tmp_path / "here", "0"), _run(tmp_path / "lanes", "1")
    early = _run(tmp_path / "early", "1", **{"AI4S_TRACE_LANES": "1"})
    for other, tag in ((lanes_, "/lanes/"), (early, "/early/")):
        assert other["status"].replace(tag, "/here/") == here["status"]
        assert other["plots"] == here["plots"] == ["gpu_time_breakdown.png", "telemetry.png", "step_time_breakdown.png"]
        assert other["missing"] == here["missing"]
        assert set(other["png"]) == set(here["png"]) == set(here["plots"])
        for name in here["png"]:
            assert other["png"][name] == here["png"][name], name


_EXIT_CHILD = """
import atexit, sys, threading, time
from pathlib import Path
out = Path(sys.argv[1])
def late():
    time.sleep(0.2)
    (out / "thread.txt").write_text("done")
threading.Thread(target=late).start()  # not a daemon: the exit waits for it
atexit.register(lambda: (out / "atexit.txt").write_text("ran"))
sys.stdout.write("buffered, no newline")
sys.argv = ["ai4s-graph"] + sys.argv[2:]
import ai4s_graph.cli as cli
cli.entry()
"""


@pytest.mark.parametrize("args,rc", [(["--version"], 0), (["no-such-command"], 2)], ids=["ok", "usage"])
def test_fast_exit_keeps_the_threads_atexit_output_and_code(tmp_path, args, rc):
    env = dict(os.environ, PYTHONPATH=str(REPO), AI4S_STATE_DIR=str(tmp_path / "state"))
    cp = subprocess.run([sys.executable, "-c", _EXIT_CHILD, str(tmp_path), *args], env=env, capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == rc, cp.stderr
    assert cp.stdout.startswith("buffered, no newline")
    assert ("ai4s-graph 0.1.0" in cp.stdout) if rc == 0 else ("STATUS=fail; reason=" in cp.stdout)
    assert (tmp_path / "thread.txt").read_text() == "done"
    assert (tmp_path / "atexit.txt").read_text() == "ran"


def test_fast_exit_codes(tmp_path):
    code = "import ai4s_graph.cli as c, sys; c.fast_exit(sys.argv[1] if sys.argv[1] != 'none' else None)"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    got = {}
    for arg in ("none", "refused: no trace"):
        cp = subprocess.run([sys.executable, "-c", code, arg], env=env, capture_output=True, text=True, timeout=60)
        got[arg] = (cp.returncode, cp.stderr.strip())
    cp = subprocess.run([sys.executable, "-c", "import ai4s_graph.cli as c; c.fast_exit(7)"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert got == {"none": (0, ""), "refused: no trace": (1, "refused: no trace")}
    assert cp.returncode == 7
