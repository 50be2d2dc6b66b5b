"""The process pool of the rank-trace tasks: one trace per worker at a time (peak memory bounded
by the number of workers, never all ranks at once), started with ``spawn`` (LangGraph runs nodes in
threads, and forking a threaded process can deadlock the child on a lock another thread held: seen
as a hung ``trace_rank``), each worker exiting when its parent is gone."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

_POOL: ProcessPoolExecutor | None = None
_POOL_SIZE = 0
#: The ``trace_rank`` tasks call :func:`pool` from LangGraph's threads at once: without the lock each
#: thread that saw no pool made its own (measured, 8 rank traces on 2 cores: 6 pools, 8-12 worker
#: processes instead of 2, 1.6 GB peak RSS, every rank finishing together after ~15 s).
_LOCK = threading.Lock()


def pool(workers: int) -> ProcessPoolExecutor:
    """The process pool of this process with ``workers`` workers (made, or re-made at another size),
    one pool whatever the number of threads asking at once."""
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE != workers:
            _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_die_with_parent, initargs=(os.getpid(),))
            _POOL_SIZE = workers
        return _POOL


def _die_with_parent(parent_pid: int) -> None:
    """Worker initializer: exit when the parent process is gone (killed with SIGKILL, say), so no
    orphaned worker outlives an interrupted run."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
