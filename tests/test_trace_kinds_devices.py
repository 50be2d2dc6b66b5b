"""Field-input kinds of what a trace file covers (issues 25 and 33): several GPUs in one file
(NVIDIA/PyProf#79, ROCm/omnitrace#208: nn.DataParallel, a model split over devices) and CUDA/HIP
graph replays only partly recorded (TraceLens#728). Hand-built members, figures computed by hand;
the engine and the verifier's reader each give them by their own code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import trace_build as tb  # noqa: E402

from ai4s_graph.cli import app  # noqa: E402
from slurm_faults import UNKNOWN_JOBID  # noqa: E402


def _rows(res: dict, reader: str) -> dict:
    return res["timeline"] if reader == "engine" else res["reader"]["timeline"]


# ---------------------------------------------------------------------------------- several GPUs


def _devices(busy: list[tuple[float, float]], *, by: str = "device") -> list[dict]:
    """One kernel per device ``k`` over ``busy[k]`` (µs), each launched; the device named by
    ``args.device`` (``by="device"``), or only by the GPU row's pid ``"GPU k"`` (``by="pid"``)."""
    ev = []
    for k, (t0, t1) in enumerate(busy):
        kw = {"device": k, "pid": k} if by == "device" else {"device": None, "pid": f"GPU {k}"}
        ev += tb.launched(f"kernel_on_{k}", t0, t1 - t0, 100 + k, launch_ts=t0 - 50.0 if t0 >= 50 else 0.0, **kw)
    return ev


DEVICES = {
    # device 0 busy [0, 800], device 1 [800, 1000]: pooled they read as one GPU busy 100 %; per device
    # 80 % and 20 % of the common window of 1000 us: summed busy 1000 of 2000 us = 50 %
    "2 devices, 80 % and 20 % (issue 33)": ([(0.0, 800.0), (800.0, 1000.0)], "device", 50.0, "0"),
    "2 devices named by their pid only": ([(0.0, 800.0), (800.0, 1000.0)], "pid", 50.0, "GPU 0"),
    # busy 600 + 300 + 400 of 3 x 1000 us = 43.33 %; device 0 the busiest
    "3 devices, unequal": ([(0.0, 600.0), (0.0, 300.0), (600.0, 1000.0)], "device", 100 * 1300 / 3000, "0"),
    # devices 0..6 busy 100..700 us, device 7 all 1000 us: 2800 + 1000 of 8000 us = 47.5 %
    "8 devices": ([(0.0, 100.0 * (k + 1)) for k in range(7)] + [(0.0, 1000.0)], "device", 47.5, "7"),
}


@pytest.mark.parametrize("member", list(DEVICES))
def test_several_gpus_in_one_file_get_figures_per_device(tmp_path, member):
    busy, by, busy_pct, top = DEVICES[member]
    res, v = tb.both(tb.write(tmp_path / "t.json", _devices(busy, by=by)))
    window = max(t1 for _t0, t1 in busy) - min(t0 for t0, _t1 in busy)
    for reader in ("engine", "reader"):
        tl = _rows(res, reader)
        assert tl["busy_time"]["percent"] == pytest.approx(busy_pct, abs=1e-9), reader
        assert tl["total_time"]["time_ms"] * 1e3 == pytest.approx(len(busy) * window), reader
        per = res["per_device"] if reader == "engine" else res["reader"]["per_device"]
        assert [round(d["busy_pct"], 9) for d in per] == [round(100 * (t1 - t0) / window, 9) for t0, t1 in busy]
    note = next(w for w in res["warnings"] if "GPUs in one trace file" in w)
    assert note.startswith(f"{len(busy)} GPUs in one trace file") and f"device {top} is the busiest" in note
    assert not tb.all_confirmed(v), tb.all_confirmed(v)


def test_one_gpu_is_unchanged(tmp_path):
    res, _ = tb.both(tb.write(tmp_path / "t.json", tb.two_kernels()))
    assert res["per_device"] == [] and tb.pct(res, "idle_time") == pytest.approx(20.0)
    assert not any("GPUs in one trace file" in w for w in res["warnings"])


def test_kernel_gaps_are_taken_within_each_gpu(tmp_path):
    # device 0: kernels [0, 100] and [300, 400] (gap 200); device 1: [100, 150] and [160, 200] (gap 10).
    # Pooled in time order the gaps would be 0, 10, 100; within each GPU they are 200 and 10: median 105
    ev = (tb.launched("a0", 0.0, 100.0, 1, launch_ts=0.0, device=0, pid=0)
          + tb.launched("b0", 300.0, 100.0, 2, device=0, pid=0)
          + tb.launched("a1", 100.0, 50.0, 3, device=1, pid=1) + tb.launched("b1", 160.0, 40.0, 4, device=1, pid=1))
    res, v = tb.both(tb.write(tmp_path / "t.json", ev))
    assert res["launch"]["median_gap_us"] == res["reader"]["launch"]["median_gap_us"] == pytest.approx(105.0)
    assert not tb.all_confirmed(v)


# ---------------------------------------------------------------------------------- graph replays


def _graph_steps(recorded: set[int], *, api: str = "cudaGraphLaunch", eager: bool = False, n: int = 8) -> list[dict]:
    """``n`` profiled steps of 1000 us (step k at k*1000); each launches one graph at k*1000 + 2
    whose replay runs [k*1000 + 200, k*1000 + 900] on the GPU, recorded only in the steps of
    ``recorded``; with ``eager``, each step first launches an eager kernel (at k*1000 + 1) that runs
    [k*1000 + 10, k*1000 + 110]."""
    ev = []
    for k in range(1, n + 1):
        s = k * 1000.0
        ev.append(tb.step(k, s, 1000.0))
        if eager:
            ev += [tb.launch(10 * k, s + 1.0), tb.kernel("eager", s + 10.0, 100.0, 10 * k)]
        ev.append(tb.launch(10 * k + 1, s + 2.0, name=api))
        if k in recorded:
            ev.append(tb.kernel("graph_replay", s + 200.0, 700.0, 10 * k + 1))
    return ev


GRAPHS = {
    # replays recorded in steps 1, 4, 8 only ([1200, 1900], [4200, 4900], [8200, 8900]): pooled, idle
    # 5600 of 7700 us (72.7 %). The replays of steps 2-3 ran in [1900, 4200], those of 5-7 in
    # [4900, 8200]: 2300 + 3300 us left out of idle and total: 2100 us, all busy (idle 0 %)
    "3 of 8 recorded (TraceLens#728)": (dict(recorded={1, 4, 8}), 3 * 700.0, 7700.0 - 5600.0, 5),
    "3 of 8 recorded, HIP": (dict(recorded={1, 4, 8}, api="hipGraphLaunch"), 3 * 700.0, 7700.0 - 5600.0, 5),
    # all but step 5: [4900, 6200] (1300 us) left out; idle = the 5 other gaps of 300 us between replays
    "7 of 8 recorded": (dict(recorded={1, 2, 3, 4, 6, 7, 8}), 7 * 700.0, 7700.0 - 1300.0, 1),
    # steps 7 and 8 unrecorded: they ran after the last recorded replay, outside the window: nothing
    # is left out (window [1200, 6900], idle 5 x 300 us)
    "the last two not recorded": (dict(recorded={1, 2, 3, 4, 5, 6}), 6 * 700.0, 5700.0, 2),
    # with an eager kernel per step: the unrecorded replays ran between the eager kernel of their
    # step and that of the next: 5 x 900 us left out; window 7890 us, busy 8 x 100 + 3 x 700 = 2900
    "3 of 8 with eager kernels": (dict(recorded={1, 4, 8}, eager=True), 2900.0, 7890.0 - 4500.0, 5),
}


@pytest.mark.parametrize("member", list(GRAPHS))
def test_partly_recorded_graph_replays_are_left_out_of_idle(tmp_path, member):
    kw, busy_us, total_us, n_missing = GRAPHS[member]
    res, v = tb.both(tb.write(tmp_path / "t.json", _graph_steps(**kw)))
    for reader in ("engine", "reader"):
        tl = _rows(res, reader)
        assert tl["busy_time"]["time_ms"] * 1e3 == pytest.approx(busy_us, abs=1e-6), reader
        assert tl["total_time"]["time_ms"] * 1e3 == pytest.approx(total_us, abs=1e-6), reader
        assert tl["idle_time"]["percent"] == pytest.approx(100 * (total_us - busy_us) / total_us, abs=1e-9), reader
    note = next(w for w in res["warnings"] if "have no recorded kernels" in w)
    assert note.startswith(f"{n_missing} of 8 graph launches ({kw.get('api', 'cudaGraphLaunch')})")
    # every step launched GPU work: the window is a steady state (not "3 of 8 steps")
    assert res["window"]["steps_with_gpu"] == 8 and not res["window"]["degenerate"]
    assert res["reader"]["window"]["steps_with_gpu"] == 8
    assert sum(s["graph_launches_unrecorded"] for s in res["per_step"]) == n_missing
    assert not tb.all_confirmed(v), tb.all_confirmed(v)


def test_run_reports_the_unrecorded_replays_and_several_gpus(tmp_path):
    (tmp_path / "in" / "traces").mkdir(parents=True)
    tb.write(tmp_path / "in" / "traces" / "trace_rank0.json", _graph_steps({1, 4, 8}))
    tb.write(tmp_path / "in" / "traces" / "trace_rank1.json", tb.doc(_devices([(0.0, 800.0), (800.0, 1000.0)]), 1))
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["run", "--job", UNKNOWN_JOBID, "--perf-run", str(tmp_path / "in"), "--out", str(out),
                                 "--checkpoint", str(tmp_path / "c.sqlite")])
    text = (out / "report.md").read_text()
    assert "5 of 8 graph launches (cudaGraphLaunch) (in step(s) 2, 3, 5, 6, 7) have no recorded kernels" in text, r.output
    assert "2 GPUs in one trace file" in text and "device 0 is the busiest" in text
