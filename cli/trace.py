"""``ai4s-graph trace ...``: look at one PyTorch profiler trace from the command line.

``ai4s-graph trace timeline <trace> [--json] [--csv DIR] [--backend auto|stream|tracelens|tracelens-csv|hta|kineto]``
prints TraceLens's GPU timeline (computation, exposed communication, exposed memcpy, busy,
idle, total: ms and % of total), computed by the engine (one bounded-memory pass; a progress bar
on stderr when the pass takes more than ~2 s). ``--csv DIR`` also writes the engine's tables as
TraceLens-shaped CSVs (gpu_timeline, ops_summary_by_category, kernel_summary,
short_kernels_summary). Input-hygiene warnings (clipped overlaps, a non-steady-state window) go to
stderr. On bad input (a missing, empty, truncated or malformed trace, an unknown backend) it writes
one line ``error: <msg>`` to stderr, then ``STATUS=fail; reason=<msg>`` to stdout, and exits 2 (1 when
the CSVs cannot be written); never a traceback.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..state.status import StatusLine
from ..tools.errors import Ai4sError
from ..tools.trace.backends import BACKENDS, TIMELINE_ROWS, analyze_trace, check_timeline

trace_app = typer.Typer(help="Inspect PyTorch profiler (kineto) traces.", no_args_is_help=True)

#: Seconds a pass must run before the progress bar appears (short passes stay quiet).
PROGRESS_DELAY_S = 2.0


class _LazyProgress:
    """A rich progress bar (stderr, transient) that appears only once a pass has run
    :data:`PROGRESS_DELAY_S` seconds; used as the engine's ``progress(done, total)`` callback."""

    def __init__(self, label: str):
        self.label, self.t0, self.bar, self.task = label, time.monotonic(), None, None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.t0 < PROGRESS_DELAY_S:
                return
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


#: Exit status of a refused input (the project's convention for a refused invocation, README) and of
#: any other failure (the CSVs could not be written).
EXIT_INPUT, EXIT_OTHER = 2, 1


def _fail(msg: str, code: int = EXIT_INPUT) -> None:
    typer.echo(f"error: {msg}", err=True)
    typer.echo(StatusLine.make("fail", msg).format())
    raise typer.Exit(code=code)


@trace_app.command("timeline")
def timeline(
    trace: Path = typer.Argument(..., help="Trace file (*.json or *.json.gz)."),
    as_json: bool = typer.Option(False, "--json", help="Print the timeline rows as JSON only."),
    backend: str = typer.Option("auto", "--backend", help=f"One of: {', '.join(BACKENDS)} (auto = stream, the engine)."),
    totals: bool = typer.Option(False, "--totals", help="Also print total_comm_time and total_memcpy_time."),
    csv_dir: Path = typer.Option(None, "--csv", help="Write TraceLens-shaped CSVs of the engine's tables into DIR."),
) -> None:
    """GPU timeline of one trace, as TraceLens defines it (ms and % of total time)."""
    if backend not in BACKENDS:
        _fail(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    bar = _LazyProgress(f"reading {trace.name}")
    try:
        if backend in ("auto", "stream"):
            from ..tools.trace import engine

            analysis, kernel_rows = engine.analyze_with_tables(trace, progress=bar)
            check_timeline(analysis.timeline, trace)
        else:
            analysis, kernel_rows = analyze_trace(trace, backend=backend, progress=bar), None
    except Ai4sError as e:
        bar.close()
        _fail(str(e))
        return
    except Exception as e:  # noqa: BLE001 - an event no rule foresaw: one line, never a traceback
        bar.close()
        _fail(f"{trace.name}: malformed trace ({type(e).__name__}: {' '.join(str(e).split())[:160]})")
        return
    bar.close()
    if csv_dir is not None:
        from ..tools.trace import tables

        try:
            tables.write_tables(csv_dir, analysis, kernel_rows)
        except OSError as e:
            _fail(f"cannot write the CSVs: {e}", EXIT_OTHER)
            return
    for w in analysis.warnings:
        typer.echo(f"warning: {w}", err=True)
    if as_json:
        typer.echo(json.dumps(analysis.timeline_json(with_totals=totals)))
        return
    table = Table(title=Text(f"GPU timeline: {trace.name}"), caption=f"backend: {analysis.backend}")
    table.add_column("row")
    table.add_column("time (ms)", justify="right")
    table.add_column("% of total", justify="right")
    rows = TIMELINE_ROWS if totals else TIMELINE_ROWS[:6]
    for name in rows:
        r = analysis.timeline.get(name)
        if r is not None:
            table.add_row(name, f"{r.time_ms:.3f}", f"{r.percent:.2f}")
    Console().print(table)
    busy = analysis.timeline["busy_time"].percent
    extra = f"; {len(analysis.warnings)} input warning(s) on stderr" if analysis.warnings else ""
    typer.echo(StatusLine.make("ok", f"backend={analysis.backend}; busy {busy:.1f}% of "
                                     f"{analysis.timeline['total_time'].time_ms:.3f} ms{extra}").format())


def register(app: typer.Typer) -> None:
    """Add the ``trace`` sub-app to the main ``ai4s-graph`` app."""
    app.add_typer(trace_app, name="trace")
