"""Field-input kinds of what names an event (issues 25 and 33): stream ids of every width and type
(ROCm/HIP 64-bit stream handles, kineto PR#1416), the category's spelling (kineto#659, PR#674, #564:
``Kernel``, the legacy ``Kernel`` / ``Runtime`` / ``Memcpy`` / ``Memset`` and ``async_gpu`` flows) with
HolisticTraceAnalysis's public trace ``inference_rank_1`` (tests/data/traces, MIT), and device
activity of kinds the readers do not take (MTIA, CUPTI range profiling). Each member is hand-built
with hand-computed figures; the engine and the verifier's reader must give them by their own code."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import trace_build as tb  # noqa: E402

from ai4s_graph.cli import app  # noqa: E402
from ai4s_graph.tools.errors import NoGpuEventsError  # noqa: E402
from ai4s_graph.tools.trace import categories, kineto, stream  # noqa: E402
from slurm_faults import UNKNOWN_JOBID  # noqa: E402

DATA = Path(__file__).parent / "data" / "traces"


def _overflow(stream_a, stream_b=None, stream_c=None) -> list[dict]:
    """A [100, 100 + 1e6] runs past B [400, 450] and C [550, 600] on one stream: A is clipped at
    400, so busy = 300 + 50 + 50 of 500 us, idle 20 %. Unclipped (A read as on no stream), the
    window is ~1 s and idle ~0 %."""
    sb = stream_a if stream_b is None else stream_b
    sc = stream_a if stream_c is None else stream_c
    return (tb.launched("A", 100.0, 1e6, 1, stream=stream_a) + tb.launched("B", 400.0, 50.0, 2, stream=sb)
            + tb.launched("C", 550.0, 50.0, 3, stream=sc))


STREAM_IDS = {
    "small int": 7, "2^31": 1 << 31, "2^32 + 7": (1 << 32) + 7, "HIP stream handle (user-space pointer)": 0x7F3A2C000000,
    "2^53 + 1": (1 << 53) + 1, "int64 max": (1 << 63) - 1, "hex string": "0x7f3a2c000000", "digit string": "7",
    "negative": -3,
}


@pytest.mark.parametrize("width", list(STREAM_IDS))
def test_stream_ids_of_every_width_and_type_clip_on_their_stream(tmp_path, width):
    res, v = tb.both(tb.write(tmp_path / "t.json", _overflow(STREAM_IDS[width])))
    for reader in ("engine", "reader"):
        assert tb.pct(res, "idle_time", reader) == pytest.approx(20.0, abs=1e-9), reader
    assert any("clipped at that start" in w and f"(stream {STREAM_IDS[width]}," in w for w in res["warnings"])
    assert not tb.all_confirmed(v), tb.all_confirmed(v)


def test_streams_that_differ_above_bit_31_stay_apart(tmp_path):
    # A on stream 2^32 + 7 [100, 400], B on stream 7 [200, 300] inside it, C [500, 600]: two streams,
    # nothing clipped: busy [100, 400] + [500, 600] = 400 of 500 us (idle 20 %). Read as one stream
    # (the ids cut to 32 bits), A would be clipped at 200: busy 300, idle 40 %.
    ev = (tb.launched("A", 100.0, 300.0, 1, stream=(1 << 32) + 7) + tb.launched("B", 200.0, 100.0, 2, stream=7)
          + tb.launched("C", 500.0, 100.0, 3, stream=(1 << 32) + 7))
    res, v = tb.both(tb.write(tmp_path / "t.json", ev))
    assert tb.pct(res, "idle_time") == tb.pct(res, "idle_time", "reader") == pytest.approx(20.0)
    assert not any("clipped" in w for w in res["warnings"]) and not tb.all_confirmed(v)


def test_the_kernel_summary_keeps_the_stream_as_written(tmp_path):
    ev = tb.launched("A", 100.0, 50.0, 1, stream=0x7F3A2C000000) + tb.launched("B", 200.0, 50.0, 2, stream="s1")
    res, _ = tb.both(tb.write(tmp_path / "t.json", ev))
    assert {r["Kernel stream"] for r in res["tables"]["kernel_summary"]} == {0x7F3A2C000000, "s1"}


# ---------------------------------------------------------------------------------- categories


def _legacy(flows_only: bool = False, cat: dict | None = None) -> list[dict]:
    """kineto before Nov 2021: Kernel K [100, 200], Memcpy M [250, 300], Memset S [350, 360],
    launched by Runtime calls, async_gpu flows. computation = K + S = 110 us, memcpy 50 us (exposed),
    busy 160 of 260 us, idle 100 us. An unlinked Kernel at [1000, 1100] (no launch, no flow) is left
    out when the others link (TraceLens's default), so the window stays 260 us."""
    c = {"kernel": "Kernel", "memcpy": "Memcpy", "memset": "Memset", "runtime": "Runtime", "flow": "async_gpu",
         **(cat or {})}
    ev = []
    for corr, (kind, name, t, d, api) in enumerate((("kernel", "gemm", 100.0, 100.0, "cudaLaunchKernel"),
                                                    ("memcpy", "Memcpy HtoD (Pageable -> Device)", 250.0, 50.0,
                                                     "cudaMemcpyAsync"),
                                                    ("memset", "Memset (Device)", 350.0, 10.0, "cudaMemsetAsync")), 1):
        rt = tb.launch(corr, t - 60.0, name=api, cat=c["runtime"])
        if flows_only:
            del rt["args"]["correlation"]
        ev += [rt, {"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": t - 60.0, "cat": c["flow"], "name": api},
               tb.kernel(name, t, d, corr, cat=c[kind]),
               {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": t, "cat": c["flow"], "name": api, "bp": "e"}]
    return ev + [tb.kernel("unlinked", 1000.0, 100.0, 99, cat=c["kernel"])]


LEGACY = {"legacy categories, Runtime correlations": dict(),
          "legacy categories, linked by async_gpu flows only": dict(flows_only=True),
          "capitalised modern names (kineto PR#674 builds)": dict(cat={"memcpy": "GPU_MEMCPY", "memset": "Gpu_Memset",
                                                                      "runtime": "CUDA_RUNTIME", "flow": "AC2G"}),
          "async_cpu_to_gpu flows (2022 traces)": dict(flows_only=True, cat={"flow": "async_cpu_to_gpu"})}


@pytest.mark.parametrize("member", list(LEGACY))
def test_category_spellings_are_read_by_both_readers(tmp_path, member):
    res, v = tb.both(tb.write(tmp_path / "t.json", _legacy(**LEGACY[member])))
    want = {"computation_time": 100 * 110 / 260, "exposed_memcpy_time": 100 * 50 / 260, "busy_time": 100 * 160 / 260,
            "idle_time": 100 * 100 / 260}
    for reader in ("engine", "reader"):
        for row, p in want.items():
            assert tb.pct(res, row, reader) == pytest.approx(p, abs=1e-9), (reader, row)
    assert res["kernel_count"] == res["reader"]["kernel_count"] == 2  # gemm + the unlinked one
    assert any(w.startswith("categories normalised to kineto's names: ") for w in res["warnings"])
    assert not tb.all_confirmed(v), tb.all_confirmed(v)


def test_canonical_category_names():
    f = categories.canonical_category
    assert [f(c) for c in ("Kernel", "KERNEL", "kernel", "Runtime", "Memcpy", "Memset", "async_gpu", "Trace",
                           "cpu_op", "my_cat")] == ["kernel", "kernel", "kernel", "cuda_runtime", "gpu_memcpy",
                                                    "gpu_memset", "ac2g", "Trace", "cpu_op", "my_cat"]
    assert f(["kernel"]) is None and f(5) is None


def _hand_timeline(path: Path) -> dict[str, float]:
    """The HTA trace's gpu_timeline computed here from its events: its 4 "Kernel" events, each
    launched by a "Runtime" cudaLaunchKernel with its correlation id, none a communication or copy
    kernel: computation = busy = their union, total = last end - first start."""
    data = json.loads(gzip.decompress(path.read_bytes()))
    launches = {e["args"]["correlation"] for e in data["traceEvents"] if e.get("cat") == "Runtime"}
    ks = sorted((e["ts"], e["ts"] + e["dur"]) for e in data["traceEvents"]
                if e.get("cat") == "Kernel" and e["args"]["correlation"] in launches)
    busy, end = 0.0, None
    for s, e in ks:
        busy += max(0.0, e - max(s, end)) if end is not None else e - s
        end = e if end is None else max(end, e)
    total = ks[-1][1] - ks[0][0]
    return {"n": len(ks), "busy_us": busy, "total_us": total}


def test_the_public_hta_trace_with_legacy_categories(tmp_path):
    p = DATA / "hta_inference_rank_1.json.gz"
    hand = _hand_timeline(p)
    # read off the file: kernels of 4, 6, 15 and 5 us from ts 1665536373729077 to 1665536373730706
    assert hand == {"n": 4, "busy_us": 30.0, "total_us": 1629.0}
    res, v = tb.both(Path(shutil.copy(p, tmp_path / "inference_rank_1.json.gz")))
    for reader in ("engine", "reader"):
        tl = res["timeline"] if reader == "engine" else res["reader"]["timeline"]
        assert tl["busy_time"]["time_ms"] * 1e3 == pytest.approx(hand["busy_us"], abs=1e-6)
        assert tl["computation_time"]["time_ms"] * 1e3 == pytest.approx(hand["busy_us"], abs=1e-6)
        assert tl["total_time"]["time_ms"] * 1e3 == pytest.approx(hand["total_us"], abs=1e-6)
        assert tl["idle_time"]["percent"] == pytest.approx(100 * (1629 - 30) / 1629, abs=1e-9)
    assert res["kernel_count"] == 4 and res["launch"]["launch_calls"] == 4
    assert res["launch"]["mean_kernel_us"] == pytest.approx(7.5)
    assert ("categories normalised to kineto's names: 'Kernel' -> kernel (4 events), 'Runtime' -> cuda_runtime "
            "(8 events), 'async_gpu' -> ac2g (8 events)") in res["warnings"]
    assert not tb.all_confirmed(v), tb.all_confirmed(v)
    out = CliRunner().invoke(app, ["trace", "timeline", str(p), "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["busy_time"]["time_ms"] == pytest.approx(0.030)


# ---------------------------------------------------------------------------------- other devices


def _mtia() -> list[dict]:
    """HTA's MTIA traces, in small: runtime calls on the host, device events on the MTIA rows."""
    return [tb.op("aten::mm", 10.0, 30.0),
            {"ph": "X", "cat": "mtia_runtime", "name": "runFunction", "pid": 1, "tid": 1, "ts": 12.0, "dur": 5.0,
             "args": {"correlation": 5, "device": 9}},
            {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 9, "tid": 801, "ts": 50.0,
             "dur": 8.0, "args": {"direction": "DEVICE_TO_HOST"}},
            {"ph": "X", "cat": "mtia_ccp_events", "name": "event_wait", "pid": 9, "tid": 802, "ts": 60.0,
             "dur": 4.0, "args": {"stream": 108}}]


def _range_profiler() -> list[dict]:
    """CUPTI range profiling: kernels measured per range, written only as cuda_profiler_range."""
    return [tb.op("aten::mm", 10.0, 30.0),
            {"ph": "X", "cat": "cuda_profiler_range", "name": "range_0", "pid": 0, "tid": 0, "ts": 40.0, "dur": 100.0,
             "args": {"metrics": {"sm__throughput.avg.pct_of_peak_sustained_elapsed": 71.2}}}]


@pytest.mark.parametrize("build,what", [(_mtia, "2 mtia_ccp_events (MTIA device events), 1 mtia_runtime"),
                                        (_range_profiler, "1 cuda_profiler_range (CUPTI range-profiler ranges")])
def test_device_activity_of_another_kind_is_named_not_called_cpu_only(tmp_path, build, what):
    p = tb.write(tmp_path / "t.json", build())
    for read in (stream.scan_trace, kineto.load_events):
        with pytest.raises(NoGpuEventsError) as e:
            read(p)
        msg = str(e.value)
        assert what in msg and "CPU-only" not in msg.replace("not a CPU-only run", "") and "\n" not in msg
    out = CliRunner().invoke(app, ["trace", "timeline", str(p)])
    assert out.exit_code == 2 and what in out.stderr and out.stdout.startswith("STATUS=fail")


def test_a_trace_with_nothing_on_a_device_may_still_be_cpu_only(tmp_path):
    p = tb.write(tmp_path / "t.json", [tb.op("aten::mm", 10.0, 30.0)])
    with pytest.raises(NoGpuEventsError, match=r"a CPU-only run\?"):
        stream.scan_trace(p)
    with pytest.raises(NoGpuEventsError, match=r"a CPU-only run\?"):
        kineto.load_events(p)


def test_run_on_an_mtia_trace_says_what_the_trace_holds(tmp_path):
    (tmp_path / "in" / "traces").mkdir(parents=True)
    tb.write(tmp_path / "in" / "traces" / "trace_rank0.json", _mtia())
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["run", "--job", UNKNOWN_JOBID, "--perf-run", str(tmp_path / "in"), "--out", str(out),
                                 "--checkpoint", str(tmp_path / "c.sqlite")])
    text = (out / "report.md").read_text()
    assert "mtia_ccp_events (MTIA device events)" in text, r.output
    assert "CPU-only run?" not in text and "(CPU-only run)" not in text
