"""``ai4s-graph cluster install|start|stop|status``: the local 2-node SLURM cluster (+ VictoriaMetrics
on 127.0.0.1:18428) for trying the tool and for the tests. A thin wrapper over
``scripts/local-cluster.sh``; the cluster directory is ``$AI4S_CLUSTER_DIR`` (default
``/var/lib/ai4s-local-cluster``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import typer

from .. import REPO_ROOT


def script_path() -> Path:
    """``scripts/local-cluster.sh`` of this checkout (``$AI4S_LOCAL_CLUSTER_SCRIPT`` overrides)."""
    env = os.environ.get("AI4S_LOCAL_CLUSTER_SCRIPT")
    if env:
        return Path(env)
    root = REPO_ROOT or Path(__file__).resolve().parent.parent
    return root / "scripts" / "local-cluster.sh"


def run_script(action: str, *, fresh: bool = False, keep_jobs: bool = False) -> int:
    """Run ``local-cluster.sh <action>`` with the terminal attached; returns its exit code."""
    p = script_path()
    if not p.is_file():
        typer.echo(f"error: {p} not found (the local cluster script ships with the source checkout)", err=True)
        return 2
    env = dict(os.environ)
    if fresh:
        env["FRESH"] = "1"
    if keep_jobs:
        env["KEEP_JOBS"] = "1"
    return subprocess.run(["bash", str(p), action], env=env).returncode


def register(app: typer.Typer) -> None:
    """Add the ``cluster`` command group to ``app``."""
    cluster = typer.Typer(help="A real local 2-node SLURM cluster (node1, node2) with sacct, and a VictoriaMetrics "
                               "on 127.0.0.1:18428, for trying ai4s-graph without a cluster.",
                          no_args_is_help=True)

    @cluster.command("install")
    def install() -> None:
        """apt-get install slurm-wlm slurmdbd munge mariadb-server victoria-metrics (root)."""
        raise typer.Exit(run_script("install"))

    @cluster.command("start")
    def start(fresh: bool = typer.Option(False, "--fresh", help="wipe the accounting DB, SLURM state and TSDB first")) -> None:
        """Start munged, mariadbd, slurmdbd, slurmctld, slurmd node1+node2 and victoria-metrics (idempotent)."""
        raise typer.Exit(run_script("start", fresh=fresh))

    @cluster.command("stop")
    def stop(keep_jobs: bool = typer.Option(False, "--keep-jobs", help="do not cancel running jobs first")) -> None:
        """Cancel all jobs, then stop every daemon through its pid file."""
        raise typer.Exit(run_script("stop", keep_jobs=keep_jobs))

    @cluster.command("status")
    def status() -> None:
        """One line per daemon (up/down), then sinfo; exit 3 when any daemon is down."""
        raise typer.Exit(run_script("status"))

    app.add_typer(cluster, name="cluster")
