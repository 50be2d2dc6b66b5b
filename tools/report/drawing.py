"""The report's figures drawn side by side, each in a process of its own (issue 29, the ``run`` side).

**Why.** The synthesizer drew its three figures one after the other in the graph's process: on the
replicated 176 MB trace (``bench/make_long_trace.py``) ``run``'s synthesizer took 2.3-3.1 s of the
run's 10.6-11.3 s on the 16-core device (three runs, 2026-12-03, the node's STATUS lines timed from
the command's start), and under cProfile on the project's 2-core machine 6.6 of its 7.4 s were the
figures (matplotlib's import 1.2 s, the step breakdown 2.5 s, the GPU breakdown 1.5 s, the
telemetry 1.35 s) and the annotated trace (1.3 s). Each figure depends only on its own picklable
input, so each can be drawn in a lane (:class:`~ai4s_graph.tools.trace.lanes.Lane`: a fresh
``python -c`` process, its answer a pickle) while this process writes the annotated trace; the PNG
bytes are the same as drawn here (the same matplotlib, the same defaults, Agg's rendering has no
state across figures; ``tests/test_drawing.py`` compares them byte for byte).

**When** (:func:`lanes_on`): ``AI4S_FIGURE_LANES`` when set (``0``: never, ``1``: always, the tests'
switch); else on a process that may run on at least :data:`MIN_CPUS` CPUs and is not a
``multiprocessing`` worker, while it writes the annotated copy of a trace long enough for the
trace's own lanes (:func:`~ai4s_graph.tools.trace.lanes.lanes_for` of that trace): the lanes pay
only while this process has that to do meanwhile. On the device's 20 MB one-rank run of the
bench's cost curve (``bench/RESULTS.md``, 2026-12-04) they left the wall time at 4.9 s and took
the run's CPU time from 7.2 to 12.8 s and its peak RSS (summed) from 196 to 385 MiB. Where a lane
cannot start or gives no answer, the figure is drawn here, as before (the same function and
arguments: the same PNG or the same error).

**Early start** (:func:`prestart`): ``run`` starts the figures' lanes idle as the trace's read
starts, when the same :func:`lanes_on` holds; each imports this module and matplotlib and waits,
and :class:`Drawing` hands it its figure: the figures then cost the synthesizer their drawing only.

**Cost:** a lane imports this module and matplotlib (~50 MiB of RSS each); lanes started early
hold it through the trace's read, so they add to the read's peak.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

from ..trace import lanes
from . import plots

#: Environment variable: ``0`` draws every figure in this process, ``1`` always in lanes.
FIGURE_LANES_ENV = "AI4S_FIGURE_LANES"
#: CPUs from which figures are drawn in lanes by default: three lanes and this process's annotated
#: trace each want one. On the project's 2-core machine the lanes' starts and three imports of
#: matplotlib (~0.5 s of CPU each there) cost about what drawing them one after another saves.
MIN_CPUS = 4

#: The figures a lane may draw, by name (a lane is handed the name, never a callable).
FIGURES: dict[str, Callable[..., Path]] = {
    "gpu_breakdown": plots.plot_gpu_breakdown,
    "telemetry": plots.plot_telemetry,
    "step_breakdown": plots.plot_step_breakdown,
}


#: What a figure's lane imports before its call arrives (:func:`prestart`): this module and the
#: matplotlib modules :func:`.plots._figure` and :func:`.plots._save` import. Measured on the
#: project's 2-core machine (2026-12-07, a small bar chart drawn and saved as PNG in a fresh
#: process, two runs each): 0.49-0.58 s with nothing imported before, 0.05 s after these (their
#: import: 0.38-0.44 s); adding ``matplotlib.pyplot``, ``matplotlib.font_manager`` or
#: ``PIL.PngImagePlugin`` changed neither figure.
PRELOAD = ("ai4s_graph.tools.report.drawing", "matplotlib.figure", "matplotlib.backends.backend_agg")

#: Niceness the idle lanes run at (:func:`prestart`): they start while the trace's lanes and their
#: workers hold the CPUs, so their imports yield to the read; the figures are drawn after the read,
#: on CPUs then free, where a lower priority costs nothing. Measured: bench/RESULTS.md (2026-12-07).
IDLE_NICE = 10

_idle: list[lanes.Lane] = []
_idle_lock = threading.Lock()


def prestart(annotating: str | os.PathLike | None) -> int:
    """Start one idle lane per figure of :data:`FIGURES` (:class:`~ai4s_graph.tools.trace.lanes.Lane`
    with no call, :data:`PRELOAD` imported) where :func:`lanes_on` holds for the trace at
    ``annotating``: ``run`` calls it as the trace's read starts (``cli/run.py``), so that the
    lanes' start and matplotlib's import are paid during the read, not after it; :class:`Drawing`
    hands each its figure. Call it from a thread that outlives the figures (the lanes die with the
    thread that started them, :func:`~ai4s_graph.tools.trace.lanes.lane_main`); lanes no figure
    took are stopped by :func:`drop_idle`. Returns how many started. Never raises."""
    if not lanes_on(annotating):
        return 0
    started = []
    for _ in FIGURES:
        try:
            started.append(lanes.Lane(None, preload=PRELOAD, nice=IDLE_NICE))
        except lanes.LaneError:
            break
    with _idle_lock:
        _idle.extend(started)
    return len(started)


def drop_idle() -> None:
    """Stop the idle lanes :func:`prestart` started that no figure took."""
    with _idle_lock:
        left = _idle[:]
        del _idle[:]
    for lane in left:
        lane.cancel()


def _lane(name: str, args: tuple, kwargs: dict[str, Any]) -> lanes.Lane | None:
    """A lane drawing ``name``: an idle one of :func:`prestart` handed the call, else one started
    now; None when none starts (drawn here then)."""
    while True:
        with _idle_lock:
            lane = _idle.pop(0) if _idle else None
        if lane is None:
            return lanes.start(draw, name, args, kwargs)
        try:
            lane.send(draw, name, args, kwargs)
            return lane
        except lanes.NotPicklableError:  # no lane can take it: drawn here, the idle lane kept for another
            with _idle_lock:
                _idle.insert(0, lane)
            return None
        except lanes.LaneError:  # it ended meanwhile
            lane.cancel()


def lanes_on(annotating: str | os.PathLike | None = None) -> bool:
    """Whether :class:`Drawing` draws in lanes while this process writes the annotated copy of the
    trace at ``annotating`` (None: no annotated trace is written; see the module docstring). Never
    raises."""
    import multiprocessing

    env = os.environ.get(FIGURE_LANES_ENV, "").strip()
    if env:
        return env == "1"
    if annotating is None or multiprocessing.parent_process() is not None or lanes.usable_cpus() < MIN_CPUS:
        return False
    return lanes.lanes_for(annotating)


def draw(name: str, args: tuple, kwargs: dict[str, Any]) -> list[tuple[str, bytes]]:
    """A lane's body: the figure ``name`` of :data:`FIGURES` drawn with ``args`` and ``kwargs`` into
    memory (:func:`.plots.staged`); returns ``[(path, PNG bytes)]``. Raises what the figure raises
    (InputError for empty or malformed input) and KeyError for a name not in :data:`FIGURES`."""
    with plots.staged() as files:
        FIGURES[name](*args, **kwargs)
    return [(str(p), data) for p, data in files]


class Drawing:
    """One figure of :data:`FIGURES`, started now: in a lane when ``lane`` (None: :func:`lanes_on`
    without an annotated trace) and it starts, else drawn here at once (as a plain call of the figure would be). :meth:`result` gives what the
    figure's call gives (its path) or raises what it raises, and files the PNG where a call made now
    would (staged with the report, :func:`.plots.staged`, else published at the path)."""

    def __init__(self, name: str, *args: Any, lane: bool | None = None, **kwargs: Any) -> None:
        if name not in FIGURES:
            raise KeyError(f"no figure named {name!r}")
        self.name, self.args, self.kwargs = name, args, kwargs
        in_lane = lanes_on() if lane is None else lane  # None: only where AI4S_FIGURE_LANES=1
        self.lane = _lane(name, args, kwargs) if in_lane else None
        self._path: Path | None = None
        self._error: BaseException | None = None
        if self.lane is None:
            self._draw_here()

    def _draw_here(self) -> None:
        try:
            self._path = FIGURES[self.name](*self.args, **self.kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised by result(), where a plain call would raise it
            self._error = e

    def result(self) -> Path:
        """The figure's path; waits for its lane (one that gave no answer: drawn here now). Raises what
        the figure raises."""
        if self.lane is not None:
            lane, self.lane = self.lane, None
            try:
                files = lane.result()
            except lanes.LaneError:  # its own error too: drawn here, raising it as a plain call does
                self._draw_here()
            else:
                for p, data in files:
                    plots.keep_png(Path(p), data)
                self._path = Path(files[-1][0])
        if self._error is not None:
            raise self._error
        assert self._path is not None
        return self._path
