"""The parallel pass's other consumers (tools/trace/scan_parallel.py kinds ``steps``, ``reader``,
``sheets``): the step accountant's feed (tools/trace/step_feed.py), the verifier reader's
(tools/trace/reader_feed.py) and the engine's loop with TraceLens's sheets' collector
(tools/trace/op_args.py) fed chunks in worker processes and joined in file order give what one feed
over the whole trace gives, value for value, on every trace the repository holds, on a hand-built
trace whose tables (names, threads, devices, repeated values) start in every chunk, and on the
odd documents of tests/test_fastscan.py (the same result or the same refusal); a chunk a consumer
cannot join (duration pairs, an event the reader stops on) hands the trace back to the one read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ai4s_graph.tools.errors import Ai4sError
from ai4s_graph.tools.trace import fastscan, host_timeline, lanes, onepass, rank_analysis, reader_feed, scan_parallel

from test_fastscan import CASES, REPO, _doc, _is_trace

TRACES = sorted(p for root in (REPO / "examples", REPO / "bench" / "accuracy" / "cases", REPO / "tests" / "data")
                for p in root.rglob("*.json*") if _is_trace(p))
EVERYTHING = lambda name: True  # noqa: E731 - the kernels counted by name: all


def _steps(path: Path, workers: int) -> object:
    try:
        return host_timeline.read_steps(path, workers=workers).finish().model_dump(mode="json")
    except Ai4sError as e:
        return ("error", type(e).__name__, str(e))


def _reader(path: Path, workers: int) -> object:
    try:
        got = reader_feed.read_reader(str(path), workers=workers)
    except Ai4sError as e:
        return ("error", type(e).__name__, str(e))
    return json.dumps(onepass._reader_of(got.loader, got.notes, 0, EVERYTHING), sort_keys=True, default=repr)


def _engine(path: Path, workers: int, cache: Path) -> object:
    try:
        got = rank_analysis.analyze_rank(str(path), 0, str(cache), workers=workers, store=False)
    except Ai4sError as e:
        return ("error", type(e).__name__, str(e))
    return json.dumps(got["value"], sort_keys=True, default=repr)


def _all_three(path: Path, workers: int, tmp: Path) -> dict[str, tuple]:
    """Each kind's result with ``workers`` (0: the one read) and what its parse did."""
    out = {}
    for kind, fn in (("steps", lambda: _steps(path, workers)), ("reader", lambda: _reader(path, workers)),
                     ("sheets", lambda: _engine(path, workers, tmp / f"cache-{kind}-{workers}"))):
        fastscan.last_parse.clear()
        out[kind] = (fn(), dict(fastscan.last_parse))
    return out


def test_the_repository_traces_are_there():
    assert len(TRACES) >= 20  # 74 on 2026-12-07 (examples, accuracy cases, tests/data)


@pytest.mark.parametrize("path", TRACES, ids=[str(p.relative_to(REPO)) for p in TRACES])
def test_every_repository_trace_same_result_from_chunks(path, tmp_path, monkeypatch):
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 40_000)  # tens to hundreds of chunks a trace
    one, par = _all_three(path, 0, tmp_path), _all_three(path, 2, tmp_path)
    for kind in one:
        assert par[kind][0] == one[kind][0], kind
        st = par[kind][1]
        if st.get("parallel") is not None:  # handed back: only for what the module docstrings name
            assert "duration pairs" in st["parallel"] or "stopped" in st["parallel"], (kind, st)
        else:
            assert st["workers"] == 2 and st["pieces"] >= 1, (kind, st)


def _varied_trace(n: int = 1500) -> bytes:
    """Events whose names, threads, pids, devices (ids, strings, lists) and categories first appear
    all along the list, with steps, memory events, flows, launches, Python frames and collectives."""
    evs: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "trainer"}}]
    t = 1_700_000_000_000.0  # an epoch-µs clock (the feeds subtract the first timestamp after the read)
    for i in range(n):
        tid = [7, 8, "w", 9][i % 4] if i % 97 else [i // 97]  # an unhashable tid now and then
        pid = 1 if i % 5 else "host"
        dev = [0, 1, "gpu:2", None][i % 4] if i % 89 else [i]
        if i % 50 == 0:
            evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i // 50}", "pid": 1, "tid": 7,
                        "ts": t, "dur": 400.0})
        if i % 31 == 0:
            evs.append({"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 7, "ts": t,
                        "args": {"Device Type": 1, "Total Allocated": 1000 + i}})
        if i % 43 == 0:
            evs.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 7, "args": {"name": f"thread {i}"}})
        evs.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 37}", "pid": pid, "tid": tid, "ts": t,
                    "dur": 3.0, "args": {"Input Dims": [[1 + (i % 3), 4]], "External id": i}})
        evs.append({"ph": "X", "cat": "python_function", "name": f"train.py({i % 11}): step", "pid": 1, "tid": 7,
                    "ts": t + 0.5, "dur": 1.0})
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                    "ts": t + 1.0, "dur": 1.0, "args": {"correlation": 10_000 + i, "External id": i}})
        evs.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 10_000 + i, "pid": 1, "tid": 7, "ts": t + 1.0})
        cat = ["kernel", "gpu_memcpy", "gpu_memset", "Kernel"][i % 4] if i % 7 else "kernel"
        name = f"kernel_{i % 53}" if i % 13 else "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)"
        args = {"correlation": 10_000 + i, "External id": i, "stream": 7 + i % 3, "device": dev}
        if cat == "gpu_memcpy":
            args["bytes"] = 4096 * (i % 5)
        if name.startswith("nccl"):
            args.update({"Collective name": "allreduce", "In msg nelems": 1024, "Group size": 2, "dtype": "Float"})
        evs.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7 + i % 3, "ts": t + 2.0 + (i % 3),
                    "dur": 2.0 + (i % 4), "args": args})
        t += 8.0
    return _doc(evs)


@pytest.mark.parametrize("chunk", [700, 5_000, 1 << 20])
def test_a_trace_whose_tables_start_in_every_chunk(tmp_path, monkeypatch, chunk):
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 2_000)
    p = tmp_path / "varied.json"
    p.write_bytes(_varied_trace())
    one, par = _all_three(p, 0, tmp_path), _all_three(p, 3, tmp_path)
    for kind in one:
        assert par[kind][0] == one[kind][0], kind
        assert par[kind][1]["parallel"] is None and par[kind][1]["workers"] == 3, (kind, par[kind][1])
    steps = json.loads(json.dumps(one["steps"][0]))
    assert steps["n_steps"] == 30 and steps["has_memory_events"] and steps["has_python_stacks"]
    doc = json.loads(p.read_bytes())["traceEvents"]
    # host events: ops, runtime calls, user frames, and events of an unknown category with a correlation
    # id ("Kernel": the accountant's GPU categories are kineto's lower-case ones)
    host = {(repr(e["pid"]), repr(e["tid"])) for e in doc
            if e.get("cat") in ("cpu_op", "cuda_runtime", "python_function", "Kernel")}
    assert steps["threads"] == len(host) == 27  # (1 | host) x (7, 8, w, 9), 16 tids that are lists, (0, 7..9)
    reader = json.loads(one["reader"][0])["reader"]
    assert reader["kernel_count"] > 0 and reader["comm"]  # the collectives' table from the joined metadata


def test_the_joined_columns_are_those_of_one_feed(tmp_path, monkeypatch):
    """Not only the finished breakdown: the step feed's columns and tables themselves."""
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 3_000)
    p = tmp_path / "varied.json"
    p.write_bytes(_varied_trace(400))
    one = host_timeline.read_steps(p, workers=0)
    par = host_timeline.StepAccountant(p)
    assert scan_parallel.read_parallel(p, 2, "steps", par)
    assert fastscan.last_parse["pieces"] >= 10
    a, b = par.export(), one.export()
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]
    assert a["h_ts"] and a["g_device"] and a["h_sig"]  # columns, as bytes
    got = reader_feed.ReaderFeed(str(p))
    assert scan_parallel.read_parallel(p, 2, "reader", got)
    ser = reader_feed.read_reader(str(p), workers=0)
    for k in ("names", "threads", "values", "steps", "dataloader", "launch_key", "g_comm"):
        assert got.export()[k] == ser.export()[k], k
    assert got.export()["r_ord"] == ser.export()["r_ord"]  # event order numbers over the whole list


@pytest.mark.parametrize("chunk", [64, 1 << 20])
@pytest.mark.parametrize("name", list(CASES))
def test_odd_documents_same_result_or_same_refusal(tmp_path, monkeypatch, name, chunk):
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", chunk)
    p = tmp_path / "t.json"
    p.write_bytes(CASES[name])
    one, par = _all_three(p, 0, tmp_path), _all_three(p, 2, tmp_path)
    for kind in one:
        assert par[kind][0] == one[kind][0], kind


def test_duration_pairs_hand_the_reader_back(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 200)
    evs = [{"ph": "B", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20,
            "args": {"correlation": 7, "stream": 7, "device": 0}},
           {"ph": "E", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 50}]
    evs += [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 60 + i, "dur": 1,
             "args": {"correlation": 8 + i, "stream": 7, "device": 0}} for i in range(20)]
    p = tmp_path / "pair.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    got = reader_feed.ReaderFeed(str(p))
    assert not scan_parallel.read_parallel(p, 2, "reader", got)
    assert "duration pairs" in fastscan.last_parse["parallel"]
    # read_reader then reads it in one pass: the pair joined, as the one read joins it
    one = reader_feed.read_reader(str(p), workers=0)
    two = reader_feed.read_reader(str(p), workers=2)
    assert one.loader.pairs.counts() == two.loader.pairs.counts() == {"joined": (1, 0, 1), "lone_ends": (0, 0),
                                                                      "never_ended": (0, 0)}
    assert len(two.loader.g_ts) == 21


def test_an_unhashable_category_in_a_chunk_is_left_out_as_in_one_read(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 300)
    evs = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 60 + i, "dur": 1,
            "args": {"correlation": 8 + i, "stream": 7, "device": 0}} for i in range(30)]
    evs[25]["cat"] = {"not": "hashable"}  # left out, counted (ill_typed), not a stop
    evs[27]["args"] = {"correlation": 35, "stream": 7, "device": 0, "Collective name": "x"}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    one, two = (reader_feed.read_reader(str(p), workers=w).loader for w in (0, 2))
    assert (one.ill_typed, one.n, one.error) == (two.ill_typed, two.n, two.error) == (1, 30, None)


def test_the_lanes_share_the_cpus_the_readers_leave(monkeypatch, tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(_varied_trace(10))
    monkeypatch.setenv(scan_parallel.WORKERS_ENV, "3")  # what workers_for says, whatever the size
    for cpus, want in ((17, 3), (14, 3), (11, 2), (10, 0), (4, 0), (2, 0)):
        monkeypatch.setattr(lanes, "usable_cpus", lambda c=cpus: c)
        assert onepass.lane_workers(p) == want, cpus  # (cpus - 5 readers) // 3 readers with workers, at most 3
    monkeypatch.setenv(scan_parallel.WORKERS_ENV, "0")
    monkeypatch.setattr(lanes, "usable_cpus", lambda: 64)
    assert onepass.lane_workers(p) == 0  # workers_for's own no


def test_the_lane_parts_with_workers_give_the_parts_without(tmp_path, monkeypatch):
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    monkeypatch.setenv("AI4S_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 20_000)
    p = str(REPO / "examples" / "perf-runs" / "92001" / "traces" / "trace_rank0.json.gz")
    got = {}
    for w in (0, 2):
        monkeypatch.setattr(onepass, "lane_workers", lambda _p, w=w: w)
        got[w] = (onepass.steps_part(p, None), onepass.reader_part(p, None, 0, EVERYTHING),
                  onepass.engine_part(p, None, 0, str(tmp_path / f"c{w}"), "r0", ()))
        assert fastscan.last_parse["workers"] == w or w == 0
    assert got[2][0] == got[0][0] and got[2][0]["step_accounting"]["n_steps"] > 0
    assert json.dumps(got[2][1], sort_keys=True, default=repr) == json.dumps(got[0][1], sort_keys=True, default=repr)
    assert json.dumps(got[2][2]["value"], sort_keys=True) == json.dumps(got[0][2]["value"], sort_keys=True)


def _head_names_the_list(p: Path, n: int = 20_000) -> None:
    """A gzip trace whose head holds the word traceEvents before the list (the parallel pass hands
    back at its head) and names that keep the gzip stream long (several raw reads a block)."""
    import gzip
    import random

    rnd = random.Random(1)
    evs = [{"ph": "X", "cat": "kernel", "name": "k%032x" % rnd.getrandbits(128), "pid": 0, "tid": 7,
            "ts": 1000.0 + i, "dur": 0.5, "args": {"stream": 7, "device": 0, "correlation": i}} for i in range(n)]
    with gzip.open(p, "wt", compresslevel=1) as fh:
        fh.write('{"note": "traceEvents", "traceEvents": ')
        json.dump(evs, fh)
        fh.write("}")


def test_a_handed_back_pass_leaves_the_open_file_to_the_one_read(tmp_path, monkeypatch):
    """The parallel pass's reader thread is done before the one read rewinds the caller's open file
    (found by a tester: it went on decompressing the same file object, and the one read failed
    with a damaged gzip stream or invalid JSON)."""
    monkeypatch.setenv(fastscan.PARSER_ENV, "fast")
    p = tmp_path / "head.json.gz"
    _head_names_the_list(p)
    for read in (host_timeline.read_steps, reader_feed.read_reader):
        for _ in range(3):
            with open(p, "rb") as raw:
                got = read(p if read is host_timeline.read_steps else str(p), raw=raw, workers=2)
            assert fastscan.last_parse["parallel"] == "no traceEvents list at the root's head"  # handed back
            assert (got.n if read is host_timeline.read_steps else got.loader.n) == 20_000


def test_a_missing_file_or_a_fifo_is_refused_as_the_one_read_refuses_it(tmp_path):
    import os

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for p in (tmp_path / "missing.json", fifo):
        for read in (host_timeline.read_steps, reader_feed.read_reader):
            with pytest.raises(Ai4sError) as one:
                read(str(p), workers=0)
            with pytest.raises(Ai4sError) as two:
                read(str(p), workers=2)  # never opened by the parallel pass (a FIFO would block it)
            assert str(two.value) == str(one.value) and p.name in str(one.value)
    assert not scan_parallel.read_parallel(tmp_path / "missing.json", 2, "steps", host_timeline.StepAccountant())


def test_a_worker_that_never_answers_hands_the_pass_back(tmp_path, monkeypatch):
    """Workers stopped (SIGSTOP) as they start: no answer in STALL_S, the pass hands back and the
    one read gives the result; no worker is left."""
    import signal

    monkeypatch.setattr(scan_parallel, "STALL_S", 1.0)
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 2_000)
    p = tmp_path / "varied.json"
    p.write_bytes(_varied_trace(200))
    procs = []
    real = scan_parallel._Worker.__init__

    def stopped(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003
        real(self, *a, **kw)
        self.proc.send_signal(signal.SIGSTOP)
        procs.append(self.proc)

    monkeypatch.setattr(scan_parallel._Worker, "__init__", stopped)
    acc = host_timeline.StepAccountant(p)
    assert not scan_parallel.read_parallel(p, 2, "steps", acc)
    assert "no answer for chunk 0" in fastscan.last_parse["parallel"]
    assert len(procs) == 2 and all(pr.poll() is not None for pr in procs)  # killed and reaped
    assert _steps(p, 2) == _steps(p, 0)


def test_a_trace_without_host_events_is_accounted(tmp_path):
    """GPU events only (no launch, op or step): one window, the GPU split, no IndexError from the
    critical path's replay or the communication view (critical_path.at_launch)."""
    from ai4s_graph.tools.trace import comm_steps

    p = tmp_path / "gpu-only.json"
    p.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0 + i, "dur": 0.5,
         "args": {"correlation": i, "stream": 7, "device": 0}} for i in range(5)]}))
    bd = host_timeline.step_breakdown(p)
    assert bd.n_steps == 1 and bd.steps[0].step == -1
    assert (bd.mean_gpu.computation_us, bd.mean_gpu.busy_us, bd.mean_gpu.idle_us) == (2.5, 2.5, 2.0)
    assert comm_steps.rank_comm(str(p), 0)[0].rank == 0
