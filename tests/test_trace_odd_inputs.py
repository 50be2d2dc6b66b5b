"""Odd but readable trace inputs (an adversarial review of the one-read pass): each kind must give
the same answer from the engine and from the verifier's reader, and never crash the run. Hand-built
traces with known answers: 4 steps of one 10 µs kernel every 50 µs (GPU busy 10/40 of the
timeline's span between the first start and the last end, i.e. 4 x 10 µs over 160 µs)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ai4s_graph.graph.analysis.nodes import trace_analyst as TA
from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.analysis.nodes.trace_verifier import verify_trace_claims
from ai4s_graph.tools.trace import kineto, onepass, ranks, stream


def _events(n=4, corr=lambda i: 100 + i, stream_id=7, dur=10.0, step_name="ProfilerStep#{i}", ph="X",
            pid=0, device=0, extra_kernel=None):
    ev = []
    for i in range(n):
        t0 = 1000.0 + 50.0 * i
        ev.append({"ph": ph, "cat": "user_annotation", "name": step_name.format(i=i), "pid": 1, "tid": 1,
                   "ts": t0, "dur": 45.0})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 1, "dur": 8.0,
                   "args": {"External id": 10 + i}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 2,
                   "dur": 4.0, "args": {"correlation": corr(i), "External id": 10 + i}})
        k = {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": pid if not callable(pid) else pid(i), "tid": 7,
             "ts": t0 + 10, "dur": dur, "args": {"correlation": corr(i), "External id": 10 + i, "device": device,
                                                 "stream": stream_id}}
        if device is None:
            del k["args"]["device"]
        if stream_id is None:
            del k["args"]["stream"]
        ev.append(k)
    if extra_kernel:
        ev.append(extra_kernel)
    return ev


def _write(path: Path, events, tail=None, compact=False, gz=True):
    doc = {"schemaVersion": 1, "traceEvents": events, **(tail or {})}
    text = json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=1)
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def _both(path: Path):
    """The rank result of the one read, and the verifier's verdicts on its claims."""
    res = TA.analyze_one(str(path), 0, str(path.parent / "cache"), "0")
    claims = TA.claims_for_rank(res)
    return res, {v.claim.metric: v for v in verify_trace_claims(claims, [res])}


def _no_disagreement(verdicts):
    """Every claim confirmed, except a per-step figure when a reader found no step (inconclusive)."""
    bad = {m: (v.verdict.value, v.claim.value, v.rederived_value) for m, v in verdicts.items()
           if v.verdict.value != "confirmed"}
    assert not bad, bad


def test_the_hand_built_trace_has_its_known_answer(tmp_path):
    res, v = _both(_write(tmp_path / "t.json.gz", _events()))
    assert res["timeline"]["computation_time"]["percent"] == pytest.approx(100 * 40 / 160)
    assert v["gpu_timeline.idle_time.percent"].verdict.value == "confirmed" and len(v) == 8
    _no_disagreement(v)


@pytest.mark.parametrize("kind,kw", [
    ("step named with a space", dict(step_name="ProfilerStep #{i}")),
    ("steps without ph", dict(ph=None)),
    ("stream beyond int32", dict(stream_id=1 << 40)),
    ("correlation beyond int64", dict(corr=lambda i: 1e30 + i)),
    ("string correlation ids", dict(corr=lambda i: str(100 + i))),
    ("no stream on any GPU event", dict(stream_id=None)),
])
def test_odd_values_never_crash_and_both_readers_agree(tmp_path, kind, kw):
    ev = _events(**kw)
    if kw.get("ph", "X") is None:
        for e in ev:
            if e["cat"] == "user_annotation":
                del e["ph"]
    res, v = _both(_write(tmp_path / "t.json.gz", ev))
    assert "error" not in res and "reader_error" not in res, kind
    _no_disagreement(v)


def test_a_negative_kernel_dur_is_dropped_by_both_readers(tmp_path):
    bad = {"ph": "X", "cat": "kernel", "name": "broken", "pid": 0, "tid": 7, "ts": 1100.0, "dur": -500.0,
           "args": {"correlation": 101, "device": 0, "stream": 7}}
    res, v = _both(_write(tmp_path / "t.json.gz", _events(extra_kernel=bad)))
    assert res["timeline"]["computation_time"]["percent"] == pytest.approx(100 * 40 / 160)
    assert res["reader"]["timeline"]["computation_time"]["percent"] == pytest.approx(100 * 40 / 160)
    _no_disagreement(v)


def test_gpus_named_only_by_a_string_pid_are_not_merged_into_one_stream(tmp_path):
    # two GPUs ("GPU 0", "GPU 1"), no args.device, the same stream number, overlapping in time
    ev = _events(pid=lambda i: "GPU 0", device=None) + \
        [dict(e, pid="GPU 1", args=dict(e["args"], correlation=e["args"]["correlation"] + 50))
         for e in _events(pid=lambda i: "GPU 0", device=None) if e["cat"] == "kernel"]
    ev += [dict(e, args=dict(e["args"], correlation=e["args"]["correlation"] + 50))
           for e in _events() if e["cat"] == "cuda_runtime"]
    scan = stream.scan_trace(_write(tmp_path / "t.json.gz", ev))
    assert len(set(scan.device.tolist())) == 2 and not scan.overlaps  # two devices, nothing clipped


def test_a_roofline_it_cannot_read_drops_the_roofline_only(tmp_path):
    shaped = _events()
    for e in shaped:
        if e["cat"] == "cpu_op":
            e["args"].update({"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]})
    shaped.append({"ph": "X", "cat": "kernel", "name": "odd", "pid": 0, "tid": 7, "ts": None, "dur": 1.0,
                   "args": {"External id": [1], "correlation": 999, "stream": 7, "device": 0}})
    res, v = _both(_write(tmp_path / "t.json.gz", shaped))
    assert "error" not in res and res["roofline_totals"] is not None
    assert res["roofline_totals"]["categories"]["GEMM"]["ops"] == 4
    _no_disagreement(v)


def test_raw_counts_read_gzip_by_content_and_spaced_keys(tmp_path):
    ev = _events() + [{"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_dot_product_attention_math",
                       "pid": 1, "tid": 1, "ts": 1200.0 + i, "dur": 0.5} for i in range(3)]
    p = _write(tmp_path / "trace_rank0.json", ev)  # gzip bytes under a .json name
    res = TA.analyze_one(str(p), 0, str(tmp_path / "cache"), "0")
    math = "aten::_scaled_dot_product_attention_math"
    assert res["raw_counts"]["sdpa_math"] == 3 == res["event_names"][math]
    spaced = tmp_path / "spaced.json"
    spaced.write_text(json.dumps({"traceEvents": ev}).replace('"name": ', '"name" : '))
    assert onepass.raw_counts(str(spaced), registry.raw_patterns())["sdpa_math"] == 3


def test_compact_one_line_trace_keeps_its_trailing_rank(tmp_path):
    pad = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": 5000.0 + i, "dur": 0.5,
            "args": {"Input Dims": [[1, 2]], "Input type": ["float"]}} for i in range(20000)]
    for r, name in ((1, "a.json"), (0, "b.json")):  # names sort against the ranks
        _write(tmp_path / name, _events() + pad, tail={"distributedInfo": {"rank": r, "world_size": 2}},
               compact=True, gz=False)
    assert (tmp_path / "a.json").stat().st_size > 1 << 20 and b"\n" not in (tmp_path / "a.json").read_bytes()
    files, _ = ranks.identify_ranks(sorted(tmp_path.glob("*.json")))
    assert [(f.path.name, f.rank, f.source) for f in files] == [("a.json", 1, "distributedInfo"),
                                                                ("b.json", 0, "distributedInfo")]


def test_a_quiet_cross_check_thread_never_swallows_another_threads_output(monkeypatch):
    """TraceLens/HTA run quiet in the graph's worker thread while the main thread prints STATUS lines:
    only the quiet thread's output is dropped (a process-wide redirect lost a STATUS line under load)."""
    import io
    import sys
    import threading

    from ai4s_graph.tools.trace.backends import quiet_this_thread

    buf = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf)
    inside, printed = threading.Event(), threading.Event()

    def cross_check():
        with quiet_this_thread():
            print("third-party noise")
            inside.set()
            printed.wait(10)
            print("more noise")

    t = threading.Thread(target=cross_check)
    t.start()
    inside.wait(10)
    print("telemetry_analyst    STATUS=ok; reason=x")  # while the other thread is quiet
    printed.set()
    t.join(10)
    assert buf.getvalue() == "telemetry_analyst    STATUS=ok; reason=x\n"


def test_roofline_shapes_when_the_first_op_has_none_and_not_after_many_ops_without(tmp_path):
    """A 2-GPU profile's first cpu_op carried no Input Dims and its roofline claims were lost: shapes
    are seen on any op; only PROBE_OPS ops without any mean a profile recorded without shapes."""
    from ai4s_graph.tools.perfmodel import roofline as RF

    ev = _events()
    for e in ev:
        if e["cat"] == "cpu_op":
            e["args"].update({"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]})
    first = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 990.0, "dur": 1.0,
             "args": {"External id": 1}}
    col = RF.RooflineCollector()
    for e in [first] + ev:
        col.feed(e)
    assert col.shapes and col.totals()["categories"]["GEMM"]["ops"] == 4
    col = RF.RooflineCollector()
    plain = [dict(first, ts=500.0 + i * 1e-3) for i in range(RF.PROBE_OPS)]
    for e in plain + ev:
        col.feed(e)
    t = col.totals()
    assert col.no_shapes and not t["shapes_recorded"] and t["window_us"] == pytest.approx(160.0)
