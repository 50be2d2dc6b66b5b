"""``ai4s-graph probe`` as a small LangGraph: mounts -> host_memory -> gpu -> gather.

Each node measures one thing on this node through :mod:`ai4s_graph.tools.cluster.node_probe` and ends with its
STATUS line (``@node``); ``gather`` writes this node's part, merges every part under the output
directory (judging each node against the median of the nodes probed together) and sets the exit
code: 42 when a node is bad (seed 000 lesson 19). ``--gather DIR`` starts at ``gather``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph

from .schema import ProbeRequest, ProbeState
from ..runtime import node
from ...state import Outcome, StatusLine
from ...tools.cluster import node_probe as P
from ...tools.slurm.health import BAD_NODE_EXIT_CODE


@node("mounts")
def mounts_node(state: ProbeState):
    """Write, read back and remove a file on each mount (home, shared dir, container image path); a failure names the mount (seed 000 lessons 1, 19)."""
    r = state["request"]
    res = [P.probe_mount(label, path, r.node) for label, path in r.mounts]
    bad = [m["label"] for m in res if not m["ok"]]
    st = StatusLine.make(Outcome.partial if bad else Outcome.ok,
                         f"mount write failed: {', '.join(bad)}" if bad else f"{len(res)} mounts writable")
    # lesson 26: the RoCE GID tables (and the GID index NCCL is told to use), compared across nodes in gather
    env = {k: os.environ[k] for k in ("NCCL_IB_GID_INDEX", "NCCL_IB_HCA") if k in os.environ}
    return {"part": {"mounts": res, "roce_gids": P.roce_gid.read_gid_tables(), "env": env}}, st


@node("host_memory")
def host_memory_node(state: ProbeState):
    """STREAM-style host memory bandwidth (GB/s) per NUMA domain and across all (seed 000 lesson 19: dual-NUMA degradation)."""
    r = state["request"]
    doms, notes = P.stream_domains(r.stream_elems, r.stream_ntimes)
    triad = ", ".join(f"{d} {v['triad']:.1f}" for d, v in doms.items())
    return {"part": {"stream": doms}, "skipped": notes}, StatusLine.make(Outcome.ok, f"STREAM triad GB/s: {triad}")


@node("gpu")
def gpu_node(state: ProbeState):
    """GPU kernel launch latency (µs per empty launch), device-to-device copy (GB/s) and a single-node all-reduce; skipped with a stated reason when there is no GPU or one GPU."""
    r = state["request"]
    if not r.gpu:
        return {"skipped": ["gpu: --no-gpu given"]}, StatusLine.make(Outcome.ok, "GPU checks not requested")
    g = P.gpu_bench.probe_gpus(allreduce=True)
    if "skipped" in g:
        return {"part": {"gpu": g}, "skipped": [f"gpu: {g['skipped']}"]}, StatusLine.make(Outcome.partial, g["skipped"])
    sk = [f"allreduce: {g['allreduce']['skipped']}"] if "skipped" in g.get("allreduce", {}) else []
    lat = ", ".join(f"{x.get('launch_us', float('nan')):.2f}" for x in g["gpus"])
    return {"part": {"gpu": g}, "skipped": sk}, StatusLine.make(Outcome.ok, f"{len(g['gpus'])} GPU(s); launch µs {lat}")


@node("gather")
def gather_node(state: ProbeState):
    """Write this node's part, merge the parts of every node probed together, judge each against their median, and write node_health_probe.txt (exit code 42 names the bad nodes)."""
    r = state["request"]
    base = P.load_baseline(r.baseline) if r.baseline else None
    if not r.gather_only:
        part = {"schema": "ai4s-probe/1", "node": r.node, "started_utc": r.started_utc,
                "skipped": state.get("skipped", []), **state.get("part", {})}
        part.setdefault("mounts", [])
        part.setdefault("stream", {})
        part["elapsed_s"] = round(time.time() - r.t0, 2)
        P.write_part(r.out_dir, part)
        procid = os.environ.get("SLURM_PROCID")
        if procid not in (None, "0") and int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1:
            rows = P.evaluate([part])
            bad = P.bad_nodes(rows)
            code = BAD_NODE_EXIT_CODE if bad else 0
            st = StatusLine.make(Outcome.fail if bad else Outcome.ok, f"part written; task {procid} leaves gathering to task 0")
            return {"rows": [vars(x) for x in rows], "bad_nodes": bad, "exit_code": code, "txt": ""}, st
        expected = P.slurm_nodes() if procid is not None else [r.node]
        rows, bad = P.gather(r.out_dir, expected, wait_s=120 if len(expected) > 1 else 0, baseline=base)
    else:
        rows, bad = P.gather(r.out_dir, baseline=base)
    notes = json.loads((Path(r.out_dir) / P.PROBE_JSON).read_text()).get("not_checked", [])
    code = BAD_NODE_EXIT_CODE if bad else 0
    # a check no reference could judge is said out loud; it lowers STATUS to partial only when the
    # user asked for that reference (--baseline given and still not enough)
    outcome = Outcome.fail if bad else (Outcome.partial if notes and r.baseline else Outcome.ok)
    st = StatusLine.make(outcome, (f"BAD_NODES={','.join(bad)}" if bad else "all nodes passed")
                         + (f"; {len(notes)} check(s) not checked" if notes else ""))
    return {"rows": [vars(x) for x in rows], "bad_nodes": bad, "exit_code": code, "not_checked": notes,
            "txt": str(os.path.join(r.out_dir, P.PROBE_FILE))}, st


def build_probe_graph():
    """The compiled probe graph (no checkpointer: the probe is a 30-second prologue)."""
    g = StateGraph(ProbeState)
    g.add_node("mounts", mounts_node)
    g.add_node("host_memory", host_memory_node)
    g.add_node("gpu", gpu_node)
    g.add_node("gather", gather_node)
    g.add_conditional_edges(START, lambda s: "gather" if s["request"].gather_only else "mounts",
                            {"gather": "gather", "mounts": "mounts"})
    g.add_edge("mounts", "host_memory")
    g.add_edge("host_memory", "gpu")
    g.add_edge("gpu", "gather")
    g.add_edge("gather", END)
    return g.compile()


def run_probe_graph(out_dir: str, node: str | None = None, mounts: list[str] | None = None, gpu: bool = True,
                    gather_only: bool = False, stream_elems: int = 1 << 25, stream_ntimes: int = 6,
                    baseline: str | None = None) -> dict[str, Any]:
    """Run the probe graph; returns the final state (``exit_code`` 42 names bad nodes in
    ``bad_nodes``; ``txt`` is the merged node_health_probe.txt). ``mounts`` are ``LABEL=PATH``
    strings (default :func:`ai4s_graph.tools.cluster.node_probe.default_mounts`). Raises InputError for a
    malformed ``--mounts`` entry."""
    os.makedirs(out_dir, exist_ok=True)
    pairs = [P.parse_mount_arg(m) for m in mounts] if mounts else P.default_mounts()
    req = ProbeRequest(out_dir=out_dir, node=P.node_name(node), mounts=pairs, gpu=gpu, gather_only=gather_only,
                       stream_elems=stream_elems, stream_ntimes=stream_ntimes, t0=time.time(),
                       started_utc=P.gpu_bench.now_utc(), baseline=baseline)
    return build_probe_graph().invoke({"request": req})
