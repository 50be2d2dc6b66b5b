"""``ai4s-graph probe`` (node health, seed 000 lesson 19) and ``ai4s-graph eval-cluster``
(acceptance evaluation and report, seed 003)."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import List, Optional

import typer

from ..tools.errors import InputError
from rich.console import Console

err = Console(stderr=True, markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the ``probe`` and ``eval-cluster`` commands to ``app``."""

    @app.command("probe")
    def probe(
        mounts: Optional[List[str]] = typer.Option(None, "--mounts", help="LABEL=PATH (or PATH) to write-probe; repeatable. "
                                                   "Default: $HOME, $AI4S_SHARED_DIR, the container image directory."),
        out: Path = typer.Option(Path("probe-out"), "--out", help="Directory for node_health_probe.txt/.json and parts/."),
        node: Optional[str] = typer.Option(None, "--node", help="Node name (default: $SLURMD_NODENAME or hostname)."),
        gpu: bool = typer.Option(True, "--gpu/--no-gpu", help="Run the GPU checks (torch)."),
        gather: Optional[Path] = typer.Option(None, "--gather", help="Only merge the parts already under DIR."),
        stream_mib: int = typer.Option(256, "--stream-mib", help="STREAM array size in MiB (3 arrays)."),
        baseline: Optional[Path] = typer.Option(None, "--baseline", help="A healthy probe's node_health_probe.json: the "
                                                "reference when no other node is probed with this one."),
    ) -> None:
        """Node health probe: mount write, STREAM per NUMA domain, GPU launch latency, D2D copy,
        single-node all-reduce. Exit 42 names the bad node(s) in BAD_NODES=."""
        from ..graph.health.probe_graph import run_probe_graph  # noqa: PLC0415

        st = run_probe_graph(out_dir=str(gather or out), node=node,
                             mounts=list(mounts) if mounts else None, gpu=gpu, gather_only=gather is not None,
                             stream_elems=stream_mib * (1 << 20) // 8, baseline=str(baseline) if baseline else None)
        for s in st.get("skipped", []):
            typer.echo(f"skipped: {s}", err=True)
        for s in st.get("not_checked", []):
            typer.echo(s, err=True)
        typer.echo(Path(st["txt"]).read_text() if st.get("txt") else "", nl=False)
        for name, line in st.get("statuses", {}).items():
            typer.echo(f"{name}: {line}", err=True)
        raise typer.Exit(st.get("exit_code", 1))

    @app.command("eval-cluster")
    def eval_cluster(
        nodes: Optional[List[str]] = typer.Option(None, "--nodes", help="Node names in hostfile order (comma list or repeat)."),
        check: Optional[Path] = typer.Option(None, "--check", help="Only check REPORT.md against the report rules."),
        from_json: Optional[List[Path]] = typer.Option(None, "--from-json", help="Build the report from gpu_bench eval JSON."),
        reports: Path = typer.Option(Path("reports"), "--reports", help="Directory for the report and raw-<date>/."),
        local_dir: str = typer.Option("/tmp", "--local-dir", help="Local-disk directory for fio."),
        shared_dir: Optional[List[str]] = typer.Option(None, "--shared-dir", help="Shared-FS directory for fio; repeatable."),
        fio_sizes: str = typer.Option("16KiB,1MiB,1GiB", "--fio-sizes", help="fio file sizes (IEC)."),
        fio_runtime: int = typer.Option(180, "--fio-runtime", help="Seconds of timed IO per fio run."),
        fio_jobs: int = typer.Option(16, "--fio-jobs", help="fio parallel jobs."),
        msmf_seconds: float = typer.Option(10.0, "--msmf-seconds"),
        ar_max: str = typer.Option("4GiB", "--ar-max", help="Largest all-reduce payload."),
        access: str = typer.Option("shell on the node", "--access", help="How commands reached the nodes (report header)."),
        gap: Optional[List[str]] = typer.Option(None, "--gap", help="'compute|network|storage: text' for the report's Gaps."),
        nccl_env_source: str = typer.Option("the environment the benchmarks ran in", "--nccl-env-source"),
        date: Optional[str] = typer.Option(None, "--date", help="Report date (default: today, UTC)."),
        as_json: bool = typer.Option(False, "--json", help="With --check: print one JSON summary on stdout "
                                     "(the rule violations as a list)."),
    ) -> None:
        """Acceptance evaluation (seed 003): environment, MAMF/MSMF, lemon GEMM, all-reduce, fio;
        writes reports/<gpu>-<date>-<HHMM>Z.md and checks it. --check only checks a report and names
        every broken rule (docs/rules.md)."""
        from ..tools.cluster.report_check import check_file_all  # noqa: PLC0415

        if check is not None:
            from .options import echo_json  # noqa: PLC0415

            def done(line: str, code: int, violations: list | None = None) -> None:
                if as_json:
                    echo_json("eval-cluster --check", line, report=str(check), exit_code=code,
                              violations=None if violations is None else
                              [{"rule": v.rule, "line": v.line, "message": v.message, "severity": v.severity}
                               for v in violations])
                else:
                    for v in violations or []:
                        typer.echo(str(v))
                    typer.echo(line)
                raise typer.Exit(code)

            if not check.is_file():
                err.print(f"no report at {check}")
                done(f"STATUS=fail; reason=no report at {check}", 2)
            try:
                found = check_file_all(check)
            except InputError as e:
                err.print(f"error: {e}")
                done(f"STATUS=fail; reason={e}", 2)
            bad = [v for v in found if v.severity == "error"]
            warn = len(found) - len(bad)
            done(f"STATUS={'fail' if bad else 'ok'}; reason={len(bad)} rule violation(s)"
                 + (f", {warn} house warning(s)" if warn else "") + f" in {check.name}",
                 1 if bad else 0, found)
        from ..graph.health.eval_graph import run_eval_graph  # noqa: PLC0415

        node_list = [n for x in (nodes or []) for n in x.split(",") if n]
        st = run_eval_graph(
            nodes=node_list, from_json=[str(p) for p in from_json or []], reports_dir=str(reports),
            date=date or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"), access=access,
            extra_gaps=list(gap or []), nccl_env_source=nccl_env_source,
            bench_args=dict(local_dir=local_dir, shared_dirs=list(shared_dir or []), fio_sizes=fio_sizes,
                            fio_runtime=fio_runtime, fio_jobs=fio_jobs, msmf_seconds=msmf_seconds, ar_max=ar_max))
        for name, line in st.get("statuses", {}).items():
            typer.echo(f"{name}: {line}", err=True)
        for v in st.get("violations", []):
            typer.echo(v)
        if st.get("report_path"):
            typer.echo(st["report_path"])
        raise typer.Exit(0 if st.get("report_path") and not st.get("violations") else 1)
