"""Step accounting (issue 34) on real torch profiler traces of host-side causes, made on the CPU by
``tests/data/traces/steps/make_cpu_traces.py`` (with_stack, record_shapes, profile_memory; 3 steps of
a small MLP with one cause injected per step, large by construction): the lead names the injected
function's ``file:line``, and its time there is the frame's own recorded time, summed in plain
Python from the ``python_function`` events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ai4s_graph.tools.trace import host_timeline
from ai4s_graph.tools.trace.pystack import site_of

DATA = Path(__file__).resolve().parent / "data" / "traces" / "steps"


def _frame(events: list[dict], func: str) -> str:
    names = {e["name"] for e in events if e.get("cat") == "python_function" and e["name"].endswith(f": {func}")}
    assert len(names) == 1, names
    return names.pop()


def _load(kind: str):
    path = DATA / f"{kind}.json.gz"
    return path, json.load(gzip.open(path))["traceEvents"]


@pytest.mark.parametrize("kind,func", [("python_work", "busy_python"), ("gc_collect", "collect_garbage"),
                                       ("torch_save", "checkpoint")])
def test_outside_ops_causes_are_named_by_their_line(kind, func):
    path, events = _load(kind)
    frame = _frame(events, func)
    bd = host_timeline.step_breakdown(path)
    assert bd.has_python_stacks and bd.n_steps == 3
    lead = bd.lead
    assert lead.category == "outside_ops" and lead.site == site_of(frame)
    assert lead.share > 0.75  # by construction the injected work is most of the step
    # the site's time per step (outside ops, and the few ops torch.save runs inside it) against the frame's
    # recorded spans clipped to each step (absolute epoch-µs times here: equal to ~1 ns)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep"))
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == frame]
    for st, (a, b) in zip(bd.steps, steps):
        inside = sum(max(0.0, min(e, b) - max(s, a)) for s, e in spans)
        got = sum(x.us for x in st.idle_sites if x.site == lead.site)
        assert got == pytest.approx(inside, abs=0.01)
        assert st.idle_sites[0].site == lead.site


def test_per_sample_forward_is_a_batch1_repetition():
    path, events = _load("per_sample")
    bd = host_timeline.step_breakdown(path)
    assert bd.has_shapes
    for st in bd.steps:
        r = st.structure.repeated
        assert (r.k, r.period, r.ops) == (16, 3, ["aten::linear", "aten::relu", "aten::linear"])
        assert r.shape.startswith("[[1, 64]")
    assert bd.lead.category == "op" and bd.lead.site == site_of(_frame(events, "<listcomp>"))
    assert bd.lead.context["repeated_k"] == 16


def test_cpu_preprocessing_in_the_main_process():
    path, events = _load("cpu_preprocess")
    bd = host_timeline.step_breakdown(path)
    lead = bd.lead
    assert lead.category == "op" and lead.site == site_of(_frame(events, "preprocess")) and lead.share > 0.75
    assert lead.name in ("aten::std", "aten::mean", "aten::sub", "aten::div", "aten::pad", "aten::add")


def test_memory_events_are_read():
    path, _ = _load("python_work")
    bd = host_timeline.step_breakdown(path)
    assert bd.has_memory_events  # profile_memory on, CPU allocations only: no device memory figure
    assert all(s.structure.device_min_allocated_bytes is None for s in bd.steps)
