"""Streaming (bounded-memory) trace reader: gpu_timeline agrees with TraceLens's own CSVs and the
project's kineto re-derivation; kernel counts agree with TraceLens's kernel_summary; bad input
gives one-line errors."""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from ai4s_graph.tools.trace import stream as T
from ai4s_graph.tools.errors import InputError, NoGpuEventsError

RUNS = Path(__file__).resolve().parent.parent / "examples" / "perf-runs"
REFS = Path(__file__).resolve().parent / "data" / "tracelens-ref"
# every trace TraceLens's reports were made for (tests/data/tracelens-ref/README.md)
REF_TRACES = sorted(d.name.removesuffix("_perf_report_csvs") for d in REFS.glob("*_perf_report_csvs"))


def _trace(ref: str) -> Path:
    """``92001_rank0`` -> ``examples/perf-runs/92001/traces/trace_rank0.json.gz``."""
    job, rank = ref.split("_rank")
    return RUNS / job / "traces" / f"trace_rank{rank}.json.gz"


def _csv_timeline(d: Path) -> dict[str, float]:
    with open(d / "gpu_timeline.csv") as fh:
        return {row["type"]: float(row["time ms"]) for row in csv.DictReader(fh)}


def test_every_reference_has_its_trace():
    assert len(REF_TRACES) == 8 and all(_trace(r).is_file() for r in REF_TRACES), REF_TRACES


@pytest.mark.parametrize("ref", REF_TRACES)
def test_gpu_timeline_matches_tracelens_csv(tracelens_refs, ref):
    res = T.analyze_trace_streaming(_trace(ref))
    ref_tl = _csv_timeline(tracelens_refs / f"{ref}_perf_report_csvs")
    total = ref_tl["total_time"]
    assert set(ref_tl) == set(res["timeline_us"])
    for row, ms in ref_tl.items():
        assert abs(res["timeline_us"][row] / 1e3 - ms) <= 0.01 * total, (row, res["timeline_us"][row], ms)
    # the CSV-shaped rows carry the same numbers
    rows = {r["type"]: r for r in res["gpu_timeline"]}
    assert rows["busy_time"]["time ms"] == pytest.approx(ref_tl["busy_time"], rel=1e-3)
    assert rows["total_time"]["percent"] == pytest.approx(100.0)


def _with_unlinked_kernels(src: Path, dst: Path, n: int, dur_us: float) -> tuple[Path, float]:
    """``src`` with ``n`` kernels appended that no CPU launch or ac2g flow links to (correlation ids
    above every id in the trace, no flow halves: kernels whose launch fell before the profiled
    window, as real traces hold them). They run back to back after the trace's last GPU event.
    Returns the new file and the time (µs) they add to the all-events span."""
    doc = json.load(gzip.open(src))
    ev = doc["traceEvents"]
    gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    end = max(float(e["ts"]) + float(e["dur"]) for e in gpu)
    top = max(int(e.get("args", {}).get("correlation", 0) or 0) for e in ev) + max(
        int(e.get("id", 0) or 0) if isinstance(e.get("id"), (int, float)) else 0 for e in ev)
    proto = next(e for e in gpu if e["cat"] == "kernel")
    for i in range(n):
        k = json.loads(json.dumps(proto))
        k["name"] = "stale_unlinked_kernel"
        k["ts"] = end + 10.0 + i * (dur_us + 10.0)
        k["dur"] = dur_us
        k["args"]["correlation"] = top + 1000 + i
        k["args"].pop("External id", None)
        ev.append(k)
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)
    return dst, n * (dur_us + 10.0)


def test_unlinked_kernels_are_left_out_like_tracelens(tracelens_refs, tmp_path):
    """GPU events that no CPU launch links to are left out, as TraceLens does (its default
    include_unlinked_kernels=False): 92001 with 500 such kernels appended (500 kernels of 50 µs, 10 µs
    apart, after its last kernel: +30 ms on a 73 ms window) gives TraceLens's own total for 92001; counting them would
    overstate the total by ~40 %."""
    p, added_us = _with_unlinked_kernels(_trace("92001_rank0"), tmp_path / "unlinked.json.gz", 500, 50.0)
    scan = T.scan_trace(p)
    linked = T.window_mask(scan, "linked")
    n_real = sum(1 for e in json.load(gzip.open(_trace("92001_rank0")))["traceEvents"]
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert scan.n_gpu_events == n_real + 500 and int(linked.sum()) == n_real
    ref = _csv_timeline(tracelens_refs / "92001_rank0_perf_report_csvs")
    assert T.gpu_timeline(scan, linked)["total_time"] / 1e3 == pytest.approx(ref["total_time"], rel=1e-4)
    all_total_ms = T.gpu_timeline(scan)["total_time"] / 1e3
    assert all_total_ms > 1.3 * ref["total_time"]
    assert all_total_ms == pytest.approx(ref["total_time"] + added_us / 1e3, rel=1e-3)


def _same_stream_overlaps(path: Path) -> Counter:
    """µs by kernel name that runs past the start of the next GPU event on the same (device,
    stream), counted over the raw JSON: what the engine clips (CUDA streams run in issue order,
    tools/trace/stream.py) and TraceLens's kernel_summary keeps. A zero-length event clips nothing."""
    by: dict[tuple, list[dict]] = {}
    for e in json.load(gzip.open(path))["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            a = e.get("args", {})
            by.setdefault((a.get("device"), a.get("stream")), []).append(e)
    over: Counter = Counter()
    for evs in by.values():
        evs = sorted(evs, key=lambda e: float(e["ts"]))
        nonzero = [e for e in evs if float(e["dur"]) > 0]
        for a, b in zip(nonzero, nonzero[1:]):
            over[a["name"]] += max(0.0, float(a["ts"]) + float(a["dur"]) - float(b["ts"]))
    return over


@pytest.mark.parametrize("ref", ["92001_rank0", "93001_rank1", "93004_rank1", "93005_rank0"])
def test_kernel_counts_match_tracelens_kernel_summary(tracelens_refs, ref):
    """Counts are TraceLens's; totals are TraceLens's less what runs past the next event on the
    same stream (93004 rank 1: two splitK GEMMs overlap their splitKreduce by ~0.13 µs each)."""
    scan = T.scan_trace(_trace(ref))
    mine = {r["name"]: r for r in T.kernel_counts(scan, T.window_mask(scan, "linked"))}
    clipped = _same_stream_overlaps(_trace(ref))
    ref_n: Counter = Counter()
    ref_us: Counter = Counter()
    with open(tracelens_refs / f"{ref}_perf_report_csvs" / "kernel_summary.csv") as fh:
        for row in csv.DictReader(fh):
            ref_n[row["Kernel name"]] += int(row["Kernel duration (µs)_count"])
            ref_us[row["Kernel name"]] += float(row["Kernel duration (µs)_sum"])
    assert ref_n, "kernel_summary.csv is empty"
    for k, n in ref_n.items():
        assert mine[k]["count"] == n, k
        assert mine[k]["total_us"] == pytest.approx(ref_us[k] - clipped[k], rel=1e-6, abs=1e-3)
    if ref == "93004_rank1":  # the one reference with overlaps on a stream: the clip is exercised
        assert 0.2 < sum(clipped.values()) < 0.3


def test_agrees_with_project_kineto_reader(perf_runs):
    kineto = pytest.importorskip("ai4s_graph.tools.trace.kineto")
    p = perf_runs / "92003" / "traces" / "trace_rank0.json.gz"
    k = kineto.rederive_timeline(p)
    mine = T.analyze_trace_streaming(p)["timeline_us"]
    total = k["total_time"].time_ms
    for row in T.GPU_TIMELINE_ROWS:
        assert abs(k[row].time_ms - mine[row] / 1e3) <= 0.01 * total, row


def test_scan_memory_is_compact(perf_runs):
    """The arrays kept per GPU event / launch / cpu_op / flow start are 45 / 36 / 28 / 8 bytes:
    the documented bound (it grows with those counts, never with the JSON text). 93005 rank 0 (FSDP,
    55,018 events): the event counts are counted here over the raw JSON."""
    p = perf_runs / "93005" / "traces" / "trace_rank0.json.gz"
    ev = json.load(gzip.open(p))["traceEvents"]
    n_gpu = sum(1 for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    n_ops = sum(1 for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    scan = T.scan_trace(p)
    assert scan.n_events == len(ev) and scan.n_gpu_events == n_gpu
    assert scan.op_ts.size == n_ops
    assert scan.nbytes() == (45 * scan.n_gpu_events + 36 * scan.launch_corr.size + 28 * scan.op_ts.size
                             + 8 * scan.flow_ids.size)
    assert scan.nbytes() < 1.5e6
    # far below the JSON text it was read from
    assert scan.nbytes() < len(gzip.open(p).read()) / 10


def test_header_read_without_events(perf_runs):
    """93001 rank 0 of a 2-GPU DDP run on one host: world size, rank and GPU count as its manifest says."""
    p = perf_runs / "93001" / "traces" / "trace_rank0.json.gz"
    h = T.read_header(p)
    assert h["distributedInfo"]["world_size"] == 2 and h["distributedInfo"]["rank"] == 0
    man = json.loads((perf_runs / "93001" / "manifest.json").read_text())
    assert man["world_size"] == 2 and man["num_nodes"] * man["gpus_per_node"] == 2
    assert len(h["deviceProperties"]) == man["gpus_per_node"]
    assert "traceEvents" not in h


def test_bad_inputs_one_line_errors(tmp_path, perf_runs):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        T.scan_trace(empty)
    with pytest.raises(InputError, match="not found"):
        T.scan_trace(tmp_path / "nope.json")
    raw = gzip.open(perf_runs / "93001" / "traces" / "trace_rank0.json.gz").read()
    trunc = tmp_path / "trunc.json"
    trunc.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputError, match="truncated") as ei:
        T.scan_trace(trunc)
    assert "\n" not in str(ei.value)
    cpu_only = tmp_path / "cpu.json"
    cpu_only.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 2}]}')
    with pytest.raises(NoGpuEventsError):
        T.scan_trace(cpu_only)
    scan = T.scan_trace(perf_runs / "93001" / "traces" / "trace_rank0.json.gz")
    with pytest.raises(InputError, match="unknown launch window"):
        T.window_mask(scan, "bogus")  # type: ignore[arg-type]
