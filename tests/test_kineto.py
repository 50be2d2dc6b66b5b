"""tools/kineto.py: the verifier's own reader and interval arithmetic (no HTA/TraceLens/pandas).
Real inputs: the bundled traces (examples/perf-runs) and TraceLens's reports of them (tests/data/tracelens-ref)."""

from __future__ import annotations

import csv
import gzip
import json
import sys

import pytest

from ai4s_graph.tools.trace import kineto
from ai4s_graph.tools.errors import InputError


def test_merge_and_subtract_intervals():
    assert kineto.merge_intervals([(5, 7), (0, 2), (1, 3), (3, 4)]) == [(0, 4), (5, 7)]
    b = [(0, 10), (20, 30)]
    a = [(2, 3), (5, 25)]
    assert kineto.subtract_intervals(b, a) == [(0, 2), (3, 5), (25, 30)]
    assert kineto.subtract_intervals(b, []) == b
    assert kineto.total_length(kineto.subtract_intervals(b, [(-1, 40)])) == 0


def test_timeline_arithmetic_definitions():
    # comp [0,10], comm [5,15] (5 exposed), memcpy [12,20] (3 under comm, 5 exposed), gap to 30.
    t = kineto.timeline_from_intervals([(0, 10), (25, 30)], [(5, 15)], [(12, 20)])
    ms = {k: v.time_ms * 1e3 for k, v in t.items()}
    assert ms == {"computation_time": 15, "exposed_comm_time": 5, "exposed_memcpy_time": 5,
                  "busy_time": 25, "idle_time": 5, "total_time": 30,
                  "total_comm_time": 10, "total_memcpy_time": 8}
    assert t["busy_time"].percent == pytest.approx(25 / 30 * 100)


def test_classify_gpu_event():
    assert kineto.classify_gpu_event("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == kineto.COMM
    assert kineto.classify_gpu_event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)") == kineto.MEMCPY
    assert kineto.classify_gpu_event("gpu_memset", "Memset (Device)") == kineto.COMPUTE  # TraceLens rule
    assert kineto.classify_gpu_event("kernel", "__amd_rocclr_copyBuffer.kd") == kineto.MEMCPY
    assert kineto.classify_gpu_event("kernel", "void at::native::vectorized_elementwise_kernel<4>") == kineto.COMPUTE


def test_categorize_op():
    assert kineto.categorize_op("aten::addmm") == "GEMM"
    assert kineto.categorize_op("aten::native_layer_norm_backward") == "NORM_bwd"
    assert kineto.categorize_op("aten::foo", "void at::native::reduce_kernel<512>") == "reduce"
    assert kineto.categorize_op("triton_poi_fused_add_0") == "triton"
    assert kineto.categorize_op("aten::_flash_attention_forward", "void pytorch_flash::flash_fwd_kernel") == "other"


REFS = [("92001", 0), ("92002", 0), ("92003", 0), ("92004", 0),
        ("93001", 0), ("93001", 1), ("93004", 1), ("93005", 0)]


def _events(path):
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


@pytest.mark.parametrize("job,rank", REFS, ids=[f"{j}_rank{r}" for j, r in REFS])
def test_rederive_timeline_matches_tracelens(perf_runs, tracelens_refs, job, rank):
    with open(tracelens_refs / f"{job}_rank{rank}_perf_report_csvs" / "gpu_timeline.csv", newline="") as fh:
        ref = {r["type"]: (float(r["time ms"]), float(r["percent"])) for r in csv.DictReader(fh)}
    got = kineto.rederive_timeline(perf_runs / job / "traces" / f"trace_rank{rank}.json.gz")
    assert set(got) == set(ref)
    for row, (ms, pct) in ref.items():
        assert got[row].time_ms == pytest.approx(ms, abs=1e-6), row
        assert got[row].percent == pytest.approx(pct, abs=1e-6), row


def test_count_kernels_on_run(perf_runs, tracelens_refs):
    """92003 (vit bf16): the kernel count of TraceLens's kernel_summary.csv; the short kernels counted
    by hand over the raw JSON (TraceLens's short_kernels_summary of this shape-less trace is empty)."""
    path = perf_runs / "92003/traces/trace_rank0.json.gz"
    c = kineto.count_kernels(path)
    with open(tracelens_refs / "92003_rank0_perf_report_csvs" / "kernel_summary.csv", newline="") as fh:
        ref_count = sum(int(r["Kernel duration (µs)_count"]) for r in csv.DictReader(fh))
    kernels = [e for e in _events(path) if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert c["kernel_count"] == ref_count == len(kernels) == 2718
    assert c["short_kernels"]["count"] == sum(1 for e in kernels if float(e["dur"]) < 10.0) == 567
    assert c["short_kernels"]["threshold_us"] == 10.0
    assert len(c["top_kernels"]) == 20
    assert c["top_kernels"][0]["total_us"] >= c["top_kernels"][1]["total_us"]
    cats = {r["category"] for r in c["kernels_by_category"]}
    assert {"GEMM", "elementwise"} <= cats


def test_load_events_keeps_only_intervals(perf_runs):
    path = perf_runs / "92001/traces/trace_rank0.json.gz"
    tr = kineto.load_events(path)
    ev = _events(path)
    steps = sorted(int(e["name"].split("#")[1]) for e in ev
                   if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#"))
    assert steps == [834, 835, 836]  # the 3 profiled steady-state steps (examples/perf-runs/README.md)
    assert any(e.get("cat") == "ac2g" for e in ev) and "distributedInfo" not in json.loads(
        gzip.decompress(path.read_bytes()))
    assert tr.rank is None and tr.has_flows and tr.linked_only
    assert len(tr.steps) == 3 and [s[2] for s in tr.steps] == steps
    assert all(g.linked for g in tr.gpu if g.cat == "kernel")
    assert isinstance(tr.gpu[0], kineto.GpuEvent) and not hasattr(tr.gpu[0], "__dict__")


def test_rank_from_distributed_info(perf_runs, tmp_path):
    """93001 rank 1 (DDP on GPU 1): the rank from distributedInfo, the GPU id from the kernels'
    ``args.device``. The same trace with its flow events removed (a property of HTA's sampled test
    traces, which have none): still rank 1, and ``has_flows`` False."""
    src = perf_runs / "93001/traces/trace_rank1.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    assert doc["distributedInfo"]["rank"] == 1
    assert {e["args"]["device"] for e in doc["traceEvents"] if e.get("cat") == "kernel"} == {1}
    tr = kineto.load_events(src)
    assert tr.rank == 1 and tr.has_flows
    assert kineto.gpu_ids(tr) == [1]
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "ac2g"]
    p = tmp_path / "noflows.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    tr = kineto.load_events(p)
    assert tr.rank == 1 and not tr.has_flows
    assert kineto.gpu_ids(tr) == [1]


def test_no_hta_tracelens_or_pandas_needed():
    """The verifier's path must not pull in the libraries it checks."""
    import subprocess

    code = ("import sys; import ai4s_graph.tools.trace.kineto; "
            "bad=[m for m in ('hta','TraceLens','pandas') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_read_trace_json_errors(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[1, 2]")
    with pytest.raises(InputError, match="x.json: JSON has no traceEvents"):
        kineto.read_trace_json(p)
