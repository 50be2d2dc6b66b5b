"""The analysis state machine of ``ai4s-graph run``::

    START → launcher ─(submit)→ wait_for_job ─(exit 42)→ launcher (re-submit once, --exclude)
               │                     │ (TIMEOUT_WAITING) → END
               ├─ Send × rank ─→ trace_rank ─→ trace_analyst → trace_verifier ─┐
               └──────────────→ telemetry_analyst ─────────────→ telemetry_verifier ────┴→ synthesizer → END

With ``--slurm-array`` (or ≥ 64 ranks and a cluster config) one ``trace_array`` task replaces the
per-rank tasks: the ranks are analysed as a SLURM job array on the cluster and gathered back.
The two analyst branches run in parallel (one LangGraph superstep, a thread each; the rank traces
in worker processes), as do the two verifiers; the synthesizer waits for both verifiers.
Where a claim is made: ``nodes/*_analyst.py``; checked: ``nodes/*_verifier.py``; reported:
``nodes/synthesizer.py``. The state is :class:`~.schema.AnalysisState` (typed values); the request
is read-only (:mod:`.configuration`).
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from .nodes import launcher_submit
from .nodes.launcher import launcher
from .nodes.telemetry_analyst import telemetry_analyst
from .nodes.telemetry_verifier import telemetry_verifier
from .nodes.synthesizer import synthesizer
from .nodes.trace_analyst import fan_out_ranks, trace_rank, trace_analyst
from .nodes.trace_array import trace_array
from .nodes.trace_verifier import trace_verifier
from .schema import AnalysisState

#: The most threads LangGraph's pool may hold for a run (the run's ``max_concurrency``). LangGraph
#: runs a superstep's tasks on that pool and hands each finished task's checkpoint write to the same
#: pool: with its default ``min(32, cores + 4)`` threads, a superstep of more tasks (the telemetry
#: analyst and 6 rank traces on 2 cores) queued the telemetry analyst's write behind the rank tasks
#: still waiting for a thread, so a stop while they ran lost a result that had been printed and the
#: node ran again on resume. A pool this large starts a thread only when none is idle (the rank
#: tasks wait on the worker processes, which bound the work): every task starts at once and every
#: write finds a thread.
TASK_THREADS = 1024

NODES = ("launcher", "wait_for_job", "trace_rank", "trace_analyst", "telemetry_analyst",
         "trace_verifier", "telemetry_verifier", "synthesizer")


def _analyze(state: AnalysisState) -> list[Send]:
    """Fan out to both analyst branches: the telemetry analyst first, then one Send per rank trace.

    LangGraph starts a superstep's tasks in the order sent. On its default pool of ``min(32, cores
    + 4)`` threads, with the telemetry analyst last, 8 rank traces on 2 cores kept it (and the
    VictoriaMetrics start) waiting until a rank finished (measured: it started 15 s into a 24 s
    run); ``ai4s-graph run`` now gives every task a thread (:data:`TASK_THREADS`), and the order
    still starts the telemetry analyst first."""
    return [Send("telemetry_analyst", state)] + fan_out_ranks(state)


def route_after_launcher(state: AnalysisState) -> Any:
    """Stop (END) when the launcher says so; wait for a submitted job; else analyse."""
    if state.get("stop"):
        return END
    submit = state["request"].submit
    if not state.get("manifest") and not submit:
        return "synthesizer"  # the launcher failed (unknown job id, bad manifest): report what is missing
    if submit and not state.get("manifest"):
        job = state.get("job")
        if job is None or not job.jobid:
            return "synthesizer"  # nothing was submitted (a refused lever value, no sbatch): report why
        return "wait_for_job"
    return _analyze(state)


def build_analysis_graph() -> StateGraph:
    """The uncompiled graph (compile it with a checkpointer)."""
    g = StateGraph(AnalysisState)
    g.add_node("launcher", launcher)
    g.add_node("trace_rank", trace_rank)
    g.add_node("trace_array", trace_array)
    g.add_node("trace_analyst", trace_analyst)
    g.add_node("telemetry_analyst", telemetry_analyst)
    g.add_node("trace_verifier", trace_verifier)
    g.add_node("telemetry_verifier", telemetry_verifier)
    g.add_node("synthesizer", synthesizer)
    g.add_edge(START, "launcher")
    # submit mode: wait for the job, re-submit once after exit 42
    g.add_node("wait_for_job", launcher_submit.wait_for_job)

    def route_after_wait(state: AnalysisState) -> Any:
        r = launcher_submit.route_after_wait(state)
        if r == "launcher":
            return "launcher"
        if r == "stop":
            return END
        return _analyze(state)

    g.add_conditional_edges("wait_for_job", route_after_wait, ["launcher", "trace_rank", "trace_array",
                                                               "trace_analyst", "telemetry_analyst", END])
    targets = ["wait_for_job", "trace_rank", "trace_array", "trace_analyst", "telemetry_analyst",
               "synthesizer", END]
    g.add_conditional_edges("launcher", route_after_launcher, targets)
    g.add_edge("trace_rank", "trace_analyst")
    g.add_edge("trace_array", "trace_analyst")
    g.add_edge("trace_analyst", "trace_verifier")
    g.add_edge("telemetry_analyst", "telemetry_verifier")
    g.add_edge(["trace_verifier", "telemetry_verifier"], "synthesizer")
    g.add_edge("synthesizer", END)
    return g
