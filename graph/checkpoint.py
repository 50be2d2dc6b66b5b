"""Checkpointers: SQLite (``langgraph-checkpoint-sqlite``) by default, Postgres when a
``postgresql://`` URL is given (optional extra ``ai4s-graph[postgres]``)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Iterator

from langgraph.checkpoint.base import BaseCheckpointSaver

from ..tools.errors import ToolUnavailableError


def state_dir() -> Path:
    """``$AI4S_STATE_DIR``, default ``~/.local/state/ai4s-graph``: where checkpoints live."""
    return Path(os.environ.get("AI4S_STATE_DIR") or Path.home() / ".local" / "state" / "ai4s-graph")


def default_db() -> str:
    """The default checkpoint database: ``<state dir>/checkpoints.sqlite``."""
    return str(state_dir() / "checkpoints.sqlite")


@contextlib.contextmanager
def open_checkpointer(url: str | None = None) -> Iterator[BaseCheckpointSaver]:
    """Yield a checkpointer for ``url``: a ``postgresql://…`` URL opens a Postgres saver, anything
    else is a SQLite file path (created with its folder). Raises :class:`ToolUnavailableError`
    when Postgres is asked for but its extra is not installed."""
    url = url or default_db()
    if url.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError:
            raise ToolUnavailableError("Postgres checkpoints need: pip install 'ai4s-graph[postgres]'") from None
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(url.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()
