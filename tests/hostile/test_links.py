"""Kind: links in the output directory (issue 26, "writes follow symlinks"). A name the tool writes,
planted as a symbolic link (to a file or a folder), a hard link or a FIFO: the target stays
untouched, the command says so in one line and exits 2, nothing is written."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.state.publish import UnsafePathError, append, ensure_dir, publish, publish_many  # noqa: E402

PRECIOUS = b"precious: must never be written by ai4s-graph\n"

#: (name under --out, kind of link): every file and folder `run` writes.
RUN_LINKS = [
    ("report.md", "file"), ("report.json", "file"), ("manifest.json", "file"), ("foms.json", "file"),
    ("gpu_time_breakdown.png", "file"), ("telemetry.png", "file"), (".ai4s-graph", "dir"),
    (".ai4s-graph/node_journal.jsonl", "file"), (".ai4s-graph/trace-cache", "dir"), ("perf_report_csvs", "dir"),
    ("perf_report_csvs/rank0", "dir"), ("perf_report_csvs/rank0/gpu_timeline.csv", "file"),
]


def _victims(tmp_path: Path) -> tuple[Path, Path]:
    f = tmp_path / "victim.txt"
    f.write_bytes(PRECIOUS)
    d = tmp_path / "victim-dir"
    d.mkdir()
    (d / "keep.txt").write_bytes(PRECIOUS)
    return f, d


@pytest.mark.parametrize("name,kind", RUN_LINKS)
def test_run_refuses_a_link_where_it_writes(tmp_path, name, kind):
    vf, vd = _victims(tmp_path)
    out = tmp_path / "out"
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(vf if kind == "file" else vd, out / name)
    before = sorted(p.name for p in out.rglob("*"))
    cp = H.cli("run", "--job", "92001", "--perf-run", str(H.EXAMPLE), "--out", str(out), state=tmp_path / "st")
    line = H.assert_refused(cp, "symbolic link", name.split("/")[0])
    assert "refused" in line
    assert vf.read_bytes() == PRECIOUS and sorted(os.listdir(vd)) == ["keep.txt"]
    assert (vd / "keep.txt").read_bytes() == PRECIOUS
    assert sorted(p.name for p in out.rglob("*")) == before  # nothing written


def test_run_refuses_a_fifo_and_a_hard_link(tmp_path):
    vf, _ = _victims(tmp_path)
    out = tmp_path / "out"
    (out / ".ai4s-graph").mkdir(parents=True)
    os.link(vf, out / ".ai4s-graph" / "node_journal.jsonl")
    cp = H.cli("run", "--job", "92001", "--perf-run", str(H.EXAMPLE), "--out", str(out), state=tmp_path / "st")
    H.assert_refused(cp, "hard link", "node_journal.jsonl")  # an append would change the other file too
    assert vf.read_bytes() == PRECIOUS
    out2 = tmp_path / "out2"
    out2.mkdir()
    os.mkfifo(out2 / "report.md")
    cp = H.cli("run", "--job", "92001", "--perf-run", str(H.EXAMPLE), "--out", str(out2), state=tmp_path / "st2")
    H.assert_refused(cp, "not a regular file")


def test_diff_refuses_links(tmp_path):
    vf, vd = _victims(tmp_path)
    _, a, _ = H.good_report(tmp_path / "a")
    b = a  # a run compared with itself is comparable: diff writes <B>/diff-92001/
    d = b / "diff-92001"
    d.mkdir()
    os.symlink(vf, d / "diff.md")
    cp = H.cli("diff", str(a), str(b), state=tmp_path / "st")
    H.assert_refused(cp, "symbolic link", "diff.md")
    assert vf.read_bytes() == PRECIOUS and not (d / "diff.json").exists()
    os.unlink(d / "diff.md")
    d.rmdir()
    os.symlink(vd, d)
    cp = H.cli("diff", str(a), str(b), state=tmp_path / "st")
    H.assert_refused(cp, "symbolic link", "diff-92001")
    assert sorted(os.listdir(vd)) == ["keep.txt"]


def test_diff_folder_name_from_a_report_cannot_leave_b(tmp_path):
    import json

    _, a, _ = H.good_report(tmp_path / "a")
    rep = json.loads((a / "report.json").read_text())
    rep["jobid"] = "../../escaped"
    (a / "report.json").write_text(json.dumps(rep))
    (a / "manifest.json").unlink()
    _, b, _ = H.good_report(tmp_path / "b")
    cp = H.cli("diff", str(a), str(b), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert not (tmp_path / "escaped").exists() and not (b.parent.parent / "escaped").exists()
    assert any(p.name.startswith("diff-") for p in b.iterdir())


def test_optimize_loop_files_refuse_links(tmp_path):
    from ai4s_graph.graph.checkpoint import sqlite_saver
    from ai4s_graph.state.loop import IterationRecord
    from ai4s_graph.tools.levers import catalog as L

    vf, _ = _victims(tmp_path)
    loop = tmp_path / "loop-x"
    loop.mkdir()
    for name in (L.JOURNAL, L.SUBMISSIONS, L.BEST_CONFIG, L.CATALOG_UPDATED, "checkpoint.sqlite",
                 "checkpoint.sqlite-journal"):
        os.symlink(vf, loop / name)
    rec = IterationRecord(loop_id="x", iteration=0, kind="baseline", fom_name="epoch_time_s", decision="baseline",
                          why="baseline")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        L.record_submission(loop, "k", "1")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        L.write_json(loop / L.BEST_CONFIG, {"a": 1})
    with pytest.raises(UnsafePathError, match="symbolic link"):
        L.dump_catalog(L.load_catalog(L.bundled_catalog("cpu-toy")), loop / L.CATALOG_UPDATED)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        L.append_journal(loop, rec)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        sqlite_saver(loop / "checkpoint.sqlite", root=loop)
    os.unlink(loop / "checkpoint.sqlite")
    with pytest.raises(UnsafePathError, match="checkpoint.sqlite-journal"):  # SQLite would follow it
        sqlite_saver(loop / "checkpoint.sqlite", root=loop)
    assert vf.read_bytes() == PRECIOUS


def test_optimize_resume_refuses_a_linked_checkpoint(tmp_path):
    vf, _ = _victims(tmp_path)
    from ai4s_graph.graph.optimize import graph as O
    from ai4s_graph.tools.levers.catalog import bundled_catalog

    req = O.new_loop(model="cpu-toy", catalog_path=bundled_catalog("cpu-toy"), loop_root=tmp_path / "loops",
                     executor="local", shared_dir=tmp_path / "shared")
    os.symlink(vf, Path(req.loop_dir) / O.CHECKPOINT_DB)
    cp = H.cli("optimize", "--resume", f"loop-{req.loop_id}", "--loop-root", str(tmp_path / "loops"),
               state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 2 and "symbolic link" in H.status_lines(cp)[-1], cp.stdout + cp.stderr
    assert vf.read_bytes() == PRECIOUS


# ---------------------------------------------------------------------------- the publish function


def test_publish_never_writes_through_any_link(tmp_path):
    vf, vd = _victims(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(vf, out / "f")
    os.symlink(vd, out / "d")
    os.link(vf, out / "hard")
    os.mkfifo(out / "fifo")
    cases = [
        (lambda: publish(out / "f", "x", out), "f is a symbolic link"),
        (lambda: append(out / "f", "x", out), "f is a symbolic link"),
        (lambda: publish(out / "d" / "new", "x", out), "d is a symbolic link"),
        (lambda: append(out / "d" / "keep.txt", "x", out), "d is a symbolic link"),
        (lambda: ensure_dir(out / "d" / "sub", out), "d is a symbolic link"),
        (lambda: publish_many([(out / "ok.txt", "x"), (out / "f", "y")], out), "f is a symbolic link"),
        (lambda: append(out / "hard", "x", out), "hard link"),
        (lambda: append(out / "fifo", "x", out), "not a regular file"),
        (lambda: publish(out / "fifo", "x", out), "not a regular file"),
    ]
    for call, msg in cases:
        with pytest.raises(UnsafePathError, match=msg) as e:
            call()
        assert "\n" not in str(e.value)
    assert vf.read_bytes() == PRECIOUS and sorted(os.listdir(vd)) == ["keep.txt"]
    assert not (out / "ok.txt").exists()  # publish_many renames nothing when one target is refused
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]
    # a hard link is replaced as a name (rename), its other name keeps the old bytes
    publish(out / "hard", "new", out)
    assert vf.read_bytes() == PRECIOUS and (out / "hard").read_text() == "new"


def test_node_wrapper_turns_a_refused_journal_into_status_fail(tmp_path):
    from ai4s_graph.graph.runtime import node
    from ai4s_graph.state import Outcome, StatusLine

    vf, vd = _victims(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(vd, out / ".ai4s-graph")
    ran = []

    @node("probe_node")
    def body(state):
        ran.append(1)
        return {}, StatusLine.make(Outcome.ok, "ran")

    upd = body({"request": {"out_dir": str(out)}})
    assert upd["statuses"]["probe_node"].startswith("STATUS=fail; reason=") and "symbolic link" in upd["statuses"]["probe_node"]
    assert not ran and sorted(os.listdir(vd)) == ["keep.txt"]


def test_publish_keeps_the_old_file_when_the_disk_is_full(tmp_path):
    """ENOSPC/EFBIG during a write (a real filesystem limit: RLIMIT_FSIZE in a child process, no
    mock of open): the earlier file keeps its bytes, no temporary file is left, no 0-byte file."""
    d = tmp_path / "out"
    d.mkdir()
    (d / "report.json").write_text('{"old": true}\n')
    (d / "report.md").write_text("# old report\n")
    got = H.under_file_limit("from ai4s_graph.state.publish import publish_many; publish_many("
                             f"[({str(d / 'report.json')!r}, 'x' * 100), ({str(d / 'report.md')!r}, 'y' * 100000)], "
                             f"{str(d)!r})", 4096)
    assert got.startswith("OSError 27"), got  # EFBIG: File too large
    assert (d / "report.json").read_text() == '{"old": true}\n' and (d / "report.md").read_text() == "# old report\n"
    assert sorted(os.listdir(d)) == ["report.json", "report.md"]
