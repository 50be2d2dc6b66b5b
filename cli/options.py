"""Options every ``ai4s-graph`` command shares: ``-q/--quiet`` (only STATUS lines and errors on the
terminal), set once by the app's callback (``ai4s-graph -q <command>``) or by a command's own
``-q``; and the one JSON summary printer of ``--json``."""

from __future__ import annotations

from typing import Any

import orjson
import typer

_STATE = {"quiet": False}

#: Version of the ``--json`` summaries of ``run``, ``diff`` and ``eval-cluster --check``: bumped when
#: a key changes meaning or goes away (adding a key keeps it).
JSON_SCHEMA_VERSION = 1


def reset(quiet: bool = False) -> None:
    """Start of an invocation (the app's callback): quiet mode is the app's ``-q`` and nothing else
    (a test runner invokes the app many times in one process)."""
    _STATE["quiet"] = bool(quiet)


def set_quiet(on: bool) -> None:
    """Turn quiet mode on (a command's ``-q`` can only add to the app's)."""
    if on:
        _STATE["quiet"] = True


def quiet() -> bool:
    """True under ``-q``: print STATUS lines and errors only."""
    return _STATE["quiet"]


def say(text: str, *, err: bool = False) -> None:
    """Print ``text`` unless quiet (progress, summaries, paths, notes; never STATUS lines or errors)."""
    if not _STATE["quiet"]:
        typer.echo(text, err=err)


def echo_json(command: str, status: str, **fields: Any) -> None:
    """Print one JSON object on stdout: ``schema_version``, ``command``, ``status`` (the STATUS line)
    and ``fields``; NaN/inf become null."""
    # orjson writes NaN and infinities as null (JSON has neither)
    typer.echo(orjson.dumps({"schema_version": JSON_SCHEMA_VERSION, "command": command, "status": status, **fields},
                            default=str).decode())


def echo_refusal(command: str, reason: str, exit_code: int) -> None:
    """A refused invocation under ``--json`` (bad input): one JSON object on stdout instead of the
    plain STATUS line (issue 27 report 5 point 4), :func:`echo_json`'s keys with ``status`` the
    ``STATUS=fail; reason=...`` line, ``outcome`` ``"fail"``, ``reason`` (one line) and the command's
    ``exit_code`` (unchanged by ``--json``). The caller still writes ``error: <reason>`` on stderr."""
    from ..state.status import StatusLine, one_line

    line = StatusLine.make("fail", reason).format()
    echo_json(command, line, outcome="fail", reason=one_line(reason), exit_code=exit_code)
