"""Checkpointers: SQLite (``langgraph-checkpoint-sqlite``) by default, Postgres when a
``postgresql://`` URL is given (optional extra ``ai4s-graph[postgres]``).

The graph states hold pydantic models (:mod:`ai4s_graph.state`, each graph's ``schema.py``).
LangGraph's serializer stores them as msgpack extensions and rebuilds them on load; its
deserializer is given an explicit allow-list of exactly those classes (and the enums they hold),
so a checkpoint never imports anything else.

One process at a time per checkpoint thread: :func:`thread_lock` (an ``fcntl.flock`` on a file
beside the checkpoint database)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import inspect
import os
import pkgutil
import socket
import sqlite3
import time
from enum import Enum
from pathlib import Path
from typing import Iterable, Iterator

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

from .. import state as state_pkg

from ..tools.errors import InputError, ToolUnavailableError


def state_dir() -> Path:
    """``$AI4S_STATE_DIR``, default ``~/.local/state/ai4s-graph``: where checkpoints live."""
    return Path(os.environ.get("AI4S_STATE_DIR") or Path.home() / ".local" / "state" / "ai4s-graph")


def default_db() -> str:
    """The default checkpoint database: ``<state dir>/checkpoints.sqlite``."""
    return str(state_dir() / "checkpoints.sqlite")


def allowed_types(types: Iterable[type] = ()) -> list[tuple[str, str]]:
    """``(module, class name)`` of every pydantic model and enum defined in :mod:`ai4s_graph.state`
    and in the modules of ``types`` (a graph's ``CHECKPOINT_TYPES``): the classes a checkpoint may
    rebuild."""
    modules = {importlib.import_module(f"{state_pkg.__name__}.{m.name}")
               for m in pkgutil.iter_modules(state_pkg.__path__)}
    modules |= {importlib.import_module(t.__module__) for t in types}
    out = set()
    for mod in modules:
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and issubclass(cls, (BaseModel, Enum)):
                out.add((cls.__module__, cls.__name__))
    return sorted(out)


def serializer(types: Iterable[type] = ()) -> JsonPlusSerializer:
    """LangGraph's serializer, allowed to rebuild exactly :func:`allowed_types` ``(types)``."""
    return JsonPlusSerializer(allowed_msgpack_modules=allowed_types(types))


@contextlib.contextmanager
def open_checkpointer(url: str | None = None, types: Iterable[type] = ()) -> Iterator[BaseCheckpointSaver]:
    """Yield a checkpointer for ``url``: a ``postgresql://…`` URL opens a Postgres saver, anything
    else is a SQLite file path (created with its folder). ``types``: the graph's state classes
    beyond :mod:`ai4s_graph.state` (see :func:`allowed_types`). Raises :class:`ToolUnavailableError`
    when Postgres is asked for but its extra is not installed."""
    url = url or default_db()
    serde = serializer(types)
    if url.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError:
            raise ToolUnavailableError("Postgres checkpoints need: pip install 'ai4s-graph[postgres]'") from None
        with PostgresSaver.from_conn_string(url) as saver:
            saver.serde = serde  # the same allow-list as SQLite (from_conn_string takes no serde)
            saver.setup()
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(url.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        yield SqliteSaver(conn, serde=serde)
    finally:
        conn.close()


class ThreadBusyError(InputError):
    """Another process holds the lock of this checkpoint thread (:func:`thread_lock`)."""


def lock_path(url: str | None, thread_id: str) -> Path:
    """The lock file of ``thread_id``: beside a SQLite checkpoint file,
    ``<file>.locks/<16 hex>.lock``; for a Postgres URL, ``<state dir>/locks/<16 hex>.lock``. The
    hex is a SHA-256 of the checkpoint URL and the thread id."""
    url = url or default_db()
    h = hashlib.sha256(f"{url}\n{thread_id}".encode()).hexdigest()[:16]
    if url.startswith(("postgres://", "postgresql://")):
        return state_dir() / "locks" / f"{h}.lock"
    db = Path(url.removeprefix("sqlite:///"))
    return db.with_name(db.name + ".locks") / f"{h}.lock"


@contextlib.contextmanager
def thread_lock(url: str | None, thread_id: str) -> Iterator[Path]:
    """Hold an exclusive ``fcntl.flock`` on :func:`lock_path` while the body runs: one process at
    a time runs (or resumes) a checkpoint thread, so two identical commands never run the same
    nodes twice nor submit the same job twice. Never waits: a second process raises
    :class:`ThreadBusyError` at once, one line naming the holder (pid, host, start time, written
    into the lock file). The kernel drops the lock when its holder exits, however it ends
    (SIGKILL included); the file stays (removing it would let a third process lock a new file
    while the second still holds the old one). A link at the lock path is refused (``O_NOFOLLOW``)."""
    path = lock_path(url, thread_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise ToolUnavailableError(f"cannot open the checkpoint lock {path}: {e.strerror or e}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise ThreadBusyError(f"checkpoint thread {thread_id} is in use by {' '.join(holder.split())}; "
                                  "refused, nothing run (wait for it to end, then run the same command to resume "
                                  "or see its result)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the flock
