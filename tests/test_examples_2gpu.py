"""The bundled 2-GPU runs (examples/perf-runs/93001-93005, made on 2 NVIDIA H200 joined by
NVLink) and the 2-GPU collective baseline (reports/raw-2026-11-30-2gpu): what the data shows,
read through the analysis's stable entry points (``collectives.analyze_collectives``, the
streaming timeline) and the report builder. Every expected value is a measured property of the
bundled files (see examples/perf-runs/README.md), with margins far from any threshold."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ai4s_graph.tools.cluster import evalcluster
from ai4s_graph.tools.trace import collectives as C

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples" / "perf-runs"
RAW = REPO / "reports" / "raw-2026-11-30-2gpu"
RUNS = {"93001": "ddp", "93002": "ddp", "93003": "ddp", "93004": "ddp", "93005": "fsdp"}


def _traces(job: str) -> dict[int, Path]:
    return {r: EX / job / "traces" / f"trace_rank{r}.json.gz" for r in (0, 1)}


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    return {job: C.analyze_collectives(_traces(job)).model_dump() for job in RUNS}


@pytest.mark.parametrize("job", sorted(RUNS))
def test_every_rank_has_a_trace_with_its_distributed_info(job):
    man = json.loads((EX / job / "manifest.json").read_text())
    assert man["jobid"] == job and man["ranks"] == 2 and man["parallel"] == RUNS[job]
    assert man["artifacts"]["traces"] == ["traces/trace_rank0.json.gz", "traces/trace_rank1.json.gz"]
    assert man["gpu"] == "NVIDIA H200" and man["env"]["NCCL_NVLS_ENABLE"] == "0"
    for r, p in _traces(job).items():
        t = json.loads(gzip.decompress(p.read_bytes()))
        di = t["distributedInfo"]
        assert di["rank"] == r and di["world_size"] == 2 and di["backend"] == "nccl"
        steps = {e["name"] for e in t["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
        assert len(steps) == 3


@pytest.mark.parametrize("job", sorted(RUNS))
def test_telemetry_has_both_gpus_and_the_job_series(job):
    names, gpus, jobs = set(), set(), set()
    for line in (EX / job / "telemetry" / "export.jsonl").read_text().splitlines():
        m = json.loads(line)["metric"]
        names.add(m["__name__"])
        if m["__name__"] == "DCGM_FI_DEV_GPU_UTIL":
            gpus.add(m["gpu"])
        if m["__name__"] == "rmsjob_info":
            jobs.add(m["jobid"])
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "rmsjob_info"} <= names
    assert gpus == {"0", "1"} and jobs == {job}


@pytest.mark.parametrize("job", sorted(RUNS))
def test_collectives_found_on_every_rank_with_size_and_busbw(reports, job):
    rep = reports[job]
    assert rep["world_size"] == 2 and sorted(r["rank"] for r in rep["per_rank"]) == [0, 1]
    assert all(r["n_comm_kernels"] > 0 for r in rep["per_rank"])
    kinds = {g["collective"] for g in rep["groups"]}
    assert kinds == ({"allgather", "reducescatter"} if RUNS[job] == "fsdp" else {"allreduce"})
    big = [g for g in rep["groups"] if g["msg_bytes"] >= 16 << 20]
    assert big and all(g["busbw_gbps"] > 0 and g["group_size"] == 2 for g in big)


def _peak_busbw(rep: dict, kind: str) -> float:
    return max(g["busbw_gbps"] for g in rep["groups"] if g["collective"] == kind and g["msg_bytes"] >= 16 << 20)


def test_p2p_disabled_all_reduce_is_much_slower_than_nvlink(reports):
    # the same 64 MiB gradient buckets: ~264 GB/s over NVLink, ~27 GB/s through host memory
    nv, host = _peak_busbw(reports["93001"], "allreduce"), _peak_busbw(reports["93002"], "allreduce")
    assert nv > 150 and host < 50 and nv / host > 5


def test_communication_bound_vs_overlapped(reports):
    exposed = {job: max(r["exposed_comm_pct"] for r in reports[job]["per_rank"]) for job in ("93001", "93002", "93003")}
    assert exposed["93002"] > 70 and exposed["93001"] > 40  # the all-reduce is the step
    assert exposed["93003"] < 5  # ViT: the buckets run during the backward
    assert all(r["comm_comp_overlap_pct"] > 80 for r in reports["93003"]["per_rank"])


def test_the_straggler_rank_is_named(reports):
    s = reports["93004"]["stragglers"]
    assert s["straggler_rank"] == 1
    last = {r["rank"]: r["pct_arrived_last"] for r in s["rows"]}
    assert last[1] > 75 and last[0] < 25
    assert json.loads((EX / "93004" / "truth.json").read_text())["rank"] == 1


def test_the_2gpu_collective_sweep_is_complete_and_correct():
    d = json.loads((RAW / "collectives-2gpu.json").read_text())
    for mode in ("p2p", "p2p_disabled"):
        rows = d[mode]["rows"]
        assert d[mode]["ranks"] == 2 and all(r["correct"] for r in rows)
        assert {(r["op"], r["bytes"]) for r in rows} == {(op, b) for op in ("all_reduce", "all_gather", "reduce_scatter")
                                                         for b in (32 << 10, 256 << 10, 2 << 20, 16 << 20, 128 << 20, 1 << 30)}
    assert d["p2p_disabled"]["env"]["NCCL_P2P_DISABLE"] == "1"
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        peak = {m: max(r["busbw_gbps"] for r in d[m]["rows"] if r["op"] == op) for m in ("p2p", "p2p_disabled")}
        assert peak["p2p"] > 4 * peak["p2p_disabled"]


def test_the_2gpu_eval_builds_a_report_with_the_network_section():
    nodes = evalcluster.load_results([RAW / "eval-2gpu.json"])
    md = evalcluster.build_report(nodes, raw_dir="raw-2026-11-30-2gpu", access="device tool")
    assert "## Network" in md and "NVLink: peak busbw 327.3 GB/s at 1 GiB" in md
    # the collective sweep, NVLink and P2P disabled, is in the report's Network section
    assert "Intra-node all-gather benchmark" in md and "Intra-node reduce-scatter benchmark" in md
    assert "peak busbw 28.3 GB/s at 1 GiB" in md
    probe = json.loads((RAW / "node_health_probe-2gpu.json").read_text())
    assert probe["allreduce"]["ranks"] == 2 and all(r["correct"] for r in probe["allreduce"]["rows"])


def test_the_committed_2gpu_report_passes_the_report_rules():
    from ai4s_graph.tools.cluster.report_check import check_file

    rep = REPO / "reports" / "h200-2026-11-30-0946Z.md"
    assert check_file(rep) == []
    text = rep.read_text()
    assert "NVIDIA H200 × 2" in text and "peak busbw 327.3 GB/s at 1 GiB" in text
