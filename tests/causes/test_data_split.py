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
    # 300 steps: one worker spinning 40 ms of a 42 ms step, the node 8.9% busy = 1.42 cores, 0.87 of it the
    # worker's: between the bounds (the job window's worker start and trace export dilute the steady steps'
    # ~95%), so transform and I/O are not separated, said, not guessed
    ("cpu-transform-loader", "dataloader-stall")])
def test_the_bundled_loader_runs(repo_root, tmp_path, case, cause):
    row = bundled_score(repo_root, tmp_path, case)
    assert (row["error"], row["class_ok"], row["named_cause"], row["first_lever"]) == \
        ("", True, cause, "num_workers_8"), row


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
