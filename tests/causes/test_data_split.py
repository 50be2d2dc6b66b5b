"""A data-bound step split by the host CPU (seed 001 T8): the DataLoader takes 45% of the step (at
least the 30% that makes it data-bound); host CPU >= 90% busy is transform-bound, <= 50% I/O-bound,
between not separable; below 30% of the step it is not data-bound and the check is silent."""

from __future__ import annotations

import pytest

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import data_split
from ai4s_graph.graph.rules.figures import Inputs, Reader

CAUSE = data_split.CAUSE


def _x(dl_ms: float, step_ms: float, cpu: float | None) -> Inputs:
    tel = {"stats": {"cpu_util.avg": {"value": cpu}}} if cpu is not None else {}
    return Inputs(rank={"path": "t.json", "rank": 0, "dataloader_ms_per_step": dl_ms, "step_time_ms": step_ms},
                  telemetry=tel)


@pytest.mark.parametrize("cpu,cid,lever", [(96.0, "triage.t8.transform_bound", "gpu_transforms"),
                                           (data_split.CPU_BUSY_PCT, "triage.t8.transform_bound", "gpu_transforms"),
                                           (20.0, "triage.t8.io_bound", "stage_to_local_nvme"),
                                           (data_split.CPU_IDLE_PCT, "triage.t8.io_bound", "stage_to_local_nvme")])
def test_both_sides(cpu, cid, lever):
    [f] = CAUSE.detect(_x(45.0, 100.0, cpu))
    assert f.claim.id == cid and f.claim.value == cpu and [lv.name for lv in f.levers] == [lever]
    assert "takes 45% of the step" in f.claim.statement and f.claim.analyst == "trace_analyst"
    rd = CAUSE.rederive(f.claim, Reader(series={"cpu_util": {"n1": [(0.0, cpu - 2.0), (1.0, cpu + 2.0)]}}))
    assert rd.value == cpu
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


@pytest.mark.parametrize("dl,cpu", [(45.0, 70.0), (45.0, data_split.CPU_IDLE_PCT + 0.1), (29.0, 96.0), (45.0, None)])
def test_silent(dl, cpu):
    assert CAUSE.detect(_x(dl, 100.0, cpu)) == []


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
