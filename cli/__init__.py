"""The ``ai4s-graph`` command line (typer).

Each sub-command lives in its own module of this package (``cli/run.py``, ``cli/trace.py``,
``cli/optimize.py``, ``cli/diff.py``, ``cli/health.py``, ``cli/cluster.py``) exposing ``register(app)``; this file
only assembles them. The CLI is the top layer: cli -> graph -> tools -> state, never upward.
"""

from __future__ import annotations

import sys

from . import early

early.warm_trace_lanes(sys.argv)  # before the imports below: `run` on one long trace (cli/early.py)

import typer  # noqa: E402

app = typer.Typer(
    name="ai4s-graph",
    help="Find out why a GPU training job is slow, with evidence you can check; then make it faster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

from typing import Optional  # noqa: E402

from . import cluster, diff, health, optimize, options, run, trace  # noqa: E402


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"ai4s-graph {__version__}")
        raise typer.Exit(0)


@app.callback()
def _common(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True,
                                           help="Print the version and exit."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print only STATUS lines and errors."),
) -> None:
    """Find out why a GPU training job is slow, with evidence you can check; then make it faster."""
    options.reset(quiet)


for _mod in (run, trace, optimize, diff, health, cluster):
    _mod.register(app)


def main() -> None:
    """Run the ``ai4s-graph`` command line. A usage error (unknown option, bad value) prints one
    ``error:`` line and a ``STATUS=fail`` line and exits 2; Ctrl-C, ``STATUS=fail; reason=interrupted
    (SIGINT)`` and exit 130 (``run`` stops by itself: :class:`~.run.SignalStop`)."""
    try:  # typer ships its own copy of click
        from typer._click.exceptions import ClickException, UsageError
    except ImportError:  # pragma: no cover - typer versions that use click itself
        from click.exceptions import ClickException, UsageError

    run.SignalStop.hold_after_settle = True  # this process ends after the command's final line
    try:
        rv = app(standalone_mode=False)
    except UsageError as e:
        msg = " ".join(e.format_message().split()) or "no command given"
        print(f"error: {msg} (see --help)", file=sys.stderr)
        print(f"STATUS=fail; reason={msg}")
        sys.exit(2)
    except ClickException as e:
        msg = " ".join(e.format_message().split())
        print(f"error: {msg}", file=sys.stderr)
        print(f"STATUS=fail; reason={msg}")
        sys.exit(1)
    except KeyboardInterrupt:
        rv = 130
    if rv == 130:  # Ctrl-C: typer turns the KeyboardInterrupt into exit 130 (``run`` exits by itself: SignalStop)
        print("error: interrupted (SIGINT)", file=sys.stderr)
        print("STATUS=fail; reason=interrupted (SIGINT)")
    sys.exit(rv if isinstance(rv, int) else 0)


def entry() -> None:
    """The ``ai4s-graph`` executable (the console script, ``python -m ai4s_graph.cli``): :func:`main`,
    then the process ends without the interpreter's teardown (:func:`fast_exit`). An exception other
    than SystemExit propagates as from :func:`main` (Python prints it and exits 1)."""
    try:
        main()
        code: object = 0
    except SystemExit as e:
        code = e.code
    fast_exit(code)


def fast_exit(code: object) -> None:
    """End this process with ``code`` (SystemExit's: None is 0, an int itself, anything else printed
    on stderr and 1) as the interpreter would, less its teardown: the threads' shutdown (non-daemon
    threads joined, ``concurrent.futures``' exit hooks), the :mod:`atexit` handlers, stdout and
    stderr flushed (a flush that fails: 120, as CPython), then ``os._exit``. What is skipped is the
    freeing of every object and module: after ``run`` on the replicated 176 MB trace, 0.35-0.5 s on
    the 16-core device between the final line and the exit (three runs, 2026-12-03) and 0.6 s on the
    project's 2-core machine, against 0.02 s with this (the same run, measured both ways)."""
    import atexit
    import os
    import threading

    if code is None:
        rc = 0
    elif isinstance(code, int):
        rc = code
    else:
        print(code, file=sys.stderr)
        rc = 1
    shutdown = getattr(threading, "_shutdown", None)  # what Py_FinalizeEx runs first (CPython)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            rc = rc or 120
    os._exit(rc)


if __name__ == "__main__":  # pragma: no cover
    entry()
