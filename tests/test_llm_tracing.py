"""Field-specific number tracing (graph/agents/tracing.py): every number an LLM writes maps to one
tool-result field, exactly or by the written rounding, in its unit. Hand-built results with known
answers; the random-value test measures the old any-number-within-1% rule against the new one."""

from __future__ import annotations

import random

import pytest

from ai4s_graph.graph.agents import tracing as T
from ai4s_graph.state import claimkit

# two ordinary tool results, hand-built in the shape the trace and telemetry tools return (values of a
# compute-bound bf16 ViT run on an H200)
EV1 = {"rank": 0, "gpu_timeline.busy_time.percent": 91.9492, "gpu_timeline.idle_time.percent": 8.0508,
       "gpu_timeline.computation_time.percent": 90.8315, "gpu_timeline.exposed_memcpy_time.percent": 1.11767,
       "launch.mean_kernel_us": 56.8302, "launch.median_gap_us": 3.104, "kernel_count": 3438, "n_steps": 4,
       "kernels_per_step": 859.5, "step_time_ms": 52.3716, "dataloader_ms_per_step": 0.0,
       "ops_by_category.GEMM.percent": 35.6185, "ops_by_category.elementwise.percent": 37.8734,
       "ops_by_category.NORM_fwd.percent": 6.31, "ops_by_category.SDPA_fwd.percent": 4.88}
EV2 = {"telemetry.power.avg": 632.864, "unit": "W", "sample_count": 147, "window_s": [0.0, 36.821],
       "per_instance": {"vm": 632.864}, "kernels": [{"name": "nvjet", "count": 114, "mean_us": 128.908,
                                                      "total_us": 14695.5}]}
SOURCES = {"ev1": EV1, "ev2": EV2, "claim:tl.r0.idle_time": {"value": 8.0508, "rederived_value": 8.05, "unit": "%"}}


def test_a_reference_traces_exactly_or_by_the_written_rounding():
    ok = lambda text, unit, ref: T.trace_ref(text, unit, ref, SOURCES) is None  # noqa: E731
    assert ok("8.05", "%", "ev1:gpu_timeline.idle_time.percent")
    assert ok("8.1", "%", "ev1:gpu_timeline.idle_time.percent") and ok("8", "%", "ev1:gpu_timeline.idle_time.percent")
    assert not ok("8.2", "%", "ev1:gpu_timeline.idle_time.percent")          # no relative slack
    assert not ok("8.06", "%", "ev1:gpu_timeline.idle_time.percent")         # 8.0508 rounds to 8.05
    assert ok("3438", "", "ev1:kernel_count") and ok("3,438", "", "ev1:kernel_count")
    assert ok("129", "µs", "ev2:kernels.0.mean_us") and ok("0.129", "ms", "ev2:kernels.0.mean_us")  # µs -> ms
    assert ok("633", "W", "ev2:telemetry.power.avg")                          # unit from the result's "unit"
    assert ok("36.8", "s", "ev2:window_s.1")                                  # list item, unit of window_s
    assert ok("8.05", "%", "claim:tl.r0.idle_time:value")


def test_a_reference_fails_on_wrong_field_unit_or_source():
    err = lambda text, unit, ref: T.trace_ref(text, unit, ref, SOURCES)  # noqa: E731
    assert "not this number" in err("90.8", "%", "ev1:gpu_timeline.idle_time.percent")  # right number, wrong field
    assert "unit" in err("8.05", "ms", "ev1:gpu_timeline.idle_time.percent")
    assert "unit" in err("633", "%", "ev2:telemetry.power.avg")
    assert "unknown source" in err("8.05", "%", "ev9:gpu_timeline.idle_time.percent")
    assert "no field" in err("8.05", "%", "ev1:gpu_timeline.idle.percent")
    assert "not a number" in err("0", "", "ev2:per_instance")
    # exponent notation states its own precision: 1e-05 is not a licence for anything below 0.5
    assert "not this number" in err("1e-05", "", "ev1:n_steps")


def test_statements_are_never_sources():
    claim = {"id": "tl.r0.idle_time", "statement": "Rank 0 is idle 8.05% and 2.3x slower than it could be.",
             "value": 8.0508, "unit": "%"}
    src = T.claim_sources([claim])
    assert T.trace_ref("8.05", "%", "claim:tl.r0.idle_time:value", src) is None
    assert T.trace_ref("2.3", "", "claim:tl.r0.idle_time:statement", src) is not None


def test_check_text_needs_an_entry_per_number_and_the_written_unit():
    refs = [T.NumberRef(text="8.05", unit="%", ref="ev1:gpu_timeline.idle_time.percent"),
            T.NumberRef(text="129", unit="µs", ref="ev2:kernels.0.mean_us")]
    assert T.check_text("Rank 0 (`tl.r0.idle_time`, bf16, H200) idles 8.05% between 129 µs kernels.",
                        refs + [T.NumberRef(text="0", unit="", ref="ev1:rank")], SOURCES) == []
    bad = T.check_text("It idles 8.05 ms, 129 µs kernels, 2.3x faster with 40% fewer.", refs, SOURCES)
    assert bad[0].startswith("8.05: written as 'ms'")
    assert [b.split(":")[0] for b in bad[1:]] == ["2.3", "40"]


def _old_rule(value: float, results: list) -> bool:
    """The rule this replaces: within 1 % of ANY number in the cited results."""
    return any(claimkit.SUPPORT_TOL.agrees(value, x) for x in claimkit.numbers_in(results))


def test_random_values_no_longer_pass(perf_runs):
    """Two ordinary tool results on the real 92003 trace (the timeline and the top 20 kernels) as
    evidence: about one random value in four (one decimal, in [0, 100]) passed the old rule; a
    reference to one field passes about one in a thousand."""
    import json

    from ai4s_graph.tools import llm_tools as agent_tools

    run = perf_runs / "92003"
    man = json.loads((run / "manifest.json").read_text())
    man["artifacts"] = {"traces": ["traces/trace_rank0.json.gz"]}
    with agent_tools.toolset("trace", {"perf_run": str(run)}, {"manifest": man}, agent_tools.Recorder()) as tools:
        t = {x.name: x for x in tools}
        results = [t["trace_timeline"].invoke({})["result"], t["trace_top_kernels"].invoke({"n": 20})["result"]]
    sources = {"ev1": results[0], "ev2": results[1]}
    fields = [f"ev1:{k}" for k in results[0] if k.endswith(".percent")]
    fields += [f"ev2:kernels.{i}.percent_of_kernel_time" for i in range(len(results[1]["kernels"]))]
    rng = random.Random(16)
    n = 4000
    vals = [round(rng.uniform(0, 100), 1) for _ in range(n)]
    old = sum(_old_rule(v, results) for v in vals) / n
    new = sum(T.trace_ref(f"{v:.1f}", "%", rng.choice(fields), sources) is None for v in vals) / n
    assert old > 0.18, old
    assert new < 0.005, new


@pytest.mark.parametrize("text,value", [("91", 90.83), ("90.8", 90.8316), ("1135", 1134.75), ("0.0564", 0.0564),
                                        ("1.13e+03", 1134.75)])
def test_written_rounding_known_answers(text, value):
    assert T.trace_ref(text, "", "s:x", {"s": {"x": value}}) is None
