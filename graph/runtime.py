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
from ..state.publish import UnsafePathError, append
from ..tools.errors import Ai4sError


def merge_dicts(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """State reducer of every graph: shallow merge of two dict updates, right wins."""
    return {**(a or {}), **(b or {})}


def journal_path(out_dir: str | Path) -> Path:
    """The node journal: one JSON line per node start and end, in ``<out_dir>/.ai4s-graph/``."""
    return Path(out_dir) / ".ai4s-graph" / "node_journal.jsonl"


def journal(out_dir: str | Path, node: str, event: str, **extra: Any) -> None:
    """Append one event (``start`` | ``end`` | ``error``) for ``node`` to the node journal
    (:func:`ai4s_graph.state.publish.append`: a link at the journal or at ``.ai4s-graph/`` is
    refused with :class:`~ai4s_graph.state.publish.UnsafePathError`, never written through)."""
    rec = {"t": time.time(), "node": node, "event": event, "pid": os.getpid(), **extra}
    append(journal_path(out_dir), json.dumps(rec) + "\n", root=out_dir)


def read_journal(out_dir: str | Path) -> list[dict[str, Any]]:
    """All journal records, oldest first (empty when there is no journal); a line that is not
    JSON (a torn write) is skipped."""
    p = journal_path(out_dir)
    if not p.exists():
        return []
    out = []
    for line in p.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except (ValueError, RecursionError):  # a torn last line (killed mid-write), or not ours
            continue
    return out


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
    the update, and turns an :class:`Ai4sError` (bad input, unreachable service) or an
    :class:`~ai4s_graph.state.publish.UnsafePathError` (a write refused: a link in the output
    directory) into ``STATUS=fail`` with the error's one-line message plus a ``missing`` entry, so
    the graph goes on and the report says what is missing. Any other exception propagates: LangGraph
    keeps the checkpoint of the completed nodes, and re-running the same command resumes at
    this node."""

    def deco(fn: NodeFn) -> Callable[[Any], dict[str, Any]]:
        @functools.wraps(fn)
        def wrapped(state: Any) -> dict[str, Any]:
            out_dir = out_dir_of(state)
            _fault_hook(name)
            try:
                journal(out_dir, name, "start")
                update, status = fn(state)
            except (Ai4sError, UnsafePathError) as e:  # a bad input, or a write refused (a link)
                update = {"missing": [f"{name}: {e}"]}
                status = StatusLine.make(Outcome.fail, str(e))
            except Exception as e:
                try:
                    journal(out_dir, name, "error", error=f"{type(e).__name__}: {e}")
                except OSError:
                    pass  # the journal cannot be written either (disk full): the exception says why
                raise
            update = dict(update)
            update["statuses"] = {**update.get("statuses", {}), name: status.format()}
            try:
                journal(out_dir, name, "end", status=status.format())
            except UnsafePathError:
                pass  # the STATUS line already says why this node failed
            return update

        wrapped.node_name = name  # type: ignore[attr-defined]
        return wrapped

    return deco
