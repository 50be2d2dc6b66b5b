"""``ai4s-graph run``: the analysis graph over one job, checkpointed so a re-run resumes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..graph.analysis.configuration import RunRequest, trace_cache_dir
from ..state import StatusLine
from ..state.publish import UnsafePathError
from ..state.status import MAX_REASON_CHARS, one_line
from ..tools.errors import Ai4sError, ToolUnavailableError
from . import early, options

# soft_wrap: a STATUS line is never folded (scripts parse it); markup off: paths may hold '[' ']'.
console = Console(highlight=False, soft_wrap=True, markup=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


def _writable(d: Path) -> bool:
    """A directory we may write reports into: ``os.access`` says so AND its mode grants a write bit.
    (For root ``os.access`` is always true; a ``dr-xr-xr-x`` archive of runs is read-only by intent.)"""
    return d.is_dir() and os.access(d, os.W_OK) and bool(d.stat().st_mode & 0o222)


def _short_hash(obj: Any) -> str:
    """12 hex digits of the SHA-256 of ``obj`` as sorted-key JSON (a stable name for a set of arguments)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def resolve_out_dir(out: Path | None, perf_run: Path | None, jobid: str | None,
                    submit_params: dict[str, Any] | None = None) -> Path:
    """``--out`` when given; else the perf-run directory when it is writable; else
    ``./ai4s-reports/<jobid>/`` (a read-only run directory, such as a shared archive).

    ``--submit`` without ``--out`` (the job id is not known before sbatch answers) gets
    ``./ai4s-reports/submit-<model>-<12 hex>/``, the hex a SHA-256 of the submit parameters: the
    same command finds its directory (and checkpoint) again, and another submission never
    writes over an earlier job's report."""
    if out is not None:
        return out.resolve()
    if perf_run is not None and _writable(perf_run):
        return perf_run.resolve()
    if submit_params and not jobid and perf_run is None:
        h = _short_hash(submit_params)
        model = re.sub(r"[^A-Za-z0-9._-]", "_", str(submit_params.get("model") or "job"))
        return (Path.cwd() / "ai4s-reports" / f"submit-{model}-{h}").resolve()
    return (Path.cwd() / "ai4s-reports" / (jobid or (perf_run.name if perf_run else "job"))).resolve()


def thread_id(req: RunRequest) -> str:
    """The checkpoint thread of a run: the job id (or, for ``--submit``, the workload and its
    parameters) plus a short hash of the arguments that change the analysis and of the identity of
    its inputs (each input file's name, size and modification time:
    :func:`~ai4s_graph.tools.report.outdir.inputs_fingerprint`), so the same command on the same
    inputs resumes, and a different command, or the same one after a trace or the manifest
    changed, starts its own thread."""
    from ..tools.report.outdir import inputs_fingerprint

    key = req.model_dump(include={"jobid", "perf_run", "out_dir", "compare", "tsdb_url", "llm", "llm_model",
                                  "submit", "submit_params", "slurm_array", "baseline"})
    if req.cross_check:  # only when asked for: the threads of earlier runs keep their names
        key["cross_check"] = list(req.cross_check)
    if not req.submit:
        key["inputs"] = inputs_fingerprint(req.perf_run, req.compare, files=(req.baseline,))
    h = _short_hash(key)
    who = req.jobid if req.jobid else f"submit-{req.submit_params.get('model', 'job')}"
    return f"run:{who}:{h}"


def _first_error(e: ValueError) -> str:
    """One line from a (pydantic) ValueError: the first error's message."""
    errs = getattr(e, "errors", None)
    if callable(errs):
        first = errs()[0]
        return f"{'.'.join(str(x) for x in first.get('loc', ())) or 'value'}: {first['msg'].removeprefix('Value error, ')}"
    return " ".join(str(e).split())


def _refuse(msg: str, code: int = 2, as_json: bool = False) -> None:
    """A refused invocation: ``error: msg`` on stderr, one ``STATUS=fail`` line on stdout (with
    ``--json``, one JSON object instead: :func:`~.options.echo_refusal`), exit ``code`` (2: refused,
    nothing written)."""
    err_console.print(f"error: {one_line(msg)}")
    if as_json:
        options.echo_refusal("run", msg, code)
    else:
        print(StatusLine.make("fail", msg).format())
    raise typer.Exit(code)


def _path_option(value: str | None, flag: str, as_json: bool = False) -> Path | None:
    """A path option as given; an empty one (``--out ''``: the current directory by accident) is
    refused."""
    if value is None:
        return None
    if not value.strip():
        _refuse(f"{flag} is empty: give a directory", as_json=as_json)
    try:
        Path(value).resolve()
    except (RuntimeError, OSError, ValueError) as e:  # a symlink loop (RuntimeError), a NUL byte
        _refuse(f"{flag}: {' '.join(str(e).split())[:120]}", as_json=as_json)
    return Path(value)


def report_written(out_dir: Path) -> Path:
    """Where this run's ``report.md`` went: ``out_dir``, or the not-published folder when the
    earlier report there was kept (whichever ``report.json`` is newer is this run's)."""
    from ..tools.report import write as report_write

    main, aside = out_dir / "report.json", out_dir / report_write.NOT_PUBLISHED / "report.json"
    try:
        if aside.is_file() and (not main.is_file() or aside.stat().st_mtime_ns > main.stat().st_mtime_ns):
            return aside.parent / "report.md"
    except OSError:
        pass
    return out_dir / "report.md"


def _parse_env(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise typer.BadParameter(f"--env expects KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def execute(req: RunRequest, *, fresh: bool = False, checkpoint: str | None = None,
            printer=None) -> dict[str, Any]:
    """Run (or resume) the analysis graph for ``req`` and return the final state values.

    Each node's STATUS line is passed to ``printer(node, line)`` as the node finishes. A node that
    raises leaves the checkpoint of the finished nodes: calling again resumes at that node. Raises
    :class:`~ai4s_graph.graph.checkpoint.ThreadBusyError` when another process runs the same
    checkpoint thread. A checkpoint that does not deserialize to the graph's types raises
    :class:`~ai4s_graph.graph.checkpoint.CheckpointRefusedError` before anything runs."""
    from ..graph.analysis.graph import build_analysis_graph
    from ..graph.analysis.schema import CHECKPOINT_TYPES, AnalysisState
    from ..graph.analysis.graph import TASK_THREADS
    from ..graph.checkpoint import CheckpointRefusedError, check_state, open_checkpointer, thread_lock, track_writes
    from ..graph.runtime import read_journal
    from ..tools.report import write as report_write

    printer = printer or (lambda node, line: None)
    cfg = {"configurable": {"thread_id": thread_id(req)}, "recursion_limit": 64, "max_concurrency": TASK_THREADS}
    # one process per thread: a second identical command is refused (ThreadBusyError), never run twice
    with thread_lock(checkpoint, cfg["configurable"]["thread_id"]), \
            open_checkpointer(checkpoint, CHECKPOINT_TYPES) as saver:
        saved = track_writes(saver)
        graph = build_analysis_graph().compile(checkpointer=saver)
        # each task's update is streamed as it ends: without it, a task whose done callback (which
        # queues its update) ran after LangGraph's wait returned was streamed only when the next
        # task of its superstep ended (the telemetry analyst's line, after every rank's)
        graph.stream_eager = True
        where = getattr(saver.serde, "source", checkpoint or "default")
        try:
            if fresh:
                saver.delete_thread(cfg["configurable"]["thread_id"])
            snap = graph.get_state(cfg)
            check_state(dict(snap.values), AnalysisState, where)  # every key holds the type the graph stores
        except CheckpointRefusedError:
            raise
        except sqlite3.DatabaseError as e:
            raise ToolUnavailableError(f"checkpoint database {checkpoint or 'default'} is unusable: {e}") from None
        except (TypeError, AttributeError, KeyError, ValueError, IndexError) as e:  # not a LangGraph checkpoint
            raise CheckpointRefusedError(f"refused checkpoint {where}: it does not deserialize to a checkpoint "
                                         f"({type(e).__name__}; delete the file or pass another "
                                         "--checkpoint)") from None
        # complete: no task left at the latest checkpoint. A superstep whose every task wrote its
        # result but was never committed (a run stopped while its last task finished) has no
        # ``next`` either (LangGraph leaves out the tasks with writes) but still has its tasks: it
        # resumes, taking their checkpointed writes (they do not run again)
        if snap.values and not snap.next and not snap.tasks:
            values = dict(snap.values)
            out_dir = Path(values["request"].out_dir if values.get("request") else req.out_dir)
            # "already complete" only while the folder this run's report went to (out_dir, or the
            # not-published folder when it was kept aside: report_written) holds it: report.md and
            # a readable report.json naming this job. Otherwise (deleted, truncated, another job's)
            # the synthesizer writes it again from the checkpointed state (never somebody else's
            # report called this run's; another job's is replaced only with --force)
            why = report_write.report_problem(report_written(out_dir).parent, values["report"].jobid) \
                if values.get("report") else None
            if why is not None:
                from ..graph.analysis.nodes.synthesizer import synthesizer

                printer("graph", StatusLine.make("partial", f"complete, but {why}: writing it again").format())
                values["request"] = values["request"].model_copy(update={"force": req.force})
                values.update(synthesizer(values))
                printer("synthesizer", values["statuses"]["synthesizer"])
                return values
            printer("graph", f"STATUS=ok; reason=already complete (thread {cfg['configurable']['thread_id']}); "
                             "use --fresh to run again")
            return values
        inputs = None if (snap.next or snap.tasks) else {"request": req}
        # from here nodes write into out_dir: its report is stale until this run publishes its own
        unmarked = report_write.in_progress(req.out_dir) is None
        journaled = len(read_journal(req.out_dir))
        report_write.mark_in_progress(req.out_dir, req.jobid, cfg["configurable"]["thread_id"])
        if snap.next:
            printer("graph", f"STATUS=ok; reason=resuming at {', '.join(snap.next)}")
        elif snap.tasks:
            printer("graph", f"STATUS=ok; reason=resuming after {', '.join(t.name for t in snap.tasks)} "
                             "(their results were checkpointed)")
        printed: dict[tuple[str, str], int] = {}
        for chunk in graph.stream(inputs, cfg, stream_mode="updates", durability="sync"):
            # a task of the superstep resumed whose writes the checkpoint held: it did not run now
            replayed = bool((chunk.get("__metadata__") or {}).get("cached"))
            for node_name, update in chunk.items():
                if node_name != "__metadata__" and isinstance(update, dict):
                    man = update.get("manifest")
                    if man is not None and getattr(man, "artifacts", None) is not None:
                        printer("graph:ranks", str(len(man.artifacts.traces)))
                    for n, line in (update.get("statuses") or {}).items():
                        if replayed:
                            printer(n, not_run_again(line))
                            continue
                        # the line only once the node's result is checkpointed: a stop after it
                        # never runs the node again
                        printed[(n, line)] = printed.get((n, line), 0) + 1
                        saved.wait(n, line, printed[(n, line)])
                        printer(n, line)
        end = graph.get_state(cfg)
        if unmarked and end.values.get("report") and not end.next and not end.tasks and \
                not any(r.get("event") == "start" and r.get("pid") == os.getpid()
                        for r in read_journal(req.out_dir)[journaled:]):
            # resumed after the synthesizer's checkpointed writes: no node ran, nothing was written
            # here by this call; the folder's report is the one that synthesizer published
            report_write.clear_in_progress(req.out_dir)
        return dict(end.values)


#: What :func:`not_run_again` adds to the reason of a STATUS line taken from the checkpoint.
NOT_RUN_AGAIN = "checkpointed, not run again"


def not_run_again(line: str) -> str:
    """The STATUS line of a node that finished before a stop, printed again when the run resumes
    (LangGraph hands back the checkpointed writes of the interrupted superstep's finished tasks
    instead of running them): its outcome, its reason and ``; checkpointed, not run again``, the
    reason cut to keep the whole within 160 characters. A line that does not parse is given back
    as it is."""
    try:
        st = StatusLine.parse(line)
    except ValueError:
        return line
    head = one_line(st.reason, MAX_REASON_CHARS - len(NOT_RUN_AGAIN) - 2)
    return StatusLine.make(st.status, f"{head}; {NOT_RUN_AGAIN}").format()


class RankProgress:
    """Progress of the rank fan-out on stderr: a rich bar when stderr is a terminal, else one line
    per rank trace analysed (``progress: 3/8 rank traces analysed``); nothing for a single trace or
    under ``-q``."""

    def __init__(self) -> None:
        self.total, self.done, self.bar, self.task = 0, 0, None, None

    def start(self, total: int) -> None:
        self.total = total
        if total > 1 and not options.quiet() and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("rank traces"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=err_console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("ranks", total=total)

    def rank_done(self) -> None:
        self.done += 1
        if self.total <= 1 or options.quiet():
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
            if self.done >= self.total:
                self.close()
        else:
            err_console.print(f"progress: {self.done}/{self.total} rank traces analysed")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def resume_hint(fresh: bool) -> str:
    """How to resume a run that stopped (a signal, a node that raised, a full disk): "re-run the
    same command", or, for a run started with ``--fresh`` (which discards the checkpoint: the
    same command again would throw away the finished nodes), "re-run the same command without
    --fresh"."""
    return "re-run the same command without --fresh" if fresh else "re-run the same command"


#: Signals that stop a run at once (:class:`SignalStop`): Ctrl-C, and what ``kill``, ``scancel``
#: and a SLURM time limit send first.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalStop:
    """A run's stop on SIGINT or SIGTERM (:data:`STOP_SIGNALS`), from :meth:`install` (the start of
    ``ai4s-graph run``) to :meth:`settled` (its final line begins: a signal after it is ignored, the
    run's own exit follows) or :meth:`restore`.

    On a signal, in this order: further signals are ignored (a double Ctrl-C lets the stop finish);
    checkpoint writes are frozen (:func:`~ai4s_graph.graph.checkpoint.freeze_writes`: a node thread
    that ends now, its telemetry server or trace lane stopped under it, cannot checkpoint that
    result; it runs again on resume); publishing is frozen and the temporary files being written
    are removed (:func:`~ai4s_graph.state.publish.freeze`: every report file is its old or its new
    version, none half renamed); ``error: interrupted (SIGINT) ...`` goes to stderr and, through
    :attr:`emit` (``emit(line, exit code)``: the run's plain or ``--json`` output),
    ``STATUS=fail; reason=interrupted (SIGINT); re-run the same command to resume`` (``... re-run
    the same command without --fresh to resume`` for a run started with ``--fresh``: ``fresh``,
    :func:`resume_hint`); the prefetched
    trace lanes and the VictoriaMetrics servers this process started, the ones that would outlive
    it, are stopped (:func:`_stop_helpers`); then the process exits at once with 128 + the signal's
    number (130, 143: the shell's convention), without waiting for the nodes still running
    (LangGraph's executor would wait for them, and a trace read runs on for minutes). The nodes
    that finished are checkpointed (durability ``sync``: each task's writes as it ends). Outside
    the main thread (where Python delivers signals) nothing is installed."""

    #: Keep ignoring the signals after :meth:`settled` when :meth:`restore` is called (the command
    #: line's :func:`~ai4s_graph.cli.main` sets it: its process ends after the final line, and a
    #: signal then would add an ``interrupted`` line to a finished run's output). Calls in a
    #: process that goes on (a test's ``CliRunner``) get the earlier handlers back.
    hold_after_settle = False

    def __init__(self, emit: Callable[[str, int], None], fresh: bool = False) -> None:
        self.emit = emit
        self.fresh = fresh
        self._old: dict[int, Any] = {}
        self._settled = False

    def install(self) -> SignalStop:
        if threading.current_thread() is threading.main_thread() and not self._old:
            self._old = {s: signal.signal(s, self._stop) for s in STOP_SIGNALS}
        return self

    def settled(self) -> None:
        """The run's final line is being written: from here a signal is ignored."""
        if self._old:
            self._settled = True
            for s in STOP_SIGNALS:
                signal.signal(s, signal.SIG_IGN)

    def restore(self) -> None:
        """Give the signals their handlers from before :meth:`install` back (see
        :attr:`hold_after_settle`)."""
        if self._settled and SignalStop.hold_after_settle:
            return
        while self._old:
            s, h = self._old.popitem()
            signal.signal(s, h)

    def _stop(self, signum: int, _frame: Any) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        name = signal.Signals(signum).name
        code = 128 + signum
        hint = resume_hint(self.fresh)
        steps = (_freeze_checkpoints, _freeze_publishing,
                 lambda: err_console.print(f"error: interrupted ({name}); the finished nodes are checkpointed: "
                                           f"{hint} to resume"),
                 lambda: self.emit(StatusLine.make("fail", f"interrupted ({name}); {hint} to resume").format(), code),
                 _stop_helpers, sys.stdout.flush, sys.stderr.flush)
        try:
            for step in steps:
                try:
                    step()
                except Exception:  # noqa: BLE001 - on the way out (a print cut into another): the next step
                    pass
        finally:
            os._exit(code)


def _freeze_checkpoints() -> None:
    mod = sys.modules.get("ai4s_graph.graph.checkpoint")  # not imported yet: no checkpoint open
    if mod is not None:
        mod.freeze_writes()


def _freeze_publishing() -> None:
    from ..state import publish

    publish.freeze()


def _stop_helpers() -> None:
    """Stop the processes a run started that would outlive an immediate exit: the prefetched trace
    lanes (:func:`~ai4s_graph.tools.trace.onepass.drop_prefetched`) and the figures' idle lanes
    (:func:`~ai4s_graph.tools.report.drawing.drop_idle`; the other lanes and workers die with this
    process), and the VictoriaMetrics servers."""
    for name, fn in (("ai4s_graph.tools.trace.onepass", "drop_prefetched"),
                     ("ai4s_graph.tools.report.drawing", "drop_idle"),
                     ("ai4s_graph.tools.telemetry.victoria", "stop_all")):
        mod = sys.modules.get(name)  # not imported: nothing of it started
        if mod is not None:
            getattr(mod, fn)()


def prefetch_trace(req: RunRequest) -> bool:
    """Start the read of the run's rank trace now, when the run directory holds exactly one (the
    traces the launcher adopts, :func:`~ai4s_graph.tools.slurm.jobs.discover_artifacts`; the case
    ``trace_rank`` reads in this process): its lanes (:func:`ai4s_graph.tools.trace.onepass.prefetch`)
    read the trace while the graph is imported and the launcher and the telemetry's database start
    (~2.5 s on the 16-core device, 2026-12-03), the engine's pass in a lane of its own too;
    ``trace_rank``'s read adopts them when it reads the same file with the same arguments (its cache
    folder, the rank and label its name gives, the registry's event names and raw patterns, the
    cross-checks, the annotated copy), and they are stopped otherwise (after the graph, or at exit).
    With them start the report figures' idle lanes (:func:`ai4s_graph.tools.report.drawing.prestart`:
    matplotlib imported during the read). Returns whether the trace's lanes started. Never raises."""
    if not req.perf_run or req.submit or req.slurm_array:
        return False
    from ..tools.trace.trace_files import run_traces  # the launcher's traces (discover_artifacts), no slurm imports

    traces = run_traces(req.perf_run)
    if len(traces) != 1:
        return False
    from ..graph.rules import registry
    from ..tools.trace import onepass
    from ..tools.trace import ranks as rank_identity

    path = Path(req.perf_run) / traces[0]
    # what trace_rank reads it with (graph/analysis/nodes/trace_analyst.py): its cache folder, and the
    # rank and label the file name gives (nothing read, as the fan-out)
    cache_dir = trace_cache_dir(req)
    try:
        files, _ = rank_identity.identify_ranks([path], header_ranks=[None])
        started = onepass.prefetch(str(path), files[0].rank, cache_dir, files[0].label,
                                   wanted=registry.event_name_wanted, raw_patterns=registry.raw_patterns(),
                                   cross_check=req.cross_check, annotate=True)
    except (Ai4sError, OSError, ValueError):
        return False
    if started:  # the figures are drawn beside the annotated copy of this trace (synthesizer.figure_lanes)
        from ..tools.report import drawing

        drawing.prestart(path)
    return started


def register(app: typer.Typer) -> None:
    """Add the ``run`` command to ``app``."""
    @app.command("run")
    def run(
        ctx: typer.Context,
        job: Optional[str] = typer.Option(None, "--job", "-j", help="SLURM job id of a profiled run to analyse."),
        perf_run_arg: Optional[str] = typer.Option(
            None, "--perf-run", help="Run directory (default $AI4S_SHARED_DIR/models/<model>/perf-runs/<job>/)."),
        out_arg: Optional[str] = typer.Option(None, "--out", help="Where report.md, report.json and plots go "
                                              "(default: the run directory, or ./ai4s-reports/<job>/ if it is read-only; with "
                                              "--submit ./ai4s-reports/submit-<model>-<hash of its parameters>/)."),
        compare_arg: Optional[str] = typer.Option(None, "--compare", help="A run of the same model at another precision "
                                                  "(the precision discriminator, seed lesson 13)."),
        force: bool = typer.Option(False, "--force", help="Replace a report of another job already in the output "
                                   "directory (without it such a directory is refused)."),
        tsdb_url: Optional[str] = typer.Option(None, "--tsdb-url", help="VictoriaMetrics/Prometheus URL; default: "
                                               "start one on loopback loaded with the run's telemetry/*.jsonl."),
        llm: Optional[str] = typer.Option(None, "--llm", help="none | anthropic (default: anthropic when "
                                          "ANTHROPIC_API_KEY is set, else none)."),
        llm_model: Optional[str] = typer.Option(None, "--llm-model", help="LLM model name (with --llm anthropic)."),
        model: Optional[str] = typer.Option(None, "--model", hidden=True,
                                            help="Deprecated: the LLM model name; use --llm-model."),
        cross_check: list[str] = typer.Option([], "--cross-check", help="Also compute each rank's GPU timeline "
                                              "with hta or tracelens (repeatable; needs the [hta] / [tracelens] "
                                              "extra) and record whether they agree; default none."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON summary on stdout (the node STATUS "
                                     "lines go to stderr)."),
        quiet: bool = typer.Option(False, "-q", "--quiet", help="Print only STATUS lines and errors."),
        max_tokens_total: Optional[int] = typer.Option(None, "--max-tokens-total", help="LLM token budget per run."),
        fresh: bool = typer.Option(False, "--fresh", help="Discard this run's checkpoint and start over."),
        checkpoint: Optional[str] = typer.Option(None, "--checkpoint", help="SQLite file or postgresql:// URL "
                                                 "(default $AI4S_STATE_DIR/checkpoints.sqlite)."),
        workers: int = typer.Option(0, "--workers", help="Rank-trace worker processes (0: automatic)."),
        slurm_array: bool = typer.Option(False, "--slurm-array", help="Analyse the rank traces as a SLURM job "
                                         "array on the cluster (automatic from 64 ranks with --cluster-config)."),
        submit: bool = typer.Option(False, "--submit", help="Submit the profiled job with sbatch, wait, then analyse."),
        workload: str = typer.Option("cpu-toy", "--workload", help="With --submit: job template "
                                     "(cpu-toy | generic | hydragnn | orbit2)."),
        app_model: Optional[str] = typer.Option(None, "--app-model", help="With --submit: the model folder name "
                                                "under $AI4S_SHARED_DIR/models/ (default: the workload)."),
        nodes: int = typer.Option(1, "--nodes", help="With --submit: nodes."),
        gpus_per_node: int = typer.Option(0, "--gpus-per-node", help="With --submit: GPUs per node."),
        ntasks_per_node: Optional[int] = typer.Option(None, "--ntasks-per-node", help="With --submit: tasks (ranks) "
                                                      "per node (default: one per GPU, 1 without GPUs)."),
        time_limit: str = typer.Option("00:10:00", "--time-limit", help="With --submit: SLURM time limit."),
        env: list[str] = typer.Option([], "--env", help="With --submit: lever KEY=VALUE (repeatable)."),
        script_arg: list[str] = typer.Option([], "--script-arg", help="With --submit: workload argument (repeatable)."),
        cluster_config: Optional[Path] = typer.Option(None, "--cluster-config", help="Cluster config YAML "
                                                      "(partition, account, shared dir)."),
        wait_timeout: float = typer.Option(3600.0, "--wait-timeout", help="Seconds to wait for sacct to report a "
                                           "terminal state before TIMEOUT_WAITING."),
        baseline: Optional[Path] = typer.Option(None, "--baseline", exists=True, dir_okay=False, help="An eval-cluster report (REPORT.md) or its "
                                                "raw eval JSON: the all-reduce busbw measured on this cluster, to "
                                                "compare the job's achieved busbw with."),
        probe: bool = typer.Option(False, "--probe", help="Let the deterministic verifiers run one srun -N1 "
                                   "--time=00:05:00 node probe (GPU clocks and power cap) on one of the job's nodes."),
    ) -> None:
        """Analyse one profiled job: launcher → trace and telemetry analysts → verifiers → report."""
        # a signal from here on stops the run at once with its STATUS line (SignalStop); before the
        # request exists, the refusal's output
        stopper = SignalStop(lambda line, code: (options.echo_json("run", line, outcome="fail", exit_code=code)
                                                  if as_json else print(line)), fresh=fresh).install()
        ctx.call_on_close(stopper.restore)
        options.set_quiet(quiet)
        if model is not None:
            err_console.print("warning: `run --model` is deprecated: it names the LLM, use --llm-model "
                              "(in `optimize`, --model is the workload)")
            llm_model = llm_model or model
        perf_run, out = _path_option(perf_run_arg, "--perf-run", as_json), _path_option(out_arg, "--out", as_json)
        compare = _path_option(compare_arg, "--compare", as_json)
        if not submit and not job and not perf_run:
            _refuse("no job given: give --job (and --perf-run), or --submit", as_json=as_json)
        llm_mode = llm or ("anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "none")
        if llm_mode not in ("none", "anthropic"):
            _refuse(f"bad --llm: it must be none or anthropic, not {llm_mode!r}", as_json=as_json)
        submit_params: dict[str, Any] = {}
        if submit:
            submit_params = {"template": workload, "model": app_model or workload, "nodes": nodes,
                             "gpus_per_node": gpus_per_node, "ntasks_per_node": ntasks_per_node, "time_limit": time_limit, "env": _parse_env(env),
                             "script_args": list(script_arg),
                             "cluster_config": str(cluster_config) if cluster_config else None}
        out_dir = resolve_out_dir(out, perf_run, job, submit_params)
        try:
            req = RunRequest(jobid=job, perf_run=str(perf_run.resolve()) if perf_run else None, out_dir=str(out_dir),
                         compare=str(compare.resolve()) if compare else None, tsdb_url=tsdb_url, llm=llm_mode,
                         llm_model=llm_model, max_tokens_total=max_tokens_total, submit=submit,
                         submit_params=submit_params, cluster_config=str(cluster_config) if cluster_config else None,
                         wait_timeout_s=wait_timeout, workers=workers, slurm_array=slurm_array,
                         baseline=str(baseline.resolve()) if baseline else None,
                         probe=probe, cross_check=tuple(cross_check), force=force)
        except ValueError as e:
            _refuse(_first_error(e), as_json=as_json)

        from ..graph.analysis.nodes.launcher import preflight
        from ..tools.report.outdir import check_out_dir, check_run_dir

        try:  # refused invocations write nothing (an earlier report in that directory survives)
            found = check_run_dir(perf_run) if (perf_run is not None and not submit) else None
            preflight(req)
            check_out_dir(out_dir, inputs=(req.perf_run, req.compare), owner=job or (found.jobid if found else None),
                          force=force)
        except (Ai4sError, UnsafePathError) as e:
            _refuse(str(e), as_json=as_json)

        progress = RankProgress()
        statuses: list[dict[str, str]] = []
        node_console = err_console if as_json else console

        def printer(node: str, line: str) -> None:
            if node == "graph:ranks":
                progress.start(int(line))
                return
            statuses.append({"node": node, "status": line})
            st = StatusLine.parse(line).status.value
            color = {"ok": "green", "partial": "yellow", "fail": "red"}[st]
            node_console.print(Text.assemble((f"{node:<20}", "bold"), " ", (line, color)))
            if node == "trace_rank":
                progress.rank_done()

        def emit(line: str, code: int, rep: Any = None, out_final: Path | None = None) -> None:
            progress.close()
            if as_json:
                options.echo_json("run", line, **_summary(req, rep, out_final, statuses, code))
            else:
                print(line)

        def finish(line: str, code: int, rep: Any = None, out_final: Path | None = None) -> None:
            stopper.settled()
            emit(line, code, rep, out_final)
            raise typer.Exit(code)

        stopper.emit = lambda line, code: emit(line, code)

        try:
            prefetched = perf_run is not None and prefetch_trace(req)
        finally:
            early.drop_unused()  # the warm lanes the prefetch did not take (cli/early.py)
        from ..graph.checkpoint import CheckpointRefusedError, ThreadBusyError  # here: langgraph's import is slow

        try:
            try:
                final = execute(req, fresh=fresh, checkpoint=checkpoint, printer=printer)
            finally:
                if prefetched:  # lanes no read or figure adopted (a refused or resumed run, a failed node) stop here
                    from ..tools.report import drawing
                    from ..tools.trace import onepass

                    onepass.drop_prefetched()
                    drawing.drop_idle()
        except ThreadBusyError as e:  # a refusal: the other process's run is untouched
            err_console.print(f"error: {one_line(e)}")
            finish(StatusLine.make("fail", str(e)).format(), 2)
        except (CheckpointRefusedError, UnsafePathError) as e:  # nothing loaded from it / nothing written there
            err_console.print(f"error: {one_line(e)}")
            finish(StatusLine.make("fail", str(e)).format(), 2)
        except Ai4sError as e:
            err_console.print(f"error: {one_line(e)}")
            finish(StatusLine.make("fail", str(e)).format(), 1)
        except OSError as e:  # disk full, file too big, no permission: published files are never half-written
            err_console.print(f"error: {one_line(e, 300)}")
            err_console.print("Nothing already written was replaced by a partial file; the finished nodes are "
                              f"checkpointed: free the space and {resume_hint(fresh)} to resume.")
            finish(StatusLine.make("fail", f"{type(e).__name__}: {e.strerror or e}; earlier report kept; re-run "
                                           f"{'without --fresh ' if fresh else ''}to resume").format(), 1)
        except Exception as e:  # a node raised: the checkpoint keeps the finished nodes
            err_console.print(f"error: {type(e).__name__}: {one_line(e, 300)}")
            err_console.print(f"The finished nodes are checkpointed: {resume_hint(fresh)} to resume. Until then the "
                              "report in the output directory is marked stale (diff refuses the folder).")
            finish(f"STATUS=fail; reason={type(e).__name__} in a node; re-run "
                   f"{'without --fresh ' if fresh else ''}to resume", 1)
        rep = final.get("report")
        if final.get("stop"):
            finish(StatusLine.make("fail", f"stopped: {final['stop']}").format(), 1)
        if not rep:
            finish("STATUS=fail; reason=no report written", 1)
        out_final = Path(final["request"].out_dir)
        if not as_json and not options.quiet():
            console.print(Text.assemble("\n", (rep.bottleneck.klass.value, "bold"), " — ",
                                        one_line(rep.executive_summary), "\n"))
            console.print(f"report: {one_line(report_written(out_final))}")
        line = rep.statuses["synthesizer"]
        finish(line, 1 if line.startswith("STATUS=fail") else 0, rep, out_final)


def _summary(req: RunRequest, rep: Any, out_dir: Path | None, statuses: list[dict[str, str]],
             code: int) -> dict[str, Any]:
    """The stable part of a run for ``--json``: job, output folder and files (the not-published
    folder when the earlier report was kept: :func:`report_written`), the bottleneck class (with
    the critical-path rank when there is one), claim counts by verdict, every node's STATUS line in
    the order printed (``[{"node", "status"}]``) and the exit code (the report itself is
    ``report.json``)."""
    out: dict[str, Any] = {"jobid": req.jobid, "exit_code": code, "statuses": statuses,
                           "out_dir": str(out_dir) if out_dir else req.out_dir}
    if rep is None:
        return {**out, "bottleneck": None, "claims": None, "files": None}
    counts: dict[str, int] = {}
    for vc in rep.claims:
        v = getattr(vc.verdict, "value", str(vc.verdict))
        counts[v] = counts.get(v, 0) + 1
    b = rep.bottleneck
    md = report_written(out_dir or Path(req.out_dir))
    return {**out, "jobid": rep.jobid or req.jobid,
            "bottleneck": {"class": b.klass.value, "critical_rank": b.critical_rank, "straggler": b.straggler,
                           "confidence": b.confidence, "borderline": b.borderline},
            "claims": counts, "files": {"report_md": str(md), "report_json": str(md.with_name("report.json"))}}
