"""The host CPU over several wall-clock spans of a job from raw node_cpu_seconds_total counters
(tools/telemetry/spans.py): the verifier's re-derivation of a reading over the steady steps only.
Hand-built counters with a known busy share per span."""

from __future__ import annotations

import pytest

from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.telemetry.export import Series
from ai4s_graph.tools.telemetry.spans import claim_spans, raw_spans_stat, spans_key


def _node(busy_at, t0: float = 990.0, t1: float = 1012.0, dt: float = 0.25, cpus: int = 2) -> list[Series]:
    """rmsjob_info of job 7 on host n1 and per-CPU idle/user counters sampled every ``dt`` s whose busy
    share over each sample interval ending at t is ``busy_at(t)``."""
    ts = [round(t0 + i * dt, 3) for i in range(int(round((t1 - t0) / dt)) + 1)]
    out = [Series({"__name__": "rmsjob_info", "instance": "n1:9100", "jobid": "7"}, tuple(ts), (1.0,) * len(ts))]
    for cpu in range(cpus):
        idle, user, iv, uv = 0.0, 0.0, [], []
        for i, t in enumerate(ts):
            if i:
                b = busy_at(t)
                idle, user = idle + (1 - b) * dt, user + b * dt
            iv.append(idle)
            uv.append(user)
        for mode, vals in (("idle", iv), ("user", uv)):
            out.append(Series({"__name__": "node_cpu_seconds_total", "instance": "n1:9100", "cpu": str(cpu),
                               "mode": mode}, tuple(ts), tuple(vals)))
    return out


def _busy(t: float) -> float:
    # 60% busy over 991-999.5 s (the steady steps before the profiler), 20% over 1003.5-1011.5 (after the
    # export), 5% elsewhere (start-up, the profiler's export)
    return 0.6 if 991.0 < t <= 999.5 else 0.2 if 1003.5 < t <= 1011.5 else 0.05


def test_the_busy_share_over_two_spans_weights_each_by_its_intervals():
    s = _node(_busy)
    # 8.5 s = 34 intervals at 60%, 8 s = 32 intervals at 20%: (34 x 60 + 32 x 20) / 66 = 40.606%
    v, n = raw_spans_stat(s, "cpu_util", "7", [(991.0, 999.5), (1003.5, 1011.5)])
    assert n == 66 and v == pytest.approx((34 * 60 + 32 * 20) / 66)
    assert raw_spans_stat(s, "cpu_util", "7", [(991.0, 999.5)])[0] == pytest.approx(60.0)
    # the whole job: mostly the spans, diluted by the 5% stretches
    whole = raw_spans_stat(s, "cpu_util", "7", [(990.0, 1012.0)])[0]
    assert whole == pytest.approx((34 * 60 + 32 * 20 + 22 * 5) / 88)


def test_a_span_without_two_samples_has_no_value_and_a_bad_span_is_an_error():
    s = _node(_busy)
    assert raw_spans_stat(s, "cpu_util", "7", [(991.01, 991.2)]) == (None, 0)
    with pytest.raises(InputError, match="bad span"):
        raw_spans_stat(s, "cpu_util", "7", [(999.0, 991.0)])
    with pytest.raises(InputError, match="unknown job id"):
        raw_spans_stat(s, "cpu_util", "8", [(991.0, 999.5)])


def test_the_claims_spans_key():
    args = [{"path": "t.json"}, {"metric": "cpu_util", "spans": [[991.0004, 999.5], [1003.5, 1011.5]]}, None]
    assert claim_spans(args) == [("cpu_util", ((991.0, 999.5), (1003.5, 1011.5)))]
    assert spans_key([(1.23456, 2.0)]) == ((1.235, 2.0),)
