"""Field-input kinds of single GPU events (issue 25): zero-length events (pytorch/kineto#136) and Trace
Event Format duration pairs / instants. Every member is hand-built (tests/trace_build.py) and its
figures computed by hand; the engine and the verifier's reader must each give them by their own code,
and the verifier must confirm every claim of the analyst."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import trace_build as tb  # noqa: E402

from ai4s_graph.cli import app  # noqa: E402
from ai4s_graph.tools.trace import kineto, stream  # noqa: E402


def _agree(path: Path, idle_pct: float, busy_us: float, total_us: float, kernels: int | None = None):
    res, v = tb.both(path)
    for reader in ("engine", "reader"):
        assert tb.pct(res, "idle_time", reader) == pytest.approx(idle_pct, abs=1e-9), reader
        tl = res["timeline"] if reader == "engine" else res["rederived"]["timeline"]
        assert tl["busy_time"]["time_ms"] * 1e3 == pytest.approx(busy_us, abs=1e-6), reader
        assert tl["total_time"]["time_ms"] * 1e3 == pytest.approx(total_us, abs=1e-6), reader
    if kernels is not None:
        assert res["kernel_count"] == res["rederived"]["kernel_count"] == kernels
    assert not tb.all_confirmed(v), tb.all_confirmed(v)
    return res


# ---------------------------------------------------------------------------------- zero length

# The base: A [100, 400], B [500, 600] on stream 7: busy 400 of 500 us, idle 20 %. A zero-length
# event anywhere inside A (its start, middle, end), several of them, a dur-0 memset, one on another
# stream: A keeps its 300 us (a zero-length event is a point in time and clips nothing).
ZERO = {
    "at A's start": [(100.0, "kernel", 7)],
    "in A's middle (the handed case)": [(250.0, "kernel", 7)],
    "at A's end": [(400.0, "kernel", 7)],
    "three inside A": [(150.0, "kernel", 7), (250.0, "kernel", 7), (350.0, "kernel", 7)],
    "a dur-0 memset inside A": [(250.0, "gpu_memset", 7)],
    "on another stream": [(250.0, "kernel", 9)],
}


@pytest.mark.parametrize("where", list(ZERO))
def test_a_zero_length_event_never_clips_the_kernel_it_lies_in(tmp_path, where):
    ev = tb.two_kernels()
    for i, (t, cat, st) in enumerate(ZERO[where]):
        ev += tb.launched("fill_zero", t, 0.0, 2000 + i, cat=cat, stream=st)
    n_kernels = 2 + sum(cat == "kernel" for _t, cat, _s in ZERO[where])
    res = _agree(tb.write(tmp_path / "t.json", ev), 20.0, 400.0, 500.0, n_kernels)
    inside = sum(st == 7 and 100.0 <= t < 400.0 for t, _c, st in ZERO[where])
    if inside:
        assert any(f"{inside} zero-length GPU event(s)" in w and "kineto#136" in w for w in res["warnings"])
    assert not any("clipped at that start" in w for w in res["warnings"])


def test_a_zero_length_kernel_after_the_last_one_still_ends_the_window(tmp_path):
    # a kernel timed as zero at 700 us is still a kernel: the window is [100, 700]: busy 400 of 600 us
    ev = tb.two_kernels() + tb.launched("fill_zero", 700.0, 0.0, 2000)
    _agree(tb.write(tmp_path / "t.json", ev), 100 * 200 / 600, 400.0, 600.0, 3)


def test_a_real_overflow_is_still_clipped(tmp_path):
    # A [100, 100+1e6] overruns B [400, 450] and C [550, 600] on its stream: clipped at 400:
    # busy 300 + 50 + 50 of 500 us, idle 20 % (the overflow-dur kind stays fixed)
    ev = (tb.launched("A", 100.0, 1e6, 1) + tb.launched("B", 400.0, 50.0, 2) + tb.launched("C", 550.0, 50.0, 3))
    res = _agree(tb.write(tmp_path / "t.json", ev), 20.0, 400.0, 500.0, 3)
    assert any("clipped at that start" in w for w in res["warnings"])


# ---------------------------------------------------------------------------------- duration pairs


def _be(name: str, t0: float, t1: float, corr: int | None, *, tid: int = 7, cat: str = "kernel",
        end_fields: bool = True) -> list[dict]:
    """A GPU event written as a "B" / "E" pair (the end with or without its name and category)."""
    b = tb.kernel(name, t0, None, corr, ph="B", cat=cat, stream=tid)
    e = {"ph": "E", "pid": 0, "tid": tid, "ts": t1}
    if end_fields:
        e.update(cat=cat, name=name)
    return [b, e]


def _cpu(corr: int, t: float) -> list[dict]:
    return [tb.op("aten::mm", t - 1.0, 8.0), tb.launch(corr, t)]


def _pairs_case(kind: str) -> list[dict]:
    """Members of the duration-pair kind; each is A [100, 400] + B [500, 600] (idle 20 %)."""
    cpu = _cpu(1000, 50.0) + _cpu(1001, 450.0)
    if kind == "B/E pairs (the handed case)":
        return cpu + _be("gemm_A", 100.0, 400.0, 1000) + _be("elementwise_B", 500.0, 600.0, 1001)
    if kind == "ends without name or category":
        return cpu + _be("gemm_A", 100.0, 400.0, 1000, end_fields=False) + _be("elementwise_B", 500.0, 600.0, 1001,
                                                                              end_fields=False)
    if kind == "pairs mixed with X events":
        return cpu + _be("gemm_A", 100.0, 400.0, 1000) + [tb.kernel("elementwise_B", 500.0, 100.0, 1001)]
    if kind == "interleaved streams":
        # A on stream 7 [100, 400], a copy kernel on stream 8 [150, 250] (inside A: no new busy time),
        # B on stream 7; begins and ends of the two streams interleaved in the file
        a_b, a_e = _be("gemm_A", 100.0, 400.0, 1000)
        c_b, c_e = _be("copy_C", 150.0, 250.0, 1002, tid=8)
        b_b, b_e = _be("elementwise_B", 500.0, 600.0, 1001)
        return cpu + _cpu(1002, 60.0) + [a_b, c_b, c_e, a_e, b_b, b_e]
    if kind == "an end without a begin":
        return cpu + [{"ph": "E", "pid": 0, "tid": 9, "ts": 300.0, "cat": "kernel", "name": "lost"}] + \
            _be("gemm_A", 100.0, 400.0, 1000) + _be("elementwise_B", 500.0, 600.0, 1001)
    if kind == "a begin never ended":
        return cpu + _be("gemm_A", 100.0, 400.0, 1000) + _be("elementwise_B", 500.0, 600.0, 1001) + \
            [tb.kernel("never_ends", 450.0, None, 1003, ph="B", stream=9)]
    if kind == "async b/e pairs with ids":
        out = []
        for name, t0, t1, corr, aid in (("gemm_A", 100.0, 400.0, 1000, 1), ("elementwise_B", 500.0, 600.0, 1001, 2)):
            b = tb.kernel(name, t0, None, corr, ph="b", id=aid)
            b["id"] = aid
            out += [b, {"ph": "e", "cat": "kernel", "name": name, "id": aid, "pid": 0, "tid": 7, "ts": t1}]
        return cpu + out
    if kind == "args merged from the end":  # the correlation id only on the end (a merged trace)
        out = []
        for name, t0, t1, corr in (("gemm_A", 100.0, 400.0, 1000), ("elementwise_B", 500.0, 600.0, 1001)):
            out += [tb.kernel(name, t0, None, None, ph="B"),
                    {"ph": "E", "pid": 0, "tid": 7, "ts": t1, "args": {"correlation": corr}}]
        return cpu + out
    raise KeyError(kind)


PAIRS = ["B/E pairs (the handed case)", "ends without name or category", "pairs mixed with X events",
         "interleaved streams", "an end without a begin", "a begin never ended", "async b/e pairs with ids",
         "args merged from the end"]


@pytest.mark.parametrize("kind", PAIRS)
def test_duration_pairs_are_joined_by_both_readers(tmp_path, kind):
    n = 3 if kind == "interleaved streams" else 2
    res = _agree(tb.write(tmp_path / "t.json", _pairs_case(kind)), 20.0, 400.0, 500.0, n)
    joined = [w for w in res["warnings"] if "duration pair(s) joined" in w]
    pairs = 1 if kind == "pairs mixed with X events" else n
    assert joined and joined[0].startswith(f"{pairs} Trace Event Format") and f"{pairs} of them GPU events" in joined[0]
    if kind == "an end without a begin":
        assert any("1 end event(s)" in w and "dropped" in w for w in res["warnings"])
    if kind == "a begin never ended":
        assert any("1 begin event(s)" in w and "never ended" in w for w in res["warnings"])
    assert res["kernel_count"] == n and res["launch"]["mean_kernel_us"] == pytest.approx(
        {2: 200.0, 3: 500.0 / 3}[n])


def test_nested_cpu_pairs_keep_the_launcher(tmp_path):
    # the CPU side as pairs too: aten::mm B [45, 60] holds cudaLaunchKernel B [50, 55]: the kernel's
    # launcher is aten::mm (GEMM); the kernel itself is an X event [100, 400]: one kernel, busy 100 %
    ev = [{"ph": "B", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 45.0},
          {"ph": "B", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 50.0,
           "args": {"correlation": 1000}},
          {"ph": "E", "pid": 1, "tid": 1, "ts": 55.0}, {"ph": "E", "pid": 1, "tid": 1, "ts": 60.0},
          tb.kernel("gemm_A", 100.0, 300.0, 1000)]
    res = _agree(tb.write(tmp_path / "t.json", ev), 0.0, 300.0, 300.0, 1)
    assert [r["category"] for r in res["ops_by_category"]] == ["GEMM"]
    assert [r["category"] for r in res["rederived"]["ops_by_category"]] == ["GEMM"]
    assert res["launch"]["launch_calls"] == 1 and res["launch"]["mean_launch_cpu_us"] == pytest.approx(5.0)


def test_instants_on_gpu_rows_are_left_out_and_said(tmp_path):
    # an instant ("ph": "i") on the GPU row at 250 and one after B at 900: a moment, not GPU work
    ev = tb.two_kernels() + [dict(tb.kernel("marker", 250.0, None, None, ph="i"), s="t"),
                             dict(tb.kernel("marker", 900.0, None, None, ph="i"), s="t")]
    res = _agree(tb.write(tmp_path / "t.json", ev), 20.0, 400.0, 500.0, 2)
    assert any("2 instant event(s)" in w for w in res["warnings"])


def test_only_pairs_that_never_end_is_no_cpu_only_run(tmp_path):
    ev = _cpu(1000, 50.0) + [tb.kernel("gemm_A", 100.0, None, 1000, ph="B")]
    p = tb.write(tmp_path / "t.json", ev)
    for read in (stream.scan_trace, kineto.load_events):
        with pytest.raises(Exception, match="never ended") as e:
            read(p)
        assert "1 of them GPU events" in str(e.value)


@pytest.mark.parametrize("backend", ["auto", "kineto"])
def test_trace_timeline_gives_the_handed_answers(tmp_path, backend):
    # the two handed cases, as check-cases reads them: `trace timeline --json`, idle 20 %
    for name, ev in (("zero", tb.two_kernels() + tb.launched("fill_zero", 250.0, 0.0, 2000)),
                     ("pairs", _pairs_case("B/E pairs (the handed case)"))):
        r = CliRunner().invoke(app, ["trace", "timeline", str(tb.write(tmp_path / f"{name}.json", ev)), "--json",
                                     "--backend", backend])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["idle_time"]["percent"] == pytest.approx(20.0)
