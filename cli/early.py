"""What the command line starts before its own imports: for ``ai4s-graph run --perf-run DIR`` on a
directory that holds one trace long enough for the trace's lanes, the lanes' interpreters
(:func:`ai4s_graph.tools.trace.lanes.warm`), so that their start and imports (the readers' modules
and the rules' registry: ~0.45 s of CPU each on the project's machine, 2026-12-07) run while this
process imports the command line, the graph and the rules (~0.6 s there before ``run`` opens the
trace). ``run``'s prefetch (:func:`ai4s_graph.cli.run.prefetch_trace`) hands them their calls, and
the trace's file, over their sockets; the lanes it does not take are stopped then
(:func:`drop_unused`). Only the standard library, :mod:`ai4s_graph.tools.trace.lanes` and the trace
names are imported here; the arguments are read as typer will read them, and a guess that misses
(a trace the prefetch then does not read) costs only the lanes' start, never a result.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The modules a warm lane imports before its call comes: the readers' parts (:mod:`.onepass`) and
#: the rules' registry whose name filter the reader's and the counters' calls carry.
WARM_PRELOAD = ("ai4s_graph.tools.trace.onepass", "ai4s_graph.graph.rules.registry")
#: ``run`` options with which the prefetch reads no trace (the job is submitted, or the ranks go to
#: a SLURM array), or nothing runs at all (help).
NO_PREFETCH = frozenset({"--submit", "--slurm-array", "--help", "-h"})
#: The command line's own options that may come before ``run`` (cli/__init__.py ``_common``).
GLOBAL_FLAGS = frozenset({"-q", "--quiet"})


def perf_run_of(argv: list[str]) -> str | None:
    """The ``--perf-run`` value of a ``run`` command line (``--perf-run DIR`` or ``--perf-run=DIR``),
    None for another command, no such option or an option that stops the prefetch
    (:data:`NO_PREFETCH`)."""
    k = 1
    while k < len(argv) and argv[k] in GLOBAL_FLAGS:  # ai4s-graph -q run ...
        k += 1
    if k >= len(argv) or argv[k] != "run":
        return None
    got = None
    for i, a in enumerate(argv[k + 1:], start=k + 1):
        if a == "--":
            break
        if a in NO_PREFETCH:
            return None
        if a == "--perf-run" and i + 1 < len(argv):
            got = argv[i + 1]
        elif a.startswith("--perf-run="):
            got = a.split("=", 1)[1]
    return got or None


def single_trace(run_dir: str) -> Path | None:
    """The one rank trace of ``run_dir`` (as the launcher discovers them:
    :func:`~ai4s_graph.tools.trace.trace_files.run_traces`), None when there are none or several."""
    from ..tools.trace.trace_files import run_traces

    try:
        found = run_traces(run_dir)
    except OSError:
        return None
    return Path(run_dir, found[0]) if len(found) == 1 else None


def warm_trace_lanes(argv: list[str] | None = None) -> int:
    """Start the trace's warm lanes (:data:`WARM_PRELOAD`, :data:`~ai4s_graph.tools.trace.lanes.WARM_LANES`
    of them) when ``argv`` (default ``sys.argv``) is a ``run`` whose ``--perf-run`` holds one trace
    that the prefetch will read with lanes (:func:`~ai4s_graph.tools.trace.lanes.prefetch_for`).
    Returns how many started. Never raises."""
    try:
        run_dir = perf_run_of(list(sys.argv if argv is None else argv))
        if run_dir is None:
            return 0
        trace = single_trace(run_dir)
        if trace is None:
            return 0
        from ..tools.trace import lanes

        if not lanes.prefetch_for(trace):  # the prefetch's own condition
            return 0
        return lanes.warm(lanes.WARM_LANES, WARM_PRELOAD)
    except Exception:  # noqa: BLE001 - a head start only: the prefetch starts its own lanes otherwise
        return 0


def drop_unused() -> None:
    """Stop the warm lanes no call took (the prefetch is over); nothing when none were started."""
    lanes = sys.modules.get("ai4s_graph.tools.trace.lanes")
    if lanes is not None:
        lanes.drop_warm()
