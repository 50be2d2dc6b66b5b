"""``ai4s-graph optimize``: the perf-optimizer loop (apply a lever, re-run, extract the FOM,
accept or revert), checkpointed so ``--resume loop-<uuid>`` continues where it stopped.

Prints each node's ``<node>: STATUS=...`` line as it ends, and a last ``STATUS=`` line for the
whole loop; exits 1 when the loop failed (bad input, baseline not measurable, wait timeout) and 2
when it refused to go on (a checkpoint that does not deserialize to the loop's types, a link where
a loop file would be written).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..state import StatusLine
from ..state.publish import UnsafePathError
from ..state.status import one_line
from ..tools.errors import Ai4sError


def _fail(msg: str, code: int = 1) -> None:
    typer.echo(f"error: {one_line(msg)}", err=True)
    typer.echo(StatusLine.make("fail", msg).format())
    raise typer.Exit(code)


def _found_cluster_config() -> bool:
    import os

    from ..tools.slurm.client import DEFAULT_CONFIG_NAMES

    return bool(os.environ.get("AI4S_CLUSTER_CONFIG")) or any(Path(n).is_file() for n in DEFAULT_CONFIG_NAMES)


def optimize(
    model: Optional[str] = typer.Option(None, "--model", help="Model of the catalog (cpu-toy, gnn, hydragnn, orbit2, vit, workload: tools/levers/catalogs/)."),
    catalog: Optional[Path] = typer.Option(None, "--catalog", help="Lever catalog YAML (default: the bundled levers/<model>.yaml)."),
    iterations: int = typer.Option(3, "--iterations", min=0, help="Lever iterations to run (the baseline is extra)."),
    node_hours: Optional[float] = typer.Option(None, "--node-hours", help="Stop once this many node-hours are used."),
    cluster_config: Optional[Path] = typer.Option(None, "--cluster-config", help="Cluster config YAML (.cluster-config.yaml)."),
    report: Optional[Path] = typer.Option(None, "--report", help="An analysis report.json: its bottleneck class steers the picker."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Resume loop-<uuid> (a path or a name under --loop-root)."),
    loop_root: Path = typer.Option(Path("ai4s-loops"), "--loop-root", help="Where loop-<uuid>/ directories go."),
    baseline_runs: int = typer.Option(2, "--baseline-runs", min=2, help="Baseline repetitions (>= 2: the noise band)."),
    executor: str = typer.Option(
        "auto", "--executor", help="slurm (sbatch/sacct), local (a subprocess on this machine), or auto: slurm "
                                   "when a cluster config is given or found (--cluster-config, $AI4S_CLUSTER_CONFIG, "
                                   "./.cluster-config.yaml), else local."),
    analyze: bool = typer.Option(
        False, "--analyze/--no-analyze", help="Run the analysis on the baseline and on each new best: its verified "
                                              "bottleneck class and named cause pick and order the candidate levers (off unless given)."),
    shared_dir: Optional[Path] = typer.Option(None, "--shared-dir", help="Local executor: where runs go "
                                              "(<dir>/models/<model>/perf-runs/<id>; default $AI4S_SHARED_DIR, else "
                                              "<loop-root>/shared)."),
    no_pin: bool = typer.Option(False, "--no-pin", help="Do not pin replicates and levers to the baseline's nodes."),
    wait_timeout: Optional[float] = typer.Option(
        None, "--wait-timeout", help="Seconds to wait for one job before stopping (default 900; on --resume "
                                     "it replaces the saved value for a loop that stopped on TIMEOUT_WAITING)."),
    llm: str = typer.Option("none", "--llm", help="Lever picker: none (rules) or anthropic (an LLM; --llm-model)."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="Model string provider:name for --llm."),
) -> None:
    """Run the perf-optimizer loop on a SLURM cluster or on this machine (--executor)."""
    from ..graph.checkpoint import CheckpointRefusedError
    from ..graph.optimize import graph as O
    from ..tools.levers.catalog import bundled_catalog

    def show(name: str, line: str) -> None:
        typer.echo(f"{name}: {one_line(line)}")

    try:
        if resume:
            d = O.find_loop(resume, loop_root)
            req = O.load_request(d)
            if wait_timeout is not None:
                req = req.model_copy(update={"wait_timeout_s": wait_timeout})
            typer.echo(f"resuming loop {req.loop_id} in {d}")
        else:
            if not model:
                _fail("--model is required (or --resume loop-<uuid>)")
            cat = catalog or bundled_catalog(model)
            kind = executor if executor != "auto" else ("slurm" if cluster_config or _found_cluster_config() else "local")
            req = O.new_loop(model=model, catalog_path=cat, loop_root=loop_root, iterations=iterations,
                             node_hours=node_hours, cluster_config=str(cluster_config) if cluster_config else None,
                             report=str(report) if report else None, baseline_runs=baseline_runs,
                             wait_timeout_s=wait_timeout if wait_timeout is not None else 900.0,
                             executor=kind, shared_dir=shared_dir, analyze=analyze, pin_placement=not no_pin)
            typer.echo(f"executor: {kind}{'' if executor != 'auto' else ' (auto: ' + ('cluster config found' if kind == 'slurm' else 'no cluster config') + ')'}")
            typer.echo(f"loop {req.loop_id} in {req.loop_dir}")
        from ..graph.agents.picker import make_picker

        picker = make_picker(llm, report_path=req.report, loop_dir=req.loop_dir, model=llm_model) if llm != "none" else None
        final = O.run_loop(req, picker=picker, on_status=show, resume=bool(resume))
    except (CheckpointRefusedError, UnsafePathError) as e:  # a crafted checkpoint, a link in the loop dir: refused
        _fail(str(e), 2)
        return
    except Ai4sError as e:
        _fail(str(e))
        return
    last = (final.get("statuses") or {}).get("report")
    if last is None:
        init = (final.get("statuses") or {}).get("init", "")
        miss = (final.get("missing") or ["loop did not finish"])[-1]
        _fail(miss if "fail" in init or final.get("missing") else "loop did not finish")
    typer.echo(f"loop_report: {Path(req.loop_dir) / 'loop_report.md'}")
    typer.echo(last)
    if StatusLine.parse(last).status.value == "fail":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``optimize`` to the ``ai4s-graph`` app."""
    app.command("optimize")(optimize)
