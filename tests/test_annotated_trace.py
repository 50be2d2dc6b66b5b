"""``annotated_trace.json.gz`` (:mod:`ai4s_graph.tools.report.annotated`): the rank's events plus the
findings tracks (steps, GPU idle gaps with their cause, collective waits), valid Trace Event Format,
re-read with the project's own reader.

- a trace built here with hand-computed gaps: two steps, four kernels, a DataLoader call over one gap;
- the bundled 93004 pair (rank 1 runs 24 extra matmuls a step): rank 0's waits, re-derived here from
  the raw traces by pairing the k-th NCCL kernel of each rank, sum to what the track holds;
  rank 1, the straggler, waits for nobody;
- the copy streams: its peak Python memory stays far below the trace's size.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from ai4s_graph import REPO_ROOT
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.report import annotated as A
from ai4s_graph.tools.trace import stream
from ai4s_graph.tools.trace.rank_analysis import analyze_rank

ROOT = Path(REPO_ROOT or Path(__file__).resolve().parent.parent)
PAIR = ROOT / "examples" / "perf-runs" / "93004" / "traces"


def _kernel(corr: int, ts: float, dur: float, name: str = "k") -> list[dict]:
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": ts - 3, "dur": 2,
             "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {"correlation": corr, "stream": 7, "device": 0}}]


def _trace(path: Path) -> Path:
    """Steps [0, 100) and [100, 200); kernels [10, 30), [50, 60), [120, 150), [180, 190): GPU idle
    gaps [30, 50), [60, 120), [150, 180); a DataLoader call on the CPU over [65, 110)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 2, "ts": 0, "dur": 100},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 1, "tid": 2, "ts": 100, "dur": 100},
          {"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
           "pid": 1, "tid": 2, "ts": 65, "dur": 45}]
    for corr, (ts, dur) in enumerate(((10, 20), (50, 10), (120, 30), (180, 10)), start=1):
        ev += _kernel(corr, ts, dur)
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 4}, "traceEvents": ev,
                   "traceName": "built"}, fh)
    return path


def _findings(out: Path, pid: int) -> dict[str, list[dict]]:
    tracks = {tid: name for name, tid in A.TRACKS.items()}
    got: dict[str, list[dict]] = {n: [] for n in A.TRACKS}
    for ev in stream.iter_events(out):
        if ev.get("pid") == pid and ev.get("ph") == "X":
            got[tracks[ev["tid"]]].append(ev)
    return got


def test_built_trace_tracks_and_reread(tmp_path):
    src = _trace(tmp_path / "t.json.gz")
    out = tmp_path / "annotated_trace.json.gz"
    s = A.write_annotated_trace(src, out, rank=3)
    assert (s.events_copied, s.steps, s.idle_gaps, s.collective_waits) == (11, 2, 3, 0)
    assert s.idle_us == 20 + 60 + 30 and s.pid == 2  # pids 0 and 1 are the trace's
    got = _findings(out, s.pid)
    assert [(e["name"], e["ts"], e["dur"]) for e in got["steps"]] == [("step 4", 0, 100), ("step 5", 100, 100)]
    gaps = [(e["ts"], e["dur"], e["name"]) for e in got["GPU idle"]]
    assert gaps == [(30, 20, "idle: cause not attributed"), (60, 60, "waiting for the DataLoader"),
                    (150, 30, "idle: cause not attributed")]
    assert got["GPU idle"][1]["args"]["dataloader_overlap_pct"] == pytest.approx(100 * 45 / 60)
    # our reader: the engine sees the same GPU timeline in the copy (the findings are no GPU events)
    a, b = stream.scan_trace(src), stream.scan_trace(out)
    assert stream.gpu_timeline(a) == stream.gpu_timeline(b) and b.steps == a.steps
    assert stream.read_header(out)["distributedInfo"] == {"rank": 3, "world_size": 4}
    whole = json.loads(gzip.decompress(out.read_bytes()))  # plain JSON, one object
    assert whole["traceName"] == "built" and list(whole)[:3] == ["schemaVersion", "distributedInfo", "traceEvents"]
    meta = {(e["tid"], e["name"]): e["args"] for e in whole["traceEvents"] if e.get("pid") == s.pid and e["ph"] == "M"}
    assert meta[(0, "process_name")] == {"name": "ai4s-graph findings (rank 3)"}
    assert {meta[(t, "thread_name")]["name"] for t in (1, 2, 3)} == set(A.TRACKS)


def test_trace_event_format(tmp_path):
    """Every event has a phase; complete events carry numeric ts/dur >= 0 and integer pid/tid; metadata
    events name a process or thread (Trace Event Format, the subset Perfetto's JSON importer reads)."""
    out = tmp_path / "a.json.gz"
    A.write_annotated_trace(_trace(tmp_path / "t.json.gz"), out)
    for e in json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]:
        assert e["ph"] in ("X", "M")
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and isinstance(e["name"], str)
        else:
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")


def test_gap_label_hook_and_engine_idle(tmp_path):
    src = _trace(tmp_path / "t.json.gz")
    seen = []

    def label(a, b):
        seen.append((a, b))
        return ("host: optimizer step", {"source": "test"}) if a == 150 else None

    s = A.write_annotated_trace(src, tmp_path / "a.json.gz", gap_label=label, idle=A.idle_intervals(stream.scan_trace(src)))
    assert seen == [(30, 50), (60, 120), (150, 180)]
    names = [e["name"] for e in _findings(tmp_path / "a.json.gz", s.pid)["GPU idle"]]
    assert names == ["idle: cause not attributed", "waiting for the DataLoader", "host: optimizer step"]


def test_engine_idle_intervals_sum_to_its_idle_time():
    scan = stream.scan_trace(PAIR / "trace_rank0.json.gz")
    a, b = A.idle_intervals(scan)
    idle = stream.gpu_timeline(scan, stream.window_mask(scan, "linked"))["idle_time"]
    # absolute epoch-µs timestamps: each gap end is exact to one float64 spacing at that magnitude
    assert abs(float(np.sum(b - a)) - idle) <= a.size * float(np.spacing(b.max()))


def _nccl_starts(path: Path) -> list[float]:
    return sorted(e["ts"] for e in stream.iter_events(path) if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower())


def test_collective_waits_of_the_bundled_straggler(tmp_path):
    recs = [analyze_rank(str(PAIR / f"trace_rank{r}.json.gz"), r, str(tmp_path / "cache"), cross_check=False)
            for r in (0, 1)]
    w0, w1 = A.collective_waits(recs, 0), A.collective_waits(recs, 1)
    s0, s1 = _nccl_starts(PAIR / "trace_rank0.json.gz"), _nccl_starts(PAIR / "trace_rank1.json.gz")
    assert len(s0) == len(s1)
    by_hand = [b - a for a, b in zip(s0, s1) if b > a]  # rank 0 waits where rank 1 starts later
    assert len(w0) == len(by_hand) and sum(w["dur"] for w in w0) == pytest.approx(sum(by_hand))
    assert sum(by_hand) > 300e3 and all(w["args"]["waits_for_rank"] == 1 for w in w0)  # ~391 ms over 3 steps
    own1 = [w for w in w1 if "waits_for_rank" in w["args"]]
    assert own1 == [] or all(w["dur"] < 1e3 for w in own1)
    # on the straggler's track the same waits, seen from it: where rank 1 starts later, rank 0 has
    # waited (its start - rank 0's start) for it, the interval ending at rank 1's own kernel start
    held = [w for w in w1 if "waited_for_by_rank" in w["args"]]
    assert len(held) == len(by_hand) and sum(w["dur"] for w in held) == pytest.approx(sum(by_hand))
    assert all(w["args"]["waited_for_by_rank"] == 0 and w["ts"] + w["dur"] in s1 for w in held)
    out1 = tmp_path / "annotated_rank1.json.gz"
    a1 = A.write_annotated_trace(PAIR / "trace_rank1.json.gz", out1, rank=1, waits=w1)
    reread = _findings(out1, a1.pid)["collective waits"]   # re-read with our stream reader
    assert a1.collective_waits == len(w1) and sum(e["dur"] for e in reread) == pytest.approx(sum(w["dur"] for w in w1))
    out = tmp_path / "annotated_trace.json.gz"
    s = A.write_annotated_trace(PAIR / "trace_rank0.json.gz", out, rank=0, waits=w0)
    got = _findings(out, s.pid)
    assert s.collective_waits == len(w0) and s.steps == 3
    assert sum(e["dur"] for e in got["collective waits"]) == pytest.approx(sum(by_hand))


def _big(path: Path, n_cpu: int, n_kernels: int) -> int:
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 2, "ts": float(i), "dur": 0.5,
           "args": {"Input Dims": [[64, 64], [64]], "External id": i}} for i in range(n_cpu)]
    for c in range(n_kernels):
        ev += _kernel(c + 1, 10.0 * c + 5, 4.0)
    raw = json.dumps({"traceEvents": ev}).encode()
    path.write_bytes(gzip.compress(raw, 1))
    return len(raw)


def _peak(src: Path, out: Path) -> tuple[int, A.AnnotatedTrace]:
    tracemalloc.start()
    try:
        s = A.write_annotated_trace(src, out)
        return tracemalloc.get_traced_memory()[1], s
    finally:
        tracemalloc.stop()


def test_streams_in_bounded_memory(tmp_path, monkeypatch):
    """The copy's peak Python allocation does not grow with the trace: 2x the CPU events (16 -> 31 MB
    of JSON, which a json.load would hold whole) moves it by less than 1 MiB. The constant part is
    the parse's piece (:data:`~ai4s_graph.tools.trace.fastscan.PIECE_BYTES` of text and its decoded
    events), the reader's blocks, the copy's batch of :data:`~ai4s_graph.tools.report.annotated.BATCH`
    events and the write buffer: under 32 MiB (measured 2026-12-03: 11.62 MiB at 16 and at 31 MB of JSON read in one thread,
    14.4 to 14.9 MiB with the reader thread).

    The difference is measured with the blocks read in the decoding thread: the reader thread's
    read-ahead (up to ``QUEUE_BLOCKS`` x ``BLOCK_BYTES`` = 3 MiB of text) fills as the scheduler lets
    it, so its peak differs from run to run by up to that much on the same file (CI, 2026-12-02:
    +1.38 MiB between the two files on a loaded machine; -0.35 to +0.47 MiB over six quiet
    repeats, against 0.0001 MiB without the thread). Without the thread the peak is a function of the input alone; with it, it is bounded."""
    from ai4s_graph.tools.trace import fastscan

    n1 = _big(tmp_path / "a.json.gz", 100_000, 2000)
    n2 = _big(tmp_path / "b.json.gz", 200_000, 2000)
    threaded_peak, _ = _peak(tmp_path / "b.json.gz", tmp_path / "ob.json.gz")
    orig = fastscan.event_batches
    monkeypatch.setattr(fastscan, "event_batches", lambda fh, **kw: orig(fh, **{**kw, "threaded": False}))
    p1, s1 = _peak(tmp_path / "a.json.gz", tmp_path / "oa.json.gz")
    p2, s2 = _peak(tmp_path / "b.json.gz", tmp_path / "ob.json.gz")
    assert (s1.events_copied, s2.events_copied, s1.idle_gaps) == (104_000, 204_000, 1999)
    assert n2 > 1.9 * n1 and p2 - p1 < 1 << 20 and p2 < 32 << 20, (p1, p2, n1, n2)
    assert threaded_peak < 32 << 20, threaded_peak


def test_bad_trace_is_one_line_and_keeps_an_earlier_file(tmp_path):
    out = tmp_path / "annotated_trace.json.gz"
    out.write_bytes(b"earlier")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "ts": 1'))
    with pytest.raises(InputError, match="truncated"):
        A.write_annotated_trace(bad, out)
    assert out.read_bytes() == b"earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["annotated_trace.json.gz", "bad.json.gz"]  # no temp left


def test_dataloader_label_kind_hand_computed():
    """The default gap cause over loader calls given out of start order, a zero-length one and one
    that ends before a later one starts: a gap overlapped by none gets no label; the others the share
    computed here by hand."""
    label = A._dataloader_label([(50.0, 70.0), (0.0, 10.0), (30.0, 30.0), (20.0, 45.0)])
    assert label(10.0, 20.0) is None  # touches two calls, overlaps neither
    assert label(30.0, 30.0) is None and label(80.0, 90.0) is None and label(-5.0, 0.0) is None
    assert label(40.0, 60.0) == ("waiting for the DataLoader", {"dataloader_overlap_pct": 100.0 * 15 / 20})
    assert label(5.0, 25.0) == ("waiting for the DataLoader", {"dataloader_overlap_pct": 100.0 * 10 / 20})
    assert label(0.0, 100.0) == ("waiting for the DataLoader", {"dataloader_overlap_pct": 100.0 * 55 / 100})
    assert A._dataloader_label([])(0.0, 1.0) is None


def test_copy_in_batches_keeps_every_event_in_order(tmp_path, monkeypatch):
    """Events are serialized a batch at a time: with batches of 3 over the built trace's 11 events
    (batch ends inside and at the end), the copy holds the same events in the same order."""
    src = _trace(tmp_path / "t.json.gz")
    monkeypatch.setattr(A, "BATCH", 3)
    res = A.write_annotated_trace(src, tmp_path / "a.json.gz", rank=3)
    copied = [ev for ev in stream.iter_events(tmp_path / "a.json.gz") if ev.get("pid") != res.pid]
    assert res.events_copied == 11 and copied == list(stream.iter_events(src))


def _prepared_and_reread(src: Path, tmp_path: Path, **kw) -> tuple[bytes, bytes, A.AnnotatedTrace, A.AnnotatedTrace]:
    """The annotated trace made from a copy prepared by one pass over ``src`` (what ``read_rank`` with
    ``annotate`` does), and the one made by reading ``src`` again: their texts and results."""
    copy = A.EventCopy(src)
    stream.feed_events(src, (copy.feed,), taps=(copy.tap,))
    copy.finish()
    fast = A.write_annotated_trace(src, tmp_path / "fast.json.gz", **kw)
    assert A._file_key(src) not in A._PREPARED  # taken once
    slow = A.write_annotated_trace(src, tmp_path / "slow.json.gz", **kw)
    return (gzip.decompress((tmp_path / "fast.json.gz").read_bytes()),
            gzip.decompress((tmp_path / "slow.json.gz").read_bytes()), fast, slow)


def test_copy_prepared_by_the_pass_equals_the_reread(tmp_path, monkeypatch):
    """The built trace (a header key before the events, a trailer key after them), in batches of 3:
    the prepared copy's text is the re-read's, byte for byte, and a valid gzip member."""
    monkeypatch.setattr(A, "BATCH", 3)
    src = _trace(tmp_path / "t.json.gz")
    fast, slow, a, b = _prepared_and_reread(src, tmp_path, rank=3)
    assert fast == slow and a.model_dump() == {**b.model_dump(), "path": a.path}
    doc = json.loads(fast)
    assert doc["traceName"] == "built" and doc["distributedInfo"] == {"rank": 3, "world_size": 4}
    assert a.events_copied == 11 and a.idle_gaps == 3 and a.idle_us == 20 + 60 + 30


def test_copy_prepared_from_a_bundled_rank_with_its_trailer(tmp_path):
    """Rank 0 of the bundled 93004 pair, whose deviceProperties and distributedInfo sit where its
    writer put them: the same text both ways."""
    src = PAIR / "trace_rank0.json.gz"
    fast, slow, a, b = _prepared_and_reread(src, tmp_path, rank=0)
    assert fast == slow and a.events_copied == b.events_copied > 1000


def test_copy_that_cannot_write_an_event_is_dropped(tmp_path):
    """An event the copy cannot write (a value that is no JSON: what a hand-fed consumer may get):
    the prepared copy gives up without raising into the pass, files nothing, and the writer reads
    the trace itself."""
    src = _trace(tmp_path / "t.json.gz")
    copy = A.EventCopy(src)
    for ev in stream.iter_events(src):
        copy.feed(ev)
    copy.feed({"ph": "X", "cat": "cpu_op", "name": "odd", "ts": 1.0, "dur": 1.0, "args": {"x": object()}})
    copy.finish()
    assert copy.error.startswith("TypeError") and A._file_key(src) not in A._PREPARED
    res = A.write_annotated_trace(src, tmp_path / "a.json.gz", rank=3)
    assert res.events_copied == 11


def test_single_rank_read_prepares_the_copy_and_a_failed_read_drops_it(tmp_path):
    """``read_rank`` with ``annotate`` files the copy for the writer (the same text as a re-read);
    on a truncated trace the read fails as before and nothing is filed, no thread left behind."""
    import threading

    from ai4s_graph.graph.rules import registry
    from ai4s_graph.tools.trace import onepass

    src = _trace(tmp_path / "t.json.gz")
    onepass.read_rank(str(src), 0, None, "0", wanted=registry.event_name_wanted,
                      raw_patterns=registry.raw_patterns(), annotate=True)
    assert A._file_key(src) in A._PREPARED
    A.write_annotated_trace(src, tmp_path / "fast.json.gz", rank=3)
    A.write_annotated_trace(src, tmp_path / "slow.json.gz", rank=3)
    assert gzip.decompress((tmp_path / "fast.json.gz").read_bytes()) == \
        gzip.decompress((tmp_path / "slow.json.gz").read_bytes())
    bad = tmp_path / "bad.json"
    bad.write_bytes(gzip.decompress(src.read_bytes())[:300])
    with pytest.raises(InputError):
        onepass.read_rank(str(bad), 0, None, "0", wanted=registry.event_name_wanted,
                          raw_patterns=registry.raw_patterns(), annotate=True)
    assert A._file_key(bad) not in A._PREPARED
    assert not [t for t in threading.enumerate() if t.name == "annotated-copy"]


def test_the_dataloader_label_of_every_gap_at_once():
    # DataLoader CPU events [10, 20] and [30, 35] (µs, start order shuffled); each gap's answer by hand
    lab = A._dataloader_label([(30.0, 35.0), (10.0, 20.0)])
    gaps = [(0.0, 5.0), (15.0, 25.0), (21.0, 29.0), (5.0, 40.0), (20.0, 30.0), (7.0, 7.0), (34.0, 50.0),
            (float("nan"), 12.0)]
    a, b = np.array([g[0] for g in gaps]), np.array([g[1] for g in gaps])
    assert lab.possible(a, b).tolist() == [False, True, False, True, False, False, True, False]
    got = [lab(x, y) for x, y in gaps]
    pct = [None if g is None else round(g[1]["dataloader_overlap_pct"], 6) for g in got]
    # (15, 25): 5 of 10 µs; (5, 40): 10 + 5 of 35 µs; (20, 30) only touches both events: none; (34, 50): 1 of 16
    assert pct == [None, 50.0, None, round(100 * 15 / 35, 6), None, None, 6.25, None]
    assert {g[0] for g in got if g} == {"waiting for the DataLoader"}
    assert [lab.share(x, y) for x, y in gaps if lab.possible(np.array([x]), np.array([y]))[0]] == [g for g in got if g]
    none = A._dataloader_label([])
    assert none.possible(a, b).tolist() == [False] * len(gaps) and none(15.0, 25.0) is None
