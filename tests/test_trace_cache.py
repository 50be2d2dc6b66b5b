"""Per-rank results are cached by the trace's content hash: a re-run does not parse again, a
changed trace misses."""

from __future__ import annotations

import gzip
import hashlib
import shutil

from ai4s_graph.tools.trace import collectives as C
from ai4s_graph.tools.trace import rank_analysis as R
from ai4s_graph.tools.trace import slurm_array as SA
from ai4s_graph.tools.trace import cache as TC


def test_get_or_compute_counts_hits(shared_data, tmp_path):
    src = shared_data / "traces" / "hta" / "sampled_rank-1.json.gz"
    assert TC.file_sha256(src) == hashlib.sha256(src.read_bytes()).hexdigest()
    cache = TC.TraceCache(tmp_path / "c")
    calls = []

    def compute():
        calls.append(1)
        return {"n": len(calls)}

    v1, hit1 = cache.get_or_compute("rank", src, "v1", compute)
    v2, hit2 = cache.get_or_compute("rank", src, "v1", compute)
    assert (hit1, hit2) == (False, True) and v1 == v2 == {"n": 1} and len(calls) == 1
    assert (cache.hits, cache.misses) == (1, 1)
    # a new analysis version or other parameters are other entries
    _, hit3 = cache.get_or_compute("rank", src, "v2", compute)
    _, hit4 = cache.get_or_compute("rank", src, "v1", compute, params={"window": "all"})
    assert not hit3 and not hit4 and len(calls) == 3


def test_analyze_rank_served_from_cache_and_modified_trace_misses(shared_data, tmp_path, monkeypatch):
    trace = tmp_path / "rank0.json.gz"
    shutil.copy(shared_data / "traces" / "hta" / "sampled_rank-0.json.gz", trace)
    cache_dir = str(tmp_path / "cache")
    scans = []
    real_scan = R.ts_mod.scan_trace
    monkeypatch.setattr(R.ts_mod, "scan_trace", lambda p, progress=None, also=(), **kw: scans.append(p)
                        or real_scan(p, progress, also, **kw))

    first = R.analyze_rank(str(trace), 0, cache_dir, cross_check=False)
    again = R.analyze_rank(str(trace), 0, cache_dir, cross_check=False)
    assert first["from_cache"] is False and again["from_cache"] is True
    assert len(scans) == 1  # the second call did not parse the trace
    assert again["timeline_us"] == first["timeline_us"] and again["comm"] == first["comm"]
    assert again["sha256"] == first["sha256"]

    # the same bytes under another rank id: cached result, relabelled rank
    other = R.analyze_rank(str(trace), 5, cache_dir, cross_check=False)
    assert other["from_cache"] is True and other["rank"] == 5

    # modify the trace (drop its last kernel): a miss, parsed again, different numbers
    import json

    data = json.loads(gzip.open(trace).read())
    kernels = [i for i, e in enumerate(data["traceEvents"]) if e.get("cat") == "kernel"]
    del data["traceEvents"][kernels[-1]]
    with gzip.open(trace, "wt") as fh:
        json.dump(data, fh)
    changed = R.analyze_rank(str(trace), 0, cache_dir, cross_check=False)
    assert changed["from_cache"] is False and len(scans) == 2
    assert changed["sha256"] != first["sha256"]
    assert changed["n_gpu_events"] == first["n_gpu_events"] - 1


def test_default_cache_dir_under_state_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("AI4S_STATE_DIR", str(tmp_path / "state"))
    assert TC.default_cache_dir() == tmp_path / "state" / "trace-cache"
    monkeypatch.delenv("AI4S_STATE_DIR")
    assert TC.default_cache_dir().parts[-3:] == (".cache", "ai4s-graph", "traces")


def test_analyze_ranks_warm_run_parses_nothing(shared_data, tmp_path, monkeypatch):
    d = shared_data / "traces" / "hta"
    files = {0: d / "sampled_rank-0.json.gz", 1: d / "sampled_rank-1.json.gz"}
    cold = R.analyze_ranks(files, cache_dir=str(tmp_path), workers=1, cross_check=False)
    assert [r["from_cache"] for r in cold] == [False, False]

    def boom(p):
        raise AssertionError(f"parsed {p} on a warm run")

    monkeypatch.setattr(R.ts_mod, "scan_trace", boom)
    warm = R.analyze_ranks(files, cache_dir=str(tmp_path), workers=2, cross_check=False)
    assert [r["from_cache"] for r in warm] == [True, True]
    assert [r["rank"] for r in warm] == [0, 1]
    assert C.build_report(warm).stragglers.hta_potential_stragglers == [1]
