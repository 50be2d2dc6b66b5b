"""Readers of one rank trace run in processes of their own while the engine's pass reads it: the
verifier's reader, the step accountant, and the counters (event names, roofline, raw text) with
the annotated copy, of :func:`.onepass.read_rank` (issue 29, the ``run`` side); started by the read
itself or, earlier, by :func:`.onepass.prefetch` (``ai4s-graph run``, before the graph's imports,
the engine's pass in a lane too).

**Why.** ``run``'s read of a long trace fed seven per-event consumers in one Python thread; on the
replicated 176 MB trace (``bench/make_long_trace.py``, the project's 2-core machine, 2026-12-03,
cProfile of :func:`~ai4s_graph.graph.analysis.nodes.rank_worker.analyze_one`) the verifier's
reader took ~25 % of that read (its feed, linking, figures and sampling), the step accountant ~24 %,
the annotated copy ~11 %, the name, roofline and raw-text counters ~6 %, against ~34 % for the
parse, the engine and the TraceLens sheets. Each
consumer sees every event in file order and keeps its own state, so each can read the trace by
itself in another process (:func:`.stream.feed_events`: the same parse, the same events in the
same order as the engine's pass hands its ``also`` consumers) and hand back only its result: the
same result, computed beside the engine instead of after it. The parse is paid once more per
lane (~2.6 s of CPU on that trace on the 2-core machine for whole events); the wall time is the
longest lane's. A lane whose consumers read a known set of keys decodes only those
(:func:`.fastscan.decoders`: the step accountant's and the verifier reader's lanes; the engine's
pass decodes its own and the sheets' keys, :class:`.fastscan.SheetsEvent`); the counters and the
annotated copy read whole events.

**A lane** (:class:`Lane`) is a module-level function and picklable arguments, run in a fresh
``python -c`` process (this process's ``sys.path``; it imports what the function's module imports),
answered with a pickle on a pipe. Anything the function writes to its stdout goes to
``/dev/null``; it raises nothing out of the lane: a failure is ``("fail", why)``, and
:meth:`Lane.result` raises :class:`LaneError`. The caller then runs the same function in its own
process (one more read, the result the same).

**Warm lanes** (:func:`warm`): ``ai4s-graph run`` on one long trace starts the lanes' processes
before its own imports (:mod:`ai4s_graph.cli.early`), idle, importing the readers' modules; the
prefetch hands each its call (:func:`start` ``warm=True``) with the trace's open file as an
:class:`Fd` marker, the descriptor passed over the lane's socket (``SCM_RIGHTS``): the same open
file as a lane started for the call inherits. A warm lane no call takes is stopped after the
prefetch (:func:`drop_warm`).

**When** (:func:`lanes_for`): never in a process of a ``multiprocessing`` pool (the rank pools read
one trace per CPU already); ``AI4S_TRACE_LANES`` when set (``0``: never; ``1``: always, the tests'
switch on small traces); else for a document of at least :data:`.scan_parallel.MIN_JSON_BYTES`
(32 MiB: a lane's start, ~0.3 s of imports, is what the one pass spends on ~8 MiB of JSON) and
below :data:`LANES_MAX_JSON_BYTES` (past it one process keeps within the document's size in
memory, the lanes do not) on a process that may run on at least 2 CPUs.

**Memory:** each lane holds its consumer's state (which the caller's process no longer holds) and
its interpreter and imports (~50 MiB); the lanes' peaks come together (in one process the engine's
arrays are freed before the reader links its events), so the peak summed over the processes is
higher: 460 against 276 MiB for ``run`` on 171.5 MiB of JSON on the device (bench/RESULTS.md).
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

#: Environment variable: ``0`` never runs lanes, ``1`` always (any size); unset: by size and CPUs.
LANES_ENV = "AI4S_TRACE_LANES"
#: Largest document (bytes of JSON) read with lanes by default: past it the one process's peak RSS
#: is within the document's size (issue 29's bound) and the lanes' is not. Measured on the 16-core
#: device, ``run`` on the replicated traces (bench/RESULTS.md): one process 276 MiB at 171.5 MiB of
#: JSON and 811 MiB at 973 MiB (commit 2284861), ~161 MiB + 0.67 x the JSON, within it from
#: ~486 MiB; with lanes 460 and 1275 MiB (commit 2d6cf48), 1.02 x the JSON: never within it.
#: Below this size neither is within the bound and the lanes are faster (11.2 s against 17.8 s at
#: 171.5 MiB side by side, commit 3c76f71; 60 s against 87 s at 973 MiB in two runs).
LANES_MAX_JSON_BYTES = 480 << 20


class LaneError(RuntimeError):
    """A lane gave no result: its function raised, its process could not start or died (the message
    says which, one line)."""


class NotPicklableError(LaneError):
    """The lane's function or arguments cannot be pickled: no lane can take the call."""


class DescriptorError(LaneError):
    """The call's :class:`Fd` markers name descriptors that cannot be passed (closed, out of
    range, more than one message holds): no lane can take the call."""


class Fd:
    """A file descriptor of this process handed to a lane as an argument (:func:`start`,
    :meth:`Lane.send`): the lane's function gets, in its place, the number under which the lane
    holds the same open file (inherited under this number by a lane started for the call; passed
    over the lane's socket, ``SCM_RIGHTS`` (unix(7)), to a warm lane, which was started before the
    file was opened: :func:`warm`)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = int(n)

    def __reduce__(self) -> tuple:
        return (Fd, (self.n,))

    def __repr__(self) -> str:
        return f"Fd({self.n})"


#: CPUs from which ``ai4s-graph run`` reads a long trace with lanes unless ``AI4S_TRACE_LANES=1``
#: (:func:`.onepass.prefetch`, which re-exports it, and :func:`warm`'s caller): one per lane (the
#: engine's pass with the three readers). On the project's 2-core machine (2 vCPUs, 2026-12-03) the
#: four lanes beside the graph's imports made ``run`` on the replicated 176 MB trace 15 -> 21 s (the
#: lanes' CPU time 31.5 s against ~21 s one at a time): the CPUs, not the imports, were then the limit.
PREFETCH_MIN_CPUS = 4
#: Warm lanes the command line starts for one long trace (:func:`warm`): the most lanes
#: :func:`.onepass.read_rank` starts (its ``LANE_READERS``: the engine's pass, the verifier's
#: reader, the step accountant, the counters and the annotated copy).
WARM_LANES = 5

#: A dotted module name (what :class:`Lane`'s ``preload`` accepts: names, never code).
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def lanes_for(path: str | os.PathLike) -> bool:
    """Whether :func:`.onepass.read_rank` runs its lanes for the trace at ``path`` (see the module
    docstring). Never raises (an unreadable path: False; the engine reports it)."""
    import multiprocessing

    from .scan_parallel import MIN_JSON_BYTES, json_bytes

    if multiprocessing.parent_process() is not None:
        return False
    env = os.environ.get(LANES_ENV, "").strip()
    if env:
        return env == "1"
    return usable_cpus() >= 2 and MIN_JSON_BYTES <= json_bytes(Path(path)) < LANES_MAX_JSON_BYTES


def prefetch_for(path: str | os.PathLike) -> bool:
    """Whether ``ai4s-graph run`` reads the trace at ``path`` with lanes started before the read
    (:func:`.onepass.prefetch`, and the warm lanes of :mod:`ai4s_graph.cli.early`): where
    :func:`lanes_for` applies, on :data:`PREFETCH_MIN_CPUS` CPUs or more unless ``AI4S_TRACE_LANES=1``.
    Never raises."""
    if not lanes_for(path):
        return False
    return os.environ.get(LANES_ENV, "").strip() == "1" or usable_cpus() >= PREFETCH_MIN_CPUS


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity; the machine's count where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Lane:
    """``fn(*args)`` started now in a process of its own (see the module docstring); :meth:`result`
    waits for its value. ``pass_fds``: file descriptors of this process the lane inherits under the
    same numbers (an open trace, a spool file: :func:`.onepass.read_rank`). ``fn`` None: the process
    starts idle, imports the modules named in ``preload`` and waits for :meth:`send` (its start and
    imports paid before the call is known: :func:`ai4s_graph.tools.report.drawing.prestart`);
    ``preload``: a tuple of dotted module names (passed as names, never as code); ``nice``: 0 to 40,
    added to the lane's niceness (``os.nice``) before it imports (a lane never raises its own
    priority). Raises :class:`NotPicklableError` (a :class:`LaneError`) when ``fn`` and ``args``
    cannot be pickled (a lambda, a bound method of a local object), :class:`LaneError` for a
    ``preload`` or ``nice`` outside those, or when the process cannot start."""

    def __init__(self, fn: Callable[..., Any] | None, *args: Any, pass_fds: tuple[int, ...] = (),
                 preload: tuple[str, ...] = (), nice: int = 0, channel: bool = False) -> None:
        payload = self._payload(fn, args) if fn is not None else None
        pass_fds = tuple(pass_fds) + tuple(a.n for a in args if isinstance(a, Fd) and a.n not in pass_fds)
        if not isinstance(preload, tuple) or not all(isinstance(m, str) and _MODULE.fullmatch(m) for m in preload):
            raise LaneError(f"lane: preload must be a tuple of module names, not {preload!r}"[:200])
        if not isinstance(nice, int) or not 0 <= nice <= 40:
            raise LaneError(f"lane: nice must be an int from 0 to 40 (os.nice's range), not {nice!r}"[:200])
        self._sock = None  # this end of a warm lane's socket (the descriptors of its call go there)
        child = None
        if channel:
            import socket

            try:
                self._sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            except OSError as e:
                raise LaneError(f"lane: no socket for its descriptors: {e}"[:200]) from None
            pass_fds += (child.fileno(),)
        code = (f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
                f"from ai4s_graph.tools.trace.lanes import lane_main; "
                f"lane_main({os.getpid()}, {preload!r}, {nice!r}, {child.fileno() if child else None!r})")
        self.name = getattr(fn, "__name__", "lane") if fn is not None else "idle"
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, pass_fds=pass_fds)
        except (OSError, ValueError, OverflowError, TypeError) as e:  # a closed or out-of-range descriptor in pass_fds
            if self._sock is not None:
                self._sock.close()
            raise LaneError(f"lane {self.name}: {type(e).__name__}: {e}"[:200]) from None
        finally:
            if child is not None:
                child.close()  # the lane holds it now
        self._answer: tuple = ("fail", f"lane {self.name}: no answer")
        self._thread: threading.Thread | None = None
        if payload is not None:
            self._send(payload)

    @staticmethod
    def _payload(fn: Callable[..., Any], args: tuple) -> bytes:
        try:
            return pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - PicklingError, TypeError, a __reduce__ that raises, RecursionError
            raise NotPicklableError(f"lane {getattr(fn, '__name__', fn)}: not picklable ({type(e).__name__})") from None

    def _send(self, payload: bytes) -> None:
        self._thread = threading.Thread(target=self._talk, args=(payload,), name=f"lane-{self.name}", daemon=True)
        self._thread.start()

    def send(self, fn: Callable[..., Any], *args: Any) -> None:
        """Hand ``fn(*args)`` to a lane started idle (``Lane(None, preload=...)``: its process already
        runs and has imported ``preload``); :meth:`result` then waits for its value. Raises
        :class:`LaneError` when ``fn`` and ``args`` cannot be pickled, the lane was handed a call
        already, or its process has ended."""
        if self._thread is not None:
            raise LaneError(f"lane {self.name}: already handed a call")
        payload = self._payload(fn, args)
        if self.proc.poll() is not None:
            raise LaneError(f"lane {self.name}: the process ended: exit {self.proc.returncode}")
        fds = [a.n for a in args if isinstance(a, Fd)]
        if fds:  # the call's open files, before the call (the lane reads them after it)
            if self._sock is None:
                raise LaneError(f"lane {self.name}: started without a socket, it cannot take descriptors")
            import socket

            try:
                socket.send_fds(self._sock, [b"f"], fds)
            except (OSError, OverflowError, ValueError) as e:  # nothing was sent: the lane stays idle
                raise DescriptorError(f"lane {self.name}: descriptors not sent: {type(e).__name__}: {e}"[:200]) from None
        self.name = getattr(fn, "__name__", "lane")
        self._send(payload)

    def _talk(self, payload: bytes) -> None:
        """Send the call, read the answer (a thread: the answer is read as the lane writes it)."""
        try:
            self.proc.stdin.write(payload)  # type: ignore[union-attr]
            self.proc.stdin.close()  # type: ignore[union-attr]
            got = pickle.load(self.proc.stdout)  # type: ignore[arg-type]
            if not (isinstance(got, tuple) and len(got) == 2 and got[0] in ("ok", "fail")):
                raise ValueError("not a lane's answer")
            self._answer = got
        except Exception as e:  # noqa: BLE001 - a lane that died: the caller runs the function itself
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # an answer that does not read while the lane lives on
                self.proc.kill()
                code = self.proc.wait()
            self._answer = ("fail", f"lane {self.name}: {type(e).__name__} (the process ended: exit {code})")
        finally:
            try:
                self.proc.stdout.close()  # type: ignore[union-attr]
            except OSError:
                pass
            self.proc.wait()
            self._close_sock()

    def _close_sock(self) -> None:
        if self._sock is not None:
            self._sock.close()

    def result(self) -> Any:
        """The function's value; waits for it. Raises :class:`LaneError` (why, one line; a lane
        started idle and never handed a call: no answer)."""
        if self._thread is None:
            raise LaneError(f"lane {self.name}: no call handed to it")
        self._thread.join()
        kind, value = self._answer[0], self._answer[1]
        self._answer = ("fail", f"lane {self.name}: result already taken")
        if kind != "ok":
            raise LaneError(str(value))
        return value

    def cancel(self) -> None:
        """Stop the lane (its result is not wanted) and wait for its process."""
        try:
            self.proc.kill()
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=10)
        else:
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()  # type: ignore[union-attr]
                except OSError:
                    pass
        self._close_sock()


#: Lanes :func:`warm` started, idle, until :func:`start` hands one a call (``warm=True``).
_WARM: list[Lane] = []
_WARM_AT_EXIT = False  # drop_warm is registered to run at exit


def warm(count: int, preload: tuple[str, ...]) -> int:
    """Start ``count`` idle lanes now (:class:`Lane` ``None``, with a socket for the descriptors of
    their calls) that import ``preload`` at once, for :func:`start` ``warm=True`` to hand calls to
    later: the lanes' start and imports paid while this process does other work (``ai4s-graph
    run``: its own imports, :mod:`ai4s_graph.cli.early`). Those no call takes are stopped by
    :func:`drop_warm` (at exit too). Returns how many started (a lane that cannot start is left out).
    Raises :class:`LaneError` for a ``preload`` that is not a tuple of module names."""
    global _WARM_AT_EXIT
    started = 0
    for _ in range(max(0, int(count))):
        try:
            _WARM.append(Lane(None, preload=preload, channel=True))
        except LaneError as e:
            if "preload" in str(e):
                raise
            continue
        started += 1
    if started and not _WARM_AT_EXIT:
        import atexit

        atexit.register(drop_warm)
        _WARM_AT_EXIT = True
    return started


def drop_warm() -> None:
    """Stop every warm lane no call took (:func:`warm`)."""
    while _WARM:
        _WARM.pop().cancel()


def start(fn: Callable[..., Any], *args: Any, pass_fds: tuple[int, ...] = (), warm: bool = False) -> Lane | None:
    """:class:`Lane` ``fn(*args)``, or None when it cannot start (the caller runs ``fn`` itself).
    ``args`` may hold :class:`Fd` markers (the lane gets the same open files). With ``warm`` a lane
    :func:`warm` started takes the call when one is still idle (its process alive), else a new lane
    starts."""
    while warm and _WARM:
        lane = _WARM.pop(0)
        try:
            lane.send(fn, *args)
            return lane
        except (NotPicklableError, DescriptorError):
            _WARM.insert(0, lane)  # no lane can take this call; the idle lane stays for another
            return None
        except LaneError:  # it ended meanwhile
            lane.cancel()
        except BaseException:
            lane.cancel()
            raise
    try:
        return Lane(fn, *args, pass_fds=pass_fds)
    except LaneError:
        return None


def take(lane: Lane | None, fn: Callable[..., Any], *args: Any) -> Any:
    """The lane's value, or ``fn(*args)`` run here when there is no lane or it gave no result (the
    same function and arguments the lane was started with: the same value)."""
    if lane is not None:
        try:
            return lane.result()
        except LaneError:
            pass
    return fn(*args)


#: prctl(2) option: the signal this process gets when its parent thread ends (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int | None) -> None:
    """Ask Linux for SIGKILL when the parent ends (a no-op elsewhere, or when libc has no prctl).
    ``parent``: the pid of the process that started this one; when it is no longer the parent (it
    died before the request took effect) exit at once."""
    import ctypes
    import ctypes.util
    import signal

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _local_fds(args: tuple, chan: int | None) -> tuple:
    """``args`` with each :class:`Fd` marker replaced by the number this lane holds that open file
    under: its own number when inherited (``chan`` None: a lane started for the call), else the
    descriptors received on the socket ``chan``, in the markers' order. Raises OSError when the
    socket does not give as many as there are markers."""
    marks = [i for i, a in enumerate(args) if isinstance(a, Fd)]
    if not marks:
        return args
    out = list(args)
    if chan is None:
        for i in marks:
            out[i] = args[i].n
        return tuple(out)
    import socket

    with socket.socket(fileno=os.dup(chan)) as sock:
        _, fds, _, _ = socket.recv_fds(sock, 16, len(marks))
    if len(fds) != len(marks):
        for fd in fds:
            os.close(fd)
        raise OSError(f"{len(fds)} descriptors received for {len(marks)}")
    for i, fd in zip(marks, fds):
        out[i] = fd
    return tuple(out)


def lane_main(parent: int | None = None, preload: tuple[str, ...] = (), nice: int = 0,
              chan: int | None = None) -> None:
    """A lane process's body: lower its priority by ``nice`` (``os.nice``; where refused, as it is),
    import the modules named in ``preload`` (one that fails to import is left to the function's own
    import to report), then read ``(fn, args)`` from stdin (its :class:`Fd` markers replaced by
    :func:`_local_fds`: from the socket ``chan`` of a warm lane), write ``("ok", value)`` or
    ``("fail", why)`` to the parent's pipe (the original stdout; the function's own prints go to
    ``/dev/null``). On Linux the lane is killed when its parent dies (``PR_SET_PDEATHSIG``,
    prctl(2): when the thread that started it ends; :func:`.onepass.read_rank`'s thread waits for
    its lanes), ``parent`` being the pid that started it: a run stopped mid-read leaves no lane
    reading on."""
    _die_with_parent(parent)
    import importlib

    out = os.fdopen(os.dup(1), "wb")  # the answer's pipe, before any import can write to fd 1
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    if nice > 0:
        try:
            os.nice(nice)
        except (OSError, OverflowError):
            pass
    for name in preload:  # before the call arrives: a lane started idle (Lane(None, preload=...))
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the function's own import raises it, inside the answer
            pass
    try:
        fn, args = pickle.load(sys.stdin.buffer)
        args = _local_fds(args, chan)
        answer: tuple = ("ok", fn(*args))
    except BaseException as e:  # noqa: BLE001 - everything is the parent's to judge
        answer = ("fail", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
    try:
        pickle.dump(answer, out, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - an unpicklable value: say so
        try:
            pickle.dump(("fail", f"result not picklable: {type(e).__name__}"), out)
        except OSError:
            return
    try:
        out.flush()
        out.close()
    except OSError:
        pass
