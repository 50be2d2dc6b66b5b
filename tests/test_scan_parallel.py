"""The parallel pass (tools/trace/scan_parallel.py): the same scan as the one pass, column for
column, on every trace the repository holds and on the hand-built odd documents of
tests/test_fastscan.py; where it cannot (duration pairs, a cut inside a string, a worker that
does not start), it hands back and the one pass gives its own result or error."""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ai4s_graph.tools.errors import Ai4sError
from ai4s_graph.tools.trace import engine, fastscan, scan_parallel, stream

from test_fastscan import CASES, REPO, _doc, _ev, _is_trace

TRACES = sorted(p for root in (REPO / "examples", REPO / "bench" / "accuracy" / "cases", REPO / "tests" / "data")
                for p in root.rglob("*.json*") if _is_trace(p))


def _scan(path: Path, workers: int, monkeypatch):
    """(scan fields, or the error) and what the parse did."""
    monkeypatch.setenv(scan_parallel.WORKERS_ENV, str(workers))
    fastscan.last_parse.clear()
    try:
        sc = stream.scan_trace(path)
    except Ai4sError as e:
        return ("error", type(e).__name__, str(e)), dict(fastscan.last_parse)
    out = {}
    for f in dataclasses.fields(sc):
        v = getattr(sc, f.name)
        out[f.name] = (v.dtype.str, v.tobytes()) if isinstance(v, np.ndarray) else v
    return out, dict(fastscan.last_parse)


def _both(path: Path, monkeypatch):
    one, _ = _scan(path, 0, monkeypatch)
    par, st = _scan(path, 2, monkeypatch)
    return one, par, st


def test_the_repository_traces_are_there():
    assert len(TRACES) >= 20  # 74 on 2026-12-02 (examples, accuracy cases, tests/data)


@pytest.mark.parametrize("path", TRACES, ids=[str(p.relative_to(REPO)) for p in TRACES])
def test_every_repository_trace_same_scan_in_many_chunks(path, monkeypatch):
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 20_000)  # tens to hundreds of chunks a trace
    one, par, st = _both(path, monkeypatch)
    assert par == one
    assert st["workers"] == 2 and st["parallel"] is None and st["fallback"] is None  # the parallel pass did it
    assert st["pieces"] >= 1


def test_the_engine_output_is_the_same_on_a_real_trace(monkeypatch):
    path = REPO / "examples" / "perf-runs" / "92001" / "traces" / "trace_rank0.json.gz"
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 50_000)
    res = []
    for w in (0, 3):
        monkeypatch.setenv(scan_parallel.WORKERS_ENV, str(w))
        analysis, tables = engine.analyze_with_tables(path)
        res.append((analysis.model_dump(mode="json"), json.dumps(tables, sort_keys=True, default=str)))
    assert res[0] == res[1]
    assert fastscan.last_parse["workers"] == 3


@pytest.mark.parametrize("chunk", [64, 300, 1 << 20])
@pytest.mark.parametrize("name", list(CASES))
def test_odd_documents_same_scan_or_same_refusal(tmp_path, monkeypatch, name, chunk):
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", chunk)
    p = tmp_path / "t.json"
    p.write_bytes(CASES[name])
    one, par, _ = _both(p, monkeypatch)
    assert par == one


def _mixed(i: int) -> dict:
    """Events that exercise every interned table: names, cpu names, threads, streams of any type,
    string device names, communication kernels with collective metadata, steps, flows."""
    k = i % 7
    if k == 0:
        return _ev(i, cat="kernel", name=f"ncclDevKernel_AllReduce_{i % 3}", tid=i % 5,
                   args={"correlation": i, "stream": ["s", 1 << 40, -3, "7"][i % 4], "device": i % 2,
                         "Collective name": "allreduce", "In msg nelems": i, "Group size": 2})
    if k == 1:
        return _ev(i, cat="Kernel", name=f"gemm_{i % 11}", pid=f"GPU {i % 3}", args={"correlation": i, "stream": i % 4})
    if k == 2:
        return _ev(i, cat="cuda_runtime", name="cudaLaunchKernel", tid=f"t{i % 4}", args={"correlation": i - 2})
    if k == 3:
        return {"ph": "s", "cat": "ac2g", "id": i - 3, "pid": 1, "tid": 7, "ts": 1000.0 + 10 * i, "name": "ac2g"}
    if k == 4:
        return _ev(i, cat="user_annotation", name=f"ProfilerStep#{i // 7}", dur=60.0)
    if k == 5:
        return _ev(i, cat="cpu_op", name=["aten::mm", "DataLoader.__next__", "execute"][i % 3], tid=[1, 2][i % 2])
    return _ev(i, cat="gpu_memcpy", name="Memcpy HtoD", ts="12.5" if i % 2 else 3.0, args={"correlation": i})


@pytest.mark.parametrize("gz", [False, True])
def test_every_interned_table_recoded_across_chunks(tmp_path, monkeypatch, gz):
    doc = _doc([_mixed(i) for i in range(700)], tail={"distributedInfo": {"rank": 3, "world_size": 4}})
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(doc) if gz else doc)
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 1500)
    one, par, st = _both(p, monkeypatch)
    assert st["parallel"] is None and st["pieces"] > 20
    assert par == one
    assert one["header"]["distributedInfo"] == {"rank": 3, "world_size": 4}  # the trailer keys, both ways
    assert len(one["stream_ids"]) == 8 and len(one["device_names"]) == 3 and len(one["comm_args"]) == 100


def test_duration_pairs_hand_back_to_the_one_pass(tmp_path, monkeypatch):
    evs = [_ev(i) for i in range(60)]
    evs[40:40] = [{"ph": "B", "cat": "kernel", "name": "paired", "pid": 1, "tid": 9, "ts": 5.0, "args": {"stream": 2}},
                  {"ph": "E", "cat": "kernel", "name": "paired", "pid": 1, "tid": 9, "ts": 8.0}]
    p = tmp_path / "pairs.json"
    p.write_bytes(_doc(evs))
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 500)
    one, par, st = _both(p, monkeypatch)
    assert par == one
    assert "duration pairs" in st["parallel"] and st["workers"] == 0
    assert "paired" in one["names"]


def test_a_cut_inside_a_string_hands_back(tmp_path, monkeypatch):
    # the boundary pattern inside every name: some chunk is cut inside a string and does not decode
    evs = [_ev(i, name="x" * (i % 97) + "},{" + "y" * 50) for i in range(200)]  # cuts land in names too
    p = tmp_path / "cut.json"
    p.write_bytes(_doc(evs))
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 700)
    one, par, st = _both(p, monkeypatch)
    assert par == one
    assert "did not decode" in st["parallel"]


def test_a_worker_that_does_not_start_hands_back(tmp_path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_bytes(_doc([_mixed(i) for i in range(300)]))
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 2000)
    one, _ = _scan(p, 0, monkeypatch)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the worker exits at once
    par, st = _scan(p, 2, monkeypatch)
    assert par == one
    assert st["parallel"].startswith("worker") and st["workers"] == 0


def test_workers_for_reads_the_environment_and_the_document_size(tmp_path, monkeypatch):
    small = tmp_path / "s.json"
    small.write_bytes(_doc([_ev(1)]))
    monkeypatch.setenv(scan_parallel.WORKERS_ENV, "3")
    assert scan_parallel.workers_for(small) == 3
    monkeypatch.setenv(scan_parallel.WORKERS_ENV, "junk")
    assert scan_parallel.workers_for(small) == 0
    monkeypatch.delenv(scan_parallel.WORKERS_ENV)
    assert scan_parallel.workers_for(small) == 0  # below MIN_JSON_BYTES: the one pass


def test_json_bytes_of_a_gzip_file_is_its_recorded_size(tmp_path):
    doc = _doc([_ev(i) for i in range(2000)])
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(doc))
    assert p.stat().st_size < len(doc)
    assert scan_parallel.json_bytes(p) == len(doc)
    q = tmp_path / "t.json"
    q.write_bytes(doc)
    assert scan_parallel.json_bytes(q) == len(doc)


def _workers_in_a_pool(path: str) -> int:
    return scan_parallel.workers_for(Path(path))


def test_no_workers_of_its_own_in_a_process_of_a_pool(tmp_path, monkeypatch):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    p = tmp_path / "s.json"
    p.write_bytes(_doc([_ev(1)]))
    monkeypatch.setenv(scan_parallel.WORKERS_ENV, "4")  # inherited by the pool's process
    assert scan_parallel.workers_for(p) == 4
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(_workers_in_a_pool, str(p)).result() == 0


def test_workers_beyond_two_only_where_they_fit_in_the_documents_size(tmp_path, monkeypatch):
    monkeypatch.delenv(scan_parallel.WORKERS_ENV, raising=False)
    monkeypatch.setattr(scan_parallel.os, "sched_getaffinity", lambda _pid: set(range(16)))
    sizes = {}
    for mib in (40, 150, 171, 1000):
        monkeypatch.setattr(scan_parallel, "json_bytes", lambda _p, m=mib: m << 20)
        sizes[mib] = scan_parallel.workers_for(tmp_path / "any.json")
    # 40 MiB: 2 (never fewer once parallel); 150: (150 - 96) // 24 = 2; 171 (the replicated 176 MB
    # trace's JSON): (171 - 96) // 24 = 3; 1000: 37 fit, MAX_WORKERS 4
    assert (scan_parallel.ONE_PASS_RSS_BYTES, scan_parallel.WORKER_RSS_BYTES) == (96 << 20, 24 << 20)
    assert sizes == {40: 2, 150: 2, 171: 3, 1000: scan_parallel.MAX_WORKERS}
    monkeypatch.setattr(scan_parallel.os, "sched_getaffinity", lambda _pid: {0})
    assert scan_parallel.workers_for(tmp_path / "any.json") == 0  # one CPU: the one pass


@pytest.mark.parametrize("cut", ["gzip", "json", "empty"])
def test_a_truncated_or_empty_file_gives_the_one_pass_refusal(tmp_path, monkeypatch, cut):
    doc = _doc([_mixed(i) for i in range(400)])
    data = {"gzip": gzip.compress(doc)[:-200], "json": doc[: len(doc) * 2 // 3], "empty": b""}[cut]
    p = tmp_path / ("t.json.gz" if cut == "gzip" else "t.json")
    p.write_bytes(data)
    monkeypatch.setattr(scan_parallel, "CHUNK_BYTES", 2000)
    one, par, st = _both(p, monkeypatch)
    assert one[0] == "error" and par == one  # the same one-line refusal
    assert st.get("workers", 0) == 0  # handed back (or, for an empty file, refused before any read)
