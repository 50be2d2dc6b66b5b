"""Checkpointers: SQLite (``langgraph-checkpoint-sqlite``) by default, Postgres when a
``postgresql://`` URL is given (optional extra ``ai4s-graph[postgres]``).

The graph states hold pydantic models (:mod:`ai4s_graph.state`, each graph's ``schema.py``).
LangGraph's serializer stores them as msgpack extensions and rebuilds them on load. Every
checkpointer here (``run``'s, the optimizer loop's) reads through :class:`StrictSerializer`: an
entry is rebuilt only when it names exactly one of those classes (or the few standard types
LangGraph itself writes: ``set``, ``Send``, dates), through that class's own validation, and
anything else -- a pickle, a JSON constructor, an unknown module, a model whose fields do not
validate -- refuses the whole checkpoint with one line naming the file
(:class:`CheckpointRefusedError`). LangGraph's own allow-list hook is not enough: a blocked type
comes back as its raw payload and an allowed model that fails validation is built unvalidated
(``model_construct``), so the graph would go on with values of the wrong type.

One process at a time per checkpoint thread: :func:`thread_lock` (an ``fcntl.flock`` on a file
beside the checkpoint database)."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import functools
import hashlib
import importlib
import inspect
import os
import pkgutil
import socket
import sqlite3
import threading
import time
import types
import typing
import uuid
import weakref
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import ormsgpack
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde import jsonplus as _jp
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Send
from pydantic import BaseModel, ValidationError

from .. import state as state_pkg
from ..state.publish import check_writable
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


class CheckpointRefusedError(InputError):
    """A checkpoint entry that does not deserialize to the types this tool stores; the message
    names the checkpoint file and the offending entry."""


#: Standard types LangGraph writes into a checkpoint besides the graphs' own: ``(module, name)`` ->
#: the class. (``set`` for channel versions; ``Send`` for the per-rank fan-out; dates and UUIDs.)
_STANDARD: dict[tuple[str, str], type] = {
    ("builtins", "set"): set, ("builtins", "frozenset"): frozenset,
    ("datetime", "datetime"): datetime.datetime, ("datetime", "date"): datetime.date,
    ("datetime", "time"): datetime.time, ("datetime", "timedelta"): datetime.timedelta,
    ("datetime", "timezone"): datetime.timezone, ("uuid", "UUID"): uuid.UUID, ("langgraph.types", "Send"): Send,
}
_METHODS = {("datetime", "datetime", "fromisoformat")}


class StrictSerializer(JsonPlusSerializer):
    """LangGraph's ``JsonPlusSerializer`` for writing; for reading, only ``null``, ``bytes``,
    ``bytearray`` and ``msgpack`` entries whose extensions name a class of ``allowed`` (``(module,
    name)`` pairs, see :func:`allowed_types`) or of the standard set above, each rebuilt through
    its own constructor or pydantic validation. Raises :class:`CheckpointRefusedError` naming
    ``source`` (the checkpoint file) for anything else: ``pickle`` and ``json`` entries, an unknown
    type, a method call other than ``datetime.fromisoformat``, a pydantic-v1 or NumPy payload, a
    model that fails validation."""

    def __init__(self, allowed: Iterable[tuple[str, str]], source: str = "checkpoint") -> None:
        self._classes: dict[tuple[str, str], type] = dict(_STANDARD)
        for mod, name in allowed:
            self._classes[(mod, name)] = getattr(importlib.import_module(mod), name)
        self.source = source
        self._why = threading.local()
        super().__init__(allowed_msgpack_modules=list(self._classes))

    def _refuse(self, what: str) -> CheckpointRefusedError:
        return CheckpointRefusedError(f"refused checkpoint {self.source}: {what}, not a type this tool stores "
                                      "(nothing was loaded from it; delete the file or pass another --checkpoint)")

    def _unpack(self, data: bytes):
        return ormsgpack.unpackb(data, ext_hook=self._ext, option=ormsgpack.OPT_NON_STR_KEYS)

    def _cls(self, tup) -> type:
        if not (isinstance(tup, (list, tuple)) and len(tup) >= 3 and all(isinstance(x, str) for x in tup[:2])):
            raise self._refuse("a malformed msgpack extension")
        cls = self._classes.get((tup[0], tup[1]))
        if cls is None:
            raise self._refuse(f"an entry naming {tup[0]}.{tup[1]}")
        return cls

    def _ext(self, code: int, data: bytes):
        # ormsgpack replaces an exception raised here by ValueError("ext_hook failed"): the first
        # refusal is kept for loads_typed to raise
        try:
            return self._build(code, data)
        except CheckpointRefusedError as e:
            self._why.err = getattr(self._why, "err", None) or e
            raise
        except (ValidationError, TypeError, ValueError, KeyError, IndexError, OverflowError) as e:
            self._why.err = getattr(self._why, "err", None) or self._refuse(
                f"an entry that does not validate ({type(e).__name__}: {' '.join(str(e).split())[:80]})")
            raise

    def _build(self, code: int, data: bytes):
        if code == _jp.EXT_DELTA_SNAPSHOT:
            return _jp._DeltaSnapshot(self._unpack(data))
        tup = self._unpack(data)
        if code == _jp.EXT_METHOD_SINGLE_ARG:
            if not (isinstance(tup, (list, tuple)) and len(tup) == 4 and tuple(tup[:2]) + (tup[3],) in _METHODS):
                raise self._refuse(f"a method call {'.'.join(map(str, tup[:2])) if isinstance(tup, (list, tuple)) else ''}")
            return getattr(self._classes[(tup[0], tup[1])], tup[3])(tup[2])
        if code not in (_jp.EXT_CONSTRUCTOR_SINGLE_ARG, _jp.EXT_CONSTRUCTOR_POS_ARGS, _jp.EXT_CONSTRUCTOR_KW_ARGS,
                        _jp.EXT_PYDANTIC_V2):
            raise self._refuse(f"a msgpack extension of code {code}")
        cls = self._cls(tup)
        if code == _jp.EXT_PYDANTIC_V2:
            if not (isinstance(cls, type) and issubclass(cls, BaseModel) and isinstance(tup[2], dict)):
                raise self._refuse(f"a model payload naming {tup[0]}.{tup[1]}")
            return cls.model_validate(tup[2])
        if isinstance(cls, type) and issubclass(cls, BaseModel):
            raise self._refuse(f"a constructor call of the model {tup[0]}.{tup[1]}")
        if code == _jp.EXT_CONSTRUCTOR_SINGLE_ARG:
            return cls(tup[2])
        if code == _jp.EXT_CONSTRUCTOR_POS_ARGS:
            if not isinstance(tup[2], (list, tuple)):
                raise self._refuse(f"an entry naming {tup[0]}.{tup[1]} with malformed arguments")
            return _jp._send_from_args(tup[2]) if cls is Send else cls(*tup[2])
        if not isinstance(tup[2], dict):
            raise self._refuse(f"an entry naming {tup[0]}.{tup[1]} with malformed arguments")
        return cls(**tup[2])

    def loads_typed(self, data: tuple[str, bytes]):
        """Rebuild one stored value (see the class docstring). Raises :class:`CheckpointRefusedError`."""
        type_, raw = data
        if type_ in ("null", "bytes", "bytearray"):
            return super().loads_typed(data)
        if type_ != "msgpack":
            raise self._refuse(f"an entry of serialization type {str(type_)[:40]!r} (this tool writes msgpack only)")
        self._why.err = None
        try:
            return self._unpack(raw)
        except CheckpointRefusedError:
            raise
        except (ormsgpack.MsgpackDecodeError, RecursionError, ValueError, TypeError) as e:
            err, self._why.err = self._why.err, None
            raise (err or self._refuse(f"an entry that is not valid msgpack ({type(e).__name__})")) from None


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the shape of the annotation ``hint``: pydantic models, enums and plain
    types by ``isinstance``; ``list[X]``, ``tuple[...]``, ``dict[K, V]`` element by element; unions,
    ``Optional``, ``Annotated`` and ``Any``; a TypedDict as a dict of its keys' types."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _matches(value, typing.get_args(hint)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in typing.get_args(hint))
    if origin in (list, set, frozenset):
        (arg,) = typing.get_args(hint) or (Any,)
        return isinstance(value, origin) and all(_matches(v, arg) for v in value)
    if origin is tuple:
        return isinstance(value, (tuple, list))
    if origin is dict:
        k, v = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(_matches(a, k) and _matches(b, v) for a, b in value.items())
    if origin is not None:
        return isinstance(value, origin)
    if isinstance(hint, type) and typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return False
        sub = typing.get_type_hints(hint)
        return all(_matches(v, sub[k]) for k, v in value.items() if k in sub)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a forward reference or special form this check does not know: the nodes check it


def check_state(values: dict, schema: type, source: str = "checkpoint") -> None:
    """Refuse checkpointed state ``values`` whose keys do not hold the types of the graph's state
    ``schema`` (a TypedDict, see :func:`_matches`): a dict where a model is expected, a string where
    a list is expected, a key the graph does not have. Raises :class:`CheckpointRefusedError`
    naming ``source``."""
    hints = typing.get_type_hints(schema)
    for key, value in values.items():
        hint = hints.get(key)
        if hint is None:
            raise CheckpointRefusedError(f"refused checkpoint {source}: an unknown state key {str(key)[:40]!r}")
        if not _matches(value, hint):
            raise CheckpointRefusedError(f"refused checkpoint {source}: state key {str(key)[:40]!r} holds a "
                                         f"{type(value).__name__}, not what the graph stores (delete the file "
                                         "or pass another --checkpoint)")


def serializer(types: Iterable[type] = (), source: str = "checkpoint") -> StrictSerializer:
    """The strict serializer (:class:`StrictSerializer`) allowed to rebuild exactly
    :func:`allowed_types` ``(types)``; ``source`` names the checkpoint in its errors."""
    return StrictSerializer(allowed_types(types), source)


def _shown(url: str) -> str:
    """A checkpoint location fit for a message: a Postgres URL without its user and password."""
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://{rest.rsplit('@', 1)[1]}"
    return url


def sqlite_saver(path: str | Path, types: Iterable[type] = (), root: str | Path | None = None):
    """A SQLite checkpointer on ``path`` with the strict serializer, and its connection (the
    caller closes it). ``root``: the folder the file must lie in without a link on the way (the
    database, its rollback journal and WAL are refused when they are links: SQLite would follow
    them). Raises :class:`~ai4s_graph.state.publish.UnsafePathError` for a link."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    p = Path(path)
    for name in (p.name, p.name + "-journal", p.name + "-wal", p.name + "-shm"):
        check_writable(p.parent / name, root)
    conn = sqlite3.connect(str(p), check_same_thread=False)
    return SqliteSaver(conn, serde=serializer(types, str(p))), conn


@contextlib.contextmanager
def open_checkpointer(url: str | None = None, types: Iterable[type] = ()) -> Iterator[BaseCheckpointSaver]:
    """Yield a checkpointer for ``url``: a ``postgresql://…`` URL opens a Postgres saver, anything
    else is a SQLite file path (created with its folder). ``types``: the graph's state classes
    beyond :mod:`ai4s_graph.state` (see :func:`allowed_types`). Raises :class:`ToolUnavailableError`
    when Postgres is asked for but its extra is not installed."""
    url = url or default_db()
    if url.startswith(("postgres://", "postgresql://")):
        serde = serializer(types, _shown(url))
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError:
            raise ToolUnavailableError("Postgres checkpoints need: pip install 'ai4s-graph[postgres]'") from None
        with PostgresSaver.from_conn_string(url) as saver:
            saver.serde = serde  # the same allow-list as SQLite (from_conn_string takes no serde)
            saver.setup()
            _OPEN.add(saver)
            try:
                yield saver
            finally:
                _OPEN.discard(saver)
        return
    path = Path(url.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    saver, conn = sqlite_saver(path, types)
    _OPEN.add(saver)
    try:
        yield saver
    finally:
        _OPEN.discard(saver)
        conn.close()


class SavedWrites:
    """The STATUS lines of the tasks whose writes a checkpointer has saved (:func:`track_writes`),
    so a run prints a node's STATUS line only once its result is in the checkpoint: a stop right
    after the line never runs that node again. LangGraph hands a finished task's writes to the
    checkpointer on its background thread pool and streams the task's update at the same moment,
    so without this wait the line can come first. Counted per ``(node, line)`` (a node's update
    holds ``statuses: {node: line}``, :func:`~ai4s_graph.graph.runtime.node`)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._saved: dict[tuple[str, str], int] = {}

    def record(self, writes: Iterable[tuple[str, Any]]) -> None:
        """Count the STATUS lines among ``writes`` (``(channel, value)`` pairs just saved)."""
        with self._cond:
            for channel, value in writes:
                if channel == "statuses" and isinstance(value, dict):
                    for node, line in value.items():
                        key = (str(node), str(line))
                        self._saved[key] = self._saved.get(key, 0) + 1
            self._cond.notify_all()

    def wait(self, node: str, line: str, count: int = 1, timeout: float = 30.0) -> bool:
        """Wait until ``line`` of ``node`` was saved ``count`` times (the n-th time a run streams the
        same line of the same node, such as two rank tasks' equal lines), at most ``timeout``
        seconds. Returns whether it was; a checkpointer that fails to save makes LangGraph raise
        on its own, so a timeout only delays the line."""
        with self._cond:
            return self._cond.wait_for(lambda: self._saved.get((node, line), 0) >= count, timeout)


def track_writes(saver: BaseCheckpointSaver) -> SavedWrites:
    """Record in a :class:`SavedWrites` every task's writes ``saver`` saves (its ``put_writes``
    wrapped on the instance; the signature LangGraph inspects is kept) and return it."""
    tracked = SavedWrites()
    put = saver.put_writes

    @functools.wraps(put)
    def put_writes(config: Any, writes: Any, task_id: str, *args: Any, **kwargs: Any) -> None:
        put(config, writes, task_id, *args, **kwargs)
        tracked.record(writes)

    saver.put_writes = put_writes  # type: ignore[method-assign]
    return tracked


#: The checkpointers :func:`open_checkpointer` opened and has not closed (:func:`freeze_writes`).
_OPEN: "weakref.WeakSet[BaseCheckpointSaver]" = weakref.WeakSet()

#: Seconds :func:`freeze_writes` waits for a saver's lock (a write of a node's result or a step
#: takes milliseconds). Not longer: when the calling thread itself holds it (a signal handler that
#: interrupted the main thread's own read of the state) it never comes, and then no other thread
#: gets it either (the interrupted read never ends); a write in progress elsewhere was made before
#: the stop, so letting it end does no harm.
FREEZE_WAIT_S = 0.5


def freeze_writes(wait_s: float = FREEZE_WAIT_S) -> Callable[[], None]:
    """Stop every open checkpointer of this process from writing (a run about to exit at once on a
    signal, ``ai4s-graph run``): takes each saver's own lock (LangGraph's SQLite and Postgres savers
    hold ``saver.lock`` around every read and write), waiting up to ``wait_s`` for a write in
    progress, so a node thread that ends after this point cannot checkpoint a result made while
    the run stops (a telemetry query cut off by its server's stop, a trace part whose lane was
    stopped): it blocks until the exit, and the node runs again on resume. Returns the function
    that gives the locks back (the tests'; a stopping run never calls it). Never raises."""
    held = []
    for saver in list(_OPEN):
        lock = getattr(saver, "lock", None)
        if lock is not None and lock.acquire(timeout=wait_s):
            held.append(lock)

    def thaw() -> None:
        while held:
            held.pop().release()

    return thaw


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
