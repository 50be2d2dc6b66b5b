"""Per-rank results are cached by the trace's content hash: a re-run does not parse again, a
changed trace misses. Inputs: the bundled 2-GPU run 93004 (DDP vit, rank 1 a straggler by construction:
examples/perf-runs/93004/truth.json)."""

from __future__ import annotations

import gzip
import hashlib
import shutil

from ai4s_graph.tools.trace import collectives as C
from ai4s_graph.tools.trace import rank_analysis as R
from ai4s_graph.tools.trace import slurm_array as SA
from ai4s_graph.tools.trace import cache as TC


def test_get_or_compute_counts_hits(perf_runs, tmp_path):
    src = perf_runs / "93004" / "traces" / "trace_rank1.json.gz"
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


def test_analyze_rank_served_from_cache_and_modified_trace_misses(perf_runs, tmp_path, monkeypatch):
    trace = tmp_path / "rank0.json.gz"
    shutil.copy(perf_runs / "93004" / "traces" / "trace_rank0.json.gz", trace)
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


def test_analyze_ranks_warm_run_parses_nothing(perf_runs, tmp_path, monkeypatch):
    import json

    d = perf_runs / "93004" / "traces"
    files = {0: d / "trace_rank0.json.gz", 1: d / "trace_rank1.json.gz"}
    straggler = json.loads((perf_runs / "93004" / "truth.json").read_text())["rank"]  # built in: rank 1
    cold = R.analyze_ranks(files, cache_dir=str(tmp_path), workers=1, cross_check=False)
    assert [r["from_cache"] for r in cold] == [False, False]

    def boom(p):
        raise AssertionError(f"parsed {p} on a warm run")

    monkeypatch.setattr(R.ts_mod, "scan_trace", boom)
    warm = R.analyze_ranks(files, cache_dir=str(tmp_path), workers=2, cross_check=False)
    assert [r["from_cache"] for r in warm] == [True, True]
    assert [r["rank"] for r in warm] == [0, 1]
    # the cross-rank report of the cached results is the cold one's, and names the built-in straggler
    assert C.build_report(warm).model_dump() == C.build_report(cold).model_dump()
    st = C.build_report(warm).stragglers
    assert st.straggler_rank == st.claim.rank == straggler == 1
