"""Kind: garbage that used to get a confident answer (the adversarial trial of main, 2026-12-02).
Every input is a bundled run damaged by code here; every expected value comes from how the input
was built or from a computation over its raw JSON in the test, never from the engine's output.

- a rank trace of another run (93003's rank 1 copied in as 93004's): left out, ``STATUS=partial``;
- ``global_batch_size`` 0 or negative in ``manifest.json``: refused in one line naming the field;
- one kernel moved 1000 s away: left out of both readers' figures and said (TraceLens would read
  GPU idle near 100 %: its ``total_time`` spans the first GPU event to the last);
- a shuffled ``train.log``: its out-of-order step lines counted, ``STATUS=partial``;
- a trace without launch calls: kernels per step not confirmed (``not checked: no launch events``);
- an artifact replaced at the same path between two runs: said, with both sizes and times;
- text, a second JSON object, a second gzip member or NUL bytes after the trace's document: said
  as data after the document (not as the last event's ``ts`` failing to parse); whitespace is JSON.
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.state import Manifest  # noqa: E402
from ai4s_graph.tools.errors import InputError  # noqa: E402
from ai4s_graph.tools.files import changed_artifacts, changed_since_adoption, fingerprint  # noqa: E402
from ai4s_graph.tools.trace import engine, kineto, ranks  # noqa: E402
from ai4s_graph.tools.trainlog import fom  # noqa: E402

EXAMPLES = H.REPO / "examples" / "perf-runs"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _trace(p: Path) -> dict:
    return json.loads(gzip.decompress(p.read_bytes()))


def _gpu_span_unix(d: dict) -> tuple[float, float]:
    """First GPU start and last GPU end in unix seconds, by hand from the raw JSON
    (kineto: ``ts`` µs relative to ``baseTimeNanoseconds``)."""
    g = [(e["ts"], e["ts"] + e["dur"]) for e in d["traceEvents"] if e.get("cat") in GPU_CATS]
    base = d["baseTimeNanoseconds"] / 1e9
    return base + min(a for a, _ in g) / 1e6, base + max(b for _, b in g) / 1e6


# ----------------------------------------------------------------------------------- foreign rank

def _rec(path: str, t0: float, t1: float, ws: int | None = 2) -> dict:
    """A rank result as the analyst holds it: GPU span in trace µs over a base of 1.79e9 s."""
    base = 1_790_000_000.0
    return {"path": path, "stream": {"gpu_span_us": [(t0 - base) * 1e6, (t1 - base) * 1e6],
                                     "base_time_ns": int(base * 1e9), "world_size": ws}}


def test_a_trace_outside_the_job_window_is_foreign_and_one_inside_the_slack_is_not():
    start, end = 1_796_000_000.0, 1_796_000_010.0
    slack = ranks.FOREIGN_SLACK_S
    res = [_rec("a/trace_rank0.json", start + 1, start + 2),                    # inside
           _rec("a/trace_rank1.json", start - slack + 0.1 - 1, start - slack + 0.1),  # ends just inside the slack
           _rec("a/trace_rank2.json", start - 30, start - slack - 0.1),          # ends 0.1 s past the slack
           _rec("a/trace_rank3.json", end + slack + 0.1, end + 5)]               # starts past the end
    bad = ranks.foreign_traces(res, jobid="7", start=start, end=end, world_size=2)
    assert sorted(bad) == ["a/trace_rank2.json", "a/trace_rank3.json"]
    assert f"{slack + 0.1:.1f} s before job 7's window" in bad["a/trace_rank2.json"]
    assert f"{slack + 0.1:.1f} s after job 7's window" in bad["a/trace_rank3.json"]
    assert all("\n" not in v and "another run" in v for v in bad.values())


def test_a_trace_of_another_world_size_is_foreign():
    res = [_rec("r0.json", 10, 11), _rec("r1.json", 10, 11), _rec("r2.json", 10, 11, ws=8)]
    bad = ranks.foreign_traces(res)  # no manifest: the world size most traces give (2)
    assert list(bad) == ["r2.json"] and "world_size 8 is not the job's world size 2" in bad["r2.json"]
    assert ranks.foreign_traces(res[:2], world_size=2) == {}
    # a relative clock (no base, small ts) and no window say nothing of when
    assert ranks.trace_unix_span({"gpu_span_us": [5.0, 9.0]}) is None


def _partial_report(run: Path, tmp_path: Path, job: str = "93004") -> dict:
    """``run --job <job>`` on ``run``: no traceback, exit 0, the last STATUS line partial; its
    report.json."""
    out = tmp_path / "out"
    cp = H.cli("run", "--job", job, "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert H.status_lines(cp)[-1].startswith("STATUS=partial"), cp.stdout[-2000:]
    return json.loads((out / "report.json").read_text())


def test_another_runs_trace_as_rank_1_is_left_out(tmp_path):
    """93003's rank-1 trace (a run 20 s earlier) in 93004's directory: rank 1 is left out, with
    the offset computed here from its raw JSON and 93004's manifest; the run ends partial."""
    run = H.copy_run(tmp_path / "run", EXAMPLES / "93004")
    foreign = EXAMPLES / "93003" / "traces" / "trace_rank1.json.gz"
    shutil.copy(foreign, run / "traces" / "trace_rank1.json.gz")
    man = json.loads((run / "manifest.json").read_text())
    _t0, t1 = _gpu_span_unix(_trace(foreign))
    assert t1 < man["start_unix"] - ranks.FOREIGN_SLACK_S  # how the input was built
    rep = _partial_report(run, tmp_path)
    said = [m for m in rep["missing"] if "trace_rank1.json.gz: a trace of another run" in m]
    assert len(said) == 1 and f"{man['start_unix'] - t1:.1f} s before job 93004's window" in said[0]
    ranks_claimed = {c["claim"]["id"].split(".")[1] for c in rep["claims"] if c["claim"]["id"].startswith("tl.r")}
    assert ranks_claimed == {"r0"}  # no claim of the foreign rank


@pytest.mark.parametrize("how", ["deleted", "a directory"])
def test_a_rank_trace_the_manifest_lists_but_the_run_lacks_makes_the_run_partial(tmp_path, how):
    """93004 (2 ranks, manifest.json lists both traces) with rank 1's trace deleted, or a directory
    in its place: the run is partial and says which listed trace it lacks (it was STATUS=ok,
    compute-bound, with nothing missing)."""
    run = H.copy_run(tmp_path / "run", EXAMPLES / "93004")
    man = json.loads((run / "manifest.json").read_text())
    assert "traces/trace_rank1.json.gz" in man["artifacts"]["traces"]  # how the input was built
    t1 = run / "traces" / "trace_rank1.json.gz"
    t1.unlink()
    if how == "a directory":
        t1.mkdir()
    rep = _partial_report(run, tmp_path)
    word = "is a directory" if how == "a directory" else "does not exist"
    said = [m for m in rep["missing"] if "traces/trace_rank1.json.gz: listed in manifest.json but" in m]
    assert len(said) == 1 and word in said[0], rep["missing"]


# ----------------------------------------------------------------------------- global batch size

@pytest.mark.parametrize("gbs", [-16, 0])
def test_a_non_positive_global_batch_size_is_refused_naming_the_field(tmp_path, gbs):
    run = H.copy_run(tmp_path / "run")
    m = json.loads((run / "manifest.json").read_text())
    m["global_batch_size"] = gbs
    (run / "manifest.json").write_text(json.dumps(m))
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(tmp_path / "out"), state=tmp_path / "st")
    H.assert_refused(cp, "global_batch_size", f"got {gbs}")
    assert not (tmp_path / "out" / "report.md").exists()


def test_the_fom_parser_refuses_a_non_positive_batch_too():
    log = EXAMPLES / "92001" / "train.log"
    for bad in (0, -16, True, 2.5):
        with pytest.raises(InputError, match="global_batch_size must be a positive integer"):
            fom.parse_log(log, global_batch_size=bad)
    r = fom.parse_log(log, global_batch_size=16)
    assert r.throughput_samples_per_s == pytest.approx(16 / r.steady_step_time_s)
    with pytest.raises(ValueError, match="global_batch_size"):
        Manifest.model_validate({"jobid": "1", "global_batch_size": -1})


# ------------------------------------------------------------------------------ a moved kernel

@pytest.fixture(scope="module")
def moved(tmp_path_factory) -> tuple[Path, Path, dict]:
    """92001's trace with its middle kernel moved +1000 s, and the same trace without that kernel."""
    d = _trace(EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz")
    ks = [i for i, e in enumerate(d["traceEvents"]) if e.get("cat") == "kernel"]
    k = ks[len(ks) // 2]
    moved, without = copy.deepcopy(d), copy.deepcopy(d)
    moved["traceEvents"][k]["ts"] += 1e9
    del without["traceEvents"][k]
    tmp = tmp_path_factory.mktemp("moved")
    a, b = tmp / "moved.json.gz", tmp / "without.json.gz"
    a.write_bytes(gzip.compress(json.dumps(moved).encode(), 1))
    b.write_bytes(gzip.compress(json.dumps(without).encode(), 1))
    return a, b, moved


def test_a_kernel_1000_s_away_is_left_out_and_said_by_both_readers(moved):
    a, b, raw = moved
    got, ref = engine.analyze(a), engine.analyze(b)
    assert got.kernel_count == ref.kernel_count
    for row in ("idle_time", "computation_time", "total_time"):
        assert got.timeline[row].time_ms == pytest.approx(ref.timeline[row].time_ms, abs=1e-6)
    notes = [w for w in got.warnings if "far outside the profiled steps" in w]
    assert len(notes) == 1 and notes[0].startswith("1 GPU event(s)") and "1e+03 s after the end" in notes[0]
    kv, kr = kineto.rederive_figures(a), kineto.rederive_figures(b)
    assert kv["kernel_count"] == kr["kernel_count"]
    assert kv["timeline"]["idle_time"]["percent"] == pytest.approx(kr["timeline"]["idle_time"]["percent"], abs=1e-6)
    assert any("far outside the profiled steps" in n for n in kineto.load_events(a).notes)
    # what TraceLens reads (GPUEventAnalyser: total_time = last GPU end - first GPU start over all
    # GPU events), by hand over the raw JSON: the moved kernel stretches the window to ~1000 s
    g = [(e["ts"], e["ts"] + e["dur"]) for e in raw["traceEvents"] if e.get("cat") in GPU_CATS]
    total = max(y for _, y in g) - min(x for x, _ in g)
    busy_upper = sum(y - x for x, y in g)
    assert 1.0 - busy_upper / total > 0.9999  # TraceLens: GPU idle > 99.99 %


def test_no_event_of_a_bundled_trace_is_far_outside():
    for p in sorted(EXAMPLES.glob("*/traces/*.json.gz")):
        assert not [w for w in engine.analyze(p).warnings if "far outside" in w], p


# ------------------------------------------------------------------------------ a corrupt duration

def _last_of_stream(d: dict, pick) -> int:
    """Index of the last (by start) GPU event of ``d`` that ``pick`` selects and that no later event
    on its stream follows (so no stream clip bounds it)."""
    gpu = [(i, e) for i, e in enumerate(d["traceEvents"]) if e.get("cat") in GPU_CATS]
    last_on = {}
    for i, e in sorted(gpu, key=lambda x: x[1]["ts"]):
        last_on[(e.get("pid"), (e.get("args") or {}).get("stream"))] = i
    return max((i for i in last_on.values() if pick(d["traceEvents"][i])), key=lambda i: d["traceEvents"][i]["ts"])


@pytest.mark.parametrize("trace, pick, dur", [
    ("93001/traces/trace_rank0.json.gz", lambda e: "nccl" in e["name"].lower(), 1e12),  # an 11.6-day allreduce
    ("92001/traces/trace_rank0.json.gz", lambda e: True, 5e7),  # a 50 s GPU event at the end
    ("92002/traces/trace_rank0.json.gz", lambda e: e.get("cat") == "gpu_memcpy", 1e9),
])
def test_a_gpu_event_ending_long_after_the_host_activity_is_left_out_by_both_readers(tmp_path, trace, pick, dur):
    """A GPU event (the last on its stream: nothing clips it) whose duration ends it more than the
    host span and 1 s after the last CPU-side event (hygiene.tail_bound; the real traces end within
    1.07 ms): the timeline is the one without it, in both readers, and said once; it would otherwise
    be all of the window (the 1e12 µs allreduce read "exposed communication 100%")."""
    d = _trace(EXAMPLES / trace)
    k = _last_of_stream(d, pick)
    bad, without = copy.deepcopy(d), copy.deepcopy(d)
    bad["traceEvents"][k]["dur"] = dur
    del without["traceEvents"][k]
    a, b = tmp_path / "bad.json.gz", tmp_path / "without.json.gz"
    a.write_bytes(gzip.compress(json.dumps(bad).encode(), 1))
    b.write_bytes(gzip.compress(json.dumps(without).encode(), 1))
    got, ref = engine.analyze(a), engine.analyze(b)
    for row in ("idle_time", "computation_time", "exposed_comm_time", "total_time"):
        assert got.timeline[row].time_ms == pytest.approx(ref.timeline[row].time_ms, abs=1e-6), row
    notes = [w for w in got.warnings if "ending far after the profiled host activity" in w]
    assert len(notes) == 1 and notes[0].startswith("1 GPU event(s)") and "corrupt duration" in notes[0]
    kv, kr = kineto.rederive_figures(a), kineto.rederive_figures(b)
    for row in ("idle_time", "exposed_comm_time", "total_time"):
        assert kv["timeline"][row]["time_ms"] == pytest.approx(kr["timeline"][row]["time_ms"], abs=1e-6), row
    assert sum("ending far after the profiled host activity" in n for n in kineto.load_events(a).notes) == 1


def test_a_long_event_the_next_on_its_stream_clips_is_clipped_not_dropped(tmp_path):
    """The same overrun on a kernel that another kernel follows on its stream: the stream clip
    bounds it (TraceLens's rule, the handed overflow-dur case), so nothing is left out."""
    d = _trace(EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz")
    ks = [i for i, e in enumerate(d["traceEvents"]) if e.get("cat") == "kernel"]
    d["traceEvents"][ks[len(ks) // 2]]["dur"] = 1e12
    a = tmp_path / "clipped.json.gz"
    a.write_bytes(gzip.compress(json.dumps(d).encode(), 1))
    got = engine.analyze(a)
    assert got.kernel_count == len(ks) and got.clipped_excess_us > 1e11
    assert not [w for w in got.warnings if "ending far after" in w]


def _hand(tmp_path, name: str, extra_cpu: list, kernels: list) -> Path:
    """One cpu_op [0, 100) µs with three correlated launches (5, 6, 7) at 1-3 µs, ``extra_cpu``
    events, and ``kernels``: (name, ts, dur, correlation, stream)."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 100}]
    ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": c - 4, "dur": 1,
            "args": {"correlation": c}} for c in (5, 6, 7)]
    ev += extra_cpu
    ev += [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": t, "dur": d,
            "args": {"correlation": c, "stream": st, "device": 0}} for n, t, d, c, st in kernels]
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def _both(p: Path) -> tuple[float, float, list[str], list[str]]:
    """Busy time (ms) and the tail notes of the engine and of the verifier's reader."""
    got, kv = engine.analyze(p), kineto.rederive_figures(p)
    tail = "ending far after the profiled host activity"
    return (got.timeline["busy_time"].time_ms, kv["timeline"]["busy_time"]["time_ms"],
            [w for w in got.warnings if tail in w], [n for n in kineto.load_events(p).notes if tail in n])


@pytest.mark.parametrize("late_call", [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaGetDevice", "pid": 1, "tid": 1, "ts": 5e6, "dur": 1},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaGetDevice", "pid": 1, "tid": 1, "ts": 5e6, "dur": 1,
     "args": {"correlation": "x"}},
])
def test_the_host_activity_is_the_same_for_both_readers(tmp_path, late_call):
    """A runtime call without a correlation id 5 s later is not a launch: the host activity both
    readers bound the GPU events by is the cpu_ops and the launches, so the 2 s kernel ending after
    it is left out by both (busy: the other kernel's 5 µs)."""
    p = _hand(tmp_path, "late_call", [late_call], [("k0", 10, 5, 5, 7), ("k1", 20, 2e6, 6, 8)])
    eng, ver, n_eng, n_ver = _both(p)
    assert eng == pytest.approx(0.005) and ver == pytest.approx(0.005) and len(n_eng) == len(n_ver) == 1


def test_a_clip_at_a_dropped_events_start_is_undone_by_both_readers(tmp_path):
    """A [10, 60) then B at 20 with a 1e12 µs dur on one stream: B is left out, so A is not clipped
    at B's start: busy is A's 50 µs in both readers, and no clip line names B."""
    p = _hand(tmp_path, "clip_drop", [], [("A", 10, 50, 5, 7), ("B", 20, 1e12, 6, 7), ("C", 30, 5, 7, 8)])
    eng, ver, n_eng, n_ver = _both(p)
    assert eng == pytest.approx(0.05) and ver == pytest.approx(0.05) and len(n_eng) == len(n_ver) == 1
    assert not [w for w in engine.analyze(p).warnings if "clipped at that start" in w]
    assert engine.analyze(p).clipped_excess_us == 0.0


def test_the_linked_events_are_never_all_left_out(tmp_path):
    """Both linked kernels end seconds after the host activity, one unlinked kernel does not: left
    out, the figures would read the unlinked one alone; both readers keep them all instead."""
    p = _hand(tmp_path, "linked_late", [], [("k0", 5, 3e6, 5, 7), ("k1", 10, 4e6, 6, 8), ("u", 20, 5, 999, 9)])
    eng, ver, n_eng, n_ver = _both(p)
    assert eng == pytest.approx(ver) and eng > 3000
    assert n_eng == n_ver and len(n_eng) == 1 and n_eng[0].startswith("2 GPU event(s)") and "are kept" in n_eng[0]


def test_every_gpu_event_late_is_kept_and_said(tmp_path):
    """Every kernel ends seconds after the host activity: nothing is left to read without them, so
    both readers keep them, and both say so in the same words (the figures rest on them)."""
    p = _hand(tmp_path, "all_late", [], [("k0", 5, 3e6, 5, 7), ("k1", 10, 4e6, 6, 8)])
    eng, ver, n_eng, n_ver = _both(p)
    assert eng == pytest.approx(ver) and eng > 3000
    assert n_eng == n_ver and len(n_eng) == 1 and "'k0'" in n_eng[0] and "are kept" in n_eng[0]


def test_no_event_of_a_bundled_trace_ends_far_after_the_host_activity():
    for p in sorted(EXAMPLES.glob("*/traces/*.json.gz")):
        assert not [w for w in engine.analyze(p).warnings if "ending far after" in w], p


# ------------------------------------------------------------------------------ a shuffled log

def _log(order: list[int]) -> str:
    return "".join(f"Batch {i}: loss {5 / (i + 1):.5f} time 0.0150 seconds samples 16\n" for i in order)


def test_step_lines_out_of_order_are_counted(tmp_path):
    p = tmp_path / "train.log"
    p.write_text(_log(list(range(10))))
    assert fom.steps_out_of_order(fom.parse_log(p)) == 0
    p.write_text(_log(list(range(10)) * 2))   # two epochs, each from Batch 0: in order
    assert fom.steps_out_of_order(fom.parse_log(p)) == 0
    p.write_text(_log([0, 1, 2, 5, 4, 3, 6, 7, 8, 9]))  # 4 after 5 and 3 after 4: two lines
    r = fom.parse_log(p)
    assert fom.steps_out_of_order(r) == 2
    assert any(n.startswith("2 of 10 step lines are out of order") for n in r.notes)


def test_a_shuffled_log_ends_partial(tmp_path):
    import random

    run = H.copy_run(tmp_path / "run")
    lines = (run / "train.log").read_text().splitlines()
    random.Random(1).shuffle(lines)
    (run / "train.log").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    tel = [ln for ln in cp.stdout.splitlines() if ln.startswith("telemetry_analyst")]
    assert tel and "STATUS=partial" in tel[0] and "step lines are out of order" in tel[0]
    assert H.status_lines(cp)[-1].startswith("STATUS=partial")


# ------------------------------------------------------------------------- no launch events

def test_kernels_per_step_is_not_confirmed_without_launch_events(tmp_path):
    run = H.copy_run(tmp_path / "run")
    d = H.read_trace(run)
    d["traceEvents"] = [e for e in d["traceEvents"] if "LaunchKernel" not in str(e.get("name"))]
    H.write_trace(run, d)
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    rep = json.loads((out / "report.json").read_text())
    kps = [c for c in rep["claims"] if c["claim"]["metric"] == "kernels.kernels_per_step"]
    assert kps and all(c["verdict"] == "inconclusive" for c in kps)
    assert all(c["note"].startswith("not checked: no launch events") for c in kps)


# ---------------------------------------------------------------------------- replaced artifacts

def test_fingerprints_say_which_file_changed(tmp_path):
    import os

    a = tmp_path / "t.json"
    a.write_bytes(b'{"traceEvents": []}')
    os.utime(a, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    before = {"t.json": fingerprint(a)}
    assert before["t.json"] == {"size": 19, "mtime_ns": 1_700_000_000_000_000_000}
    assert changed_artifacts(before, {"t.json": fingerprint(a)}, "x") == []
    a.write_bytes(b'{"traceEvents": [1]}')  # another file at the same path: 20 bytes, a new mtime
    lines = changed_artifacts(before, {"t.json": fingerprint(a)}, "the last adoption")
    assert len(lines) == 1 and "19 bytes, modified 2023-11-14 22:13:20.000 UTC then" in lines[0]
    assert "20 bytes" in lines[0] and "replaced at the same path" in lines[0]
    assert "now missing" in changed_artifacts(before, {}, "x")[0]
    assert changed_since_adoption("t.json", before["t.json"], before["t.json"]) is None
    assert "replaced after adoption" in changed_since_adoption("t.json", before["t.json"], fingerprint(a))
    h = fingerprint(a, sha256=True)["sha256"]  # the hash, when asked, is sha256 of the bytes
    import hashlib
    assert h == hashlib.sha256(b'{"traceEvents": [1]}').hexdigest()


def test_a_trace_replaced_between_two_runs_is_said(tmp_path):
    run, out, _ = H.good_report(tmp_path)
    man = json.loads((out / "manifest.json").read_text())
    rec = man["artifacts"]["fingerprints"]["traces/trace_rank0.json.gz"]
    trace = run / "traces" / "trace_rank0.json.gz"
    assert rec == fingerprint(trace)
    d = H.read_trace(run)
    d["traceEvents"] = d["traceEvents"][:-1]  # a different file at the same path
    H.write_trace(run, d)
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    rep = json.loads((out / "report.json").read_text())
    said = [m for m in rep["missing"] if m.startswith("launcher: traces/trace_rank0.json.gz: a different file")]
    assert len(said) == 1 and f"{rec['size']} bytes" in said[0] and f"{trace.stat().st_size} bytes" in said[0]
    assert H.status_lines(cp)[-1].startswith("STATUS=partial")


@pytest.mark.parametrize("field, value", [("peak_rss_bytes", 2**64), ("num_workers", -(2**63) - 1),
                                          ("env", {"deep": [1, 10**30]})])
def test_an_integer_wider_than_64_bits_in_the_manifest_is_refused_naming_it(tmp_path, field, value):
    """A manifest integer that no 64-bit field holds (extra fields and nested ones too) is refused in
    one line naming the field, exit 2, nothing written (it crashed every resume in the checkpoint's
    msgpack and replaced ``--out/manifest.json``)."""
    run = H.copy_run(tmp_path / "run", EXAMPLES / "92001")
    man = json.loads((run / "manifest.json").read_text())
    man[field] = value
    (run / "manifest.json").write_text(json.dumps(man))
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    name = {"env": "env.deep[1]"}.get(field, field)
    H.assert_refused(cp, f"{name}: ")
    assert "does not fit a 64-bit integer" in cp.stderr  # the whole line (STATUS cuts a long one)
    assert not out.exists()
    with pytest.raises(ValueError, match="does not fit a 64-bit integer"):
        Manifest.read(run / "manifest.json")


# ------------------------------------------------------------------- data after the JSON document

def _appended(tmp_path: Path, how: str) -> Path:
    """The bundled 92001 trace with something after its document: text, a second JSON object, a
    second gzip member (``cat a.json.gz a.json.gz``), NUL padding; or only whitespace (still JSON)."""
    src = EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz"
    text = gzip.decompress(src.read_bytes())
    if how == "gzip-members":
        out = tmp_path / "t.json.gz"
        out.write_bytes(src.read_bytes() * 2)
        return out
    tail = {"text": b"\ngarbage {\n", "object": b'{"traceEvents": []}', "nul": b"\0" * 64,
            "whitespace": b" \n\t\r\n"}[how]
    out = tmp_path / "t.json"
    out.write_bytes(text + tail)
    return out


@pytest.mark.parametrize("how", ["text", "object", "gzip-members", "nul"])
def test_data_after_the_document_is_said_as_such(tmp_path: Path, how: str) -> None:
    """Not "traceEvents[i] field 'ts' does not parse" about the last event (the message before)."""
    p = _appended(tmp_path, how)
    with pytest.raises(InputError) as e:
        engine.analyze(p)
    msg = str(e.value)
    assert msg.startswith(f"{p.name}: more text after the end of the JSON document"), msg
    assert "\n" not in msg and "traceEvents[" not in msg


def test_whitespace_after_the_document_is_json(tmp_path: Path) -> None:
    p = _appended(tmp_path, "whitespace")
    ref = engine.analyze(EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz")
    got = engine.analyze(p)
    assert got.model_dump(exclude={"path"}) == ref.model_dump(exclude={"path"})
    assert got.kernel_count == ref.kernel_count > 0


# ------------------------------------------------------------- the manifest and the trace disagree

def test_device_for_prefers_the_trace_and_says_when_the_sources_disagree() -> None:
    from ai4s_graph.tools.perfmodel.datasheet import device_for

    assert device_for("NVIDIA H200", "NVIDIA H200") == ("NVIDIA H200", None)
    assert device_for("H200", "NVIDIA H200") == ("NVIDIA H200", None)  # the same datasheet row
    name, note = device_for("AMD Instinct MI300X", "NVIDIA H200")
    assert name == "NVIDIA H200"
    assert note is not None and "'AMD Instinct MI300X'" in note and "'NVIDIA H200'" in note and "disagree" in note
    assert device_for("MI300X", None) == ("MI300X", None)  # no device in the trace: the manifest's
    assert device_for("some lab GPU", "NVIDIA H200") == ("NVIDIA H200", None)  # one source unknown: no row to disagree
    name, note = device_for("NVIDIA H100", "NVIDIA H100 PCIe")  # a PCIe card: other peaks, no row here
    assert name == "NVIDIA H100 PCIe" and note is not None and "no roofline" in note
    assert device_for(None, "NVIDIA H200 NVL") == ("NVIDIA H200 NVL", None)  # no row, and nothing to disagree with
    assert device_for(None, None) == ("", None)
    assert device_for(7, ["NVIDIA H200"]) == ("", None)  # not strings: no name (never raises)
    name, note = device_for("AMD Instinct MI300X " + "x" * 20000, "NVIDIA H200")
    assert name == "NVIDIA H200" and note is not None and len(note) < 400


def test_a_manifest_naming_another_gpu_than_the_trace_is_said(tmp_path: Path) -> None:
    """92001 ran on an H200 (its trace's deviceProperties); a manifest that says MI300X: the report
    says so with the inputs (not a missing input: STATUS stays ok), the roofline reads the H200."""
    run = H.copy_run(tmp_path / "run")
    m = json.loads((run / "manifest.json").read_text())
    assert m["gpu"] == "NVIDIA H200" and _trace(run / "traces" / "trace_rank0.json.gz")["deviceProperties"][0]["name"] \
        == "NVIDIA H200"
    m["gpu"] = "AMD Instinct MI300X"
    (run / "manifest.json").write_text(json.dumps(m))
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 0, cp.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    notes = [n for n in rep["input_notes"] if "disagree" in n]
    assert len(notes) == 1 and "'AMD Instinct MI300X'" in notes[0] and "'NVIDIA H200'" in notes[0], rep["input_notes"]
    assert notes[0] in (out / "report.md").read_text()
    assert H.status_lines(cp)[-1].startswith("STATUS=ok")


@pytest.mark.parametrize("pad", [0, 2 << 20])
def test_a_damaged_gzip_stream_is_said_as_such(tmp_path: Path, pad: int) -> None:
    """A .json.gz whose CRC does not match its text (altered after it was written), with or without
    2 MiB of whitespace after the document: said as damaged gzip data, not as an event's field nor
    as text after the document."""
    text = gzip.decompress((EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz").read_bytes())
    raw = bytearray(gzip.compress(text + b" " * pad, 1))
    raw[-8] ^= 0xFF  # the CRC-32 of RFC 1952's trailer
    p = tmp_path / "t.json.gz"
    p.write_bytes(bytes(raw))
    with pytest.raises(InputError) as e:
        engine.analyze(p)
    assert str(e.value).startswith("t.json.gz: the gzip data is damaged (CRC check failed"), str(e.value)


def test_a_broken_key_after_the_list_is_not_the_last_events(tmp_path: Path) -> None:
    """``"traceName": }`` after the events: said at that key, not as the last event's ``ts``."""
    text = gzip.decompress((EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz").read_bytes()).rstrip()
    i = text.rfind(b"]")
    p = tmp_path / "t.json"
    p.write_bytes(text[:i + 1] + b', "traceName": }')
    for read in (engine.analyze, kineto.load_events):
        with pytest.raises(InputError) as e:
            read(p)
        assert str(e.value).startswith("t.json: the JSON after the traceEvents list does not parse (at the top-level "
                                       "key 'traceName')"), str(e.value)


# ----------------------------------------------------------- values of another type or size in events

def test_a_step_number_past_int64_and_a_numbered_kernel_leave_a_report(tmp_path: Path) -> None:
    """``ProfilerStep#`` with 23 digits (no int64: it stopped the run with an OverflowError) is no
    step; a kernel whose ``name`` is a number stopped the annotated copy (TypeError). Both: a report."""
    run = H.copy_run(tmp_path / "run")
    d = H.read_trace(run)
    steps = [e for e in d["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") == "user_annotation"]
    assert len(steps) == 3
    steps[0]["name"] = "ProfilerStep#" + "9" * 23
    next(e for e in d["traceEvents"] if e.get("cat") == "kernel")["name"] = 12345
    H.write_trace(run, d)
    out = tmp_path / "out"
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(out), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 0, (cp.stdout[-1500:], cp.stderr[-1500:])
    assert (out / "report.md").is_file() and (out / "annotated_trace.json.gz").is_file()
    assert engine.analyze(run / "traces" / "trace_rank0.json.gz").n_steps == 2


def test_the_key_after_the_list_and_a_cut_there_are_named_right(tmp_path: Path) -> None:
    """A comma missing after ``]`` is not blamed on the ``traceEvents`` key that parsed; a file cut
    right after ``]`` is truncated (both readers)."""
    text = gzip.decompress((EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz").read_bytes()).rstrip()
    i = text.rfind(b"]")
    for name, body, want in (("comma.json", text[:i + 1] + b' "traceName": "x"}', "the JSON after the traceEvents "
                              "list does not parse: not valid JSON"),
                             ("cut.json", text[:i + 1], "truncated: the JSON ends after the traceEvents list")):
        p = tmp_path / name
        p.write_bytes(body)
        for read in (engine.analyze, kineto.load_events):
            with pytest.raises(InputError) as e:
                read(p)
            assert str(e.value).startswith(f"{name}: {want}"), str(e.value)


def test_the_verifiers_reader_says_a_damaged_gzip_stream_too(tmp_path: Path) -> None:
    raw = bytearray((EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz").read_bytes())
    raw[-8] ^= 0xFF
    p = tmp_path / "t.json.gz"
    p.write_bytes(bytes(raw))
    with pytest.raises(InputError) as e:
        kineto.load_events(p)
    assert str(e.value).startswith("t.json.gz: the gzip data is damaged (CRC check failed"), str(e.value)


def test_gpu_names_of_other_cards_find_no_row() -> None:
    """GH200 is not an H200 (another memory system); "PCI-E" is a PCIe card (other peaks)."""
    from ai4s_graph.tools.perfmodel.datasheet import gpu_key

    assert gpu_key("NVIDIA GH200 480GB") is None and gpu_key("NVIDIA H100 PCI-E") is None
    assert gpu_key("NVIDIA H200") == "H200" and gpu_key("NVIDIA A100-SXM4-80GB") == "A100"
    assert gpu_key("AMD Instinct MI300X") == "MI300X" and gpu_key("NVIDIA H100 80GB HBM3") == "H100"


def test_copies_never_written_do_not_hold_a_file_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived process reading traces with the annotated copy and never writing it: at most
    MAX_PREPARED spool files stay open (before: one per read)."""
    import os

    from ai4s_graph.graph.rules import registry
    from ai4s_graph.tools.report import annotated
    from ai4s_graph.tools.trace import onepass

    def drop_all() -> None:
        while annotated._PREPARED:
            annotated._PREPARED.popitem()[1]._f.close()

    monkeypatch.setenv("AI4S_TRACE_LANES", "0")
    src = (EXAMPLES / "92001" / "traces" / "trace_rank0.json.gz").read_bytes()
    drop_all()
    before = len(os.listdir("/proc/self/fd"))
    for i in range(annotated.MAX_PREPARED + 3):
        p = tmp_path / f"t{i}.json.gz"
        p.write_bytes(src)
        onepass.read_rank(str(p), 0, str(tmp_path / f"c{i}"), "0", wanted=registry.event_name_wanted,
                          raw_patterns=registry.raw_patterns(), annotate=True)
    assert len(annotated._PREPARED) == annotated.MAX_PREPARED
    assert len(os.listdir("/proc/self/fd")) - before <= annotated.MAX_PREPARED
    drop_all()
