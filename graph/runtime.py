"""What every node of every graph shares: the node wrapper that ends each node with its STATUS
line, the node journal, and the fault-injection hook the crash/resume tests use. (The analysis
graph's request lives in :mod:`ai4s_graph.graph.analysis.configuration`.)
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from pydantic import BaseModel

from ..state import Outcome, StatusLine
from ..tools.errors import Ai4sError


def merge_dicts(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """State reducer of every graph: shallow merge of two dict updates, right wins."""
    return {**(a or {}), **(b or {})}


def journal_path(out_dir: str | Path) -> Path:
    """The node journal: one JSON line per node start and end, in ``<out_dir>/.ai4s-graph/``."""
    return Path(out_dir) / ".ai4s-graph" / "node_journal.jsonl"


def journal(out_dir: str | Path, node: str, event: str, **extra: Any) -> None:
    """Append one event (``start`` | ``end`` | ``error``) for ``node`` to the node journal."""
    p = journal_path(out_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    rec = {"t": time.time(), "node": node, "event": event, "pid": os.getpid(), **extra}
    with p.open("a") as f:
        f.write(json.dumps(rec) + "\n")


def read_journal(out_dir: str | Path) -> list[dict[str, Any]]:
    """All journal records, oldest first (empty when there is no journal)."""
    p = journal_path(out_dir)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def _fault_hook(node: str) -> None:
    """Test hook: ``AI4S_FAULT=exit-before:<node>`` kills the process (``os._exit(137)``, like
    SIGKILL: no cleanup, no checkpoint of this step) when ``node`` starts;
    ``AI4S_FAULT=sleep-before:<node>:<seconds>`` sleeps there, so a test can kill it for real."""
    spec = os.environ.get("AI4S_FAULT", "")
    for item in filter(None, spec.split(",")):
        parts = item.split(":")
        if len(parts) >= 2 and parts[1] == node:
            if parts[0] == "exit-before":
                sys.stdout.flush()
                os._exit(137)
            if parts[0] == "sleep-before" and len(parts) == 3:
                time.sleep(float(parts[2]))
            if parts[0] == "raise-before":
                raise RuntimeError(f"injected fault before {node}")


NodeFn = Callable[[Any], tuple[dict[str, Any], StatusLine]]


def out_dir_of(state: Mapping[str, Any]) -> str:
    """The output directory of a run: ``state["request"].out_dir`` (a typed request) or
    ``state["request"]["out_dir"]`` (the graphs whose request is still a plain dict)."""
    req = state["request"]
    return req.out_dir if isinstance(req, BaseModel) else req["out_dir"]


def node(name: str) -> Callable[[NodeFn], Callable[[Any], dict[str, Any]]]:
    """Wrap a node body ``fn(state) -> (update, StatusLine)`` as a LangGraph node.

    The wrapper journals start and end, records the STATUS line under ``statuses[name]`` in
    the update, and turns an :class:`Ai4sError` (bad input, unreachable service) into
    ``STATUS=fail`` with the error's one-line message plus a ``missing`` entry, so the graph
    goes on and the report says what is missing. Any other exception propagates: LangGraph
    keeps the checkpoint of the completed nodes, and re-running the same command resumes at
    this node."""

    def deco(fn: NodeFn) -> Callable[[Any], dict[str, Any]]:
        @functools.wraps(fn)
        def wrapped(state: Any) -> dict[str, Any]:
            out_dir = out_dir_of(state)
            _fault_hook(name)
            journal(out_dir, name, "start")
            try:
                update, status = fn(state)
            except Ai4sError as e:
                update = {"missing": [f"{name}: {e}"]}
                status = StatusLine.make(Outcome.fail, str(e))
            except Exception as e:
                journal(out_dir, name, "error", error=f"{type(e).__name__}: {e}")
                raise
            update = dict(update)
            update["statuses"] = {**update.get("statuses", {}), name: status.format()}
            journal(out_dir, name, "end", status=status.format())
            return update

        wrapped.node_name = name  # type: ignore[attr-defined]
        return wrapped

    return deco
