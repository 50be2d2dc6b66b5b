"""tools/plots.py on real inputs: TraceLens's gpu_timeline CSVs of the bundled traces
(tests/data/tracelens-ref), the 92003 telemetry export, and FOMs parsed from the bundled runs'
training logs (examples/perf-runs)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pandas as pd
import pytest

from ai4s_graph.tools.trainlog import fom
from ai4s_graph.tools.report import plots
from ai4s_graph.tools.errors import InputError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk; asserts the file is a PNG."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def assert_sane_png(path: Path) -> tuple[int, int]:
    assert path.is_file()
    w, h = png_size(path)
    assert 300 <= w <= 5000 and 200 <= h <= 5000, (w, h)
    assert path.stat().st_size > 5_000  # a real drawing, not an empty canvas
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".plot-")]
    return w, h


def timeline_from_csv(csv: Path) -> dict[str, dict[str, float]]:
    df = pd.read_csv(csv)
    return {row.type: {"time_ms": float(row["time ms"]), "percent": float(row.percent)} for _, row in df.iterrows()}


def tracelens_timelines(root: Path) -> list[tuple[str, dict]]:
    """``(<job>_rank<r>, timeline)`` for every reference under ``tests/data/tracelens-ref``."""
    return [(d.name.removesuffix("_perf_report_csvs"), timeline_from_csv(d / "gpu_timeline.csv"))
            for d in sorted(root.glob("*_csvs"))]


# --------------------------------------------------------------------------- gpu breakdown
def test_gpu_breakdown_single(tmp_path, tracelens_refs):
    name, tl = next(t for t in tracelens_timelines(tracelens_refs) if t[0] == "92003_rank0")
    # 92003 is the compute-bound run (examples/perf-runs/README.md: GPU busy ~81 %), no communication
    assert tl["busy_time"]["percent"] > 80 and tl["exposed_comm_time"]["time_ms"] == 0.0
    out = plots.plot_gpu_breakdown(tl, tmp_path / "breakdown.png", title=name)
    assert out == tmp_path / "breakdown.png"
    assert_sane_png(out)


def test_gpu_breakdown_per_rank(tmp_path, tracelens_refs):
    tls = tracelens_timelines(tracelens_refs)
    assert len(tls) == 8  # the references listed in tests/data/tracelens-ref/README.md
    out_list = plots.plot_gpu_breakdown([tl for _, tl in tls], tmp_path / "ranks.png")
    w_list, _ = assert_sane_png(out_list)
    out_map = plots.plot_gpu_breakdown({n[:12]: tl for n, tl in tls}, tmp_path / "named.png")
    assert_sane_png(out_map)
    # percent left out: derived from total_time
    no_pct = {k: {"time_ms": v["time_ms"]} for k, v in tls[0][1].items()}
    assert_sane_png(plots.plot_gpu_breakdown(no_pct, tmp_path / "nopct.png"))
    single_w, _ = png_size(plots.plot_gpu_breakdown(tls[0][1], tmp_path / "one.png"))
    assert w_list > single_w  # eight bars take more room than one


def test_gpu_breakdown_bad_input(tmp_path):
    for bad in ({}, [], [{}], {"computation_time": {"percent": 3.0}},
                {"computation_time": {"time_ms": 0.0}, "idle_time": {"time_ms": 0.0}},
                {"computation_time": {"time_ms": float("nan")}}):
        with pytest.raises(InputError) as ei:
            plots.plot_gpu_breakdown(bad, tmp_path / "bad.png")
        assert "\n" not in str(ei.value)
    assert not (tmp_path / "bad.png").exists()


# --------------------------------------------------------------------------- telemetry
def telemetry_92003(perf_runs: Path) -> tuple[dict, tuple[float, float]]:
    """92003's telemetry export as ``({metric: [(unix s, value)]}, rmsjob_info window)``."""
    series: dict[str, list[tuple[float, float]]] = {}
    window = None
    for line in (perf_runs / "92003/telemetry/export.jsonl").read_text().splitlines():
        rec = json.loads(line)
        name = rec["metric"]["__name__"]
        pts = [(t / 1000.0, v) for t, v in zip(rec["timestamps"], rec["values"])]
        if name == "rmsjob_info":  # Omnistat's job marker: value 1 while job 92003 ran
            on = [t for t, v in pts if v == 1]
            window = (min(on), max(on))
        else:
            series[name] = pts
    return series, window


def test_telemetry_92003(tmp_path, perf_runs):
    series, window = telemetry_92003(perf_runs)
    man = json.loads((perf_runs / "92003/manifest.json").read_text())
    # the workload's sampler marks the whole process (rmsjob_info = 1 from its start); the manifest's
    # start_unix/end_unix bound the training loop inside it (workloads/train.py: t_start, t_end)
    assert window[0] <= man["start_unix"] < man["end_unix"] <= window[1] + 1
    units = {"DCGM_FI_DEV_GPU_UTIL": "%", "DCGM_FI_DEV_POWER_USAGE": "W", "DCGM_FI_DEV_SM_CLOCK": "MHz",
             "DCGM_FI_DEV_FB_USED": "MiB", "DCGM_FI_DEV_FB_FREE": "MiB", "DCGM_FI_DEV_GPU_TEMP": "C",
             "DCGM_FI_DEV_MEM_COPY_UTIL": "%"}
    out = plots.plot_telemetry(series, units, (man["start_unix"], man["end_unix"]), tmp_path / "tel.png",
                               title="job 92003")
    _, h_all = assert_sane_png(out)
    two = {k: series[k] for k in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE")}
    _, h_two = assert_sane_png(plots.plot_telemetry(two, units, window, tmp_path / "tel2.png"))
    assert h_all > h_two  # one panel per metric
    # raw VictoriaMetrics millisecond timestamps are accepted as well, and window=None spans the data
    ms = {"DCGM_FI_DEV_GPU_UTIL": [(t * 1000.0, v) for t, v in series["DCGM_FI_DEV_GPU_UTIL"]]}
    assert_sane_png(plots.plot_telemetry(ms, units, None, tmp_path / "tel3.png"))


def test_telemetry_bad_input(tmp_path, perf_runs):
    series, window = telemetry_92003(perf_runs)
    cases = [
        ({}, window),
        ({"DCGM_FI_DEV_GPU_UTIL": []}, window),
        ({"DCGM_FI_DEV_GPU_UTIL": series["DCGM_FI_DEV_GPU_UTIL"]}, (window[1] + 100, window[1] + 200)),
        ({"DCGM_FI_DEV_GPU_UTIL": series["DCGM_FI_DEV_GPU_UTIL"]}, (window[1], window[0])),
    ]
    for s, w in cases:
        with pytest.raises(InputError) as ei:
            plots.plot_telemetry(s, {}, w, tmp_path / "bad.png")
        assert "\n" not in str(ei.value)
    assert not (tmp_path / "bad.png").exists()


# --------------------------------------------------------------------------- FOM iterations
def test_fom_iterations(tmp_path, perf_runs):
    # real FOMs: the bundled runs' epoch times as if they were loop iterations (92004 is 92001 in fp64)
    foms = {j: fom.parse_log(perf_runs / j / "train.log", fom_kind="latency")
            for j in ("92001", "92004", "92003")}
    assert all(f.epoch_time_s and f.epoch_time_s > 0 for f in foms.values())
    records = [
        {"iteration": 0, "lever": "baseline", "fom": foms["92001"].epoch_time_s, "decision": "baseline"},
        {"iteration": 1, "lever": "precision_fp64", "fom": foms["92004"].epoch_time_s, "decision": "reverted"},
        {"iteration": 2, "lever": "torch_compile", "fom": None, "decision": "failed"},
        {"iteration": 3, "lever": "vit_swap", "fom": foms["92003"].epoch_time_s, "decision": "revert"},
        {"iteration": 4, "lever": "rccl_high_priority", "fom": foms["92001"].epoch_time_s * 0.987,
         "decision": "accepted"},
    ]
    out = plots.plot_fom_iterations(records, "epoch_time_s", tmp_path / "loop.png", higher_is_better=False)
    assert_sane_png(out)


def test_fom_iterations_bad_input(tmp_path):
    for bad in ([], [{"lever": "x", "fom": 1.0}], [{"iteration": 0, "fom": None, "decision": "failed"}]):
        with pytest.raises(InputError) as ei:
            plots.plot_fom_iterations(bad, "epoch_time_s", tmp_path / "bad.png")
        assert "\n" not in str(ei.value)
    assert not (tmp_path / "bad.png").exists()


def _bars_reference(per_rank, path, marked=None, title="Step time breakdown"):
    """The step plot as it was drawn before its bars became one collection per part: ``ax.bar``
    (one Rectangle artist per bar) and the legend of its bars, the same figure otherwise."""
    import io
    import math

    from matplotlib.figure import Figure

    ranks = [(str(k), list(v)) for k, v in per_rank.items() if v]
    n_max = max(len(r) for _, r in ranks)
    fig = Figure(figsize=(min(plots.STEP_PLOT_MAX_IN, max(6.0, 0.5 * n_max + 3.5)), 2.8 * len(ranks) + 0.6))
    every = max(1, math.ceil(n_max / plots.STEP_PLOT_MAX_TICKS))
    first = None
    for j, (label, rows) in enumerate(ranks):
        ax = fig.add_subplot(len(ranks), 1, j + 1, sharey=first)
        first = first or ax
        xs = list(range(len(rows)))
        bottoms = [0.0] * len(rows)
        for key, name, color in plots.STEP_PARTS:
            h = [float(r[key]) for r in rows]
            ax.bar(xs, h, bottom=bottoms, color=color, label=name, width=0.7,
                   edgecolor="white" if len(rows) <= plots.STEP_PLOT_MAX_TICKS else "none")
            bottoms = [b + x for b, x in zip(bottoms, h)]
        plots.step_panel_labels(ax, label, rows, every, marked)  # the panel's labels as the plot draws them
        if j == 0:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.axes[-1].set_xlabel("ProfilerStep")
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=plots.DPI, bbox_inches="tight")
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("n_steps, marked", [(12, "1"), (138, None)])
def test_step_breakdown_same_pixels_as_bars(tmp_path, n_steps, marked):
    """The step plot's collections draw the PNG ``ax.bar`` drew, byte for byte: a few steps (white
    edges, two ranks, a straggler marked) and a long profile (138 steps: no edges, labels thinned)."""
    per_rank = {"0": [{"step": 834 + i, "computation_ms": 1.31 + 0.1 * (i % 3), "exposed_comm_ms": 0.4 * (i % 2),
                       "exposed_memcpy_ms": 0.0139, "idle_ms": 21.1 + (i % 4)} for i in range(n_steps)],
                "1": [{"step": 834 + i, "computation_ms": 1.5, "exposed_comm_ms": 0.0, "exposed_memcpy_ms": 0.1,
                       "idle_ms": 3.0 + 0.5 * (i % 5)} for i in range(n_steps - 2)]}
    got = plots.plot_step_breakdown(per_rank, tmp_path / "new.png", marked=marked)
    _bars_reference(per_rank, tmp_path / "ref.png", marked=marked)
    assert_sane_png(got)
    assert got.read_bytes() == (tmp_path / "ref.png").read_bytes()


def test_step_breakdown_bad_input(tmp_path):
    with pytest.raises(InputError, match="no rank with steps"):
        plots.plot_step_breakdown({"0": []}, tmp_path / "s.png")
    row = {"step": 1, "computation_ms": 1.0, "exposed_comm_ms": 0.0, "exposed_memcpy_ms": 0.0, "idle_ms": -2.0}
    with pytest.raises(InputError, match="idle_ms is negative"):
        plots.plot_step_breakdown({"0": [row]}, tmp_path / "s.png")
    with pytest.raises(InputError):
        plots.plot_step_breakdown({"0": [dict(row, idle_ms="x")]}, tmp_path / "s.png")
    assert not (tmp_path / "s.png").exists()
