"""``ai4s-graph diff <run A> <run B>``: compare two analysed runs (the ``--out`` directories of
``ai4s-graph run``): figure of merit with its noise band, timeline rows, top kernels, collectives,
telemetry and every claim; the optimizer's integrity guards decide whether the runs are
comparable, and an unlike pair is never called a regression. Writes ``diff.md`` and
``diff.json``. Exit codes (:data:`EXIT_CODES`, also in ``--help`` and the README): 0 = comparable,
no regression beyond noise; 1 = a regression beyond noise or a refused (unlike) pair; 2 = a write
refused or failed (a link where ``diff.md``/``diff.json`` or their folder would go, a full disk:
nothing is replaced); 3 = bad input (a directory that is not an analysed run, a malformed
``report.json``/``foms.json``/``manifest.json``, or one whose files are from different runs: issue 27
report 5 point 9; nothing is written). ``--json`` prints one JSON summary on stdout instead of the
text lines (:func:`summary`); ``-q`` prints only the STATUS line (and errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..state import StatusLine
from ..state.publish import UnsafePathError
from ..tools.errors import Ai4sError
from . import options

#: The exit codes of ``diff`` (issue 27 report 5 point 9: a malformed input has its own).
EXIT_OK, EXIT_REGRESSION, EXIT_WRITE, EXIT_BAD_INPUT = 0, 1, 2, 3
EXIT_CODES = (f"Exit codes: {EXIT_OK} = comparable, no regression beyond noise; {EXIT_REGRESSION} = a regression "
              f"beyond noise or a refused (unlike) pair; {EXIT_WRITE} = diff.md/diff.json could not be written (a link "
              f"there, a full disk: nothing replaced); {EXIT_BAD_INPUT} = bad input (not an analysed run, a malformed "
              "or inconsistent report.json/foms.json/manifest.json: nothing written).")


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
    """Compare two analysed runs (exit codes below)."""
    from ..tools.report import diff as D

    options.set_quiet(quiet)
    try:
        try:
            a, b = D.load_side(run_a), D.load_side(run_b)
            d = D.compare(a, b, noise_pct=noise_pct, top=top)
        except OSError as e:  # an unreadable input file
            raise D.InputError(f"cannot read the runs: {e}") from None
        except Ai4sError as e:
            raise D.InputError(str(e)) from None
        except (TypeError, ValueError, OverflowError, AttributeError, KeyError, IndexError) as e:
            # report.json is checked against the report model; foms.json, manifest.json and the
            # telemetry beside the runs are read as run writes them: another shape is bad input
            raise D.InputError("the runs' files hold a value of a type or size ai4s-graph run does not write "
                               f"({type(e).__name__}: {' '.join(str(e).split())[:120]}): edited or foreign files"
                               ) from None
        md, js = D.write_diff(d, out) if out is not None else D.write_diff(d, D.default_out(b, a), root=b.path)
    except (Ai4sError, OSError) as e:
        bad_input = isinstance(e, D.InputError) and not isinstance(e, UnsafePathError)
        msg = str(e) if isinstance(e, (Ai4sError, UnsafePathError)) else f"cannot write the diff: {e}"
        code = EXIT_BAD_INPUT if bad_input else EXIT_WRITE
        line = StatusLine.make("fail", msg).format()
        typer.echo(f"error: {msg}", err=True)
        if as_json:
            options.echo_json("diff", line, verdict=None, exit_code=code, error=msg)
        else:
            typer.echo(line)
        raise typer.Exit(code)
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
    app.command("diff", epilog=EXIT_CODES)(diff)
