"""What every node of every graph shares: the run request, the node wrapper that ends each node
with its STATUS line, the node journal, and the fault-injection hook the crash/resume tests use.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from urllib.parse import urlparse

from pydantic import BaseModel, Field, field_validator

from ..state import Outcome, StatusLine
from ..tools.errors import Ai4sError


class RunRequest(BaseModel):
    """What the user asked for with ``ai4s-graph run``.

    ``perf_run`` is the directory holding the job's artifacts; ``out_dir`` is where the report,
    manifest (when the run directory is read-only) and plots go; ``compare`` is a second run of the
    same model at another precision (the precision discriminator, seed 000 lesson 13)."""

    jobid: str | None = None
    perf_run: str | None = None
    out_dir: str
    compare: str | None = None
    tsdb_url: str | None = None
    llm: str = "none"  # "none" | "anthropic"
    llm_model: str | None = None
    max_tokens_total: int | None = None
    submit: bool = False
    submit_params: dict[str, Any] = Field(default_factory=dict)
    cluster_config: str | None = None
    wait_timeout_s: float = 3600.0
    workers: int = Field(0, ge=0)  # rank-trace worker processes (0 = automatic)
    slurm_array: bool = False  # analyse the rank traces as a SLURM job array

    @field_validator("tsdb_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        u = urlparse(v)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"--tsdb-url must be an http(s)://host:port URL, not {v!r}")
        return v.rstrip("/")


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


NodeFn = Callable[[dict[str, Any]], tuple[dict[str, Any], StatusLine]]


def node(name: str) -> Callable[[NodeFn], Callable[[dict[str, Any]], dict[str, Any]]]:
    """Wrap a node body ``fn(state) -> (update, StatusLine)`` as a LangGraph node.

    The wrapper journals start and end, records the STATUS line under ``statuses[name]`` in
    the update, and turns an :class:`Ai4sError` (bad input, unreachable service) into
    ``STATUS=fail`` with the error's one-line message plus a ``missing`` entry, so the graph
    goes on and the report says what is missing. Any other exception propagates: LangGraph
    keeps the checkpoint of the completed nodes, and re-running the same command resumes at
    this node."""

    def deco(fn: NodeFn) -> Callable[[dict[str, Any]], dict[str, Any]]:
        @functools.wraps(fn)
        def wrapped(state: dict[str, Any]) -> dict[str, Any]:
            out_dir = state["request"]["out_dir"]
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
