"""The rank read's lanes (tools/trace/lanes.py): the verifier's reader, the step accountant and
the annotated copy read the trace in processes of their own. Their result must be the in-process
one, to the last key and byte, on real traces of every bundled kind; a lane that fails, dies or
cannot start must leave the same result (its part then runs in the caller's process)."""

from __future__ import annotations

import gzip
import os
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


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, on: str, annotate: bool = True) -> dict:
    """``read_rank`` with lanes on (``"1"``) or off, computed (a cache folder of its own)."""
    monkeypatch.setenv(lanes.LANES_ENV, on)
    cache = tempfile.mkdtemp(prefix="ai4s-lanes-cache-")
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
    assert _spools() == before, "the lane's copy file is removed"


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


def test_unpicklable_lane_does_not_start() -> None:
    assert lanes.start(lambda: 1) is None
    with pytest.raises(lanes.LaneError, match="not picklable"):
        lanes.Lane(_chatty, lambda: 1)


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
    assert _spools() == before


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
    assert _spools() == before


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
