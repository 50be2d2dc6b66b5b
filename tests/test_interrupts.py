"""What a run stopping at once on a signal (``ai4s-graph run``'s SignalStop) relies on: checkpoint
writes frozen, publishing frozen with its temporary files removed, and a resume after the last
node's checkpointed writes leaving the output folder finished. Real SQLite checkpoints and real
files; the end-to-end signal runs are in tests/test_graph_run.py."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

from ai4s_graph.graph import checkpoint
from ai4s_graph.graph.analysis.schema import CHECKPOINT_TYPES
from ai4s_graph.state import publish
from ai4s_graph.tools.report import write as report_write


def _blocked(fn) -> tuple[threading.Thread, threading.Event]:
    """``fn`` started in a thread; the event is set when it returned."""
    done = threading.Event()

    def go() -> None:
        fn()
        done.set()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, done


def test_frozen_checkpoints_take_no_write_until_thawed(tmp_path: Path) -> None:
    """After freeze_writes no thread reads or writes the open checkpoint (a node ending while the
    run stops cannot checkpoint its result); the same call from another thread goes through once
    the locks are given back."""
    with checkpoint.open_checkpointer(str(tmp_path / "ck.sqlite"), CHECKPOINT_TYPES) as saver:
        cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        thaw = checkpoint.freeze_writes()
        t, done = _blocked(lambda: saver.get_tuple(cfg))
        t.join(0.5)
        assert not done.is_set(), "the checkpoint answered while frozen"
        thaw()
        t.join(60)
        assert done.is_set()
    assert not list(checkpoint._OPEN)


def test_frozen_publishing_removes_the_file_being_written_and_renames_nothing(tmp_path: Path) -> None:
    """A file being written when publishing freezes is removed (no ``.<name>.<hex>.tmp`` is left
    by the exit) and its target keeps its old content; a set published from another thread after
    the freeze renames none of its files until it is thawed."""
    target = tmp_path / "annotated_trace.json.gz"
    target.write_bytes(b"old")
    writing, go_on = threading.Event(), threading.Event()

    def stream() -> None:
        try:
            with publish.publish_stream(target, root=tmp_path) as fh:
                fh.write(b"new, half written")
                writing.set()
                go_on.wait(60)
        except OSError:
            pass  # its temporary file was removed under it

    t1 = threading.Thread(target=stream, daemon=True)
    t1.start()
    assert writing.wait(60)
    assert len(list(tmp_path.glob(".annotated_trace.json.gz.*.tmp"))) == 1
    thaw = publish.freeze()
    assert list(tmp_path.glob(".*.tmp")) == []
    (tmp_path / "report.json").write_text("old json")
    (tmp_path / "report.md").write_text("old md")
    t2, done = _blocked(lambda: publish.publish_many([(tmp_path / "report.json", "new json"),
                                                      (tmp_path / "report.md", "new md")], root=tmp_path))
    t2.join(0.5)
    assert not done.is_set()
    assert (tmp_path / "report.json").read_text() == "old json" and (tmp_path / "report.md").read_text() == "old md"
    go_on.set()
    t1.join(60)
    assert target.read_bytes() == b"old"  # its rename failed: the temporary file was gone
    thaw()
    t2.join(60)
    assert done.is_set()
    assert (tmp_path / "report.json").read_text() == "new json" and (tmp_path / "report.md").read_text() == "new md"
    assert list(tmp_path.glob(".*.tmp")) == []


def test_a_resume_after_the_synthesizers_checkpointed_writes_leaves_the_folder_finished(perf_runs, tmp_path):
    """The synthesizer published its report and its writes were checkpointed, but the step was not
    committed (a run stopped in between: here the finished checkpoint's last step removed from the
    database). The same request resumes after it, runs no node, and leaves no in-progress marker
    (which would make ``diff`` refuse the folder as unfinished for good)."""
    from ai4s_graph.cli.run import execute
    from ai4s_graph.graph.analysis.configuration import RunRequest
    from ai4s_graph.graph.runtime import read_journal

    run = shutil.copytree(perf_runs / "92003", tmp_path / "run")
    out = tmp_path / "out"
    req = RunRequest(jobid="92003", perf_run=str(run), out_dir=str(out))
    ck = tmp_path / "ck.sqlite"
    execute(req, checkpoint=str(ck))
    assert report_write.in_progress(out) is None and (out / "report.md").is_file()
    con = sqlite3.connect(ck)
    with con:
        (last,) = con.execute("SELECT checkpoint_id FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1").fetchone()
        con.execute("DELETE FROM checkpoints WHERE checkpoint_id = ?", (last,))
        con.execute("DELETE FROM writes WHERE checkpoint_id = ?", (last,))
    con.close()
    before = len(read_journal(out))
    lines: list[tuple[str, str]] = []
    final = execute(req, checkpoint=str(ck), printer=lambda node, line: lines.append((node, line)))
    assert lines[0] == ("graph", "STATUS=ok; reason=resuming after synthesizer (their results were checkpointed)")
    assert final["report"].bottleneck.klass.value == "compute-bound"
    assert [r for r in read_journal(out)[before:] if r["event"] == "start"] == []
    assert report_write.in_progress(out) is None


def test_signals_are_ignored_from_the_final_line_and_given_back_after(monkeypatch) -> None:
    """From the run's final line (``settled``) a signal is ignored: it would add an ``interrupted``
    line to a finished run's output. The earlier handlers come back after the command, unless the
    process ends with it (the command line's main sets ``hold_after_settle``)."""
    import signal

    from ai4s_graph.cli.run import STOP_SIGNALS, SignalStop

    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    stop = SignalStop(lambda line, code: None).install()
    assert all(signal.getsignal(s) == stop._stop for s in STOP_SIGNALS)
    stop.settled()
    assert all(signal.getsignal(s) == signal.SIG_IGN for s in STOP_SIGNALS)
    stop.restore()
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before
    monkeypatch.setattr(SignalStop, "hold_after_settle", True)
    held = SignalStop(lambda line, code: None).install()
    held.settled()
    held.restore()
    try:
        assert all(signal.getsignal(s) == signal.SIG_IGN for s in STOP_SIGNALS)
    finally:
        monkeypatch.setattr(SignalStop, "hold_after_settle", False)
        held.restore()
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def test_a_freeze_in_the_thread_renaming_a_set_finishes_the_set(tmp_path: Path, monkeypatch) -> None:
    """The signal handler runs in the thread it interrupts: when that thread was renaming a set
    (the synthesizer publishes the report in the main thread), the freeze renames the rest of the
    set, so report.json and report.md are both new (before: the new report.json beside the old
    report.md)."""
    import os

    (tmp_path / "report.json").write_text("old json")
    (tmp_path / "report.md").write_text("old md")
    real = os.replace
    calls: list[str] = []
    thaws = []

    class Exited(Exception):
        """The process's exit, which the real handler makes here."""

    def replace_then_signal(src, dst, **kw):  # noqa: ANN001, ANN003
        real(src, dst, **kw)
        calls.append(dst)
        if len(calls) == 1:  # the signal lands after the first rename of the set
            thaws.append(publish.freeze())
            raise Exited

    monkeypatch.setattr(publish.os, "replace", replace_then_signal)
    try:
        publish.publish_many([(tmp_path / "report.json", "new json"), (tmp_path / "report.md", "new md")],
                             root=tmp_path)
    except Exited:
        pass
    finally:
        for thaw in thaws:
            thaw()
    assert (tmp_path / "report.json").read_text() == "new json" and (tmp_path / "report.md").read_text() == "new md"
    assert list(tmp_path.glob(".*.tmp")) == []
    assert publish._RENAMES == []


def test_the_interrupt_line_of_a_fresh_run_says_to_resume_without_fresh() -> None:
    """The line SignalStop prints on a signal names how to resume: "re-run the same command" for a
    plain run, "... without --fresh" for one started with --fresh (its --fresh would discard the
    checkpoint). A real SIGINT raised in a child process that installed the handler; exit 130."""
    import subprocess
    import sys

    code = ("import signal, sys; from ai4s_graph.cli.run import SignalStop; "
            "SignalStop(lambda line, code: print(line), fresh=sys.argv[1] == 'fresh').install(); "
            "signal.raise_signal(signal.SIGINT); print('not stopped')")
    for fresh, hint in (("fresh", "re-run the same command without --fresh"), ("plain", "re-run the same command")):
        cp = subprocess.run([sys.executable, "-c", code, fresh], capture_output=True, text=True, timeout=120)
        assert cp.returncode == 130, cp.stderr
        assert cp.stdout.splitlines() == [f"STATUS=fail; reason=interrupted (SIGINT); {hint} to resume"]
        assert f"error: interrupted (SIGINT); the finished nodes are checkpointed: {hint} to resume" in cp.stderr
