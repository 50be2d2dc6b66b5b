"""``ai4s-graph eval-cluster`` as a small LangGraph: measure -> inter_node -> report -> check.

``measure`` runs :mod:`ai4s_graph.tools.cluster.gpu_bench` on every node given (in-process for this host, srun
for the others) or loads results measured elsewhere (``--from-json``); ``inter_node`` runs the
all-reduce across every node when there are two or more (seed 003: omitted on one node);
``report`` writes the dated markdown report and raw JSON; ``check`` runs the report checker
(:mod:`ai4s_graph.tools.cluster.report_check`) on what was written. Each node ends with a STATUS line.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from .schema import EvalRequest, EvalState
from ..runtime import node
from ...state import Outcome, StatusLine
from ...tools.cluster import evalcluster as E
from ...tools.errors import InputError


@node("measure")
def measure_node(state: EvalState):
    """Measure every node (environment, MAMF/MSMF, 16384³ matmul ×3, intra-node all-reduce, fio), or load the results from ``--from-json``."""
    r = state["request"]
    if r.from_json:
        res = E.load_results(r.from_json)
        return {"results": res}, StatusLine.make(Outcome.ok, f"loaded {len(res)} node result(s)")
    nodes = r.nodes or ["localhost"]
    argv = E.eval_args(**r.bench_args)
    res = [E.measure_node(n, argv) for n in nodes]
    gaps = sum(len(x.get("gaps", [])) for x in res)
    st = StatusLine.make(Outcome.partial if gaps else Outcome.ok, f"{len(res)} node(s) measured; {gaps} gap(s)")
    return {"results": res}, st


@node("inter_node")
def inter_node(state: EvalState):
    """Inter-node all-reduce bus bandwidth over payload sizes with ≥ 2 nodes; with one node there is no inter-node section (seed 003)."""
    r = state["request"]
    res = state.get("results") or []
    if len(res) < 2 or r.from_json:
        return {"inter": None}, StatusLine.make(Outcome.ok, "one node: no inter-node all-reduce (seed 003)" if len(res) < 2
                                                else "results loaded from JSON")
    ngpu = len(res[0]["env"].get("gpus") or [])
    inter = E.inter_node_allreduce([x["node"] for x in res], ngpu, r.bench_args.get("ar_max", "4GiB"))
    return {"inter": inter}, StatusLine.make(Outcome.ok, f"inter-node all-reduce over {inter.get('ranks')} ranks")


@node("report")
def report_node(state: EvalState):
    """Write the dated markdown report (seed 003 report rules). Raises InputError when nothing was measured."""
    r = state["request"]
    if not state.get("results"):
        raise InputError("no eval results to report")
    path, viol = E.write_report(state["results"], r.reports_dir, date=r.date, access=r.access,
                                inter=state.get("inter"), extra_gaps=r.extra_gaps, nccl_env_source=r.nccl_env_source)
    return {"report_path": str(path), "violations": [str(v) for v in viol]}, StatusLine.make(Outcome.ok, f"wrote {path.name}")


@node("check")
def check_node(state: EvalState):
    """Run the report checker (tools/report_check.py); STATUS=fail names the first violated rule."""
    v = state.get("violations", [])
    if v:
        return {}, StatusLine.make(Outcome.fail, f"{len(v)} report rule violation(s); first: {v[0]}")
    return {}, StatusLine.make(Outcome.ok, "report passes every mechanical rule")


def build_eval_graph():
    """The compiled eval-cluster graph."""
    g = StateGraph(EvalState)
    for name, fn in (("measure", measure_node), ("inter_node", inter_node), ("report", report_node), ("check", check_node)):
        g.add_node(name, fn)
    g.add_edge(START, "measure")
    g.add_edge("measure", "inter_node")
    g.add_edge("inter_node", "report")
    g.add_edge("report", "check")
    g.add_edge("check", END)
    return g.compile()


def run_eval_graph(*, nodes: list[str], from_json: list[str], reports_dir: str, date: str, access: str,
                   extra_gaps: list[str] | None = None, nccl_env_source: str = "the environment the benchmarks ran in",
                   bench_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the eval graph; the final state holds ``report_path`` and ``violations`` (empty when
    the report passes the checker) and every node's STATUS line under ``statuses``."""
    req = EvalRequest(out_dir=reports_dir, reports_dir=reports_dir, nodes=nodes, from_json=from_json, date=date,
                      access=access, extra_gaps=extra_gaps or [], nccl_env_source=nccl_env_source,
                      bench_args=bench_args or {})
    return build_eval_graph().invoke({"request": req})
