"""``ai4s-graph diff <run A> <run B>``: compare two analysed runs (the ``--out`` directories of
``ai4s-graph run``): figure of merit with its noise band, timeline rows, top kernels, collectives,
telemetry and every claim; the optimizer's integrity guards decide whether the runs are
comparable, and an unlike pair is never called a regression. Writes ``diff.md`` and
``diff.json``; exit 0 = comparable, no regression beyond noise; 1 = regression, refused pair or
bad input (see :mod:`ai4s_graph.tools.report.diff`); 2 = a write refused (a link where
``diff.md``/``diff.json`` or their folder would go: nothing is written)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..state import StatusLine
from ..state.publish import UnsafePathError
from ..tools.errors import Ai4sError


def diff(
    run_a: Path = typer.Argument(..., help="Analysed run A (the reference): an `ai4s-graph run --out` directory."),
    run_b: Path = typer.Argument(..., help="Analysed run B (the candidate)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where diff.md / diff.json go (default: <B>/diff-<A's job>)."),
    noise_pct: Optional[float] = typer.Option(
        None, "--noise-pct", min=0.0, help="Noise floor in percent (default 2; e.g. a loop's measured baseline spread)."),
    top: int = typer.Option(10, "--top", min=1, help="Top kernels per run."),
) -> None:
    """Compare two analysed runs; exit 1 on a regression beyond noise or an unlike pair."""
    from ..tools.report import diff as D

    try:
        a, b = D.load_side(run_a), D.load_side(run_b)
        d = D.compare(a, b, noise_pct=noise_pct, top=top)
        md, js = D.write_diff(d, out) if out is not None else D.write_diff(d, D.default_out(b, a), root=b.path)
    except UnsafePathError as e:  # a link where diff.md/diff.json would go: refused, nothing written
        typer.echo(f"error: {e}", err=True)
        typer.echo(StatusLine.make("fail", str(e)).format())
        raise typer.Exit(2)
    except Ai4sError as e:
        typer.echo(f"error: {e}", err=True)
        typer.echo(StatusLine.make("fail", str(e)).format())
        raise typer.Exit(1)
    f = d["fom"]
    head = (f"{f['name']} {f['improvement_pct']:+.2f}% (noise {f['noise_pct']:.2f}%)" if f.get("name") else "no FOM")
    typer.echo(f"diff: {md}")
    typer.echo(f"diff.json: {js}")
    if d["verdict"] == "not-comparable":
        typer.echo(StatusLine.make("partial", f"not comparable, no regression claimed: {'; '.join(d['refused'])[:300]}").format())
    else:
        typer.echo(StatusLine.make("ok" if d["exit_code"] == 0 else "fail",
                                   f"{d['verdict']}: {head}; {len(d['claims_moved'])} claims moved beyond noise").format())
    raise typer.Exit(d["exit_code"])


def register(app: typer.Typer) -> None:
    """Add ``diff`` to the ``ai4s-graph`` app."""
    app.command("diff")(diff)
