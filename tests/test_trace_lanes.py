"""The rank read's lanes (tools/trace/lanes.py): the verifier's reader, the step accountant and
the annotated copy read the trace in processes of their own. Their result must be the in-process
one, to the last key and byte, on real traces of every bundled kind; a lane that fails, dies or
cannot start must leave the same result (its part then runs in the caller's process)."""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
from pathlib import Path

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.report import annotated
from ai4s_graph.tools.trace import lanes, onepass

REPO = Path(__file__).resolve().parents[1]
#: Real traces: the bundled examples' 1-GPU dispatch-bound GNN (92001), data-loader-bound ViT
#: (92002), a 2-GPU NCCL rank (93001), and HTA's inference trace (tests/data/traces/README.md).
TRACES = [REPO / "examples/perf-runs/92001/traces/trace_rank0.json.gz",
          REPO / "examples/perf-runs/92002/traces/trace_rank0.json.gz",
          REPO / "examples/perf-runs/93001/traces/trace_rank1.json.gz",
          REPO / "tests/data/traces/hta_inference_rank_1.json.gz"]


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, on: str, annotate: bool = True, cache: str | None = None) -> dict:
    """``read_rank`` with lanes on (``"1"``) or off, computed (a cache folder of its own unless ``cache``)."""
    monkeypatch.setenv(lanes.LANES_ENV, on)
    cache = cache or tempfile.mkdtemp(prefix="ai4s-lanes-cache-")
    return onepass.read_rank(str(path), 0, cache, "0", wanted=registry.event_name_wanted,
                             raw_patterns=registry.raw_patterns(), annotate=annotate)


def _annotated(path: Path, out: Path) -> bytes:
    annotated.write_annotated_trace(path, out, rank=0)
    return gzip.decompress(out.read_bytes())


def _spools() -> set[str]:
    """The deleted files this process holds open (a lane's copy spool is an anonymous file) and any
    named spool left in the temporary folder."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            held.add(target)
    return held | {p.name for p in Path(tempfile.gettempdir()).glob("ai4s-annotated-*")}


def _left_behind(before: set[str]) -> set[str]:
    """The spools held or named now that were not there at ``before`` (a ``_spools()`` taken at the
    test's start). A difference, not an equality: an earlier test's file (pytest's own capture files
    are anonymous temporary files too) may be closed by the garbage collector during this test, and
    that is not this test's concern."""
    return _spools() - before


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.parent.name + "/" + p.name)
def test_lanes_give_the_in_process_result(trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _spools()
    here = _read(trace, monkeypatch, "0")
    text_here = _annotated(trace, tmp_path / "here.json.gz")
    apart = _read(trace, monkeypatch, "1")
    assert annotated._file_key(trace) in annotated._PREPARED, "the lane's copy is filed for the writer"
    text_apart = _annotated(trace, tmp_path / "apart.json.gz")
    assert apart == here
    assert "reader" in apart and apart["reader"]["timeline"], "the verifier's reader ran"
    assert ("step_accounting" in apart) == ("step_accounting" in here)
    assert text_apart == text_here
    assert _left_behind(before) == set(), "the lane's copy file is removed"


def test_lanes_are_chosen_by_size_and_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = TRACES[0]
    monkeypatch.delenv(lanes.LANES_ENV, raising=False)
    assert lanes.lanes_for(small) is False  # 0.3 MB on disk, ~4 MB of JSON: below MIN_JSON_BYTES
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    assert lanes.lanes_for(small) is True
    monkeypatch.setenv(lanes.LANES_ENV, "0")
    assert lanes.lanes_for(small) is False
    monkeypatch.setenv(lanes.LANES_ENV, "yes")  # anything but 1: never
    assert lanes.lanes_for(small) is False


def _claims_size(path: Path, size: int) -> Path:
    """A gzip file whose trailer records ``size`` bytes of text (ISIZE, RFC 1952: what
    :func:`.scan_parallel.json_bytes` reads of a .json.gz without inflating it)."""
    data = bytearray(gzip.compress(b"{}"))
    data[-4:] = (size % (1 << 32)).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


def test_lanes_by_default_between_the_two_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ai4s_graph.tools.trace.scan_parallel import MIN_JSON_BYTES

    monkeypatch.delenv(lanes.LANES_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert lanes.lanes_for(_claims_size(tmp_path / "mid.json.gz", MIN_JSON_BYTES)) is True
    assert lanes.lanes_for(_claims_size(tmp_path / "low.json.gz", MIN_JSON_BYTES - 1)) is False
    big = _claims_size(tmp_path / "big.json.gz", lanes.LANES_MAX_JSON_BYTES)  # one process keeps within it
    assert lanes.lanes_for(big) is False
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    assert lanes.lanes_for(big) is True
    monkeypatch.delenv(lanes.LANES_ENV)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})  # one CPU: the lanes would only wait
    assert lanes.lanes_for(tmp_path / "mid.json.gz") is False


def _boom(msg: str) -> None:
    raise ValueError(msg)


def _chatty(x: int) -> int:
    print("a lane's own print must not reach the answer's pipe")  # noqa: T201
    os.write(1, b"nor a write to fd 1\n")
    return x * 2


def _die() -> None:
    os._exit(3)


def test_lane_value_and_its_prints() -> None:
    lane = lanes.Lane(_chatty, 21)
    assert lane.result() == 42
    with pytest.raises(lanes.LaneError, match="already taken"):
        lane.result()


def test_lane_failure_is_one_line_and_take_runs_it_here() -> None:
    lane = lanes.Lane(_boom, "a\nb")
    with pytest.raises(lanes.LaneError, match=r"^ValueError: a b$"):
        lane.result()
    assert lanes.take(lanes.Lane(_chatty, 5), _chatty, 5) == 10
    assert lanes.take(lanes.Lane(_die), _chatty, 7) == 14  # the lane died: the same function, here
    assert lanes.take(None, _chatty, 8) == 16


def test_a_dead_lane_says_so() -> None:
    with pytest.raises(lanes.LaneError, match="process ended: exit 3"):
        lanes.Lane(_die).result()


def _imported(name: str) -> bool:
    return name in sys.modules


def test_an_idle_lane_imports_first_then_takes_one_call() -> None:
    """Lane(None, preload=...): the process starts and imports before its call is known (``wave``:
    a module neither this test module nor the lane's own start imports; an unknown one is skipped)."""
    cold = lanes.Lane(_imported, "wave")
    idle = lanes.Lane(None, preload=("no_such_module_here", "wave"))
    with pytest.raises(lanes.LaneError, match="no call handed"):
        idle.result()
    idle.send(_imported, "wave")
    assert cold.result() is False and idle.result() is True
    with pytest.raises(lanes.LaneError, match="already handed a call"):
        idle.send(_chatty, 1)
    ended = lanes.Lane(None)
    ended.proc.kill()
    ended.proc.wait()
    with pytest.raises(lanes.LaneError, match="process ended"):
        ended.send(_chatty, 1)
    with pytest.raises(lanes.LaneError, match="not picklable"):
        lanes.Lane(None).send(_chatty, lambda: 1)
    niced = lanes.Lane(None, nice=5)  # its priority lowered before it imports
    niced.send(os.nice, 0)
    assert niced.result() == min(os.nice(0) + 5, 19)
    unused = lanes.Lane(None)
    unused.cancel()  # an idle lane stops and is waited for
    assert unused.proc.returncode is not None
    assert unused.proc.stdin.closed and unused.proc.stdout.closed


_FORGER = """import os, pickle
os.write(1, pickle.dumps(("ok", "FORGED")))
print("and a line", flush=True)
"""


def test_an_idle_lanes_preload_cannot_write_its_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A preloaded module's writes to fd 1 go to /dev/null, as the call's own do: the answer is the call's."""
    (tmp_path / "forger_mod.py").write_text(_FORGER)
    monkeypatch.syspath_prepend(str(tmp_path))
    lane = lanes.Lane(None, preload=("forger_mod",))
    lane.send(_chatty, 4)
    assert lane.result() == 8


@pytest.mark.parametrize("kw", [{"preload": "wave"}, {"preload": ("os; import wave",)}, {"preload": (3,)},
                                {"preload": ["wave"]}, {"nice": -5}, {"nice": 41}, {"nice": None}, {"nice": 2.5}],
                         ids=["str", "code", "int", "list", "negative", "past-40", "none", "float"])
def test_a_lanes_preload_is_module_names_and_its_nice_a_lowering(kw: dict) -> None:
    with pytest.raises(lanes.LaneError, match="^lane: (preload|nice) must be"):
        lanes.Lane(None, **kw)


def test_unpicklable_lane_does_not_start() -> None:
    assert lanes.start(lambda: 1) is None
    with pytest.raises(lanes.LaneError, match="not picklable"):
        lanes.Lane(_chatty, lambda: 1)


@pytest.mark.parametrize("trace", TRACES[:2], ids=lambda p: p.parent.parent.name + "/" + p.name)
def test_the_copy_lane_and_the_workers_give_the_in_process_result(trace: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the CPUs let the readers use the parallel pass (onepass.lane_workers > 0): the annotated
    copy reads in a lane of its own (copy_part), the counters' lane without it, the engine's read
    here with workers; the same record and the same annotated text as in one process."""
    before = _spools()
    here = _read(trace, monkeypatch, "0")
    text_here = _annotated(trace, tmp_path / "here.json.gz")
    monkeypatch.setattr(onepass, "lane_workers", lambda _p: 2)
    started = _count_starts(monkeypatch)
    apart = _read(trace, monkeypatch, "1")
    assert sorted(started) == ["copy_part", "counts_part", "reader_part", "steps_part"]
    assert annotated._file_key(trace) in annotated._PREPARED, "the copy lane's copy is filed for the writer"
    assert _annotated(trace, tmp_path / "apart.json.gz") == text_here
    assert apart == here
    assert _left_behind(before) == set(), "the lane's copy file is removed"


def test_a_killed_lane_leaves_the_same_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every lane killed as soon as it starts: the read falls back to its parts in this process,
    the annotated copy to the writer's own read; the same record and the same annotated text."""
    trace = TRACES[0]
    before = _spools()
    here = _read(trace, monkeypatch, "0")
    text_here = _annotated(trace, tmp_path / "here.json.gz")
    real = lanes.Lane.__init__

    def killed(self: lanes.Lane, fn, *args, **kw) -> None:  # noqa: ANN001, ANN003
        real(self, fn, *args, **kw)
        self.proc.kill()

    monkeypatch.setattr(lanes.Lane, "__init__", killed)
    assert _read(trace, monkeypatch, "1") == here
    assert annotated._file_key(trace) not in annotated._PREPARED, "no copy filed: the writer reads the trace"
    assert _annotated(trace, tmp_path / "apart.json.gz") == text_here
    assert _left_behind(before) == set()


@pytest.mark.parametrize("kind", ["truncated", "cpu-only"])
def test_unreadable_trace_same_error_with_lanes(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace the engine refuses (cut short; a real CPU-only profile: no GPU event) fails the same
    way with lanes, and leaves no lane file."""
    if kind == "truncated":
        bad = tmp_path / "bad.json"
        bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2,')
    else:
        bad = REPO / "tests/data/traces/steps/torch_save.json.gz"
    before = _spools()
    with pytest.raises(InputError) as here:
        _read(bad, monkeypatch, "0")
    with pytest.raises(InputError) as apart:
        _read(bad, monkeypatch, "1")
    assert str(apart.value) == str(here.value)
    assert _left_behind(before) == set()


def test_adopt_refuses_a_copy_of_another_file(tmp_path: Path) -> None:
    """A copy whose trace changed since the lane read it (size or mtime) is not filed."""
    src = tmp_path / "t.json.gz"
    src.write_bytes(TRACES[0].read_bytes())
    spool = annotated.copy_spool()
    assert spool is not None
    with spool:
        snap = onepass.counts_part(str(src), None, registry.event_name_wanted, registry.raw_patterns(),
                                   spool.fileno())["copy"]
        assert snap["size"] > 0 and spool.seek(0, os.SEEK_END) > 0  # the deflated events, in the anonymous file
        os.utime(src, ns=(1, 1))
        assert annotated.adopt_copy(src, snap, spool) is False
        assert annotated.adopt_copy(src, {"error": "x"}, spool) is False


def test_the_lanes_read_the_file_opened_even_when_the_path_is_replaced(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace swapped for another (a new inode at the same path) right after the read opened it:
    the engine and every lane read the file opened, not the new one (before: the lanes read the
    new file, and the verifier refuted two of the analyst's claims)."""
    a, b = TRACES[0], REPO / "examples/perf-runs/92004/traces/trace_rank0.json.gz"
    here = _read(a, monkeypatch, "0")
    other = _read(b, monkeypatch, "0")
    assert here["reader"]["kernel_count"] != other["reader"]["kernel_count"]  # two different runs
    p = tmp_path / "trace_rank0.json.gz"
    p.write_bytes(a.read_bytes())
    real = onepass.rank_analysis.analyze_rank

    def swapped(*args, **kw):  # noqa: ANN002, ANN003
        q = tmp_path / "new.json.gz"
        q.write_bytes(b.read_bytes())
        os.replace(q, p)  # what a job writing its trace anew does
        return real(*args, **kw)

    monkeypatch.setattr(onepass.rank_analysis, "analyze_rank", swapped)
    got = _read(p, monkeypatch, "1", annotate=False)
    assert got["reader"] == here["reader"]
    assert {**got["step_accounting"], "path": None} == {**here["step_accounting"], "path": None}
    assert got["names"] == here["names"] and got["raw_counts"] == here["raw_counts"]
    assert got["record"]["analysis"]["kernel_count"] == here["record"]["analysis"]["kernel_count"]


def test_a_lane_ends_with_its_parent(tmp_path: Path) -> None:
    """A run killed mid-read (SIGKILL: no cleanup runs) leaves no lane reading on."""
    import signal
    import subprocess
    import sys
    import time

    code = ("import sys, time; from ai4s_graph.tools.trace import lanes; "
            "lane = lanes.Lane(time.sleep, 600); print(lane.proc.pid, flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    try:
        pid = int(parent.stdout.readline())  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        while Path(f"/proc/{pid}/cmdline").read_bytes().find(b"lane_main") < 0:  # the lane has started
            assert time.monotonic() < deadline
            time.sleep(0.05)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        while True:  # the lane gets SIGKILL from the kernel; poll until it is gone (or a zombie)
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                break
            if state == "Z":
                break
            assert time.monotonic() < deadline, "the lane outlived its parent"
            time.sleep(0.05)
    finally:
        parent.kill()


def _stale() -> dict:
    return {"file": (0, 0, 0, 0), "x": "lane"}


def _fresh() -> dict:
    return {"file": ("any",), "x": "here"}


def test_a_lane_that_read_another_file_is_run_here(tmp_path: Path) -> None:
    """The trace replaced or rewritten while a lane read it: its value is not taken."""
    src = tmp_path / "t.json.gz"
    src.write_bytes(TRACES[0].read_bytes())
    with open(src, "rb") as f:
        ident = onepass._fd_identity(f)
    assert ident is not None and ident[2] == src.stat().st_size
    assert onepass._take(lanes.Lane(_stale), ident, _fresh) == {"x": "here"}
    assert onepass._take(lanes.Lane(_fresh), ("any",), _stale) == {"x": "here"}  # the same file: the lane's


# --------------------------------------------------------------------------- prefetch (issue 29)
def _prefetch(path: Path, cache: str, rank: int = 0) -> bool:
    return onepass.prefetch(str(path), rank, cache, "0", wanted=registry.event_name_wanted,
                            raw_patterns=registry.raw_patterns(), annotate=True)


def _count_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the lanes started from now on (``lanes.start`` wrapped)."""
    seen: list[str] = []
    real = lanes.start

    def counted(fn, *args, **kw):  # noqa: ANN001, ANN003
        seen.append(fn.__name__)
        return real(fn, *args, **kw)

    monkeypatch.setattr(lanes, "start", counted)
    return seen


def test_prefetched_lanes_are_adopted_and_give_the_same_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lanes started before the read (``ai4s-graph run`` starts them before the graph's imports) are
    the read's lanes: no other starts, the same rank result and annotated trace as lanes started by
    the read itself, none left behind."""
    trace = TRACES[1]
    before = _spools()
    want = _read(trace, monkeypatch, "1")
    text_want = _annotated(trace, tmp_path / "want.json.gz")
    cache = str(tmp_path / "cache")
    assert _prefetch(trace, cache)
    (st,) = onepass._PREFETCHED.values()
    procs = [x.proc for x in st.running()]
    assert len(procs) == 4 and st.engine is not None  # the engine's pass too
    seen = _count_starts(monkeypatch)
    got = _read(trace, monkeypatch, "1", cache=cache)
    assert seen == [], "the read started no lane of its own"
    assert onepass._PREFETCHED == {}
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]  # they ran to their end
    assert got == want
    assert _annotated(trace, tmp_path / "got.json.gz") == text_want
    assert _left_behind(before) == set()
    again = _read(trace, monkeypatch, "0", cache=cache)  # the engine's lane filled the run's cache
    assert again["record"]["from_cache"] is True and again["record"]["timeline"] == want["record"]["timeline"]


def test_prefetched_lanes_of_other_arguments_are_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of the same file for another rank does not adopt the prefetched lanes (they are
    killed) and starts its own; the result is the one a read without prefetch gives."""
    trace = TRACES[0]
    want = _read(trace, monkeypatch, "1", annotate=True)
    cache = str(tmp_path / "cache")
    assert _prefetch(trace, cache, rank=5)
    (st,) = onepass._PREFETCHED.values()
    procs = [x.proc for x in st.running()]
    seen = _count_starts(monkeypatch)
    got = _read(trace, monkeypatch, "1", cache=cache)
    assert sorted(seen) == ["counts_part", "reader_part", "steps_part"]
    assert all(p.returncode is not None and p.returncode != 0 for p in procs), [p.returncode for p in procs]
    assert got == want and onepass._PREFETCHED == {}


def test_a_trace_replaced_after_its_prefetch_is_read_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefetched lanes read the file that was there; when another file is put at the path
    before the read, the read is of that file (its own lanes), never the prefetched one's."""
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    link = tmp_path / "trace_rank0.json.gz"
    link.write_bytes(TRACES[0].read_bytes())
    cache = str(tmp_path / "cache")
    assert _prefetch(link, cache)
    other = tmp_path / "new.json.gz"
    other.write_bytes(TRACES[1].read_bytes())
    os.replace(other, link)
    seen = _count_starts(monkeypatch)
    got = _read(link, monkeypatch, "1", cache=cache)
    assert sorted(seen) == ["counts_part", "reader_part", "steps_part"]
    want = _read(TRACES[1], monkeypatch, "1")
    def unplaced(d: dict) -> dict:
        return {k: v for k, v in d.items() if k != "path"}

    assert got["reader"] == want["reader"]
    assert unplaced(got["step_accounting"]) == unplaced(want["step_accounting"])
    assert got["record"]["sha256"] == want["record"]["sha256"] and got["names"] == want["names"]
    assert onepass._PREFETCHED == {}


def test_lanes_never_adopted_are_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _spools()
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    assert _prefetch(TRACES[0], str(tmp_path))
    procs = [x.proc for st in onepass._PREFETCHED.values() for x in st.running()]
    onepass.drop_prefetched()
    assert onepass._PREFETCHED == {}
    assert all(p.returncode is not None for p in procs)
    assert _left_behind(before) == set()
    monkeypatch.setenv(lanes.LANES_ENV, "0")
    assert not _prefetch(TRACES[0], str(tmp_path)) and onepass._PREFETCHED == {}  # no lanes for this trace: nothing started


def test_the_run_prefetches_only_a_single_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ai4s-graph run``'s prefetch (cli/run.py): the one rank trace the launcher adopts from the
    run directory (tools/slurm/jobs.py discover_artifacts, whatever manifest.json lists), under the
    rank and label its file name gives and trace_rank's cache folder; none for two traces."""
    from ai4s_graph.cli.run import prefetch_trace
    from ai4s_graph.graph.analysis.configuration import RunRequest

    monkeypatch.setenv(lanes.LANES_ENV, "1")
    monkeypatch.delenv("AI4S_TRACE_CACHE", raising=False)
    req = RunRequest(jobid="1", perf_run=str(tmp_path), out_dir=str(tmp_path / "out"))
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "trace_rank3.json.gz").write_bytes(TRACES[0].read_bytes())
    assert prefetch_trace(req)
    (key,) = onepass._PREFETCHED
    assert key[0] == str((tmp_path / "traces" / "trace_rank3.json.gz").resolve()) and key[1] == 3 and key[4] is True
    assert key[5:] == (str(tmp_path / "out" / ".ai4s-graph" / "trace-cache"), "3", ())  # trace_rank's cache and label
    onepass.drop_prefetched()
    (tmp_path / "traces" / "trace_rank0.json.gz").write_bytes(TRACES[0].read_bytes())  # the launcher finds two
    assert not prefetch_trace(req) and onepass._PREFETCHED == {}
    assert not (tmp_path / "out").exists()


def test_a_fifo_is_never_opened_by_the_prefetch(tmp_path: Path) -> None:
    """A FIFO where the trace should be: the prefetch and the size probe return at once (an open
    would wait for a writer forever); the launcher refuses the file later."""
    import subprocess
    import sys

    fifo = tmp_path / "trace_rank0.json.gz"
    os.mkfifo(fifo)
    code = ("import sys; from ai4s_graph.graph.rules import registry; from pathlib import Path\n"
            "from ai4s_graph.tools.trace import onepass, scan_parallel\n"
            f"p = {str(fifo)!r}\n"
            "print(scan_parallel.json_bytes(Path(p)), onepass.prefetch(p, 0, None, '0', "
            "wanted=registry.event_name_wanted, raw_patterns=registry.raw_patterns(), annotate=True))")
    for env in ("1", ""):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, lanes.LANES_ENV: env})
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["0", "False"]


def test_a_prefetched_engine_pass_writes_no_cache_until_adopted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's lane reads the cache but never writes it (a run refused after the prefetch
    writes nothing); the adopting read writes the entry, the same one a read without lanes writes."""
    trace = TRACES[0]
    cache = tmp_path / "cache"
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    assert _prefetch(trace, str(cache))
    (st,) = onepass._PREFETCHED.values()
    assert st.engine is not None
    st.engine.result()  # waits for the lane's pass: it is done, and wrote nothing
    assert not cache.exists()
    onepass.drop_prefetched()
    got = _read(trace, monkeypatch, "1", cache=str(cache))
    entries = sorted(p.relative_to(cache) for p in cache.rglob("*.json"))
    assert len(entries) == 1 and got["record"]["from_cache"] is False
    plain = tmp_path / "plain"
    _read(trace, monkeypatch, "0", cache=str(plain))
    assert sorted(p.relative_to(plain) for p in plain.rglob("*.json")) == entries
    assert (cache / entries[0]).read_bytes() == (plain / entries[0]).read_bytes()


def test_a_trace_rewritten_in_place_with_its_mtime_restored_is_read_anew(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Same size, same mtime (os.utime), other bytes: the ctime tells, so the prefetched lanes are
    not adopted and the read is of the new bytes."""
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    link = tmp_path / "trace_rank0.json"
    text = gzip.decompress(TRACES[0].read_bytes())
    link.write_bytes(text)
    cache = str(tmp_path / "cache")
    assert _prefetch(link, cache)
    before = link.stat()
    import time

    time.sleep(0.01)  # a later ctime (ns clock)
    new = text.replace(b'"name": "ProfilerStep#', b'"name": "ProfilerStep!', 1)
    assert len(new) == len(text) and new != text
    link.write_bytes(new)
    os.utime(link, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (link.stat().st_size, link.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    seen = _count_starts(monkeypatch)
    got = _read(link, monkeypatch, "1", cache=cache)
    assert sorted(seen) == ["counts_part", "reader_part", "steps_part"]
    import hashlib

    assert got["record"]["sha256"] == hashlib.sha256(new).hexdigest()


def test_prefetch_by_default_from_four_cpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, lanes are prefetched for a trace they apply to (between the two sizes) only where
    each of the four gets a CPU (onepass.PREFETCH_MIN_CPUS); AI4S_TRACE_LANES=1 always."""
    from ai4s_graph.tools.trace import scan_parallel

    monkeypatch.delenv(lanes.LANES_ENV, raising=False)
    monkeypatch.setattr(scan_parallel, "json_bytes", lambda _p: 171 << 20)  # the replicated trace's JSON
    got = {}
    for n in (2, 3, 4, 16):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=n: set(range(n)))
        got[n] = _prefetch(TRACES[0], str(tmp_path))
        onepass.drop_prefetched()
    assert onepass.PREFETCH_MIN_CPUS == 4
    assert got == {2: False, 3: False, 4: True, 16: True}


def _with_bad_name(src: Path, dst: Path, drop_gpu: bool = False) -> Path:
    """``src`` with one user_annotation's name made a list (a consumer refuses that event) and, with
    ``drop_gpu``, no kernel, memcpy or memset event (the engine refuses the trace at its end)."""
    import json

    doc = json.loads(gzip.decompress(src.read_bytes()))
    evs = doc["traceEvents"]
    i = next(k for k, e in enumerate(evs) if e.get("cat") == "user_annotation")
    evs[i]["name"] = [evs[i]["name"]]
    if drop_gpu:
        doc["traceEvents"] = [e for e in evs if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    dst.write_text(json.dumps(doc))
    return dst


def _refusal(path: Path, monkeypatch: pytest.MonkeyPatch, on: str, cache: str, prefetch: bool = False):
    if prefetch:
        monkeypatch.setenv(lanes.LANES_ENV, "1")
        assert _prefetch(path, cache)
    with pytest.raises(Exception) as e:
        _read(path, monkeypatch, on, cache=cache)
    return type(e.value).__name__, str(e.value)


@pytest.mark.parametrize("drop_gpu", [False, True], ids=["event-refused", "event-refused-and-no-gpu-events"])
def test_a_refused_event_is_the_same_refusal_with_lanes_and_writes_no_cache(drop_gpu: bool, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer that refuses an event: the same error with lanes (started by the read or
    prefetched) as in one process, even where the engine also refuses the trace at its end (the
    event comes first), and no cache entry (in one process the pass never reached the store)."""
    bad = _with_bad_name(TRACES[0], tmp_path / "trace_rank0.json", drop_gpu)
    got = {}
    for mode, on, pre in (("one", "0", False), ("lanes", "1", False), ("prefetched", "1", True)):
        cache = tmp_path / f"cache-{mode}"
        got[mode] = _refusal(bad, monkeypatch, on, str(cache), prefetch=pre)
        assert not list(cache.rglob("*.json")), (mode, "a cache entry was written")
        assert onepass._PREFETCHED == {}
    assert got["lanes"] == got["one"] and got["prefetched"] == got["one"]
    assert got["one"][0] == "InputError" and "traceEvents[" in got["one"][1], got["one"]


def test_the_consumers_of_a_cached_trace_name_the_event_they_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the engine's result in the cache the consumers read the trace by themselves: an event
    they refuse is named as the full pass names it (not a bare TypeError)."""
    from ai4s_graph.tools.trace import rank_analysis

    bad = _with_bad_name(TRACES[0], tmp_path / "trace_rank0.json")
    cache = str(tmp_path / "cache")
    rank_analysis.analyze_rank(str(bad), 0, cache)  # the engine alone takes the event: cached
    _, fresh = _refusal(bad, monkeypatch, "0", str(tmp_path / "fresh"))
    _, cached = _refusal(bad, monkeypatch, "0", cache)
    assert cached == fresh and "traceEvents[" in cached


#: Traces recorded with shapes (the roofline's ``Input Dims``: 93001's 2-GPU NCCL rank, an accuracy
#: case with per-sample ops) and without (92001, HTA's inference trace).
COUNT_TRACES = TRACES + [REPO / "bench/accuracy/cases/per-sample-loop/traces/trace_rank0.json.gz",
                         REPO / "tests/data/traces/steps/gc_collect.json.gz"]


@pytest.mark.parametrize("trace", COUNT_TRACES, ids=lambda p: p.parent.parent.name + "/" + p.name)
def test_the_counters_lane_decoding_its_keys_counts_what_whole_events_give(trace: Path) -> None:
    """counts_part without the copy decodes only onepass.COUNT_FIELDS; its names, durations, kernel
    time, roofline (both links) and raw counts equal the counters fed every whole event."""
    got = onepass.counts_part(str(trace), None, registry.event_name_wanted, registry.raw_patterns(), None)
    names, roof, raw = onepass.NameCounter(registry.event_name_wanted), onepass.RooflineCollector(), \
        onepass.RawCounter(registry.raw_patterns())
    from ai4s_graph.tools.trace import stream

    stream.feed_events(str(trace), (names.feed, roof.feed), taps=(raw.feed,), fields="all")
    want = onepass._counts_of(names, roof, raw)
    got.pop("file")
    assert got == want
    if "93001" in str(trace) or "per-sample" in str(trace):
        assert want["roofline_totals"]["shapes_recorded"] and want["roofline_totals"]["categories"]
