"""Memory-bound roofline categories (seed 001 T15) on a hand-built trace: one ``aten::add`` of two
1024x1024 fp32 tensors (3 x 4 MiB = 12582912 B moved, 1048576 FLOP: 0.083 FLOP/B, far below the
H200 ridge) whose kernel runs 10 µs: 12582912 B / 10 µs = 1.2583 TB/s. The kernel is linked to the
op by External id (the analyst) and by correlation id through its launch (the verifier): both give
the same bandwidth, so the claim is confirmed."""

from __future__ import annotations

import gzip
import json

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import roofline_memory
from ai4s_graph.graph.rules.diagnosis import memory_bound_from_roofline
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.state import Manifest
from ai4s_graph.tools.perfmodel.roofline import RooflineCollector, roofline_of
from ai4s_graph.tools.trace import stream

CAUSE = roofline_memory.CAUSE
BYTES = 3 * 4 * 1024 * 1024


def _trace(tmp_path, kernel_us: float = 10.0):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0,
           "args": {"External id": 1, "Input Dims": [[1024, 1024], [1024, 1024], []],
                    "Input type": ["float", "float", "Scalar"]}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0,
           "args": {"correlation": 5, "External id": 1}},
          {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7, "ts": 50.0,
           "dur": kernel_us, "args": {"correlation": 5, "External id": 1, "device": 0, "stream": 7}}]
    p = tmp_path / "t.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": ev}, f)
    return p


def _roofline(p, link):
    col = RooflineCollector()
    stream.feed_events(p, (col.feed,))
    return roofline_of(col.totals(link), "NVIDIA H200", p.name)


def test_memory_bound_elementwise_claimed_and_confirmed(tmp_path):
    p = _trace(tmp_path)
    rf = _roofline(p, "external_id")
    assert rf["categories"]["elementwise"]["bytes"] == BYTES
    [f] = CAUSE.detect(Inputs(rank={"path": str(p), "rank": 0}, roofline=rf, manifest=Manifest(jobid="1", gpu="H200")))
    assert f.causes == ("memory-bound-elementwise",) and f.claim.id == "triage.roofline.elementwise"
    assert f.claim.metric == "roofline.elementwise.tbps" and f.claim.value == round(BYTES / 10e-6 / 1e12, 4) == 1.2583
    assert [lv.name for lv in f.levers] == ["torch_compile"]
    rd = CAUSE.rederive(f.claim, Reader(rank={"roofline_correlation_rf": _roofline(p, "correlation")}))
    assert rd.value == 1.2583
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"
    assert memory_bound_from_roofline(rf)[0] is True


def test_no_shapes_no_claim(tmp_path):
    assert CAUSE.detect(Inputs(rank={"path": "t", "rank": 0}, roofline={"shapes_recorded": False})) == []
    assert CAUSE.detect(Inputs(rank={"path": "t", "rank": 0}, roofline=None)) == []
    assert memory_bound_from_roofline(None)[0] is None


def test_modelled_bytes_above_the_hbm_peak_are_called_an_over_count(tmp_path):
    """The same add whose kernel runs 2 µs: 12582912 B / 2 µs = 6.2915 TB/s, above the H200's
    4.8 TB/s HBM peak (datasheet): no kernel moves that, so the shape model over-counts the bytes
    (operands in L2, broadcast). The claim says so instead of calling it an achieved bandwidth
    (the bundled 93001 read "107% of the peak"), with a lower confidence; its value is the same
    arithmetic, which the verifier still re-derives."""
    p = _trace(tmp_path, kernel_us=2.0)
    rf = _roofline(p, "external_id")
    assert rf["categories"]["elementwise"]["above_peak_bw"] is True
    [f] = CAUSE.detect(Inputs(rank={"path": str(p), "rank": 0}, roofline=rf, manifest=Manifest(jobid="1", gpu="H200")))
    assert f.claim.value == round(BYTES / 2e-6 / 1e12, 4) == 6.2915
    assert "above the 4.80 TB/s HBM peak" in f.claim.statement and "over-counts" in f.claim.statement
    assert "% of the" not in f.claim.statement and f.claim.confidence == 0.5
