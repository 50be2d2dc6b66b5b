"""``ai4s-graph trace ...``: look at one PyTorch profiler trace from the command line.

``ai4s-graph trace timeline <trace> [--json] [--backend auto|tracelens|tracelens-csv|hta|kineto]``
prints TraceLens's GPU timeline (computation, exposed communication, exposed memcpy, busy,
idle, total: ms and % of total). On bad input it writes ``error: <msg>`` to stderr, then
``STATUS=fail; reason=<msg>`` to stdout, and exits 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..state.status import StatusLine
from ..tools.errors import Ai4sError
from ..tools.trace.backends import BACKENDS, TIMELINE_ROWS, analyze_trace

trace_app = typer.Typer(help="Inspect PyTorch profiler (kineto) traces.", no_args_is_help=True)


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    typer.echo(StatusLine.make("fail", msg).format())
    raise typer.Exit(code=1)


@trace_app.command("timeline")
def timeline(
    trace: Path = typer.Argument(..., help="Trace file (*.json or *.json.gz)."),
    as_json: bool = typer.Option(False, "--json", help="Print the timeline rows as JSON only."),
    backend: str = typer.Option("auto", "--backend", help=f"One of: {', '.join(BACKENDS)}."),
    totals: bool = typer.Option(False, "--totals", help="Also print total_comm_time and total_memcpy_time."),
) -> None:
    """GPU timeline of one trace, as TraceLens defines it (ms and % of total time)."""
    if backend not in BACKENDS:
        _fail(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    try:
        analysis = analyze_trace(trace, backend=backend)
    except Ai4sError as e:
        _fail(str(e))
        return
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
    typer.echo(StatusLine.make("ok", f"backend={analysis.backend}; busy {busy:.1f}% of {analysis.timeline['total_time'].time_ms:.3f} ms").format())


def register(app: typer.Typer) -> None:
    """Add the ``trace`` sub-app to the main ``ai4s-graph`` app."""
    app.add_typer(trace_app, name="trace")
