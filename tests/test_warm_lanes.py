"""Warm lanes (tools/trace/lanes.py ``warm``, cli/early.py): the trace lanes' interpreters started
before the command line's imports and handed their calls later, the trace's open file passed over
their sockets. A warm lane must read the very file the caller opened, in the order its descriptors
were given, give the result a lane started for the call gives, and never outlive the prefetch."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from ai4s_graph.cli import early
from ai4s_graph.graph.rules import registry
from ai4s_graph.tools.report import annotated
from ai4s_graph.tools.trace import lanes, onepass

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "examples/perf-runs/92002/traces/trace_rank0.json.gz"


@pytest.fixture(autouse=True)
def _no_warm_left():
    lanes.drop_warm()
    yield
    lanes.drop_warm()


def test_a_warm_lane_reads_the_file_it_is_handed_even_after_its_path_is_replaced(tmp_path: Path) -> None:
    p = tmp_path / "f.txt"
    p.write_bytes(b"hello world")
    assert lanes.warm(1, ()) == 1
    idle = lanes._WARM[0]
    with open(p, "rb") as f:
        p.unlink()
        p.write_bytes(b"other text!")  # the path now names another file; the lane gets the open one
        lane = lanes.start(os.read, lanes.Fd(f.fileno()), 5, warm=True)
        assert lane is idle and lanes._WARM == []
        assert lane.result() == b"hello"


def test_two_descriptors_arrive_in_their_order(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(b"0123456789")
    lanes.warm(1, ())
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        lane = lanes.start(os.sendfile, lanes.Fd(fo.fileno()), lanes.Fd(fi.fileno()), 2, 6, warm=True)
        assert lane.result() == 6
    assert dst.read_bytes() == b"234567"


def test_a_lane_started_for_the_call_gets_its_markers_as_its_own_numbers(tmp_path: Path) -> None:
    p = tmp_path / "f.txt"
    p.write_bytes(b"abcdef")
    with open(p, "rb") as f:
        lane = lanes.start(os.pread, lanes.Fd(f.fileno()), 3, 2)  # no warm lane: inherited descriptors
        assert lane.result() == b"cde"


def test_an_idle_lane_without_a_socket_refuses_descriptors(tmp_path: Path) -> None:
    lane = lanes.Lane(None)
    try:
        with open(tmp_path / "x", "wb") as f, pytest.raises(lanes.LaneError, match="cannot take descriptors"):
            lane.send(os.fstat, lanes.Fd(f.fileno()))
    finally:
        lane.cancel()


def test_warm_lanes_no_call_takes_are_stopped() -> None:
    assert lanes.warm(2, ("json",)) == 2
    procs = [x.proc for x in lanes._WARM]
    lanes.drop_warm()
    assert lanes._WARM == [] and all(p.poll() is not None for p in procs)


def test_a_call_no_lane_can_take_leaves_the_warm_lane() -> None:
    lanes.warm(1, ())
    assert lanes.start(lambda: 1, warm=True) is None
    assert len(lanes._WARM) == 1 and lanes._WARM[0].proc.poll() is None


def test_a_warm_lane_that_died_is_replaced_by_a_new_lane() -> None:
    lanes.warm(1, ())
    dead = lanes._WARM[0]
    dead.proc.kill()
    dead.proc.wait()
    lane = lanes.start(os.getpid, warm=True)
    assert lane is not dead and lanes._WARM == []
    assert lane.result() == lane.proc.pid


def test_the_prefetch_takes_the_warm_lanes_and_gives_the_same_result(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The lanes early.warm_trace_lanes starts are the prefetch's (none started anew), with the
    same rank result and annotated trace as lanes started by the read itself."""
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    want = onepass.read_rank(str(TRACE), 0, tempfile.mkdtemp(prefix="ai4s-warm-"), "0",
                             wanted=registry.event_name_wanted, raw_patterns=registry.raw_patterns(), annotate=True)
    annotated.write_annotated_trace(TRACE, tmp_path / "want.json.gz", rank=0)
    assert lanes.warm(lanes.WARM_LANES, early.WARM_PRELOAD) == lanes.WARM_LANES
    warm = {id(x) for x in lanes._WARM}
    cache = str(tmp_path / "cache")
    assert onepass.prefetch(str(TRACE), 0, cache, "0", wanted=registry.event_name_wanted,
                            raw_patterns=registry.raw_patterns(), annotate=True)
    (st,) = onepass._PREFETCHED.values()
    readers = 4 + (onepass.lane_workers(TRACE) > 0)  # the copy's own lane only where the readers have workers
    assert {id(x) for x in st.running()} <= warm and len(st.running()) == readers
    assert len(lanes._WARM) == lanes.WARM_LANES - readers
    got = onepass.read_rank(str(TRACE), 0, cache, "0", wanted=registry.event_name_wanted,
                            raw_patterns=registry.raw_patterns(), annotate=True)
    annotated.write_annotated_trace(TRACE, tmp_path / "got.json.gz", rank=0)
    assert got == want
    import gzip

    assert gzip.decompress((tmp_path / "got.json.gz").read_bytes()) == \
        gzip.decompress((tmp_path / "want.json.gz").read_bytes())


def test_the_warm_lanes_are_as_many_as_the_read_starts() -> None:
    assert lanes.WARM_LANES == onepass.LANE_READERS
    assert onepass.PREFETCH_MIN_CPUS == lanes.PREFETCH_MIN_CPUS


@pytest.mark.parametrize("argv, want", [
    (["ai4s-graph", "run", "--perf-run", "/r"], "/r"),
    (["ai4s-graph", "run", "--job", "7", "--perf-run=/r/x"], "/r/x"),
    (["ai4s-graph", "run", "--perf-run", "/r", "--submit"], None),
    (["ai4s-graph", "run", "--slurm-array", "--perf-run", "/r"], None),
    (["ai4s-graph", "run", "--perf-run", "/r", "--help"], None),
    (["ai4s-graph", "run", "--perf-run"], None),
    (["ai4s-graph", "trace", "timeline", "--perf-run", "/r"], None),
    (["ai4s-graph"], None),
    (["ai4s-graph", "run", "--", "--perf-run", "/r"], None),
    (["ai4s-graph", "-q", "run", "--perf-run", "/r"], "/r"),
    (["ai4s-graph", "-x", "run", "--perf-run", "/r"], None),
])
def test_the_perf_run_is_read_from_a_run_command_line(argv: list[str], want: str | None) -> None:
    assert early.perf_run_of(argv) == want


def test_warm_lanes_only_for_a_run_directory_with_one_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = tmp_path / "one"
    (one / "traces").mkdir(parents=True)
    (one / "traces" / "trace_rank0.json.gz").write_bytes(TRACE.read_bytes())
    (one / "traces" / "report.json").write_text("{}")  # the tool's own files are not traces
    two = tmp_path / "two"
    (two / "traces").mkdir(parents=True)
    for r in (0, 1):
        (two / "traces" / f"trace_rank{r}.json.gz").write_bytes(TRACE.read_bytes())
    assert early.single_trace(str(one)) == one / "traces" / "trace_rank0.json.gz"
    assert early.single_trace(str(two)) is None
    assert early.single_trace(str(tmp_path / "missing")) is None
    run = ["ai4s-graph", "run", "--perf-run"]
    monkeypatch.setenv(lanes.LANES_ENV, "0")
    assert early.warm_trace_lanes(run + [str(one)]) == 0
    monkeypatch.delenv(lanes.LANES_ENV)
    assert early.warm_trace_lanes(run + [str(one)]) == 0  # a 2 MB trace: below the lanes' size
    monkeypatch.setenv(lanes.LANES_ENV, "1")
    assert early.warm_trace_lanes(run + [str(two)]) == 0
    assert early.warm_trace_lanes(["ai4s-graph", "trace", "timeline", str(one)]) == 0
    assert early.warm_trace_lanes(run + [str(one)]) == lanes.WARM_LANES
    procs = [x.proc for x in lanes._WARM]
    early.drop_unused()
    assert lanes._WARM == [] and all(p.poll() is not None for p in procs)


def test_the_command_line_warms_nothing_when_imported_elsewhere() -> None:
    """Importing the command line (a test, a notebook) starts no lane: the warm start reads
    ``sys.argv`` for a ``run`` command only."""
    import subprocess

    code = ("import sys; sys.argv = ['x', 'trace']; import ai4s_graph.cli; "
            "from ai4s_graph.tools.trace import lanes; print(len(lanes._WARM))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.stdout.strip() == "0", out.stderr


class _Refuses:
    """An argument whose pickling raises something other than a PicklingError."""

    def __reduce__(self):
        raise RuntimeError("no")


@pytest.mark.parametrize("args", [(lanes.Fd(-1), 1), (lanes.Fd(2**64), 1), (lanes.Fd(10**6), 1),
                                  tuple(lanes.Fd(0) for _ in range(300)), (_Refuses(),)],
                         ids=["negative", "beyond-int", "not-open", "too-many", "reduce-raises"])
def test_a_call_no_lane_can_take_keeps_the_warm_lanes(args: tuple) -> None:
    """Descriptors that cannot be passed, or arguments that do not pickle: no lane (warm or new)
    can take the call, the caller runs it itself, and the warm lanes stay idle for the next call
    (none is used up, none is left running after drop_warm)."""
    before = set(os.listdir("/proc/self/fd"))
    assert lanes.warm(2, ()) == 2
    procs = [x.proc for x in lanes._WARM]
    assert lanes.start(os.read, *args, warm=True) is None
    assert [x.proc for x in lanes._WARM] == procs and all(p.poll() is None for p in procs)
    lane = lanes.start(os.getpid, warm=True)
    assert lane.proc is procs[0] and lane.result() == procs[0].pid
    lanes.drop_warm()
    assert all(p.poll() is not None for p in procs)
    assert set(os.listdir("/proc/self/fd")) <= before
