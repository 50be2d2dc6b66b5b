"""The ``ai4s-graph`` command line (typer).

Each sub-command lives in its own module ``ai4s_graph/cli_<name>.py`` exposing
``register(app)``; this file only assembles them.
"""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    name="ai4s-graph",
    help="Find out why a GPU training job is slow, with evidence you can check; then make it faster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

_COMMAND_MODULES = ("cli_run", "cli_trace", "cli_optimize", "cli_probe", "cli_cluster")

for _name in _COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"ai4s_graph.{_name}")
    except ModuleNotFoundError as _e:  # a command module not written yet
        if _e.name != f"ai4s_graph.{_name}":
            raise
        continue
    _mod.register(app)


def main() -> None:
    """Run the ``ai4s-graph`` command line. A usage error (unknown option, bad value) prints one
    ``error:`` line and a ``STATUS=fail`` line and exits 2."""
    try:  # typer ships its own copy of click
        from typer._click.exceptions import ClickException, UsageError
    except ImportError:  # pragma: no cover - typer versions that use click itself
        from click.exceptions import ClickException, UsageError

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
        print("STATUS=fail; reason=interrupted; re-run the same command to resume")
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
