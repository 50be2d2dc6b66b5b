"""Hand-built cross-rank tables for the communication cause tests: the collectives report the
analysis pass hands the causes (``Inputs.collectives``) and the verifier's reader tables
(``Reader.ranks``, ``Reader.collectives``), each number chosen so the answer is known by hand."""

from __future__ import annotations

from typing import Any

from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.state import Manifest
from ai4s_graph.tools.trace import crossrank_check


def rank_row(rank: int, exposed_pct: float, total_us: float = 100_000.0) -> dict[str, Any]:
    """One per-rank row of the collectives report: exposed communication ``exposed_pct`` % of a
    ``total_us`` window."""
    return {"rank": rank, "exposed_comm_pct": exposed_pct, "exposed_comm_us": exposed_pct / 100 * total_us,
            "total_us": total_us}


def group(msg_bytes: float, count: int, latency_us: float, busbw_gbps: float, ctype: str = "allreduce") -> dict[str, Any]:
    """One collective group of the report (summed latency µs, mean busbw GB/s)."""
    return {"collective": ctype, "msg_bytes": msg_bytes, "count": count, "total_latency_us": latency_us,
            "busbw_gbps": busbw_gbps}


def inputs(per_rank: list[dict[str, Any]], groups: list[dict[str, Any]], *, gpu: str = "NVIDIA H200",
           nodes: int = 1, env: dict[str, str] | None = None, waits_ms: dict[int, float] | None = None) -> Inputs:
    """The analyst's inputs of a multi-rank job: its collectives report and manifest."""
    rows = [{"rank": r, "total_wait_us": w * 1e3} for r, w in (waits_ms or {}).items()]
    return Inputs(collectives={"per_rank": per_rank, "groups": groups, "stragglers": {"rows": rows}},
                  manifest=Manifest(jobid="1", gpu=gpu, num_nodes=nodes), env=env or {})


def kernel(ts: float, dur: float, nelems: int, dtype: str = "Float", group_size: int = 2) -> dict[str, Any]:
    """One communication kernel of a :func:`~ai4s_graph.tools.trace.crossrank_check.comm_table`."""
    return {"ts": ts, "end": ts + dur, "dur": dur,
            "args": {"In msg nelems": nelems, "dtype": dtype, "Group size": group_size}}


def reader(timelines: dict[int, float], tables: dict[int, dict[str, list[dict[str, Any]]]] | None = None) -> Reader:
    """The verifier's reader: each rank's timeline (exposed communication %) and, from ``tables``,
    its own cross-rank summary (:func:`crossrank_check.collective_summary`)."""
    ranks = {r: {"timeline": {"exposed_comm_time": {"percent": p}}} for r, p in timelines.items()}
    return Reader(ranks=ranks, collectives=crossrank_check.collective_summary(tables) if tables else {})
