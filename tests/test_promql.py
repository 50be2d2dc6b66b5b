"""Job-scoped telemetry: PromQL through a real VictoriaMetrics vs the raw-sample path, on the
real exports of the bundled runs ``examples/perf-runs/92001`` (GNN fp32, dispatch-bound) and
``92003`` (ViT bf16, compute-bound), plus the AMD (Omnistat rocm_*) map and the error paths. The
right values are computed here from the raw JSON lines (:func:`_hand_tw_mean`), by code of this
file, not by the project's PromQL or raw-sample layers. No mocks."""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ai4s_graph.state import Evidence
from ai4s_graph.tools.telemetry import export as E, metrics as M, promql as P, rawstats as R
from ai4s_graph.tools.errors import InputError, ToolUnavailableError

JOBS = ("92001", "92003")
AMD_JOB = "92003-amd"
MIB = 1048576.0


def _export(perf_runs: Path, jobid: str) -> Path:
    return perf_runs / jobid / "telemetry" / "export.jsonl"


def _raw_points(path: Path, name: str, instance: str = "vm", gpu: str | None = "0") -> list[tuple[int, float]]:
    """The raw samples ``(unix ms, value)`` of series ``name{instance, gpu}`` in an export file
    (``gpu=None``: a series without a ``gpu`` label, as Omnistat's ``card``-labelled ones)."""
    for line in path.read_text().splitlines():
        d = json.loads(line)
        m = d["metric"]
        if m["__name__"] == name and m.get("instance") == instance and m.get("gpu") == gpu:
            return list(zip(d["timestamps"], d["values"]))
    raise AssertionError(f"no {name} series in {path}")


def _in_window(pts: list[tuple[int, float]], window: tuple[float, float]) -> list[tuple[int, float]]:
    """The samples from 1 ms before the window's start to its end at whole milliseconds (the sample
    at the start counts; a TSDB stores whole ms, so 92001's end 713.756802 s holds the 713.757 sample)."""
    return [(t, v) for t, v in pts if window[0] * 1000 - 1 <= t <= round(window[1] * 1000)]


def _hand_tw_mean(pts: list[tuple[int, float]], end_s: float) -> float:
    """Time-weighted mean, by hand: each sample holds until the next, the last one until ``end``
    (whole ms), over the time from the first sample to ``end``."""
    end = round(end_s * 1000)
    area = sum(v * (t2 - t1) for (t1, v), (t2, _) in zip(pts, pts[1:])) + pts[-1][1] * (end - pts[-1][0])
    return area / (end - pts[0][0])


def _to_omnistat(src: Path, dst: Path, jobid: str, instance: str) -> None:
    """Rewrite a dcgm-exporter export to the names and labels Omnistat's amd-smi collector uses
    (ROCm/omnistat omnistat/collector_amdsmi.py): same values, AMD names. FB used/free MiB become
    ``rocm_vram_used_percentage`` and ``rocm_vram_total_bytes`` as Omnistat reports VRAM. The
    instance is renamed so the NVIDIA job on the same timestamps does not join."""
    rename = {
        "DCGM_FI_DEV_GPU_UTIL": ("rocm_utilization_percentage", {}),
        "DCGM_FI_DEV_SM_CLOCK": ("rocm_sclk_clock_mhz", {"source": "average_gfxclk_frequency"}),
        "DCGM_FI_DEV_POWER_USAGE": ("rocm_average_socket_power_watts", {"source": "average_socket_power"}),
        "DCGM_FI_DEV_GPU_TEMP": ("rocm_temperature_celsius", {"location": "edge"}),
        "DCGM_FI_DEV_MEM_COPY_UTIL": ("rocm_vram_busy_percentage", {}),
    }
    rows = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    fb = {r["metric"]["__name__"]: r for r in rows if r["metric"]["__name__"] in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")}
    out = []
    for r in rows:
        m = dict(r["metric"])
        name = m["__name__"]
        m["instance"] = instance
        if "Hostname" in m:
            m["Hostname"] = instance
        if name == "rmsjob_info":
            m["jobid"] = jobid
            m["nodes"] = instance
            out.append({**r, "metric": m})
            continue
        card = m.pop("gpu", "0")
        for k in ("device", "modelName"):
            m.pop(k, None)
        m["card"] = card
        if name in rename:
            new, extra = rename[name]
            out.append({**r, "metric": {**m, **extra, "__name__": new}})
    used, free = fb["DCGM_FI_DEV_FB_USED"], fb["DCGM_FI_DEV_FB_FREE"]
    assert used["timestamps"] == free["timestamps"]
    total = [u + f for u, f in zip(used["values"], free["values"])]
    base = {"card": "0", "instance": instance, "Hostname": instance}
    out.append({"metric": {**base, "__name__": "rocm_vram_used_percentage"},
                "values": [100 * u / t for u, t in zip(used["values"], total)], "timestamps": used["timestamps"]})
    out.append({"metric": {**base, "__name__": "rocm_vram_total_bytes"},
                "values": [t * MIB for t in total], "timestamps": used["timestamps"]})
    dst.write_text("".join(json.dumps(r) + "\n" for r in out))


@pytest.fixture(scope="module")
def tsdb(vm_server, perf_runs, tmp_path_factory):
    """The session VM loaded with 92001, 92003 and the Omnistat-named copy of 92003."""
    for j in JOBS:
        vm_server.import_jsonl(_export(perf_runs, j))
    amd = tmp_path_factory.mktemp("amd") / "export.jsonl"
    _to_omnistat(_export(perf_runs, "92003"), amd, AMD_JOB, "mi-node-1")
    vm_server.import_jsonl(amd)
    return {"url": vm_server.url, "amd_export": amd}


@pytest.fixture(scope="module")
def pq(tsdb):
    return P.PromQL(tsdb["url"])


def _slurm_window(perf_runs: Path, jobid: str) -> tuple[float, float]:
    m = json.loads((perf_runs / jobid / "manifest.json").read_text())
    return m["start_unix"], m["end_unix"]


def _raw_rmsjob_window(path: Path, jobid: str) -> tuple[float, float]:
    for line in path.read_text().splitlines():
        d = json.loads(line)
        if d["metric"]["__name__"] == "rmsjob_info" and d["metric"]["jobid"] == jobid:
            ts = [t / 1000 for t, v in zip(d["timestamps"], d["values"]) if v > 0]
            return min(ts), max(ts)
    raise AssertionError("no rmsjob_info")


# ---------------------------------------------------------------------------------- pure parts


def test_job_join_matches_hosts_and_rejects_injection():
    w = (1795960753.5, 1795960795.0)
    # the join's range: the window plus 300 s each side (641.5 s), evaluated at end + 300 s
    assert P.job_join("DCGM_FI_DEV_GPU_UTIL", "92003", w) == (
        'label_replace(DCGM_FI_DEV_GPU_UTIL, "host", "$1", "instance", "(.+?)(?::[0-9]+)?") and on (host) '
        '(max by (host) (label_replace(max_over_time(rmsjob_info{jobid="92003"}[641500ms] @ 1795961095.000), '
        '"host", "$1", "instance", "(.+?)(?::[0-9]+)?")) > 0)')
    for bad in ['92003"} or vector(1) or {x="', "92 003", "", "92003'", "a{b}"]:
        with pytest.raises(InputError) as ei:
            P.job_join("up", bad, w)
        assert "\n" not in str(ei.value)
    assert [E.host_of(i) for i in ("node1:9400", "node1", "gpu01.cluster:8001")] == ["node1", "node1", "gpu01.cluster"]


def test_metric_map_covers_both_vendors_with_cited_names():
    for name in ("gpu_util", "sm_clock", "power", "hbm_used", "hbm_total", "hbm_free", "gpu_temp", "mem_bw_util"):
        m = M.METRICS[name]
        assert set(m.sources) == {"nvidia", "amd"}
        assert all(i.startswith("DCGM_FI_") for i in m.sources["nvidia"].inputs)
        assert all(i.startswith("rocm_") for i in m.sources["amd"].inputs)
    assert M.METRICS["hbm_used"].unit == "bytes" and M.METRICS["gpu_util"].unit == "%"
    assert M.METRICS["cpu_util"].sources["node"].inputs == ("node_cpu_seconds_total",)
    assert "Omnistat" in (M.__doc__ or "") and "collector_amdsmi.py" in (M.__doc__ or "")
    with pytest.raises(InputError, match="unknown telemetry metric"):
        M.metric_def("flops")


def test_load_export_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"metric": {"__name__": "x"}, "values": [1], "timestamps": [1000]}\nnot json\n')
    series, rep = E.read_export(bad)  # the bad line is dropped and named, the good one kept
    assert [s.values for s in series] == [(1.0,)] and rep.dropped_lines == [(2, "not JSON")]
    assert rep.problems() == ["bad.jsonl: 1 line(s) dropped (line 2: not JSON)"]
    only_bad = tmp_path / "only-bad.jsonl"
    only_bad.write_text("not json\n[1, 2]\n")
    with pytest.raises(InputError, match="no usable series.*line 1: not JSON; line 2: a JSON list, not an object"):
        E.load_export(only_bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="empty"):
        E.load_export(empty)
    with pytest.raises(InputError, match="not found"):
        E.load_export(tmp_path / "nope.jsonl")


def test_raw_path_on_real_export(perf_runs):
    path = _export(perf_runs, "92003")
    series = E.load_export(path)
    rms_lo, rms_hi = _raw_rmsjob_window(path, "92003")
    assert (rms_lo, rms_hi) == (1795963718.506, 1795963750.741)  # the export's first and last rmsjob_info
    assert R.raw_job_windows(series, "92003") == {"vm": (rms_lo, rms_hi)}
    util = _raw_points(path, "DCGM_FI_DEV_GPU_UTIL")
    d = R.raw_job_stat_detail(series, "gpu_util", "92003", "avg")  # no SLURM window: rmsjob_info's
    in_rms = _in_window(util, (rms_lo, rms_hi))
    assert d.vendor == "nvidia" and d.window_source == "rmsjob_info"
    assert d.sample_count == len(in_rms) == 130  # every 4 Hz sample of the export
    # time-weighted: the sample at the window's end (rmsjob_info's last, 750.741) holds 0 s; the
    # plain mean of the 130 samples counts it as a full 0.25 s interval
    assert in_rms[-1][0] == round(rms_hi * 1000)
    assert d.value == pytest.approx(_hand_tw_mean(in_rms, rms_hi), rel=1e-12)
    assert abs(d.value - statistics.fmean(v for _, v in in_rms)) > 0.01
    w = _slurm_window(perf_runs, "92003")
    g = R.raw_job_stat_detail(series, "gpu_util", "92003", "avg", window=w)
    in_slurm = _in_window(util, w)
    # over the SLURM window (722.870 .. 750.742): 113 samples, the first at 722.872; the host joins
    # through all 130 rmsjob_info samples (every one within 300 s of the window)
    assert g.window_source == "given" and g.sample_count == len(in_slurm) == 113 and g.hosts == {"vm": 130}
    assert g.value == pytest.approx(_hand_tw_mean(in_slurm, w[1]), rel=1e-12)
    # a raw metric name works too; an unknown job is a clear one-line error
    assert R.raw_job_stat(series, "DCGM_FI_DEV_GPU_UTIL", "92003") == pytest.approx(d.value)
    with pytest.raises(InputError, match="unknown job id"):
        R.raw_job_stat(series, "gpu_util", "424242")


def _count_requests(monkeypatch) -> list[str]:
    """The URLs of every HTTP request made from here on (each still goes out: requests'
    ``Session.request`` is wrapped, not replaced), so that a test counts attempts instead of timing them."""
    import requests

    sent: list[str] = []
    real = requests.Session.request

    def request(self, method, url, *a, **kw):
        sent.append(url)
        return real(self, method, url, *a, **kw)

    monkeypatch.setattr(requests.Session, "request", request)
    return sent


def test_unreachable_tsdb_is_one_line_and_bounded(monkeypatch):
    """A TSDB that refuses connections: each call is one line after its bounded retry (2 attempts,
    ``export.with_retry``), counted, not timed (a timed bound depends on the machine's load)."""
    sent = _count_requests(monkeypatch)
    dead = P.PromQL("http://127.0.0.1:9", timeout_s=2)
    for call in (lambda: dead.job_window("92003"),
                 lambda: dead.job_stat("gpu_util", "92003", (1795963722.87, 1795963750.742)),
                 lambda: E.export_raw("http://127.0.0.1:9", "up")):
        before = len(sent)
        with pytest.raises(ToolUnavailableError) as ei:
            call()
        assert str(ei.value) == "TSDB at http://127.0.0.1:9 unreachable: connection refused"
        assert len(sent) - before == 2 and all(u.startswith("http://127.0.0.1:9/api/v1/") for u in sent[before:])


# ---------------------------------------------------------------------------------- real TSDB


@pytest.mark.vm
@pytest.mark.parametrize("jobid", JOBS)
def test_job_window_matches_rmsjob_info_samples(pq, perf_runs, jobid):
    raw = _raw_rmsjob_window(_export(perf_runs, jobid), jobid)
    assert pq.job_window(jobid) == pytest.approx(raw, abs=1e-3)
    manifest = json.loads((perf_runs / jobid / "manifest.json").read_text())
    assert pq.job_window(jobid, hint=(manifest["start_unix"], manifest["end_unix"])) == pytest.approx(raw, abs=1e-3)
    assert pq.detect_vendor(jobid, raw) == "nvidia"


@pytest.mark.vm
def test_gpu_util_92003_matches_hand_and_raw(pq, perf_runs):
    w = _slurm_window(perf_runs, "92003")
    r = pq.job_stat("gpu_util", "92003", w, "avg")
    in_slurm = _in_window(_raw_points(_export(perf_runs, "92003"), "DCGM_FI_DEV_GPU_UTIL"), w)
    assert r.value == pytest.approx(_hand_tw_mean(in_slurm, w[1]), rel=1e-12)
    end_ms, tf_ms = round(w[1] * 1000), in_slurm[0][0]  # 1795963750.742 and the first sample, 722.872
    assert r.unit == "%" and r.vendor == "nvidia" and r.time == end_ms / 1000 == 1795963750.742
    # time-weighted: integrate() from the first sample in the window to the end; the raw range D is
    # the job's length (end at ms) plus 1 ms
    span_ms, d_ms = end_ms - tf_ms, math.ceil((end_ms / 1000 - w[0]) * 1000) + 1
    assert (span_ms, d_ms) == (27870, 27874)
    assert r.query.startswith(f"avg(label_replace((((integrate(DCGM_FI_DEV_GPU_UTIL[{span_ms}ms]) / {span_ms / 1000:.3f}) or "
                              f"avg_over_time(DCGM_FI_DEV_GPU_UTIL[{d_ms}ms])) and (tfirst_over_time(DCGM_FI_DEV_GPU_UTIL"
                              f"[{d_ms}ms]) == {tf_ms / 1000:.3f})), \"host\"")
    assert 'rmsjob_info{jobid="92003"}' in r.query and "[" + "27s:1s]" not in r.query and ":1s]" not in r.query
    assert r.per_instance == {"vm": pytest.approx(r.value)}
    assert r.sample_count == len(in_slurm) == 113  # every raw 0.25 s sample in the SLURM window
    raw = R.raw_job_stat(E.load_export(_export(perf_runs, "92003")), "gpu_util", "92003", "avg", window=w)
    assert r.value == pytest.approx(raw, rel=1e-12)  # same samples, same definition
    ev = Evidence(**r.evidence())  # a claim can carry the query as evidence
    assert ev.query == r.query and ev.returned == r.value
    # re-running the recorded query at the recorded time gives the same number
    again = pq.instant(r.query, r.time)
    assert float(again[0]["value"][1]) == r.value


@pytest.mark.vm
@pytest.mark.parametrize("jobid", JOBS)
@pytest.mark.parametrize("metric", ["power", "sm_clock", "gpu_util", "hbm_used", "gpu_temp", "mem_bw_util"])
def test_promql_and_raw_paths_agree(pq, perf_runs, jobid, metric):
    series = E.load_export(_export(perf_runs, jobid))
    w = _slurm_window(perf_runs, jobid)
    for stat in ("avg", "p50", "max", "min"):
        r = pq.job_stat(metric, jobid, w, stat)
        raw = R.raw_job_stat(series, metric, jobid, stat, window=w)
        assert r.value is not None and raw is not None
        # both read every raw sample in the window: equal up to float rounding
        assert r.value == pytest.approx(raw, rel=1e-9), (metric, stat, r.query)


@pytest.mark.vm
def test_known_values_of_the_two_runs(pq, perf_runs):
    """Character from examples/perf-runs/README.md: 92001 is dispatch-bound (GPU mostly idle, mean
    utilization ~10 %), 92003 compute-bound. Time-weighted means of the raw samples in the jobs'
    SLURM windows (180 and 113 samples), computed here from the export files."""
    w1, w3 = _slurm_window(perf_runs, "92001"), _slurm_window(perf_runs, "92003")
    e1, e3 = _export(perf_runs, "92001"), _export(perf_runs, "92003")
    u1, u3 = _in_window(_raw_points(e1, "DCGM_FI_DEV_GPU_UTIL"), w1), _in_window(_raw_points(e3, "DCGM_FI_DEV_GPU_UTIL"), w3)
    assert (len(u1), len(u3)) == (180, 113)
    s1 = pq.job_stat("gpu_util", "92001", w1)
    s3 = pq.job_stat("gpu_util", "92003", w3)
    assert s1.value == pytest.approx(_hand_tw_mean(u1, w1[1]), rel=1e-12) and s1.value < 15
    assert s3.value == pytest.approx(_hand_tw_mean(u3, w3[1]), rel=1e-12) and s3.value > 4 * s1.value
    p1 = pq.job_stat("power", "92001", w1)
    p3 = pq.job_stat("power", "92003", w3)
    q1, q3 = _in_window(_raw_points(e1, "DCGM_FI_DEV_POWER_USAGE"), w1), _in_window(_raw_points(e3, "DCGM_FI_DEV_POWER_USAGE"), w3)
    assert p1.value == pytest.approx(_hand_tw_mean(q1, w1[1]), rel=1e-12)
    assert p3.value == pytest.approx(_hand_tw_mean(q3, w3[1]), rel=1e-12)
    # time-weighted, not the plain sample mean (92003's power rises during the job: they differ)
    assert abs(p3.value - statistics.fmean(v for _, v in q3)) > 0.5
    hbm = pq.job_stat("hbm_used", "92003", w3, "max")
    fb = max(v for _, v in _in_window(_raw_points(e3, "DCGM_FI_DEV_FB_USED"), w3))
    assert hbm.unit == "bytes" and fb == 11041.0 and hbm.value == fb * MIB  # FB_USED max 11041 MiB


@pytest.mark.vm
@pytest.mark.parametrize("metric", ["gpu_util", "power", "sm_clock", "hbm_used", "hbm_total", "gpu_temp", "mem_bw_util"])
def test_amd_omnistat_names_give_the_same_numbers(pq, tsdb, metric):
    w_nv = pq.job_window("92003")
    w_amd = pq.job_window(AMD_JOB)
    assert w_amd == w_nv
    assert pq.detect_vendor(AMD_JOB, w_amd) == "amd"
    for stat in ("avg", "max"):
        nv = pq.job_stat(metric, "92003", w_nv, stat)
        amd = pq.job_stat(metric, AMD_JOB, w_amd, stat)
        assert amd.vendor == "amd" and "rocm_" in amd.query and "DCGM" not in amd.query
        # a metric Omnistat derives from two series (VRAM % x total) needs a 1 s subquery (values at
        # common times), the DCGM one is read raw: equal only to the grid's resolution then
        two = not M.METRICS[metric].sources["amd"].single
        assert amd.value == pytest.approx(nv.value, rel=0.01 if two else 1e-9), (metric, stat)
        assert list(amd.per_instance) == ["mi-node-1"]
    raw = R.raw_job_stat(E.load_export(tsdb["amd_export"]), metric, AMD_JOB, "avg")
    prom = pq.job_stat(metric, AMD_JOB, w_amd).value
    if M.METRICS[metric].sources["amd"].single:
        assert raw == pytest.approx(prom, rel=0.01, abs=1.0)
        return
    # HBM bytes from two series (VRAM % x total): the raw path averages the products at the common
    # sample times, PromQL the products on its 1 s subquery grid (the last sample at or before each
    # whole second). 92003's HBM steps from 1719 to 9839 MiB inside the window (model load), where
    # the two means differ by 1.2 %: each is checked against its own definition, computed by hand
    pct = _raw_points(tsdb["amd_export"], "rocm_vram_used_percentage", "mi-node-1", None)
    tot = dict(_raw_points(tsdb["amd_export"], "rocm_vram_total_bytes", "mi-node-1", None))
    prod = [(t, p / 100 * tot[t]) for t, p in _in_window(pct, w_amd) if t in tot]
    assert len(prod) == 130 and raw == pytest.approx(statistics.fmean(v for _, v in prod), rel=1e-9)
    on_grid = [[v for t, v in prod if t <= g * 1000][-1] for g in range(math.ceil(w_amd[0]), math.ceil(w_amd[1]) + 1)]
    assert len(on_grid) == 33 and prom == pytest.approx(statistics.fmean(on_grid), rel=1e-9)


@pytest.mark.vm
def test_job_series_for_plots(pq, perf_runs):
    w = pq.job_window("92003")
    s = pq.job_series("gpu_util", "92003", w, step_s=1)
    assert list(s) == ["vm"]
    pts = s["vm"]
    assert pts[0][0] >= math.floor(w[0]) and pts[-1][0] <= math.ceil(w[1])
    # a point each whole second of the 32.2 s window (718.506 .. 750.741) that has a sample before it
    assert [t for t, _ in pts] == [float(t) for t in range(math.ceil(w[0]), math.ceil(w[1]) + 1)]
    # each point is the raw 4 Hz sample last at or before its second (no average, no interpolation)
    raw = _raw_points(_export(perf_runs, "92003"), "DCGM_FI_DEV_GPU_UTIL")
    assert [v for _, v in pts] == [[rv for rt, rv in raw if rt <= t * 1000][-1] for t, _ in pts]
    assert pq.job_series("gpu_util", "92003", w, vendor="amd") == {}


@pytest.mark.vm
def test_export_raw_from_live_tsdb_equals_file(pq, perf_runs):
    w = pq.job_window("92003")
    live = pq.export(['rmsjob_info{jobid="92003"}', 'DCGM_FI_DEV_GPU_UTIL{instance="vm"}'], w[0] - 60, w[1] + 60)
    assert R.raw_job_stat(live, "gpu_util", "92003") == pytest.approx(
        R.raw_job_stat(E.load_export(_export(perf_runs, "92003")), "gpu_util", "92003"))


@pytest.mark.vm
def test_bad_and_unknown_job_ids(pq):
    w = pq.job_window("92003")
    with pytest.raises(InputError, match="bad job id"):
        pq.job_stat("gpu_util", '92003"} or vector(1) #', w)
    with pytest.raises(InputError, match="bad job id"):
        pq.job_window("x'y")
    # unknown job: job_window is a clear error; a stat in a given window is an empty result
    with pytest.raises(InputError, match="unknown job id") as ei:
        pq.job_window("424242")
    assert "\n" not in str(ei.value)
    assert pq.detect_vendor("424242", w) == "none"
    r = pq.job_stat("gpu_util", "424242", w)
    assert r.value is None and r.sample_count == 0 and r.per_instance == {}
    assert pq.job_series("gpu_util", "424242", w) == {}
    with pytest.raises(InputError, match="unknown statistic"):
        pq.job_stat("gpu_util", "92003", w, "p99")


@pytest.mark.vm
def test_bad_query_is_input_error_not_retried(pq, monkeypatch):
    """A query the TSDB rejects (HTTP 4xx) is an InputError after one request: never retried."""
    sent = _count_requests(monkeypatch)
    with pytest.raises(InputError, match="rejected"):
        pq.instant("sum(", 1795960795)
    assert len(sent) == 1 and sent[0].endswith("/api/v1/query")


# ---------------------------------------------------------------------------------- node metrics


def _proc_sample() -> tuple[float, dict[tuple[str, str], float], dict[str, float], float]:
    """One node_exporter-style reading of this machine: (t, cpu seconds by (cpu, mode), meminfo
    bytes, load1). /proc/stat counts USER_HZ ticks."""
    hz = os.sysconf("SC_CLK_TCK")
    modes = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    cpu: dict[tuple[str, str], float] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu") and parts[0] != "cpu":
            for mode, ticks in zip(modes, parts[1:9]):
                cpu[(parts[0][3:], mode)] = int(ticks) / hz
    mem = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        if k in ("MemTotal", "MemAvailable"):
            mem[k] = int(v.split()[0]) * 1024.0
    load1 = float(Path("/proc/loadavg").read_text().split()[0])
    return time.time(), cpu, mem, load1


def _proc_cpu_s(pid: int) -> float:
    """utime + stime of process ``pid`` in seconds (/proc/PID/stat fields 14 and 15, USER_HZ)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.vm
def test_cpu_only_job_node_metrics(vm_server):
    """A real CPU workload on this machine, sampled like node_exporter every 0.25 s for ~3 s and
    pushed as text exposition with an rmsjob_info marker. Load-independent: PromQL and the raw path
    read the same recorded samples (equal answers), and the burner's own CPU seconds, read inside
    the same interval as the node counters, bound the node's busy seconds from below (a ratio
    within one measurement, never a second read of a live figure)."""
    inst = socket.gethostname().replace('"', "")
    jobid = f"cpu-{os.getpid()}"
    burner = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<6: pass"])
    try:
        lines, marks, mem_total = [], [], None
        for _ in range(13):
            before = _proc_cpu_s(burner.pid)
            t, cpu, mem, load1 = _proc_sample()
            marks.append((before, _proc_cpu_s(burner.pid)))
            mem_total = mem["MemTotal"]
            ms = int(t * 1000)
            for (c, mode), v in cpu.items():
                lines.append(f'node_cpu_seconds_total{{instance="{inst}",cpu="{c}",mode="{mode}"}} {v} {ms}')
            lines.append(f'node_memory_MemTotal_bytes{{instance="{inst}"}} {mem["MemTotal"]} {ms}')
            lines.append(f'node_memory_MemAvailable_bytes{{instance="{inst}"}} {mem["MemAvailable"]} {ms}')
            lines.append(f'node_load1{{instance="{inst}"}} {load1} {ms}')
            lines.append(f'rmsjob_info{{instance="{inst}",jobid="{jobid}",type="slurm"}} 1 {ms}')
            time.sleep(0.25)
    finally:
        burner.kill()
        burner.wait()
    vm_server.import_prometheus("\n".join(lines) + "\n")
    pq = P.PromQL(vm_server.url)
    w = pq.job_window(jobid)
    assert w[1] - w[0] > 2.5
    assert pq.detect_vendor(jobid, w) == "none"
    live = pq.export([f'{{instance="{inst}",__name__=~"node_.*|rmsjob_info"}}'], w[0] - 5, w[1] + 5)
    util = pq.job_stat("cpu_util", jobid, w)
    raw_util = R.raw_job_stat(live, "cpu_util", jobid, window=w)
    assert util.vendor == "node" and util.unit == "%" and 0 <= util.value <= 100
    assert "last_over_time(node_cpu_seconds_total{mode=\"idle\"}" in util.query
    assert util.value == pytest.approx(raw_util, rel=1e-9)  # the same samples, the same definition
    # busy CPU seconds of the node >= the burner's CPU seconds in the same interval (the burner's
    # reads lie inside the node reads); slack: one USER_HZ tick per CPU at each end
    cpu_series = [s for s in live if s.name == "node_cpu_seconds_total"]
    all_s = sum(s.values[-1] - s.values[0] for s in cpu_series)
    burner_s = marks[-1][0] - marks[0][1]
    ncpu = len({s.metric["cpu"] for s in cpu_series})
    assert util.value / 100 * all_s >= burner_s - 2 * ncpu / os.sysconf("SC_CLK_TCK")
    for metric in ("mem_available", "mem_total", "load1"):  # one series: the same samples, the same answer
        assert M.METRICS[metric].sources["node"].single
        r = pq.job_stat(metric, jobid, w)
        assert r.value == pytest.approx(R.raw_job_stat(live, metric, jobid, window=w), rel=1e-9), metric
    # mem_used_pct combines two series (PromQL: a 1 s subquery grid; raw: the common sample times), so
    # the two averages differ by how much memory moved between samples (the machine's load): each must
    # lie within the recorded per-sample values, which no load changes
    avail = {round(t * 1000): v for s in live if s.name == "node_memory_MemAvailable_bytes" for t, v in zip(s.timestamps, s.values)}
    total = {round(t * 1000): v for s in live if s.name == "node_memory_MemTotal_bytes" for t, v in zip(s.timestamps, s.values)}
    used = [100 * (1 - avail[k] / total[k]) for k in avail.keys() & total.keys()]
    for v in (pq.job_stat("mem_used_pct", jobid, w).value, R.raw_job_stat(live, "mem_used_pct", jobid, window=w)):
        assert min(used) - 1e-9 <= v <= max(used) + 1e-9
    assert pq.job_stat("mem_total", jobid, w, "max").value == mem_total  # the recorded figure


# ------------------------------------------------------- time-weighted avg (issue 14, the kind)

TW0 = 1795500000.0  # hand-built series (unix s; in the past: VictoriaMetrics drops future samples); jobs 9710x


def _tw_export(path: Path, jobid: str, host: str, points: list[tuple[float, float]], rms: list[float]) -> None:
    lab = {"gpu": "0", "device": "nvidia0", "Hostname": host, "instance": f"{host}:9400"}
    rows = [{"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", **lab}, "values": [v for _, v in points],
             "timestamps": [int(round(t * 1000)) for t, _ in points]},
            {"metric": {"__name__": "rmsjob_info", "instance": f"{host}:8001", "jobid": jobid},
             "values": [1.0] * len(rms), "timestamps": [int(round(t * 1000)) for t in rms]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_time_weighted_mean_known_answers():
    # the handed case's shape: 100 % for 5 s then 20 %, 4 Hz, samples at both window ends. The plain
    # mean of the 41 samples is (20*100 + 21*20)/41 = 59.02; the sample AT the end describes the time
    # after the job, so it holds 0 s: (100*5 + 20*5)/10 = 60 exactly
    ts = [i * 0.25 for i in range(41)]
    vs = [100.0 if t < 5 else 20.0 for t in ts]
    assert statistics.fmean(vs) == pytest.approx(59.0244, abs=1e-4)
    assert R.time_weighted_mean(ts, vs, 10.0) == 60.0
    # irregular scrapes: 10 (1 s), 50 (1 s), 100 (6 s), 10 (2 s) -> 680/10; plain mean 42.5
    assert R.time_weighted_mean([0, 1, 2, 8], [10, 50, 100, 10], 10.0) == pytest.approx(68.0)
    # one sample at the end covers no time: its value
    assert R.time_weighted_mean([10.0], [42.0], 10.0) == 42.0
    with pytest.raises(InputError):
        R.time_weighted_mean([], [], 1.0)


@pytest.mark.vm
@pytest.mark.parametrize("jobid, points, window, want, n", [
    # irregular scrapes inside the window (first sample at the start): 680 / 10 s
    ("97101", [(-3, 0.0), (0, 10.0), (1, 50.0), (2, 100.0), (8, 10.0), (12, 0.0)], (0, 10), 68.0, 4),
    # a window not aligned to a 15 s scrape: the sample 7 s before the job (0 %) is not carried in;
    # 80 holds 15 s and 40 holds 7 s from the first sample at +8 s: (80*15 + 40*7) / 22
    ("97102", [(-7, 0.0), (8, 80.0), (23, 40.0), (38, 0.0)], (0, 30), (80 * 15 + 40 * 7) / 22, 2),
    # a 4 Hz series whose window ends between samples (at +9.9 s): 100 for 5 s, 20 for 4.9 s
    ("97103", [(i * 0.25, 100.0 if i < 20 else 20.0) for i in range(-8, 60)], (0, 9.9), (500 + 20 * 4.9) / 9.9, 40),
])
def test_time_weighted_avg_promql_and_raw_agree(vm_server, tmp_path, jobid, points, window, want, n):
    f = tmp_path / "export.jsonl"
    pts = [(TW0 + t, v) for t, v in points]
    host = f"tw{jobid}"  # the session's VM holds every case: one host per case keeps the series apart
    _tw_export(f, jobid, host, pts, [TW0 + window[0] + 1, TW0 + window[1] - 1])
    vm_server.import_jsonl(f)
    w = (TW0 + window[0], TW0 + window[1])
    r = P.PromQL(vm_server.url).job_stat("gpu_util", jobid, w, "avg")
    raw = R.raw_job_stat_detail(E.load_export(f), "gpu_util", jobid, "avg", window=w)
    assert r.value == pytest.approx(want, rel=1e-12) and raw.value == pytest.approx(want, rel=1e-12)
    assert r.sample_count == raw.sample_count == n and r.per_instance == {host: pytest.approx(want)}
    assert "integrate(DCGM_FI_DEV_GPU_UTIL[" in r.query
    assert float(P.PromQL(vm_server.url).instant(r.query, r.time)[0]["value"][1]) == r.value


@pytest.mark.vm
def test_time_weighted_avg_two_hosts_with_different_scrape_phases(vm_server, tmp_path):
    f = tmp_path / "export.jsonl"
    rows = []
    for host, phase, val in (("phA", 0.0, 30.0), ("phB", 0.4, 90.0)):
        pts = [(TW0 + 100 + phase + i, val if i < 5 else val / 3) for i in range(-2, 12)]
        lab = {"gpu": "0", "Hostname": host, "instance": f"{host}:9400"}
        rows.append({"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", **lab}, "values": [v for _, v in pts],
                     "timestamps": [int(round(t * 1000)) for t, _ in pts]})
        rows.append({"metric": {"__name__": "rmsjob_info", "instance": f"{host}:8001", "jobid": "97104"},
                     "values": [1.0], "timestamps": [int((TW0 + 105) * 1000)]})
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    vm_server.import_jsonl(f)
    w = (TW0 + 100, TW0 + 110)
    r = P.PromQL(vm_server.url).job_stat("gpu_util", "97104", w, "avg")
    # phA: 30 for 5 s, 10 for 5 s -> 20; phB from its first sample at +0.4: 90 for 5 s, 30 for 4.6 s
    want_b = (90 * 5 + 30 * 4.6) / 9.6
    assert r.per_instance == {"phA": pytest.approx(20.0), "phB": pytest.approx(want_b)}
    assert r.value == pytest.approx((20.0 + want_b) / 2) and " or " in r.query
    assert R.raw_job_stat(E.load_export(f), "gpu_util", "97104", "avg", window=w) == pytest.approx(r.value, rel=1e-12)


def test_nan_samples_are_counted_and_left_out(tmp_path):
    f = tmp_path / "export.jsonl"
    nan = float("nan")
    # json.dumps writes bare NaN, as a Python exporter would: the loader reads it
    _tw_export(f, "97105", "nannode", [(TW0 + i, nan if i % 2 else (80.0 if i < 6 else 40.0)) for i in range(11)],
               [TW0 + 5])
    d = R.raw_job_stat_detail(E.load_export(f), "gpu_util", "97105", "avg", window=(TW0, TW0 + 10))
    # finite samples 80 at 0, 2, 4 and 40 at 6, 8, 10: each holds until the next finite one -> 80 for 6 s, 40 for 4 s
    assert d.value == pytest.approx(64.0) and d.sample_count == 6 and d.nan_count == 5
    _tw_export(f, "97106", "nannode", [(TW0 + i, nan) for i in range(11)], [TW0 + 5])
    d = R.raw_job_stat_detail(E.load_export(f), "gpu_util", "97106", "max", window=(TW0, TW0 + 10))
    assert d.value is None and d.sample_count == 0 and d.nan_count == 11


@pytest.mark.vm
def test_a_sample_at_the_end_rounded_to_the_ms_is_in_both_paths(vm_server, tmp_path):
    """A SLURM end 0.4 ms before a sample (92001's end 713.756802 s has one at 713.757): the TSDB
    holds whole ms and PromQL evaluates at the end rounded to the ms, so that sample is the
    window's last in both paths. 41 samples at 4 Hz, 10 % except 99 % at +10.000 s."""
    f = tmp_path / "export.jsonl"
    pts = [(TW0 + 200 + i * 0.25, 99.0 if i == 40 else 10.0) for i in range(41)]
    _tw_export(f, "97107", "msend", pts, [TW0 + 205])
    vm_server.import_jsonl(f)
    w = (TW0 + 200, TW0 + 209.9996)
    series = E.load_export(f)
    for stat, want in (("max", 99.0), ("p50", 10.0), ("min", 10.0), ("avg", 10.0)):  # at the end it holds 0 s
        r = P.PromQL(vm_server.url).job_stat("gpu_util", "97107", w, stat)
        raw = R.raw_job_stat_detail(series, "gpu_util", "97107", stat, window=w)
        assert r.value == pytest.approx(want) and raw.value == pytest.approx(want), stat
        assert raw.sample_count == 41
    assert P.PromQL(vm_server.url).job_stat("gpu_util", "97107", w, "avg").sample_count == 41
