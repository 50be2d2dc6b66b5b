"""torch.compile recompiling (seed 001 T16): compile events past a frame's first compile in the
trace plus recompile lines in the log, summed; the first compile alone is silent; the raw-text count
of the trace and the verifier's own log re-read give the same number."""

from __future__ import annotations

import pytest

from cause_inputs import inputs_for, reader_for, trace

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import recompiles
from ai4s_graph.tools.trainlog import logtext
from ai4s_graph.tools.trainlog.reread import reread_log

CAUSE = recompiles.CAUSE
LOG = "W1130 torch/_dynamo/convert_frame.py] Recompiling function forward in model.py:42\n" * 3


def test_trace_and_log_counts_add_up(tmp_path):
    p = trace(tmp_path, {"Torch-Compiled Region: 0/0": 5, "Torch-Compiled Region: 0/1": 2,
                         "Torch-Compiled Region: 0/2": 1, "torch/_dynamo/convert_frame.py(1234): _compile": 1})
    log = tmp_path / "train.log"
    log.write_text(LOG)
    facts = logtext.log_facts(log, logtext.read_log(log), registry.log_patterns())
    assert facts["counts"]["recompile_lines"] == 3
    [f] = CAUSE.detect(inputs_for(p, log=facts))
    # the compile event counts (1); the regions 0/1, 0/2 name cached graphs, not compiles
    assert f.claim.value == 1 + 3 and [lv.name for lv in f.levers] == ["compile_dynamic_shapes"]
    assert all(e.args["log"] == str(log) for e in f.claim.evidence)
    r = reader_for(p, log=reread_log(log, registry.log_patterns(verifier=True)))
    rd = CAUSE.rederive(f.claim, r)
    assert rd.value == 4
    assert registry.judge(f.claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value == "confirmed"


def test_the_first_compile_of_each_frame_is_silent(tmp_path):
    p = trace(tmp_path, {"Torch-Compiled Region: 0/0": 20, "Torch-Compiled Region: 1/0": 20})
    assert CAUSE.detect(inputs_for(p, log={"counts": {"recompile_lines": 0}})) == []
    assert reader_for(p).rank["raw_counts"]["compile"] == 0


def test_log_lines_alone_fire(tmp_path):
    p = trace(tmp_path, {"aten::mm": 3})
    [f] = CAUSE.detect(inputs_for(p, log={"path": "train.log", "counts": {"recompile_lines": 2}}))
    assert f.claim.value == 2 and [e.tool for e in f.claim.evidence] == ["log.grep"]


def test_graph_break_regions_are_not_recompiles(tmp_path):
    # a graph break's resume function runs as region 1/1 several times a step (bundled graph-break:
    # 0/0 x3, 1/0 x3, 1/1 x12 in 3 steps), nothing compiles: no recompilation claim
    p = trace(tmp_path, {"Torch-Compiled Region: 0/0": 3, "Torch-Compiled Region: 1/0": 3,
                         "Torch-Compiled Region: 1/1": 12, "CompiledFunction": 18})
    assert CAUSE.detect(inputs_for(p, log={"counts": {"recompile_lines": 0}})) == []
    assert reader_for(p).rank["raw_counts"]["compile"] == 0


def test_inductor_compile_op_counts(tmp_path):
    # the bundled recompile run's form: 'compile_fx_inner (dynamo_timed)' cpu ops inside the steps
    p = trace(tmp_path, {"compile_fx_inner (dynamo_timed)": 2, "Torch-Compiled Region: 0/6": 1})
    [f] = CAUSE.detect(inputs_for(p, log={"counts": {"recompile_lines": 0}}))
    assert f.claim.value == 2 and CAUSE.rederive(f.claim, reader_for(p)).value == 2


def test_share_is_the_compile_time_counted_once(tmp_path):
    from host_traces import Op, host_trace
    from step_traces import read
    # a 5000 µs Inductor compile a step inside Dynamo's _compile frame of the same span: 0.5, not 1.0
    items = [Op("compile_fx_inner (dynamo_timed)", 5000.0), Op("aten::mm", 200.0, kernel_us=1000.0)]
    x, _ = read(host_trace(tmp_path, items, py=("torch/_dynamo/convert_frame.py(100): _compile", 0, 1)))
    x.rank["n_steps"] = 3
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(0.5, abs=1e-9)
