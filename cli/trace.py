"""``ai4s-graph trace ...``: look at one PyTorch profiler trace from the command line.

``ai4s-graph trace comm <rank traces | perf-run folder> [--json] [--baseline F] [--run-dir D]``: the
communication figures per rank and step and across ranks (``tools/trace/comm_ranks.py``).

``ai4s-graph trace timeline <trace> [--json] [--csv DIR] [--backend auto|stream|tracelens|tracelens-csv|hta|kineto]``
prints TraceLens's GPU timeline (computation, exposed communication, exposed memcpy, busy,
idle, total: ms and % of total), computed by the engine (one bounded-memory pass; a progress bar
on stderr when the pass takes more than ~2 s). ``--csv DIR`` also writes the engine's tables as
TraceLens-shaped CSVs (gpu_timeline, ops_summary_by_category, kernel_summary,
short_kernels_summary). Input-hygiene warnings (clipped overlaps, a non-steady-state window) go to
stderr. On bad input (a missing, empty, truncated or malformed trace, an unknown backend) it writes
one line ``error: <msg>`` to stderr, then ``STATUS=fail; reason=<msg>`` to stdout (with ``--json``, one
JSON object instead: ``status``, ``outcome``, ``reason``, ``exit_code``), and exits 2 (1 when the CSVs
cannot be written); never a traceback.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..state.status import StatusLine
from ..tools.errors import Ai4sError
from ..tools.trace.backends import BACKENDS, TIMELINE_ROWS, analyze_trace, check_timeline
from . import options

trace_app = typer.Typer(help="Inspect PyTorch profiler (kineto) traces.", no_args_is_help=True)

#: Seconds a pass must run before the progress bar appears (short passes stay quiet).
PROGRESS_DELAY_S = 2.0


class _LazyProgress:
    """A rich progress bar (stderr, transient) that appears only once a pass has run
    :data:`PROGRESS_DELAY_S` seconds; used as the engine's ``progress(done, total)`` callback."""

    def __init__(self, label: str):
        self.label, self.t0, self.bar, self.task = label, time.monotonic(), None, None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None and options.quiet():
            return
        if self.bar is None:
            if time.monotonic() - self.t0 < PROGRESS_DELAY_S:
                return
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


#: Exit status of a refused input (the project's convention for a refused invocation, README) and of
#: any other failure (the CSVs could not be written).
EXIT_INPUT, EXIT_OTHER = 2, 1


def _fail(msg: str, code: int = EXIT_INPUT, as_json: bool = False, command: str = "trace timeline") -> None:
    """``error: msg`` on stderr, then the STATUS line on stdout (with ``as_json``, the refusal as one
    JSON object: :func:`~.options.echo_refusal`), and exit ``code``."""
    typer.echo(f"error: {msg}", err=True)
    if as_json:
        options.echo_refusal(command, msg, code)
    else:
        typer.echo(StatusLine.make("fail", msg).format())
    raise typer.Exit(code=code)


def _warn_or_json(warnings: list[str], model=None) -> bool:
    """Warnings to stderr; with a model, print it as JSON and say so (the caller prints nothing else)."""
    for w in warnings:
        typer.echo(f"warning: {w}", err=True)
    if model is None:
        return False
    typer.echo(model.model_dump_json())
    return True


@trace_app.command("timeline")
def timeline(
    trace: Path = typer.Argument(..., help="Trace file (*.json or *.json.gz)."),
    as_json: bool = typer.Option(False, "--json", help="Print the timeline rows as JSON only."),
    backend: str = typer.Option("auto", "--backend", help=f"One of: {', '.join(BACKENDS)} (auto = stream, the engine)."),
    totals: bool = typer.Option(False, "--totals", help="Also print total_comm_time and total_memcpy_time."),
    csv_dir: Path = typer.Option(None, "--csv", help="Write TraceLens-shaped CSVs of the engine's tables into DIR."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print only the STATUS line and errors (input notes too "
                               "are silent; with --json they are under \"notes\")."),
) -> None:
    """GPU timeline of one trace, as TraceLens defines it (ms and % of total time)."""
    options.set_quiet(quiet)
    if backend not in BACKENDS:
        _fail(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}", as_json=as_json)
    bar = _LazyProgress(f"reading {trace.name}")
    try:
        if backend in ("auto", "stream"):
            from ..tools.trace import engine, tracelens_sheets

            if csv_dir is not None:  # every TraceLens sheet, from the same read
                analysis, kernel_rows = tracelens_sheets.analyze_with_sheets(trace, progress=bar)
            else:
                analysis, kernel_rows = engine.analyze_with_tables(trace, progress=bar)
            check_timeline(analysis.timeline, trace)
        else:
            analysis, kernel_rows = analyze_trace(trace, backend=backend, progress=bar), None
    except Ai4sError as e:
        bar.close()
        _fail(str(e), as_json=as_json)
        return
    except Exception as e:  # noqa: BLE001 - an event no rule foresaw: one line, never a traceback
        bar.close()
        _fail(f"{trace.name}: malformed trace ({type(e).__name__}: {' '.join(str(e).split())[:160]})", as_json=as_json)
        return
    bar.close()
    if csv_dir is not None:
        from ..tools.trace import tables

        try:
            tables.write_tables(csv_dir, analysis, kernel_rows)
        except OSError as e:
            _fail(f"cannot write the CSVs: {e}", EXIT_OTHER, as_json=as_json)
            return
    if as_json:  # the input notes (e.g. sub-µs clipped overlaps) travel in the JSON
        typer.echo(json.dumps({**analysis.timeline_json(with_totals=totals), "notes": list(analysis.warnings)}))
        return
    for w in analysis.warnings:
        options.say(f"warning: {w}", err=True)
    if options.quiet():
        typer.echo(StatusLine.make("ok", f"backend={analysis.backend}; busy "
                                         f"{analysis.timeline['busy_time'].percent:.1f}% of "
                                         f"{analysis.timeline['total_time'].time_ms:.3f} ms").format())
        return
    table = Table(title=Text(f"GPU timeline: {trace.name}"), caption=f"backend: {analysis.backend}")
    table.add_column("row")
    table.add_column("time (ms)", justify="right")
    table.add_column("% of total", justify="right")
    rows = TIMELINE_ROWS if totals else TIMELINE_ROWS[:6]
    for name in rows:
        r = analysis.timeline.get(name)
        if r is not None:
            table.add_row(name, f"{r.time_ms:.3f}", f"{r.percent:.2f}")
    Console().print(table)
    busy = analysis.timeline["busy_time"].percent
    extra = f"; {len(analysis.warnings)} input warning(s) on stderr" if analysis.warnings else ""
    typer.echo(StatusLine.make("ok", f"backend={analysis.backend}; busy {busy:.1f}% of "
                                     f"{analysis.timeline['total_time'].time_ms:.3f} ms{extra}").format())


@trace_app.command("steps")
def steps(
    trace: Path = typer.Argument(..., help="Trace file (*.json or *.json.gz)."),
    as_json: bool = typer.Option(False, "--json", help="Print the step accounting as JSON only."),
    top: int = typer.Option(5, "--top", min=1, help="Attributions and critical-path shares shown per step."),
    path: bool = typer.Option(False, "--path", help="Keep each step's critical-path segments (in --json)."),
) -> None:
    """Every millisecond of each profiled step: GPU busy (computation, exposed communication, exposed
    memcpy) and idle, what the host did during the idle time, the critical path, and the lead."""
    from ..state.steps import HOST_CATEGORIES
    from ..tools.trace.host_timeline import step_breakdown

    try:
        bd = step_breakdown(trace, top=top, keep_paths=path)
    except Ai4sError as e:
        _fail(str(e), as_json=as_json, command="trace steps")
        return
    if _warn_or_json(bd.warnings, bd if as_json else None):
        return
    con = Console()
    table = Table(title=Text(f"Step time budget: {trace.name} (ms)"))
    table.add_column("")
    for st in bd.steps:
        table.add_column(f"step {st.step}", justify="right")
    rows = [("wall", [s.wall_us for s in bd.steps])]
    rows += [(f"gpu {k[:-3]}", [getattr(s.gpu, k) for s in bd.steps]) for k in
             ("computation_us", "exposed_comm_us", "exposed_memcpy_us", "idle_us")]
    rows += [(f"  idle: {c}", [s.idle_by_host_us.get(c, 0.0) for s in bd.steps]) for c in HOST_CATEGORIES]
    rows += [(f"host: {c}", [s.host_us.get(c, 0.0) for s in bd.steps]) for c in HOST_CATEGORIES]
    for label, vals in rows:
        if any(v > 0 for v in vals) or label == "wall":
            table.add_row(label, *(f"{v / 1e3:.3f}" for v in vals))
    con.print(table)
    for st in bd.steps:
        idle = "; ".join(f"{a.category} {a.name or a.op or ''}".strip() + f" {a.us / 1e3:.3f}" for a in st.idle_top[:top])
        cp = "; ".join(f"{p.key[:60]} {p.us / 1e3:.3f} ({100 * p.share:.0f}%)" for p in st.critical_path.top_ops[:top])
        typer.echo(f"step {st.step}: GPU idle by host (ms): {idle}")
        typer.echo(f"step {st.step}: critical path by op (ms): {cp}")
        if st.critical_path.top_sites:
            typer.echo(f"step {st.step}: critical path by call site: " + "; ".join(
                f"{p.key} {p.us / 1e3:.3f}" for p in st.critical_path.top_sites[:top]))
    d = bd.distribution
    if d.n:
        typer.echo(f"step time: median {d.median_ms:.3f} ms, mean {d.mean_ms:.3f} ms, max {d.max_ms:.3f} ms ({d.n} steps)")
    if bd.python_stack_note:
        typer.echo(f"note: {bd.python_stack_note}")
    if bd.lead is not None:
        typer.echo(f"lead: {bd.lead.text}")
    status = "ok" if bd.n_steps else "partial"
    summary = f"{bd.n_steps} steps" + (f"; lead: {bd.lead.category} {bd.lead.us / 1e3:.3f} ms of "
                                       f"{bd.lead.step_us / 1e3:.3f} ms" if bd.lead else "; no step to account")
    typer.echo(StatusLine.make(status, summary).format())


def _comm_status(rep, with_baseline: bool) -> str:
    """The STATUS line of ``trace comm``: partial when no collective was found or the baseline was unreadable."""
    nsteps = sum(rc.n_steps for rc in rep.ranks)
    found = bool(nsteps and any(s.comm_kernels or s.collectives for rc in rep.ranks for s in rc.steps))
    no_base = with_baseline and not rep.baseline_source
    reason = (f"{len(rep.ranks)} rank(s), {nsteps} step(s); {rep.n_sync} synchronising collectives matched"
              + ("" if found else "; no collective found") + ("; baseline unreadable" if no_base else ""))
    return StatusLine.make("ok" if found and not no_base else "partial", reason).format()


@trace_app.command("comm")
def comm(
    traces: list[Path] = typer.Argument(..., help="Rank trace files (*.json / *.json.gz), or one perf-run folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the communication figures as JSON only."),
    baseline: Path = typer.Option(None, "--baseline", help="eval-cluster raw JSON: busbw measured on the cluster."),
    run_dir: Path = typer.Option(None, "--run-dir", help="Perf-run folder whose manifest / job script give the NCCL "
                                                         "environment (default: the folder given as TRACES)."),
) -> None:
    """Communication per rank and step: collectives by type and size, overlap with computation and the
    backward, DDP buckets, FSDP all-gathers, host syncs that waited for a collective; across ranks, busbw
    against the baseline, the NCCL variables set, and what the last-arriving rank did meanwhile."""
    from ..tools.trace.comm_context import env_from_run
    from ..tools.trace.comm_ranks import comm_report
    from ..tools.trace.ranks import find_rank_traces

    try:
        paths: list[Path] = list(traces)
        if len(paths) == 1 and paths[0].is_dir():
            run_dir = run_dir or paths[0]
            paths = find_rank_traces(paths[0])
        env = env_from_run(run_dir) if run_dir is not None else []
        rep = comm_report(paths, baseline=baseline, env=env)
    except Ai4sError as e:
        _fail(str(e), as_json=as_json, command="trace comm")
        return
    if _warn_or_json([f"rank {rc.rank}: {w}" for rc in rep.ranks for w in rc.warnings], rep if as_json else None):
        return
    if options.quiet():
        typer.echo(_comm_status(rep, baseline is not None))
        return
    con = Console()
    for rc in rep.ranks:
        table = Table(title=Text(f"rank {rc.rank}: {Path(rc.path).name} (ms unless said)"))
        table.add_column("")
        for st in rc.steps:
            table.add_column(f"step {st.step}", justify="right")
        ms = lambda v: "-" if v is None else f"{v / 1e3:.3f}"  # noqa: E731
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        rows = [("wall", [ms(s.wall_us) for s in rc.steps]), ("communication", [ms(s.comm_us) for s in rc.steps]),
                ("  hidden / exposed", [f"{ms(s.hidden_us)} / {ms(s.exposed_us)}" for s in rc.steps]),
                ("  hidden share", [pct(s.hidden_share) for s in rc.steps]),
                ("  before backward end", [pct(s.comm_before_backward_end_share) for s in rc.steps]),
                ("  on critical path", [ms(s.comm_on_critical_path_us) for s in rc.steps]),
                ("buckets (mean MiB)", [f"{s.buckets} ({'-' if s.bucket_mean_bytes is None else f'{s.bucket_mean_bytes / 2**20:.2f}'})"
                                        for s in rc.steps])]
        kinds = sorted({(c.collective, c.dtype, c.phase) for s in rc.steps for c in s.collectives}, key=str)
        for k in kinds:
            cells = []
            for s in rc.steps:
                c = next((c for c in s.collectives if (c.collective, c.dtype, c.phase) == k), None)
                cells.append("-" if c is None else f"{c.count} x {'?' if c.mean_bytes is None else f'{c.mean_bytes / 2**20:.3f}'} MiB")
            rows.append((f"{k[0]} {k[1] or ''} ({k[2]})", cells))
        if any(s.gathers for s in rc.steps):
            rows.append(("all-gather exposed fwd / bwd", [f"{ms(s.gather_exposed_us.get('forward', 0.0))} / "
                                                          f"{ms(s.gather_exposed_us.get('backward', 0.0))}" for s in rc.steps]))
        rows.append(("host syncs on a collective", [str(len(s.syncs_on_comm)) for s in rc.steps]))
        for label, cells in rows:
            table.add_row(label, *cells)
        con.print(table)
        for s in rc.steps:
            for y in s.syncs_on_comm:
                typer.echo(f"rank {rc.rank} step {s.step}: {y.name} in {y.op or '(no op)'} ({y.position}) waited "
                           f"{y.dur_us / 1e3:.3f} ms for a {y.collective}; GPU idle {y.gpu_idle_after_us / 1e3:.3f} ms after")
    for b in rep.busbw:
        ref = "" if b.ratio is None else f"; baseline {b.baseline_gbps:.1f} GB/s, ratio {b.ratio:.3f}"
        off = "" if b.ratio_p2p_disabled is None else f"; P2P-disabled baseline ratio {b.ratio_p2p_disabled:.3f}"
        bw = "-" if b.busbw_gbps is None else f"{b.busbw_gbps:.1f}"
        typer.echo(f"busbw {b.collective} {b.msg_bytes / 2**20:.3f} MiB x {b.count}: {bw} GB/s{ref}{off}")
    for e in rep.env:
        typer.echo(f"env {e.name}={e.value} ({e.source}){': ' + e.restricts if e.restricts else ''}")
    for lr in rep.late:
        lag = (f"; over {lr.n_steps} step(s) it lagged rank {lr.first} by {lr.lag_us / 1e3:.3f} ms: GPU "
               f"{lr.lag_gpu_us / 1e3:.3f} ms, host {lr.lag_host_us / 1e3:.3f} ms" + (f", largest {lr.largest}" if lr.largest else "")
               if lr.n_steps else "")
        typer.echo(f"rank {lr.rank} arrived last at {lr.n_last} of {rep.n_sync} synchronising collectives (longest wait "
                   f"{lr.max_wait_us / 1e3:.3f} ms){lag}")
    for n in rep.notes:
        typer.echo(f"note: {n}")
    typer.echo(_comm_status(rep, baseline is not None))


def register(app: typer.Typer) -> None:
    """Add the ``trace`` sub-app to the main ``ai4s-graph`` app."""
    app.add_typer(trace_app, name="trace")
