"""The ``ai4s-graph`` command line (typer).

Each sub-command lives in its own module ``ai4s_graph/cli_<name>.py`` exposing
``register(app)``; this file only assembles them.
"""

from __future__ import annotations

import importlib

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


def main() -> None:  # pragma: no cover - entry point
    """Run the ``ai4s-graph`` command line."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
