"""One read per rank trace (issues 12, 23): the engine, the verifier's own reader, the causes'
name counts and raw-text counts and the roofline collector are fed by the same pass, and each must
give what its standalone read of the file gives. Also: keys written after ``traceEvents``
(deviceProperties, distributedInfo) are read, and the raw-text count streams in chunks with the
same answer as a regular expression over the whole text."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from ai4s_graph.graph.analysis.nodes import trace_analyst
from ai4s_graph.graph.rules import registry
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.perfmodel.roofline import RooflineCollector, roofline, roofline_of
from ai4s_graph.tools.trace import crossrank_check, kineto, onepass, ranks, stream
from ai4s_graph.tools.trace.trailer import read_trailer, trailer_keys


@pytest.fixture()
def vit(perf_runs):
    """93003 rank 0: DDP vit bf16 on an H200, record_shapes on (examples/perf-runs/README.md)."""
    return perf_runs / "93003/traces/trace_rank0.json.gz"


def _cpu_op_count(path, name):
    """cpu_op events named ``name``, counted by hand over the raw JSON."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return sum(1 for e in ev if e.get("cat") == "cpu_op" and e.get("name") == name)


def _names(path):
    c = onepass.NameCounter(registry.event_name_wanted)
    stream.feed_events(path, (c.feed,))
    return c.counts


def test_one_pass_gives_what_each_standalone_read_gives(vit, tmp_path):
    res = trace_analyst.analyze_one(str(vit), 0, str(tmp_path / "cache"), "0")
    assert res["from_cache"] is False
    # the verifier's reader, fed by the engine's read, equals its own read of the file
    alone = kineto.rederive_figures(vit)
    fed = dict(res["reader"])
    comm = fed.pop("comm")
    kus = fed.pop("kernel_us")  # the causes' GPU time by name (onepass.kernel_time_by_name), not a figure of the reader
    assert kus and all(v > 0 for v in kus.values())
    assert fed == alone
    assert comm == crossrank_check.comm_kernels(vit)
    # the causes' name counts and raw-text counts equal a separate streamed count
    assert res["event_names"] == _names(vit)
    # a fused (cuDNN) SDPA: 12 layers x 3 profiled steps, no math fallback
    assert res["event_names"]["aten::_scaled_dot_product_cudnn_attention"] == 36
    assert _cpu_op_count(vit, "aten::_scaled_dot_product_cudnn_attention") == 36
    assert _cpu_op_count(vit, "aten::_scaled_dot_product_attention_math") == 0
    assert "aten::_scaled_dot_product_attention_math" not in res["event_names"]
    assert res["raw_counts"] == onepass.raw_counts(str(vit), registry.raw_patterns())
    assert res["raw_counts"]["sdpa_math"] == 0
    # the roofline totals of the pass give the roofline of a separate read, by both links
    dev = res["device_name"]
    assert dev == "NVIDIA H200"
    for link, totals in (("external_id", res["roofline_totals"]), ("correlation", res["roofline_correlation"])):
        assert roofline_of(totals, dev) == roofline(vit, link=link)
    assert roofline(vit)["categories"]["GEMM"]["kernel_us"] > 0

    # second run: the engine's result comes from the cache; the others are fed by the same open file
    again = trace_analyst.analyze_one(str(vit), 0, str(tmp_path / "cache"), "0")
    assert again["from_cache"] is True
    for k in ("reader", "event_names", "raw_counts", "roofline_totals", "roofline_correlation"):
        assert again[k] == res[k], k


def test_a_failing_consumer_never_fails_the_engine(vit):
    class Broken(kineto.KinetoLoader):
        def _feed(self, ev):
            if self.n == 10:
                raise RuntimeError("boom")
            super()._feed(ev)

    ld = Broken(vit)
    scan = stream.scan_trace(vit, also=(ld.feed,))
    assert scan.n_gpu_events > 0
    with pytest.raises(InputError, match="verifier's reader stopped.*RuntimeError: boom"):
        ld.finish(0)
    col = RooflineCollector()
    col.error = "ValueError: bad"
    with pytest.raises(InputError, match="roofline: the trace could not be read"):
        col.totals()


def _doc(events, head=None, tail=None):
    d = dict(head or {})
    d["traceEvents"] = events
    d.update(tail or {})
    return json.dumps(d, indent=1)


_EVENTS = [{"ph": "X", "cat": "cpu_op", "name": 'odd "] }, {" name', "ts": float(i), "dur": 1.0,
            "args": {"Input Dims": [[1, 2], [3]], "s": "]],"}} for i in range(2000)]


@pytest.mark.parametrize("gz", [False, True])
def test_keys_after_trace_events_are_read(tmp_path, gz):
    tail = {"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "x": [1, [2]]}],
            "distributedInfo": {"rank": 3, "world_size": 4}, "traceName": "a ] b"}
    text = _doc(_EVENTS, {"schemaVersion": 1}, tail)
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    assert read_trailer(p) == tail
    head = stream.read_header(p)
    assert head == {"schemaVersion": 1}  # the head alone
    both = stream.read_header(p, ("distributedInfo", "deviceProperties", "schemaVersion"), trailer=True)
    assert both["distributedInfo"]["rank"] == 3 and both["deviceProperties"] == tail["deviceProperties"]
    # the tail of a document bigger than the kept window still parses
    assert trailer_keys(text.encode()[-5000:]) == tail
    # a trailer-less document: nothing
    assert trailer_keys(_doc(_EVENTS).encode()[-5000:]) == {}


def test_rank_identity_reads_distributed_info_written_after_the_events(tmp_path):
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 1.0, "args": {"correlation": 1}}]
    for r in (1, 0):  # file names give no rank and sort opposite to the ranks
        (tmp_path / f"node{'ab'[r]}.json").write_text(_doc(ev, tail={"distributedInfo": {"rank": r, "world_size": 2}}))
    files, notes = ranks.identify_ranks(sorted(tmp_path.iterdir()))
    assert [(f.path.name, f.rank, f.source) for f in files] == [("nodea.json", 0, "distributedInfo"),
                                                                ("nodeb.json", 1, "distributedInfo")]
    assert notes == []


@pytest.mark.parametrize("chunk", [97, 1024, 1 << 23])
def test_raw_count_streams_in_chunks_with_the_whole_text_answer(tmp_path, chunk):
    names = ["aten::isnan", "autograd::engine::evaluate_function: MulBackward0", "aten::add"] * 700
    evs = [{"ph": "X", "cat": "cpu_op", "name": n, "ts": float(i), "dur": 1.0} for i, n in enumerate(names)]
    text = json.dumps({"traceEvents": evs}, indent=1).encode()
    rc = onepass.RawCounter({"isnan": 'aten::isnan"', "backward": "autograd::engine::evaluate_function",
                             "add": "aten::add"}, overlap=200)
    for i in range(0, len(text), chunk):
        rc.feed(text[i:i + chunk])
    assert rc.counts() == {"isnan": 700, "backward": 700, "add": 700}
    assert len(re.findall(rb'"name":\s*"aten::add', text)) == 700
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text))
    assert onepass.raw_counts(str(p), {"add": "aten::add"}) == {"add": 700}  # the pass's own chunks


def _raw_doc() -> tuple[bytes, dict[str, int]]:
    """A document with a hand-counted number of names hitting each cause's raw pattern, plus the
    awkward spots of the raw text: escaped quotes inside names, a ``\\"name\\": \\"`` inside a string
    (not a name key), names after a long stretch without any, whitespace around the colon."""
    hits = {"sdpa_math": ("aten::_scaled_dot_product_attention_math", 3),
            "compile": ("torch/_dynamo/convert_frame.py(912): _compile", 2),
            "compiled_regions": ("Torch-Compiled Region: 0/1", 4),
            "isnan": ("aten::isnan", 5), "backward": ("autograd::engine::evaluate_function: MulBackward0", 6),
            "per_tensor_update": ("aten::addcdiv_", 7), "stream_syncs": ("cudaStreamSynchronize", 8),
            "ckpt_fwd_layer_norm": ("void at::native::vectorized_layer_norm_kernel<float>", 9),
            "ckpt_bwd_attention": ("flash_bwd_dq_kernel", 10)}
    evs = []
    for _, (name, n) in hits.items():
        evs += [{"ph": "X", "cat": "cpu_op", "name": name, "ts": float(len(evs)), "dur": 1.0} for _ in range(n)]
    # not hits: a near miss of each closed pattern, a name with escaped quotes, a key inside a string
    evs += [{"ph": "X", "name": "aten::isnan_", "args": {"note": '"name": "aten::isnan"'}},
            {"ph": "X", "name": 'say "aten::addcdiv_" twice'}, {"ph": "X", "name": "cudaStreamSynchronizeX"}]
    evs.append({"ph": "M", "args": {"pad": "x" * 300_000}})  # a stretch longer than the overlap
    evs += [{"ph": "X", "name": "aten::isnan"}] * 11
    want = {k: n for k, (_, n) in hits.items()}
    want["isnan"] += 11
    text = json.dumps({"traceEvents": evs}, indent=1).replace('"name": ', '"name" :  ').encode()
    return text, want


@pytest.mark.parametrize("chunk", [7, 97, 4096, 1 << 20])
def test_raw_count_kind_every_pattern_hand_counted(chunk):
    text, want = _raw_doc()
    pats = registry.raw_patterns()
    rc = onepass.RawCounter(pats, overlap=64)
    for i in range(0, len(text), chunk):
        rc.feed(text[i:i + chunk])
    got = rc.counts()
    assert {k: v for k, v in got.items() if v} == want
    # the same as one regular expression per pattern over the whole text (the former method)
    assert got == {k: len(re.findall(rb'"name"\s*:\s*"' + p.encode(), text)) for k, p in pats.items()}


def test_raw_count_truncated_document_counts_the_open_name():
    text = b'{"traceEvents": [{"name": "aten::isnan"}, {"name": "aten::isnan", "ph": "X"}, {"name": "autograd::engine::evaluate_fun'
    rc = onepass.RawCounter({"isnan": 'aten::isnan"', "backward": "autograd::engine::evaluate_fu"}, overlap=8)
    for i in range(0, len(text), 5):
        rc.feed(text[i:i + 5])
    assert rc.counts() == {"isnan": 2, "backward": 1}
