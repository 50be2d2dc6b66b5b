"""``ai4s-graph diff <run A> <run B>``: compare two analysed runs (the ``--out`` directories of
``ai4s-graph run``): figure of merit with its noise band, timeline rows, top kernels, collectives,
telemetry and every claim; the optimizer's integrity guards decide whether the runs are
comparable, and an unlike pair is never called a regression. Writes ``diff.md`` and
``diff.json``; exit 0 = comparable, no regression beyond noise; 1 = regression, refused pair or
bad input (see :mod:`ai4s_graph.tools.report.diff`); 2 = a write refused (a link where
``diff.md``/``diff.json`` or their folder would go: nothing is written). ``--json`` prints one JSON
summary on stdout instead of the text lines (:func:`summary`); ``-q`` prints only the STATUS line
(and errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..state import StatusLine
from ..state.publish import UnsafePathError
from ..tools.errors import Ai4sError
from . import options


def diff(
    run_a: Path = typer.Argument(..., help="Analysed run A (the reference): an `ai4s-graph run --out` directory."),
    run_b: Path = typer.Argument(..., help="Analysed run B (the candidate)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where diff.md / diff.json go (default: <B>/diff-<A's job>)."),
    noise_pct: Optional[float] = typer.Option(
        None, "--noise-pct", min=0.0, help="Noise floor in percent (default 2; e.g. a loop's measured baseline spread)."),
    top: int = typer.Option(10, "--top", min=1, help="Top kernels per run."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON summary on stdout (schema_version 1)."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print only the STATUS line and errors."),
) -> None:
    """Compare two analysed runs; exit 1 on a regression beyond noise or an unlike pair."""
    from ..tools.report import diff as D

    options.set_quiet(quiet)
    try:
        a, b = D.load_side(run_a), D.load_side(run_b)
        d = D.compare(a, b, noise_pct=noise_pct, top=top)
        md, js = D.write_diff(d, out) if out is not None else D.write_diff(d, D.default_out(b, a), root=b.path)
    except (Ai4sError, OSError) as e:
        refused = isinstance(e, UnsafePathError)  # a link where diff.md/diff.json would go: nothing written
        msg = str(e) if isinstance(e, (Ai4sError, UnsafePathError)) else f"cannot write the diff: {e}"
        line = StatusLine.make("fail", msg).format()
        typer.echo(f"error: {msg}", err=True)
        if as_json:
            options.echo_json("diff", line, verdict=None, exit_code=2 if refused else 1, error=msg)
        else:
            typer.echo(line)
        if refused:
            raise typer.Exit(2)
        raise typer.Exit(1)
    line = StatusLine.make(*D.status_reason(d))
    if as_json:
        options.echo_json("diff", line.format(), **summary(d, md, js))
    else:
        options.say(f"diff: {md}")
        options.say(f"diff.json: {js}")
        for c in d["contradictions"]:  # none for a refused pair: it prints only the refusal
            options.say(f"contradiction: {c}", err=True)
        typer.echo(line.format())
    raise typer.Exit(d["exit_code"])


def summary(d: dict, md: Path, js: Path) -> dict:
    """The stable part of a diff for ``--json``: verdict, exit code, comparability and refusals, the
    verdict FOM (name, direction, unit, A, B, improvement and noise in percent, the change in words:
    :func:`~ai4s_graph.tools.report.diff.change_words`), contradictions,
    the bottleneck classes and the files written."""
    f = d["fom"]
    return {"verdict": d["verdict"], "exit_code": d["exit_code"], "comparable": d["comparable"],
            "refused": d["refused"], "a": d["a"]["jobid"], "b": d["b"]["jobid"],
            "fom": {k: f.get(k) for k in ("name", "direction", "unit", "a", "b", "improvement_pct", "change", "noise_pct")},
            "contradictions": d["contradictions"], "bottleneck": d["bottleneck"],
            "claims_moved": len(d["claims_moved"]), "files": {"diff_md": str(md), "diff_json": str(js)}}


def register(app: typer.Typer) -> None:
    """Add ``diff`` to the ``ai4s-graph`` app."""
    app.command("diff")(diff)
