"""The engine's pass over one large trace in several processes: the document's text cut into chunks
at event boundaries in this process, each chunk decoded and read by the engine's loop
(:class:`.scan_loop.ScanColumns`) in a worker process, the chunks' columns joined here in file
order (:meth:`.scan_loop.ScanColumns.absorb`). The result is the one pass's, column for column
(``tests/test_scan_parallel.py`` checks every bundled trace both ways). Other consumers that
export a chunk's state and absorb the next chunk's in order are read the same way
(:func:`read_parallel`, :data:`KINDS`: the engine with TraceLens's sheets' collector, the step
accountant, the verifier's reader; ``tests/test_step_feed.py``).

**Why.** The one pass (:func:`.stream.scan_trace`) spends ~90 % of its time decoding JSON and in the
per-event loop, both in one Python thread: ~2.4 s of the 3.6 s of ``trace timeline`` on the
replicated 176 MB trace (``bench/make_long_trace.py``) on the project's 2-core machine. Decoding and
the loop are independent per event; only the interning (names, threads, streams, devices) and the
event order numbers depend on what came before, and the join re-codes those.

**What stays in this process:** the read and gunzip (a reader thread: zlib releases the GIL), the
cut (``re`` over the text, :data:`.fastscan._BOUNDARY` at least :data:`CHUNK_BYTES` apart), the
trailer keys after the list (:func:`.fastscan._trailer`, as the one pass finds them) and the join.

**When it hands back** (returns None: the one pass then reads the trace and gives its own result or
error): a chunk that does not decode (a cut inside a string, malformed text, an integer ijson would
refuse: :func:`.fastscan._piece`), a duration pair (:class:`.scan_loop.NeedsOnePass`), a document
whose head is not the shape the fast parse splits, a second ``traceEvents`` list, a read error, a
worker that does not start or dies. Nothing is given out before the whole document was read.

**Workers** (:func:`workers_for`): none in a process of a ``multiprocessing`` pool (the rank pools
already read one trace per CPU); else ``AI4S_SCAN_WORKERS`` when set (0 or 1: never), else, for a
document of at least :data:`MIN_JSON_BYTES`, one per CPU this process may run on, at most
:data:`MAX_WORKERS`, and beyond two only as many as fit in the document's size
(:data:`WORKER_RSS_BYTES`). Each is ``python -c`` with this process's ``sys.path`` importing this module
only (msgspec, no numpy: ~18 MiB of RSS), fed over a pipe, and exits when its pipe closes.

**Memory** in this process: the chunks queued and in flight (2 x workers x :data:`CHUNK_BYTES`), the
text being cut, the joined columns (the one pass's); in each worker: one chunk, its columns and one
piece's events.
"""

from __future__ import annotations

import os
import pickle
import queue
import stat
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable

from . import fastscan
from .scan_loop import NeedsOnePass, ScanColumns

#: Environment variable: the number of worker processes (0 or 1: the one pass only).
WORKERS_ENV = "AI4S_SCAN_WORKERS"
#: Text sent to a worker at a time. A worker holds one chunk, its decoded piece and its columns, so
#: the chunk sets a worker's RSS: on the replicated 176 MB trace (this 2-core machine, 2026-12-03,
#: peak RSS summed over the processes, sampled every 10 ms) 4 MiB chunks gave 29-35 MiB a worker and
#: 169 / 196 MiB with 2 / 3 workers, 2 MiB 24-26 MiB and 148 / 170 MiB, 1 MiB 23 MiB and 158 MiB
#: with 3 workers (181 with 4); 1 MiB costs ~0.13 s more of this process's CPU (172 chunks instead
#: of 43) and lets a third worker in within the document's size.
CHUNK_BYTES = 1 << 20
#: Workers at most: the parent's share (read, gunzip, cut, join: ~15 % of the one pass's CPU) keeps
#: up with about this many (measured, bench/RESULTS.md), and each worker adds ~23 MiB of RSS.
MAX_WORKERS = 4
#: Documents smaller than this are read by the one pass: starting the workers costs ~0.1 s (python
#: and msgspec's import), which the one pass spends on ~8 MiB of JSON (measured on the 2-core machine).
MIN_JSON_BYTES = 32 << 20
#: What one worker adds to the peak RSS summed over the processes, and the one pass's own peak
#: (``trace timeline`` on the replicated 176 MB trace, this 2-core machine, bench's process-tree
#: sampling): 96 MiB with no worker (2026-12-02); with 1 MiB chunks (:data:`CHUNK_BYTES`,
#: 2026-12-03) ~100 MiB in this process and 23 MiB a worker (interpreter and imports 19 MiB, a chunk
#: and its events): 158 / 181 MiB with 3 / 4 workers. Workers beyond 2 are started only while they
#: fit in the document's size with the one pass's peak (the issue-29 bound: peak RSS <= the JSON's
#: size): 24 MiB a worker with the margin.
WORKER_RSS_BYTES = 24 << 20
ONE_PASS_RSS_BYTES = 96 << 20
#: Seconds the pass waits for the next chunk's answer while its workers live before it hands back
#: (its workers are then killed): a chunk (:data:`CHUNK_BYTES`) takes a worker ~0.05 s on the
#: project's machine, so only a stopped or stuck worker comes near it.
STALL_S = 120.0
#: A chunk's header on a worker's pipe: its kind (``b"l"`` or ``b"d"``) and its length in bytes.
_HEAD = struct.Struct("<cQ")


def workers_for(path: Path) -> int:
    """How many worker processes read ``path`` (see the module docstring); 0 for the one pass, and
    always 0 in a process of a ``multiprocessing`` pool (the rank pools of the analysis already read
    one trace per CPU: workers of their own would oversubscribe the CPUs and multiply the memory)."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        return 0
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    size = json_bytes(path)
    if cpus < 2 or size < MIN_JSON_BYTES:
        return 0
    fit = (size - ONE_PASS_RSS_BYTES) // WORKER_RSS_BYTES  # the workers' memory within the document's size
    return min(MAX_WORKERS, cpus, max(2, fit))


def json_bytes(path: Path) -> int:
    """The document's size in bytes: the file's, or for a gzip file the larger of its size and the
    size its trailer records (ISIZE, RFC 1952 section 2.3.1: the input's size modulo 2^32); 0 for a
    path that names no regular file it can read (missing, a FIFO, a NUL byte in it). Never raises."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device: opening or reading it here would block or eat it
            return 0
        size = st.st_size
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            return max(size, int.from_bytes(fh.read(4), "little"))
    except (OSError, ValueError):  # ValueError: a NUL byte in the path (os.stat's "embedded null byte")
        return 0


#: What a worker may feed (``kind``): kind -> the module (of this package) whose
#: ``PIECE_CONSUMER`` is ``(new consumer, its method fed one decoded piece, the field set its
#: pieces decode with)``: the engine's loop (:class:`.scan_loop.ScanColumns`, the default), the
#: engine's loop with TraceLens's sheets' collector (:class:`.op_args.EngineSheets`), the step
#: accountant's feed (:class:`.step_feed.StepFeed`), the verifier reader's
#: (:class:`.reader_feed.ReaderFeed`). Each consumer feeds a decoded piece, exports its state as
#: picklable parts and absorbs the parts of the next chunk in file order; none of the modules
#: imports numpy (a worker's RSS). Named, not imported: they import this module's callers.
KINDS = {"engine": "scan_loop", "sheets": "op_args", "steps": "step_feed", "reader": "reader_feed"}


def _kind_of(kind: str) -> tuple[Callable[..., Any], str, Any]:
    """The ``PIECE_CONSUMER`` of a worker ``kind`` (:data:`KINDS`). Raises KeyError for another."""
    import importlib

    return importlib.import_module(f"{__package__}.{KINDS[kind]}").PIECE_CONSUMER


class _Worker:
    """One worker process and the thread that feeds it chunks from ``tasks`` and files its answers
    in ``results`` (chunk index -> answer)."""

    def __init__(self, tasks: queue.Queue, results: dict[int, Any], ready: threading.Condition,
                 kind: str = "engine") -> None:
        code = (f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
                f"from ai4s_graph.tools.trace.scan_parallel import worker_main; worker_main({kind!r})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self._tasks, self._results, self._ready = tasks, results, ready
        self.thread = threading.Thread(target=self._run, name="scan-worker", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        inp, out = self.proc.stdin, self.proc.stdout
        while True:
            task = self._tasks.get()
            if task is None:
                return
            i, kind, text = task
            try:
                inp.write(_HEAD.pack(kind, len(text)))  # type: ignore[union-attr]
                inp.write(text)  # type: ignore[union-attr]
                inp.flush()  # type: ignore[union-attr]
                del text, task
                answer = pickle.load(out)  # type: ignore[arg-type]
            except Exception as e:  # noqa: BLE001 - a dead worker: the parallel pass hands back
                answer = ("fail", f"worker: {type(e).__name__}")
            with self._ready:
                self._results[i] = answer
                self._ready.notify_all()
            if answer[0] != "ok":
                return

    def close(self, abandon: bool) -> None:
        """End the worker: at the end of the document its thread has taken the end mark and the
        closed pipe ends the worker; when the pass is abandoned the worker is killed first (its
        thread, blocked on the answer, then reads the end of the pipe). :meth:`reap` waits for it."""
        if abandon:
            self.proc.kill()
        self.thread.join(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()  # type: ignore[union-attr]
            except OSError:
                pass

    def reap(self) -> None:
        """Wait for the worker's exit (its pipe closed by :meth:`close`): a blocking ``wait`` in a
        thread, joined with a 5 s bound, since ``Popen.wait(timeout)`` polls with sleeps of up to
        50 ms (0.14 s over 3 workers in ``trace timeline``, 2026-12-03); killed past the bound."""
        t = threading.Thread(target=self.proc.wait, name="scan-worker-reap", daemon=True)
        t.start()
        t.join(5)
        if t.is_alive():
            self.proc.kill()
            self.proc.wait()


def _reap(pool: list[_Worker]) -> None:
    """:meth:`_Worker.reap` of every worker, their pipes all closed first so they exit together."""
    for w in pool:
        w.reap()


def scan_columns(p: Path, workers: int, *, progress: Callable[[int, int], None] | None = None,
                 raw: BinaryIO | None = None, sheets: Any = None) -> ScanColumns | None:
    """The engine's columns of the trace ``p`` read by ``workers`` processes (``raw``: the file
    already open), with ``.trailer`` (the keys written after the list); None when the parallel pass
    hands back (see the module docstring). With ``sheets`` (an empty
    :class:`.op_args.OpArgsCollector`) the workers feed TraceLens's sheets' collector too (kind
    ``sheets``, :class:`.op_args.EngineSheets`), joined into it (partly, when the pass hands back).
    ``progress(bytes_read, file_size)`` after each chunk.
    Sets :data:`.fastscan.last_parse`: ``pieces``, ``fallback`` (None), ``workers`` (0 when it
    handed back) and ``parallel`` (None, or why it handed back; the one pass that then reads the
    trace sets ``pieces`` and ``fallback`` anew)."""
    cols = ScanColumns(None)
    if sheets is not None:
        both = _kind_of("sheets")[0](cols, sheets)
        return cols if read_parallel(p, workers, "sheets", both, progress=progress, raw=raw) else None
    return cols if read_parallel(p, workers, "engine", cols, progress=progress, raw=raw) else None



def read_parallel(p: Path, workers: int, kind: str, into: Any, *,
                  progress: Callable[[int, int], None] | None = None, raw: BinaryIO | None = None) -> bool:
    """Feed the trace ``p`` to consumers of ``kind`` (:data:`KINDS`) in ``workers`` processes, one
    per chunk, and join their parts into ``into`` (a consumer of that kind, or of a subclass, fed
    nothing yet) in file order, its ``.trailer`` set to the keys written after the list. True when
    ``into`` holds the whole trace; False when the pass handed back (see the module docstring):
    ``into`` then holds part of it and is not to be used. ``progress``, ``raw`` and
    :data:`.fastscan.last_parse`: as :func:`scan_columns`."""
    from .rawfile import decoded, raw_of
    from ..jsonguard import GuardedReader

    try:
        st0 = p.stat()
    except OSError:  # missing or unreadable: the one read says so in one line
        return False
    if not stat.S_ISREG(st0.st_mode):  # a FIFO or a device: opening it here would block or eat it
        return False
    size = st0.st_size
    tasks: queue.Queue = queue.Queue(maxsize=workers)
    results: dict[int, Any] = {}
    ready = threading.Condition()
    pool: list[_Worker] = []
    cols = into
    st: dict[str, Any] = {"pieces": 0, "fallback": None, "workers": workers, "parallel": None}
    merged = 0  # chunks joined so far
    progress_at = [time.monotonic()]  # when the last chunk was joined (or the pass began)
    sent = 0
    complete = False

    def join_ready(upto: int) -> bool:
        """Join the answers in order up to chunk ``upto`` (exclusive), waiting for them; False on a
        failed chunk."""
        nonlocal merged
        while merged < upto:
            with ready:
                while merged not in results:
                    if not any(w.thread.is_alive() for w in pool) and merged not in results:
                        return False
                    if time.monotonic() - progress_at[0] >= STALL_S:  # a worker that neither answers nor dies
                        st["parallel"] = f"no answer for chunk {merged} in {STALL_S:.0f} s"
                        return False
                    ready.wait(0.5)
                answer = results.pop(merged)
            if answer[0] != "ok":
                st["parallel"] = answer[1]
                return False
            cols.absorb(answer[1])
            st["pieces"] += answer[2]
            merged += 1
            progress_at[0] = time.monotonic()
        return True

    def send(kind: bytes, text: memoryview) -> bool:
        nonlocal sent
        while True:
            try:
                tasks.put((sent, kind, text), timeout=0.5)
                break
            except queue.Full:
                if not any(w.thread.is_alive() for w in pool):
                    return False
                if time.monotonic() - progress_at[0] >= STALL_S:  # every worker busy, none answers
                    st["parallel"] = f"no answer for chunk {merged} in {STALL_S:.0f} s"
                    return False
        sent += 1
        # join what is done without waiting (the join keeps pace with the workers)
        with ready:
            done = merged
            while done in results:
                done += 1
        return join_ready(done)

    try:
        with raw_of(p, raw) as r:
            blocks = fastscan._Blocks(GuardedReader(decoded(r), p.name), True)
            try:
                buf, s = fastscan._head(blocks)
                if s is None:
                    st["parallel"] = "no traceEvents list at the root's head"
                    return False
                pool.extend(_Worker(tasks, results, ready, kind) for _ in range(workers))
                eof = False
                while True:
                    if not eof and len(buf) - s < CHUNK_BYTES + (1 << 16):  # one copy per chunk
                        more, have = [buf[s:]], len(buf) - s
                        while have < CHUNK_BYTES + (1 << 16):
                            b = blocks.next()
                            if not b:
                                eof = True
                                break
                            more.append(b)
                            have += len(b)
                        buf, s = b"".join(more), 0
                        del more
                    m = None if eof and len(buf) - s < CHUNK_BYTES else \
                        fastscan._BOUNDARY.search(buf, s + CHUNK_BYTES)
                    if m is None:
                        if not eof:
                            more = fastscan.read_on(blocks, buf, s)
                            if more is not None:
                                buf, s = more
                                continue
                            eof = True
                        rest = buf[s:]
                        if fastscan.second_list(rest):
                            st["parallel"] = "a second traceEvents list"  # ijson reads it too: the one pass
                            return False
                        if not send(b"d", memoryview(rest)) or not join_ready(sent):
                            return False
                        cols.trailer = fastscan._trailer(blocks, [rest])
                        complete = True
                        break
                    if not send(b"l", memoryview(buf)[s:m.start() + 1]):
                        return False
                    s = m.end() - 1  # the next event's "{"
                    if progress is not None:
                        progress(r.tell(), size)
            finally:
                blocks.close()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - any read or worker error: the one pass reads it and says why
        st["parallel"] = f"{type(e).__name__}: {str(e)[:120]}"
        return False
    finally:
        while True:  # the chunks no worker took (an abandoned pass), then one end mark per worker
            try:
                tasks.get_nowait()
            except queue.Empty:
                break
        for _ in pool:
            tasks.put_nowait(None)  # room for one per worker (maxsize), the queue being empty
        for w in pool:
            w.close(abandon=not complete)
        _reap(pool)
        if not complete:  # why: the first chunk a worker refused, else the pass's own reason
            st["workers"] = 0
            refused = [results[i][1] for i in sorted(results) if results[i][0] != "ok"]
            st["parallel"] = st["parallel"] or (refused[0] if refused else "a worker stopped")
        fastscan.last_parse.clear()
        fastscan.last_parse.update(st)
    if progress is not None:
        progress(size, size)
    return True


def _read_chunk(kind: bytes, text: bytes, reader: str = "engine") -> tuple:
    """A worker's answer for one chunk: ``("ok", parts, pieces)`` or ``("fail", why)``; ``reader``:
    the consumer's kind (:data:`KINDS`)."""
    new, method, fields = _kind_of(reader)
    decode_list, decode_doc = fastscan.decoders(fields)
    cols = new()
    feed = getattr(cols, method)
    pieces = 0
    try:
        if kind == b"d":
            try:
                with fastscan._GcPause():
                    doc = decode_doc(fastscan._OPEN + text)
            except Exception:  # noqa: BLE001 - msgspec's refusal: the one pass reads it
                return ("fail", "the end of the list did not decode")
            if not isinstance(doc, dict) or not fastscan.agrees(text):
                return ("fail", "the end of the list did not decode")
            feed(doc["traceEvents"])
            return ("ok", cols.export(), 1)
        s, end = 0, len(text)
        while s < end:
            m = fastscan._BOUNDARY.search(text, s + fastscan.PIECE_BYTES)
            stop = m.start() + 1 if m is not None else end
            evs = fastscan._piece(b"[" + text[s:stop] + b"]", decode_list)
            tries = 0
            while evs is None and m is not None and tries < fastscan.RETRIES:
                m = fastscan._BOUNDARY.search(text, m.end())
                stop = m.start() + 1 if m is not None else end
                evs = fastscan._piece(b"[" + text[s:stop] + b"]", decode_list)
                tries += 1
            if evs is None:
                return ("fail", "a piece of chunk text did not decode")
            feed(evs)
            pieces += 1
            s = m.end() - 1 if m is not None else end
        return ("ok", cols.export(), pieces)
    except NeedsOnePass:
        return ("fail", "duration pairs (read by the one pass)")
    except Exception as e:  # noqa: BLE001 - a consumer's refusal: the one pass reads it and says why
        return ("fail", f"the consumer refused the chunk ({type(e).__name__}: {str(e)[:80]})")


def worker_main(reader: str = "engine") -> None:
    """A worker's loop (``reader``: the consumer's kind, :data:`KINDS`): read chunks from stdin
    (:data:`_HEAD`: ``b"l"`` events of the list or ``b"d"`` the list's end and what follows, and the
    length; then the text), answer each on stdout as a pickle; exit at the end of stdin (the parent
    closed it or is gone)."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            head = inp.read(_HEAD.size)
            if len(head) < _HEAD.size:
                return
            kind, n = _HEAD.unpack(head)
            text = inp.read(n)
            if len(text) < n:
                return
        except OSError:
            return
        answer = _read_chunk(kind, text, reader)
        del text
        try:
            pickle.dump(answer, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
        except (BrokenPipeError, OSError):
            return
        if answer[0] != "ok":
            return
