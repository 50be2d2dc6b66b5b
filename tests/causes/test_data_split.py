"""A data-bound step split by the host CPU (seed 001 T8): the DataLoader takes 45% of the step (at
least the 30% that makes it data-bound); host CPU >= 90% busy is transform-bound, <= 50% I/O-bound,
between (or without host telemetry, or over a job window shorter than the ~10 s seed 001 T3 reads the
host CPU over) not separable: the class-level dataloader-stall; below 30% of the step it is not
data-bound and the check is silent; a per-epoch stall in the log (worker_respawn) is the more
specific cause and silences it."""

from __future__ import annotations

import pytest
from cause_inputs import assert_bundled, bundled_score

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import data_split
from ai4s_graph.graph.rules.figures import Inputs, Reader

CAUSE = data_split.CAUSE


def _x(dl_ms: float, step_ms: float, cpu: float | None, window_s: float | None = None) -> Inputs:
    tel = {"stats": {"cpu_util.avg": {"value": cpu}}} if cpu is not None else {}
    if window_s is not None:
        tel["window"] = [1000.0, 1000.0 + window_s]
    return Inputs(rank={"path": "t.json", "rank": 0, "dataloader_ms_per_step": dl_ms, "step_time_ms": step_ms},
                  telemetry=tel)


@pytest.mark.parametrize("cpu,cid,cause,lever", [
    (96.0, "triage.t8.transform_bound", "dataloader-cpu-transform", "gpu_transform"),
    (data_split.CPU_BUSY_PCT, "triage.t8.transform_bound", "dataloader-cpu-transform", "gpu_transform"),
    (20.0, "triage.t8.io_bound", "dataloader-io-wait", "num_workers_8"),
    (data_split.CPU_IDLE_PCT, "triage.t8.io_bound", "dataloader-io-wait", "num_workers_8")])
def test_both_sides(cpu, cid, cause, lever):
    [f] = CAUSE.detect(_x(45.0, 100.0, cpu))
    assert f.claim.id == cid and f.claim.value == cpu and [lv.name for lv in f.levers] == [lever]
    assert f.causes == (cause,) and f.share == pytest.approx(0.45)
    assert "takes 45% of the step" in f.claim.statement and f.claim.analyst == "trace_analyst"
    rd = CAUSE.rederive(f.claim, Reader(series={"cpu_util": {"n1": [(0.0, cpu - 2.0), (1.0, cpu + 2.0)]}}))
    assert rd.value == cpu
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


@pytest.mark.parametrize("cpu", [70.0, data_split.CPU_IDLE_PCT + 0.1, data_split.CPU_BUSY_PCT - 0.1, None])
def test_between_the_bounds_or_without_host_cpu_the_class_level_stall(cpu):
    # 36.5 ms of DataLoader wait in a 62.9 ms step (the bundled dataloader-stall run's figures): share 0.5803
    [f] = CAUSE.detect(_x(36.5, 62.9, cpu))
    assert f.causes == ("dataloader-stall",) and [lv.name for lv in f.levers] == ["num_workers_8"]
    assert f.claim.value == f.share == pytest.approx(36.5 / 62.9, abs=1e-6)
    # the verifier's own full-load read of the trace re-derives the share; another share refutes it
    rd = CAUSE.rederive(f.claim, Reader(rank={"dataloader_ms_per_step": 36.6, "step_time_ms": 62.9}))
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"
    rd = CAUSE.rederive(f.claim, Reader(rank={"dataloader_ms_per_step": 12.0, "step_time_ms": 62.9}))
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "refuted"


@pytest.mark.parametrize("dl", [29.0, 0.02, 2.4])  # below 30%; the bundled controls' 0.02-2.4 ms in ~20 ms steps
def test_silent_when_not_data_bound(dl):
    assert CAUSE.detect(_x(dl, 100.0, 96.0)) == []
    assert CAUSE.detect(_x(dl, 100.0, None)) == []


def test_a_per_epoch_stall_in_the_log_is_the_more_specific_cause():
    x = _x(78.0, 100.0, 20.0)
    x.log = {"step_times_s": [0.45, 0.02, 0.02] * 4, "batches_per_epoch": 3, "warmup_steps_skipped": 3}
    assert CAUSE.detect(x) == []
    [f] = registry.detect("trace_analyst", x)
    assert f.causes == ("dataloader-worker-respawn",)


def test_the_series_mean_stands_in_for_a_missing_statistic():
    x = Inputs(rank={"path": "t", "rank": 0, "dataloader_ms_per_step": 60.0, "step_time_ms": 100.0},
               telemetry={"series": {"cpu_util": {"n1": [(0.0, 10.0), (1.0, 30.0)]}}})
    [f] = CAUSE.detect(x)
    assert f.claim.id == "triage.t8.io_bound" and f.claim.value == 20.0


NEEDS_CPU = ("host CPU busy % over the job window (cpu_util: node-exporter's node_cpu_seconds_total or "
             "Omnistat's host collector in the telemetry)")
NEEDS_TRACE = "a rank trace (the DataLoader share of the step)"


@pytest.mark.parametrize("rank,cpu,needs", [
    (True, 55.0, None),  # both inputs: T8 ran (silent between 50 and 90 %, but checked)
    (True, None, [NEEDS_CPU]),  # the bundled 92002 case: no host CPU telemetry
    (False, 55.0, [NEEDS_TRACE]),
    (False, None, [NEEDS_CPU, NEEDS_TRACE]),
])
def test_not_checked_names_what_t8_needs(rank, cpu, needs):
    x = _x(10.0, 100.0, cpu)
    if not rank:
        x.rank = None
    lines = CAUSE.not_checked(x)
    assert lines == ([] if needs is None else [f"not checked: {data_split.T8}: needs " + " and ".join(needs)])
    assert registry.not_checked("trace_analyst", x) == lines  # the one trace cause with a need


@pytest.mark.parametrize("window,cause", [
    (1.7, "dataloader-stall"),  # the bundled runs' 1.2-1.7 s jobs: the reading is mostly start-up and export
    (data_split.MIN_WINDOW_S - 0.01, "dataloader-stall"),
    (data_split.MIN_WINDOW_S, "dataloader-cpu-transform"),
    (600.0, "dataloader-cpu-transform"),
    (None, "dataloader-cpu-transform")])  # no window known (a statistic handed alone): the bounds decide
def test_a_short_job_window_does_not_separate_transform_from_io(window, cause):
    [f] = CAUSE.detect(_x(45.0, 100.0, 96.0, window))
    assert f.causes == (cause,) and f.share == pytest.approx(0.45)
    if cause == "dataloader-stall":
        assert f.claim.id == "triage.t8.dataloader_stall" and [lv.name for lv in f.levers] == ["num_workers_8"]
        assert f"covers a {window:.1f} s job" in f.claim.statement and "per-process CPU" in f.claim.statement


def test_another_member_of_the_kind_an_idle_host_over_a_long_job():
    # 4 workers per rank reading shards over a 10-minute job, the node 12% busy: I/O-bound
    [f] = CAUSE.detect(_x(62.0, 100.0, 12.0, 600.0))
    assert f.causes == ("dataloader-io-wait",) and f.claim.value == 12.0


def test_the_verifier_reads_the_share_from_its_own_reader_tables_of_the_rank():
    [f] = CAUSE.detect(_x(36.5, 62.9, 96.0, 1.7))
    assert f.claim.evidence[0].args["path"] == "t.json"  # matched to its rank by the verifier
    rd = CAUSE.rederive(f.claim, Reader(rank={"raw_counts": {}, "reader": {"dataloader_ms_per_step": 36.4,
                                                                           "step_time_ms": 62.9}}))
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"
    rd = CAUSE.rederive(f.claim, Reader(rank={"raw_counts": {}, "reader": None}))
    assert rd.value is None


def test_not_checked_says_a_short_window_only_for_a_data_bound_step():
    line = CAUSE.not_checked(_x(45.0, 100.0, 96.0, 1.7))
    assert line == [f"not checked: {data_split.T8}: needs host CPU over 10 s of steady steps at least (seed 001 T3; "
                    "the job's window is 1.7 s) or the DataLoader workers' own CPU time (per-process CPU)"]
    assert CAUSE.not_checked(_x(2.0, 100.0, 96.0, 1.7)) == []
    assert CAUSE.not_checked(_x(45.0, 100.0, 96.0, 30.0)) == []


@pytest.mark.parametrize("case,cause", [
    # a 1.6 s job: the host CPU cannot tell the worker's spin from its sleep (data_split.MIN_WINDOW_S): the stall
    ("dataloader-stall", "dataloader-stall"),
    # 300 steps (~13 s): one sleeping worker, the node 4% busy of 16 cores = 0.64, the rank 0.55 of it: I/O-bound
    ("io-wait-loader", "dataloader-io-wait"),
    # 300 steps: one worker spinning 40 ms of a 42 ms step; over the job window the node is 8.9% busy (1.42
    # cores, 87% of a worker once the rank's 0.55 is taken off: between the bounds), but over the steady steps
    # outside the profiler only (11.25 s: the first 30 steps, the profiler's steps 100-104 and its trace export
    # left out) 9.43% = 1.51 cores, the worker 96% busy: CPU-transform-bound, re-derived from the raw counters
    ("cpu-transform-loader", "dataloader-cpu-transform")])
def test_the_bundled_loader_runs(repo_root, tmp_path, case, cause):
    row = bundled_score(repo_root, tmp_path, case)
    lever = "gpu_transform" if cause == "dataloader-cpu-transform" else "num_workers_8"
    assert (row["error"], row["class_ok"], row["named_cause"], row["first_lever"]) == \
        ("", True, cause, lever), row


@pytest.mark.parametrize("case,cause,lever", [
    ("io-wait-8-workers", None, None),
    ("dataloader-stall-8-workers", None, None),
    ("gpu-transform", None, None)])
def test_the_bundled_runs_and_their_controls(repo_root, tmp_path, case, cause, lever):
    assert_bundled(repo_root, tmp_path, case, cause, lever)


def _xc(cpu: float, workers: int, ranks: int, cores: int, window_s: float = 600.0):
    from ai4s_graph.state import Manifest
    x = _x(45.0, 100.0, cpu, window_s)
    x.manifest = Manifest.model_construct(num_workers=workers, gpus_per_node=ranks, cpus_per_node=cores)
    return x


@pytest.mark.parametrize("cpu,workers,ranks,cores,wpct,cause", [
    # every step here waits 45% on the loader, so each rank's own thread keeps 1 x (1 - 0.45) = 0.55 cores busy
    # one worker pegged beside its rank on a 16-core node: 2 busy cores = 12.5% of the node (the node-wide
    # bound reads that as idle); the worker itself is (2 - 0.55) / 1 = 145% busy (its intra-op threads):
    # CPU-transform-bound
    (12.5, 1, 1, 16, 145.0, "dataloader-cpu-transform"),
    # 8 workers x 2 ranks on 32 cores, the node 10% busy = 3.2 cores: (3.2 - 1.1) / 16 = 13.125%: I/O-bound
    (10.0, 8, 2, 32, 13.125, "dataloader-io-wait"),
    # 4 workers x 8 ranks (a HIP/ROCm MI300X node, 128 cores), the node 50% busy: (64 - 4.4) / 32 = 186.25%
    # (intra-op threads in the workers): transform-bound
    (50.0, 4, 8, 128, 186.25, "dataloader-cpu-transform"),
    # one worker half busy: 1.05 busy cores = 6.5625% of 16, (1.05 - 0.55) / 1 = 50% at CPU_IDLE_PCT: I/O-bound;
    # a little above it: the stall
    (6.5625, 1, 1, 16, 50.0, "dataloader-io-wait"),
    (7.1875, 1, 1, 16, 60.0, "dataloader-stall"),
    (9.0626, 1, 1, 16, 90.0016, "dataloader-cpu-transform"),  # just above CPU_BUSY_PCT (90%)
    (9.0624, 1, 1, 16, 89.9984, "dataloader-stall")])  # just below
def test_the_bounds_apply_to_the_workers_busy_share_when_the_counts_are_known(cpu, workers, ranks, cores, wpct,
                                                                               cause):
    assert data_split.worker_busy_pct(cpu, workers, ranks, cores, dataloader_share=0.45) == pytest.approx(wpct)
    # a rank that never waits keeps its whole core: the same node reading leaves less to the workers
    assert data_split.worker_busy_pct(cpu, workers, ranks, cores) == pytest.approx(
        100.0 * (cpu / 100.0 * cores - ranks) / (ranks * workers))
    [f] = CAUSE.detect(_xc(cpu, workers, ranks, cores))
    assert f.causes == (cause,) and f.share == pytest.approx(0.45)
    assert f"{cores} cores" in f.claim.statement
    if cause != "dataloader-stall":  # the node's busy % is the claim, re-derived from the series
        assert f.claim.value == cpu
        rd = CAUSE.rederive(f.claim, Reader(series={"cpu_util": {"n1": [(0.0, cpu - 1.0), (1.0, cpu + 1.0)]}}))
        assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == \
            "confirmed"


def test_without_worker_processes_the_node_share_decides():
    assert data_split.worker_busy_pct(12.5, 0, 1, 16) is None
    [f] = CAUSE.detect(_xc(12.5, 0, 1, 16))
    assert f.causes == ("dataloader-io-wait",)  # node-wide 12.5% <= CPU_IDLE_PCT


# ---------------------------------------------------------------------------------------------
# The host CPU over the steady steps outside the profiler only (the job window's start-up and the
# profiler's trace export dilute a worker's spin): a hand-built run with known spans and readings
# ---------------------------------------------------------------------------------------------

SPANS = [[991.0, 999.5], [1003.5, 1011.5]]


def _steady_x(steady: float, other: float, step_s: float = 0.5, export_s: float = 2.0, last: int = 39,
              workers: int = 1, ranks: int = 1, cores: int = 16) -> Inputs:
    """A rank whose ProfilerStep#20-22 run 1000.0-1001.5 s (unix; 0.5 s each), a log of one line per step
    from step 2 (steps 0-1 warm-up) of ``step_s`` each except the export step 23 (``export_s``), and a
    cpu_util series on a 1 s grid, ``steady`` at the points whose whole step lies in the steady steps'
    spans and ``other`` elsewhere. The spans, by hand: before the profiler, steps 2-18 (17 x 0.5 = 8.5 s)
    end where step 19 (the profiler's warm-up) begins, 1000.0 - 0.5 = 999.5: [991.0, 999.5]; after it,
    steps 24-39 (16 x 0.5 = 8 s) start where the export ends, 1001.5 + 2.0 = 1003.5: [1003.5, 1011.5]."""
    from ai4s_graph.state import Manifest
    times = [export_s if g == 23 else step_s for g in range(2, last + 1)]
    steps = [{"step": n, "ts": (n - 20) * 5e5, "dur": 5e5} for n in (20, 21, 22)]
    grid = [(float(t), steady if any(a + 1 <= t <= b for a, b in SPANS) else other) for t in range(986, 1013)]
    x = Inputs(rank={"path": "t.json", "rank": 0, "dataloader_ms_per_step": 45.0, "step_time_ms": 100.0,
                     "stream": {"steps": steps, "base_time_ns": 1000 * 10**9}},
               telemetry={"window": [985.0, 1012.0], "series": {"cpu_util": {"n1": grid}}},
               log={"step_times_s": times, "warmup_steps_skipped": 2}, fom={"step_time_source": "per-step log lines"})
    x.manifest = Manifest.model_construct(num_workers=workers, gpus_per_node=ranks, cpus_per_node=cores)
    return x


def test_the_steady_steps_spans_are_laid_on_the_clock_from_the_profiled_window():
    from ai4s_graph.graph.rules import context as ctx
    x = _steady_x(9.5, 3.0)
    assert ctx.profiled_window(x.rank) == (1000.0, 1001.5)
    assert ctx.steady_windows([20, 21, 22], (1000.0, 1001.5), x.log["step_times_s"], 2) == \
        [(991.0, 999.5), (1003.5, 1011.5)]
    # clipped to the job window; a log that ends at the export step has no span after the profiler
    assert ctx.steady_windows([20, 21, 22], (1000.0, 1001.5), x.log["step_times_s"], 2, (995.0, 1010.0)) == \
        [(995.0, 999.5), (1003.5, 1010.0)]
    assert ctx.steady_windows([20, 21, 22], (1000.0, 1001.5), x.log["step_times_s"][:22], 2) == [(991.0, 999.5)]
    # profiled right after the warm-up (the edge step 19 is the first logged one): only the span after it
    assert ctx.steady_windows([20, 21, 22], (1000.0, 1001.5), x.log["step_times_s"][17:], 19) == \
        [(1003.5, 1011.5)]
    assert ctx.steady_windows([], (1000.0, 1001.5), x.log["step_times_s"], 2) == []
    # a log cut before the profiled steps (a killed job: the log ends at step 10, or at 18 before the edge step 19, of 20-22) or one that
    # starts after them has no steady span on the window's clock: [], never an index past the log
    assert ctx.steady_windows([20, 21, 22], (1000.0, 1001.5), x.log["step_times_s"][:9], 2) == []
    assert ctx.steady_windows([20, 21, 22], (1000.0, 1001.5), x.log["step_times_s"][:17], 2) == []
    assert ctx.steady_windows([20, 21, 22], (1000.0, 1001.5), x.log["step_times_s"][:5], 30) == []
    assert ctx.steady_windows([20], None, x.log["step_times_s"], 2) == []
    # the grid points whose whole 1 s step lies in a span: 992-999 and 1005-1011 (8 + 7 points)
    assert ctx.series_mean_over({"n1": [(992.0, 10.0), (999.0, 20.0), (991.0, 99.0), (1000.0, 99.0)]},
                                SPANS) == (15.0, 2)
    assert ctx.series_mean_over({}, SPANS) == (None, 0)


def test_a_worker_spin_diluted_over_the_job_is_transform_bound_over_the_steady_steps():
    # over the whole series: (15 x 9.5 + 12 x 3.0) / 27 = 6.611% of 16 cores = 1.058 cores, the worker
    # (1.058 - 0.55) = 51% busy (between the bounds); over the steady spans 9.5% = 1.52 cores, the worker
    # (1.52 - 0.55) / 1 = 97% busy: CPU-transform-bound
    x = _steady_x(9.5, 3.0)
    assert data_split.steady_cpu(x) == {"pct": 9.5, "spans": SPANS, "points": 15, "seconds": 16.5}
    assert data_split.worker_busy_pct(6.611111, 1, 1, 16, 0.45) == pytest.approx(50.78, abs=0.01)
    [f] = CAUSE.detect(x)
    assert f.causes == ("dataloader-cpu-transform",) and f.claim.value == 9.5 and f.share == pytest.approx(0.45)
    assert "97% busy" in f.claim.statement and "10% busy over the 16.5 s of steady steps outside the profiler" \
        in f.claim.statement
    cpu_ev = f.claim.evidence[1]
    assert cpu_ev.args == {"metric": "cpu_util", "spans": SPANS} and cpu_ev.returned == 9.5
    # the verifier's raw counters over the same spans (inputs.raw_span_stats): 9.8 confirms (5 points), 3.0
    # (the reading of a sleeping worker) refutes, no samples there: no value
    key = ("cpu_util", "avg", ((991.0, 999.5), (1003.5, 1011.5)))
    for raw, verdict in ((9.8, "confirmed"), (3.0, "refuted")):
        rd = CAUSE.rederive(f.claim, Reader(raw_stats={key: raw}, series={"cpu_util": {"n1": [(0.0, 9.5)]}}))
        assert "raw node_cpu_seconds_total" in rd.method
        assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == verdict
    assert CAUSE.rederive(f.claim, Reader(raw_stats={})).value is None


def test_another_member_two_ranks_decoding_on_a_64_core_node():
    # 2 ranks x 4 workers decoding JPEGs on 64 cores, each rank waiting 45% of its step: the ranks keep
    # 2 x 0.55 = 1.1 cores; over the steady spans the node is 14% busy = 8.96 cores, the 8 workers
    # (8.96 - 1.1) / 8 = 98.25% busy: transform-bound; over the job window (start-up and export at 2%)
    # (15 x 14 + 12 x 2) / 27 = 8.667% = 5.547 cores, (5.547 - 1.1) / 8 = 55.6%: it would read as the stall
    x = _steady_x(14.0, 2.0, workers=4, ranks=2, cores=64)
    [f] = CAUSE.detect(x)
    assert f.causes == ("dataloader-cpu-transform",) and "98% busy" in f.claim.statement
    x.fom = {}  # a log printing every k-th step gives no spans: the job window decides, as before
    [f] = CAUSE.detect(x)
    assert f.causes == ("dataloader-stall",) and "56% busy" in f.claim.statement


@pytest.mark.parametrize("steady,cause", [(9.0626, "dataloader-cpu-transform"), (9.0624, "dataloader-stall")])
def test_the_bounds_hold_over_the_steady_steps(steady, cause):
    # (9.0626% x 16 - 0.55) = 90.0016% (just above CPU_BUSY_PCT), 9.0624% -> 89.9984%
    [f] = CAUSE.detect(_steady_x(steady, 3.0))
    assert f.causes == (cause,)


def test_steady_steps_shorter_than_the_seed_reading_do_not_separate_them():
    # 0.2 s steps: before the profiler 17 x 0.2 = 3.4 s, after 16 x 0.2 = 3.2 s: 6.6 s < MIN_WINDOW_S
    x = _steady_x(9.5, 3.0, step_s=0.2)
    st = data_split.steady_cpu(x)
    assert st["seconds"] == pytest.approx(6.6) and st["spans"] == [[996.4, 999.8], [1003.5, 1006.7]]
    [f] = CAUSE.detect(x)
    assert f.causes == ("dataloader-stall",) and "covers the 6.6 s of steady steps" in f.claim.statement
    assert CAUSE.not_checked(x) == [f"not checked: {data_split.T8}: needs host CPU over 10 s of steady steps at "
                                    "least (seed 001 T3; the steady steps outside the profiler span 6.6 s) or the "
                                    "DataLoader workers' own CPU time (per-process CPU)"]
