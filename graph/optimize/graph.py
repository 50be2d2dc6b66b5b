"""The perf-optimizer loop as a checkpointed LangGraph ``StateGraph`` (``ai4s-graph optimize``).

::

    init -> pick --(baseline / lever)--> submit -> wait --infra failure--> submit (exclude the bad node)
             ^                                        |--COMPLETED--> extract -> guard -> decide
             |                                        '--lever crashed-----------------> decide
             |                                     decide --replicate / more baseline runs--> submit
             '--- analyse <--(baseline / accepted, --analyze)-- record <---- decide
             '------------------------------------------------- record
    pick --budget spent / no lever left / stop--> report -> END

Jobs run on an executor (``--executor slurm``: sbatch/sacct; ``local``: a subprocess on this
machine), through the one job lifecycle of :mod:`ai4s_graph.tools.slurm.jobs`.

State is checkpointed after every node with ``SqliteSaver`` in ``loop-<uuid>/checkpoint.sqlite``
(thread id = loop id). ``submit`` and ``wait`` are separate nodes, so the job id is in a
checkpoint before anything waits: a loop killed while waiting resumes in ``wait`` on the same job
and never submits it again (``submit`` also checks the ``submissions.jsonl`` ledger for the
narrow window between sbatch returning and the checkpoint). The node bodies are in
``graph/optimize/nodes/`` (one module per concern).
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, TypedDict

from langgraph.graph import END, START, StateGraph

from . import nodes as N
from ..checkpoint import CheckpointRefusedError, check_state, sqlite_saver
from ..runtime import node
from ..analysis.schema import merge_dicts
from ...state.loop import LoopRequest
from ...tools.levers import catalog as L
from ...tools.errors import InputError
from ...tools.jsonguard import load_file

CHECKPOINT_DB = "checkpoint.sqlite"
REQUEST_FILE = "loop.json"
RECURSION_LIMIT = 10_000


class OptimizeState(TypedDict, total=False):
    """Keys of the loop state (all JSON-able).

    - ``request``: :class:`~ai4s_graph.state.loop.LoopRequest` dict plus ``out_dir`` (= loop dir);
    - ``catalog``: the working catalog copy (statuses/evidence updated as the loop goes);
    - ``applied``: accepted levers in order; ``tried``: levers tried in this loop;
    - ``baseline``: ``{values, mean, noise_pct, job_ids, nodes_list}``;
    - ``best``: ``{value, levers, run, job_ids, iteration}``;
    - ``iteration``: the number of the next/current iteration (0 = baseline);
    - ``levers_done``, ``node_hours_used``: the budgets' counters;
    - ``current``: the iteration in flight (kind, lever, change, runs, pending ``job_id``,
      ``attempt``, infra retries, guards, the record once decided) or None;
    - ``analysis``: the verified bottleneck of the best run (``bottleneck``, ``recommended``,
      ``predictions``, ``report``, ``history`` of every analysis);
    - ``route``: where the last node sends the loop; ``stop``: why the loop stops;
    - ``statuses``: node -> its last STATUS line; ``missing``: the error of the node that stopped
      the loop (an :class:`~ai4s_graph.tools.errors.Ai4sError` turned into ``STATUS=fail``).
    """

    request: dict[str, Any]
    catalog: dict[str, Any]
    applied: list[str]
    tried: list[str]
    baseline: dict[str, Any] | None
    best: dict[str, Any] | None
    iteration: int
    levers_done: int
    node_hours_used: float
    current: dict[str, Any] | None
    route: str
    stop: str | None
    analysis: dict[str, Any] | None
    statuses: Annotated[dict[str, str], merge_dicts]
    missing: list[str]  # last write wins: a resume clears it


def _route(state: dict[str, Any]) -> str:
    return state.get("route") or "report"


def _after_init(state: dict[str, Any]) -> str:
    # a node that failed with an Ai4sError (bad catalog, unsafe value) stops the loop right there
    if not state.get("catalog"):
        return "end"
    return "pick"


def _guarded(route_names: set[str]) -> Callable[[dict[str, Any]], str]:
    def r(state: dict[str, Any]) -> str:
        # a node that raised an Ai4sError left ``route`` unchanged and wrote ``missing``: stop
        nxt = _route(state)
        return nxt if nxt in route_names else "report"

    return r


def build_graph(picker: L.LeverPicker | None = None) -> StateGraph:
    """The (uncompiled) loop graph. ``picker``: the lever picker plugged into ``pick`` (None =
    :func:`ai4s_graph.tools.levers.catalog.rule_picker`; an LLM picker plugs in here)."""
    g = StateGraph(OptimizeState)
    g.add_node("init", node("init")(N.init_body))
    g.add_node("pick", node("pick")(N.make_pick_body(picker)))
    g.add_node("submit", node("submit")(_stop_on_error(N.submit_body)))
    g.add_node("wait", node("wait")(N.wait_body))
    g.add_node("extract", node("extract")(N.extract_body))
    g.add_node("guard", node("guard")(N.guard_body))
    g.add_node("decide", node("decide")(N.decide_body))
    g.add_node("record", node("record")(N.record_body))
    g.add_node("analyse", node("analyse")(N.analyse_body))
    g.add_node("report", node("report")(N.report_body))
    g.add_edge(START, "init")
    g.add_conditional_edges("init", _after_init, {"pick": "pick", "end": END})
    g.add_conditional_edges("pick", _guarded({"submit", "report"}), {"submit": "submit", "report": "report"})
    g.add_conditional_edges("submit", _guarded({"wait", "report"}), {"wait": "wait", "report": "report"})
    g.add_conditional_edges("wait", _guarded({"submit", "extract", "decide", "report"}),
                            {"submit": "submit", "extract": "extract", "decide": "decide", "report": "report"})
    g.add_conditional_edges("extract", _guarded({"guard", "decide"}), {"guard": "guard", "decide": "decide", "report": "report"})
    g.add_edge("guard", "decide")
    g.add_conditional_edges("decide", _guarded({"submit", "record"}), {"submit": "submit", "record": "record", "report": "report"})
    g.add_conditional_edges("record", _guarded({"pick", "analyse"}), {"pick": "pick", "analyse": "analyse",
                                                                      "report": "report"})
    g.add_edge("analyse", "pick")
    g.add_edge("report", END)
    return g


def _stop_on_error(fn):
    """``submit`` failing with an :class:`Ai4sError` (sbatch refused, unsafe value) must stop the
    loop, not spin: route to the report with the error as the stop reason."""
    from ...tools.errors import Ai4sError

    def wrapped(state: dict[str, Any]):
        try:
            return fn(state)
        except Ai4sError as e:
            from ...state import Outcome, StatusLine

            return ({"stop": f"submit failed: {e}", "route": "report", "missing": [f"submit: {e}"]},
                    StatusLine.make(Outcome.fail, str(e)))

    wrapped.__name__ = getattr(fn, "__name__", "submit")
    wrapped.__doc__ = fn.__doc__
    return wrapped


@contextmanager
def compiled(loop_dir: str | Path, picker: L.LeverPicker | None = None) -> Iterator[Any]:
    """The compiled graph with its SQLite checkpointer in ``<loop_dir>/checkpoint.sqlite``, read
    through the strict serializer of :mod:`ai4s_graph.graph.checkpoint` (a crafted entry refuses
    the checkpoint with :class:`~ai4s_graph.graph.checkpoint.CheckpointRefusedError`, never runs
    code); a link at the database is refused (:class:`~ai4s_graph.state.publish.UnsafePathError`)."""
    saver, conn = sqlite_saver(Path(loop_dir) / CHECKPOINT_DB, root=loop_dir)
    try:
        yield build_graph(picker).compile(checkpointer=saver)
    finally:
        conn.close()


def new_loop(
    *, model: str, catalog_path: str | Path, loop_root: str | Path = "ai4s-loops", iterations: int = 3,
    node_hours: float | None = None, cluster_config: str | None = None, report: str | None = None,
    baseline_runs: int = 2, wait_timeout_s: float = 900.0, extra_env: dict[str, Any] | None = None,
    loop_id: str | None = None, executor: str = "slurm", shared_dir: str | Path | None = None,
    analyze: bool = False, pin_placement: bool = True,
) -> LoopRequest:
    """Create ``<loop_root>/loop-<uuid>/`` and its ``loop.json`` (the request, for ``--resume``).

    Validates the catalog first (an unsafe lever value raises :class:`InputError` here, before the
    loop directory exists or anything is submitted) and reads ``bottleneck.klass`` and the
    recommended levers from ``report`` when given. ``executor``: ``slurm`` or ``local``; the local
    executor's runs go under ``shared_dir`` (default ``$AI4S_SHARED_DIR``, else
    ``<loop_root>/shared``) unless a cluster config names one."""
    if executor not in ("slurm", "local"):
        raise InputError(f"unknown executor {executor!r} (slurm or local)")
    L.load_catalog(catalog_path)
    bottleneck, recommended = L.read_report_hint(report) if report else (None, [])
    lid = loop_id or uuid.uuid4().hex[:8]
    d = Path(loop_root).resolve() / f"loop-{lid}"
    d.mkdir(parents=True, exist_ok=False)
    req = LoopRequest(
        loop_id=lid, loop_dir=str(d), model=model, catalog_path=str(Path(catalog_path).resolve()),
        iterations=iterations, node_hours=node_hours, baseline_runs=baseline_runs,
        cluster_config=str(Path(cluster_config).resolve()) if cluster_config else None,
        report=str(Path(report).resolve()) if report else None, bottleneck=bottleneck,
        recommended=recommended, wait_timeout_s=wait_timeout_s, extra_env=extra_env or {},
        executor=executor, analyze=analyze, pin_placement=pin_placement,
        shared_dir=str(Path(shared_dir or os.environ.get("AI4S_SHARED_DIR") or Path(loop_root) / "shared").resolve())
        if executor == "local" and not cluster_config else None,
    )
    L.write_json(d / REQUEST_FILE, req.model_dump(mode="json"))
    return req


def find_loop(resume: str | Path, loop_root: str | Path = "ai4s-loops") -> Path:
    """The loop directory named by ``--resume``: a path, or ``loop-<uuid>`` / ``<uuid>`` under the
    loop root. Raises :class:`InputError` when there is no such loop."""
    p = Path(resume)
    cands = [p, Path(loop_root) / p, Path(loop_root) / f"loop-{p}"]
    for c in cands:
        if (c / REQUEST_FILE).is_file():
            return c.resolve()
    raise InputError(f"no loop {resume} (looked for {REQUEST_FILE} in {', '.join(str(c) for c in cands)})")


def load_request(loop_dir: str | Path) -> LoopRequest:
    """The saved request of a loop directory. Raises :class:`InputError` (one line) when
    ``loop.json`` is not JSON within the bounds of :mod:`ai4s_graph.tools.jsonguard` or not a
    loop request."""
    p = Path(loop_dir) / REQUEST_FILE
    try:
        return LoopRequest.model_validate(load_file(p))
    except ValueError as e:  # pydantic's ValidationError
        raise InputError(f"malformed {p}: {' '.join(str(e).split())[:160]}") from None


def run_loop(req: LoopRequest, *, picker: L.LeverPicker | None = None,
             on_status: Callable[[str, str], None] | None = None, resume: bool = False) -> dict[str, Any]:
    """Run (or resume) the loop to the end and return the final state values.

    ``on_status(node, status_line)`` is called as each node ends (the CLI prints it). On
    ``resume`` the graph continues from its last checkpoint: finished iterations are not re-run
    and a submitted job is waited for, not submitted again; a loop that stopped on
    ``TIMEOUT_WAITING`` waits for the same job again (with ``req``'s wait timeout, so the caller
    may raise it); a loop that already finished does nothing. Raises
    :class:`~ai4s_graph.graph.checkpoint.CheckpointRefusedError` for a checkpoint that does not
    deserialize to the loop's types (nothing is run)."""
    cfg = {"configurable": {"thread_id": req.loop_id}, "recursion_limit": RECURSION_LIMIT}
    with compiled(req.loop_dir, picker) as app:
        where = str(Path(req.loop_dir) / CHECKPOINT_DB)
        try:
            snap = app.get_state(cfg)
            check_state(dict(snap.values), OptimizeState, where)  # every key holds the type the loop stores
            saved = (snap.values or {}).get("request")
            if saved is not None and (saved.get("out_dir") != req.loop_dir or saved.get("loop_id") != req.loop_id):
                raise CheckpointRefusedError(f"refused checkpoint {where}: its request is not this loop's "
                                             f"({req.loop_id} in {req.loop_dir})")
        except CheckpointRefusedError:
            raise
        except (TypeError, AttributeError, KeyError, ValueError, IndexError) as e:  # not a LangGraph checkpoint
            raise CheckpointRefusedError(f"refused checkpoint {where}: it does not deserialize to a checkpoint "
                                         f"({type(e).__name__})") from None
        started = bool(snap.values)
        vals = snap.values or {}
        cur = vals.get("current") or {}
        if resume and started and not snap.next and cur.get("job_id"):
            # the loop stopped while a job was in flight (TIMEOUT_WAITING -- the seed says surface
            # it and stop -- or sacct unreachable): a resume waits for that same job again, never
            # a new submission
            app.update_state(cfg, {"stop": None, "route": "wait", "missing": [],
                                   "request": {**req.model_dump(mode="json"), "out_dir": req.loop_dir}},
                             as_node="submit")
            snap = app.get_state(cfg)
        if resume and started and not snap.next:
            inp = None  # finished: nothing to do
        elif started:
            inp = None  # resume from the checkpoint
        else:
            inp = {"request": {**req.model_dump(mode="json"), "out_dir": req.loop_dir}, "statuses": {}, "missing": []}
        if inp is not None or snap.next:
            for chunk in app.stream(inp, cfg, stream_mode="updates", durability="sync"):
                for name, upd in chunk.items():
                    if on_status and isinstance(upd, dict) and name in (upd.get("statuses") or {}):
                        on_status(name, upd["statuses"][name])
        final = app.get_state(cfg).values
    return dict(final)
