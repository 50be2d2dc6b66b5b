"""The single-read lanes' consumers fed a piece of the parse at a time (``feed_batch``:
tools/report/annotated.py's copy, tools/trace/onepass.py's name counter, tools/perfmodel/roofline.py's
collector; ``stream.feed_batches``) against one event at a time: the same state to the last value,
the same refusal, on real traces cut at every piece and on hand-built odd events."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.tools.perfmodel.roofline import RooflineCollector
from ai4s_graph.tools.report import annotated
from ai4s_graph.tools.trace import onepass, stream

REPO = Path(__file__).resolve().parents[1]
TRACES = [REPO / "examples/perf-runs/92001/traces/trace_rank0.json.gz",
          REPO / "examples/perf-runs/93001/traces/trace_rank0.json.gz",
          REPO / "bench/accuracy/cases/per-sample-loop/traces/trace_rank0.json.gz",
          REPO / "tests/data/traces/steps/gc_collect.json.gz"]

#: Events a trace may hold that the consumers must take as they did one at a time: a float and a
#: bool pid, a string ts, a negative, NaN and missing dur, a number as name, a list as cat, a
#: DataLoader op, a ProfilerStep, GPU events without a name, a kernel with an id in args.
ODD = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 1.0, "tid": 7, "ts": 10, "dur": 5,
        "args": {"External id": 3, "correlation": 9}},
       {"ph": "X", "cat": "gpu_memcpy", "pid": True, "ts": 11.5, "dur": 0},
       {"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
        "pid": 2, "tid": 1, "ts": 1, "dur": 30},
       {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#12", "pid": 2, "tid": 1, "ts": 0, "dur": 100},
       {"ph": "X", "cat": ["kernel"], "name": "x", "pid": "3", "ts": 4, "dur": 1},
       {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 2, "tid": 1, "ts": "5", "dur": 2},
       {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 2, "tid": 1, "ts": 6, "dur": -1},
       {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 2, "tid": 1, "ts": 7, "dur": math.nan},
       {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "ts": 20},
       {"ph": "i", "cat": "python_function", "name": 5, "pid": 2, "ts": 8, "dur": 1},
       {"ph": "X", "cat": None, "name": 12, "pid": 2, "ts": 9, "dur": 1},
       {"ph": "X", "cat": "user_annotation", "name": ["ProfilerStep#3"], "pid": 2, "ts": 9, "dur": 1},
       {"ph": "X", "cat": "kernel", "name": None, "pid": 1, "ts": 30, "dur": 2}]


def _copy_state(copy: annotated.EventCopy) -> dict:
    """What the copy collected (its events counted, the unwritten batch of a short input, the
    findings' inputs), or only its error once it was dropped (a dropped copy's state is not used)."""
    c = copy.col
    if copy.error is not None:
        return {"error": copy.error}
    return {"error": None, "n": c.n + len(c.batch), "batch": [dict(e) for e in c.batch] if c.n == 0 else None,
            "g_ts": list(c.g_ts), "g_end": list(c.g_end), "g_cls": list(c.g_cls), "steps": c.steps,
            "loader": c.loader, "pids": c.pids}


def _fed(events: list, pieces: list[int], one_at_a_time: bool, tmp: Path, trace: Path) -> dict:
    copy = annotated.EventCopy(trace)
    names, roof = onepass.NameCounter(registry.event_name_wanted), RooflineCollector()
    try:
        if one_at_a_time:
            for ev in events:
                copy.feed(ev)
                names.feed(ev)
                roof.feed(ev)
        else:
            s = 0
            for cut in pieces + [len(events)]:
                for f in (copy.feed_batch, names.feed_batch, roof.feed_batch):
                    f(events[s:cut])
                s = cut
        state = _copy_state(copy)
    finally:
        copy.discard()
    return {"copy": state, "names": (names.counts, names.dur_us, names.kernel_us),
            "roof": (roof.error, onepass._totals(roof, "external_id"), onepass._totals(roof, "correlation"))}


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.parent.name + "/" + p.name)
def test_batches_of_a_real_trace_give_the_one_at_a_time_state(trace: Path, tmp_path: Path) -> None:
    batches = list(stream.iter_event_batches(trace))
    events = [e for b in batches for e in b]
    cuts, n = [], 0
    for b in batches[:-1]:
        n += len(b)
        cuts.append(n)
    one = _fed(events, cuts, True, tmp_path, trace)
    assert one["copy"]["error"] is None and one["copy"]["n"] == len(events) > 0
    assert _fed(events, cuts, False, tmp_path, trace) == one
    assert _fed(events, [1, 2, 3, 500, 501], False, tmp_path, trace) == one  # any cut


@pytest.mark.parametrize("cuts", [[], [1], [3, 4, 9], list(range(1, len(ODD)))])
def test_odd_events_in_any_batches_give_the_one_at_a_time_state(cuts: list[int], tmp_path: Path) -> None:
    trace = TRACES[0]
    one = _fed(ODD, [], True, tmp_path, trace)
    assert one["copy"]["error"] is None
    assert one["copy"]["pids"] == {1, 2} and one["copy"]["steps"] == [(12, 0.0, 100.0)]
    assert one["copy"]["loader"] == [(1.0, 31.0)] and one["copy"]["g_ts"] == [10.0, 11.5, 30.0]
    assert _fed(ODD, cuts, False, tmp_path, trace) == one


@pytest.mark.parametrize("bad", [7, ["x"]])
def test_a_refused_event_ends_the_copy_in_batches_as_one_at_a_time(bad, tmp_path: Path) -> None:
    """Not an event dict: the copy is dropped with the same error, the counters go on."""
    events = ODD[:4] + [bad] + ODD[4:]
    one = _fed(events, [], True, tmp_path, TRACES[0])
    assert one["copy"]["error"] is not None
    got = _fed(events, [2, 6], False, tmp_path, TRACES[0])
    assert got["copy"]["error"] == one["copy"]["error"]
    assert got["names"] == one["names"] and got["roof"] == one["roof"]


def test_feed_batches_feeds_the_events_feed_events_does() -> None:
    for trace in TRACES:
        seen_one, seen_batch = [], []
        n1 = stream.feed_events(trace, (seen_one.append,))
        n2 = stream.feed_batches(trace, (seen_batch.extend,))
        assert n1 == n2 == len(seen_one) and seen_batch == seen_one


def test_an_event_named_by_a_number_is_copied_as_one_without_a_name(tmp_path: Path) -> None:
    """A python function, cpu op or annotation whose name is a number or a list (a hand-edited or
    foreign trace): the annotated trace is written, the event copied as it is, neither a step nor a
    DataLoader call (the copy raised AttributeError on ``name.lower()`` before)."""
    import gzip
    import json

    evs = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 10, "dur": 5},
           {"ph": "X", "cat": "python_function", "name": 5, "pid": 2, "tid": 1, "ts": 8, "dur": 1},
           {"ph": "X", "cat": None, "name": ["ProfilerStep#1"], "pid": 2, "tid": 1, "ts": 0, "dur": 40},
           {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 30, "dur": 5}]
    src = tmp_path / "odd.json"
    src.write_text(json.dumps({"traceEvents": evs}))
    got = annotated.write_annotated_trace(src, tmp_path / "out.json.gz", rank=0)
    doc = json.loads(gzip.decompress((tmp_path / "out.json.gz").read_bytes()))
    assert got.events_copied == 4 and doc["traceEvents"][:4] == evs
    assert got.steps == 0 and got.idle_gaps == 1 and got.idle_us == 15.0


def test_the_idle_gaps_texts_are_their_events_dumps() -> None:
    """Every finding's text is ``orjson.dumps`` of its event (annotated._finding_texts writes the
    unnamed gaps from one dumps of the starts and lengths): gaps of every float kind (epoch-µs
    clocks, NaN, infinities, negative zero, huge and tiny values), some a DataLoader call overlaps,
    with and without a label hook; the counts and the gaps' summed length added in order."""
    import numpy as np
    import orjson

    rng = np.random.default_rng(7)
    a = np.concatenate([1.7e15 + np.cumsum(rng.uniform(1, 500, 3000)), [0.0, -0.0, 5e-324, 1e300, math.nan,
                                                                        math.inf, 1e16, 123.456]])
    b = a + np.concatenate([rng.uniform(0, 300, 3000), [1.0, 2.0, 3.0, 1e300, 1.0, 1.0, math.nan, 1e-7]])
    loader = annotated._dataloader_label([(float(a[10]), float(a[12])), (float(a[500]), float(a[500]) + 50.0)])
    waits = [{"name": "wait for rank 1", "ts": 5.0, "dur": 2.0, "args": {"wait_us": 2.0}}]
    steps = [(3, 1.0, 10.0), (2, 0.5, 0.25)]

    def hook(x: float, y: float):
        return ("a hook's label", {"k": 1}) if math.isfinite(x) and int(x) % 7 == 0 else None

    for label in (None, hook):
        texts, counts, idle_us = annotated._finding_texts(9, 0, steps, (a, b), waits, label, loader, 1.0)
        with np.errstate(invalid="ignore"):
            keep = ~((b - a) < 1.0)
        want, total = [], 0.0
        for x, y in zip(a[keep].tolist(), b[keep].tolist()):
            got = (label(x, y) if label else None) or loader(x, y) or (annotated.UNATTRIBUTED, {})
            want.append({"ph": "X", "pid": 9, "tid": annotated.TRACKS["GPU idle"], "cat": annotated.CAT,
                         "name": got[0], "ts": x, "dur": y - x, "args": {"idle_us": y - x, **got[1]}})
            total += y - x
        head = 2 + 2 * len(annotated.TRACKS) + len(steps)
        assert texts[head:head + len(want)] == [orjson.dumps(e) for e in want]
        assert counts == {"steps": 2, "GPU idle": len(want), "collective waits": 1}
        assert (math.isnan(idle_us) and math.isnan(total)) or idle_us == total
        assert any(b"waiting for the DataLoader" in t for t in texts)
        assert json_ok(texts)


def json_ok(texts: list[bytes]) -> bool:
    import json

    return all(isinstance(json.loads(t), dict) for t in texts)


@pytest.mark.parametrize("events", [[], [{"ph": "M", "name": "process_name", "pid": 1e20, "tid": 0, "args": {"name": "x"}},
                                        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1.9e19, "ts": 1, "dur": 2},
                                        {"ph": "X", "cat": "kernel", "name": "k", "pid": 3, "ts": 5, "dur": 2}]],
                         ids=["no-events", "pids-beyond-64-bits"])
def test_the_annotated_trace_of_odd_pids_and_of_no_events_is_json(events: list, tmp_path: Path) -> None:
    """No event at all (no comma before the findings), and float pids no 64-bit integer holds (1e20,
    1.9e19: the findings' pid is chosen beside the pids that fit; the run failed on orjson's
    "Integer exceeds 64-bit range" before)."""
    import gzip
    import json

    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    got = annotated.write_annotated_trace(src, tmp_path / "out.json.gz", rank=0)
    doc = json.loads(gzip.decompress((tmp_path / "out.json.gz").read_bytes()))
    assert doc["traceEvents"][:len(events)] == events and got.events_copied == len(events)
    assert got.pid == (4 if events else 1_000_000)
    assert all(e["pid"] == got.pid for e in doc["traceEvents"][len(events):])
