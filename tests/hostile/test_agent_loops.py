"""Kind: endless agent loops (issue 26: a model that keeps calling an unknown tool made 1332 API
calls in 300 s unless ``--max-tokens-total`` was set). The pass stops after
``MAX_INVALID_TOOL_TURNS`` consecutive invalid turns, and after ``MAX_TURNS`` model calls in all,
with ``STATUS=partial`` and the reason; the deterministic result is kept.

The first test replays ``tests/cassettes/synthesizer_unknown_tool.yaml``: the real client
(langchain-anthropic -> anthropic SDK) against the scripted server with the ``unknown-tool-always``
fault (``tests/cassettes/fake_anthropic.py``), synthesized by ``python tests/cassettes/generate.py``.
Without a bound the cassette runs out of answers and the pass ends "API unreachable" instead."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tenacity import wait_none

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cassettes"))
import harness  # noqa: E402

from ai4s_graph.graph.agents import llm, runner  # noqa: E402
from ai4s_graph.state.status import Outcome  # noqa: E402


@pytest.fixture(autouse=True)
def _no_retry_wait(monkeypatch):
    monkeypatch.setattr(runner, "RETRY_WAIT", wait_none())


def _report() -> dict:
    claim = {"id": "tl.r0.idle_time", "analyst": "trace_analyst", "statement": "Rank 0: idle time is 94.6% of the window.",
             "metric": "gpu_timeline.idle_time.percent", "value": 94.6, "unit": "%",
             "evidence": [{"tool": "trace.engine", "query": "trace_rank0.json.gz: idle_time", "returned": 94.6}]}
    return {"jobid": "92001", "model": "gnn", "state": "COMPLETED", "nodes_list": ["vm"],
            "bottleneck": {"klass": "dispatch-bound", "rationale": "GPU idle most of the window",
                           "supporting_claims": [claim["id"]], "confidence": 0.8},
            "claims": [{"claim": claim, "verdict": "confirmed", "verifier": "trace_verifier", "rederived_value": 94.6,
                        "tolerance": {"abs": 1.0}, "method": "kineto"}],
            "levers": [], "missing": [], "executive_summary": "Job 92001 is dispatch-bound (deterministic summary)."}


def _req(out: Path) -> dict:
    return {"out_dir": str(out), "llm": "anthropic", "llm_model": llm.DEFAULT_MODEL, "jobid": "92001"}


def test_a_model_that_always_calls_an_unknown_tool_stops(tmp_path, monkeypatch, record_mode):
    with harness.anthropic_cassette("synthesizer_unknown_tool", record_mode, monkeypatch,
                                    fault="unknown-tool-always") as cass:
        res = llm.synthesizer_pass(_req(tmp_path), _report())
        calls = len(cass.requests)
    assert res.status.status is Outcome.partial, res.status.format()
    assert (f"{runner.MAX_INVALID_TOOL_TURNS} consecutive turns calling only unknown tool 'no_such_tool'"
            in res.status.reason), res.status.reason
    assert res.llm_calls == calls == runner.MAX_INVALID_TOOL_TURNS
    assert res.prose == _report()["executive_summary"]  # the deterministic summary stays


class _Scripted:
    """A chat model (the runner's ``MODEL_FACTORY`` seam) answering from a script of tool calls,
    endlessly repeating its last entry; counts its calls."""

    def __init__(self, script: list[list[tuple[str, dict]]]) -> None:
        self.script, self.calls = script, 0

    def bind_tools(self, tools, tool_choice=None):
        return self

    def invoke(self, messages):
        from langchain_core.messages import AIMessage

        turn = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"t{self.calls}-{i}"}
                                                 for i, (n, a) in enumerate(turn)],
                         usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15})


def _run(model: _Scripted, tmp_path: Path, monkeypatch, tools=()):
    from langchain_core.tools import StructuredTool
    from pydantic import BaseModel

    class Answer(BaseModel):
        text: str

    monkeypatch.setenv("ANTHROPIC_API_KEY", harness.FAKE_KEY)
    monkeypatch.setattr(runner, "MODEL_FACTORY", lambda m, n: model)
    ts = [StructuredTool.from_function(func=lambda: "{}", name=t, description=t) for t in tools]
    return runner.run_agent("synthesizer", _req(tmp_path), "task", ts, "submit_summary", Answer,
                            lambda a: "rejected: never good enough", "the final answer")


def test_the_turn_limit_stops_a_pass_that_never_settles(tmp_path, monkeypatch):
    """Every budget spent one way or another (all tool calls, invalid turns just under their bound,
    rejected answers under theirs): the pass still stops at MAX_TURNS model calls."""
    tool, bad, final = ("probe", {}), ("no_such_tool", {}), ("submit_summary", {"text": "x"})
    under = runner.MAX_INVALID_TOOL_TURNS - 1
    script = [[tool]] * runner.MAX_TOOL_CALLS + [[bad]] * under + [[final]] + [[bad]] * under + [[final]] \
        + [[bad]] * under + [[tool]] * 50
    model = _Scripted(script)
    res = _run(model, tmp_path, monkeypatch, tools=("probe",))
    assert res.status.status is Outcome.partial, res.status.format()
    assert f"turn limit of {runner.MAX_TURNS} model calls" in res.status.reason, res.status.reason
    assert model.calls == runner.MAX_TURNS == 14


def test_invalid_turns_past_the_tool_cap_stop_too(tmp_path, monkeypatch):
    model = _Scripted([[("probe", {})]] * 100)  # a known tool, called forever past its cap
    res = _run(model, tmp_path, monkeypatch, tools=("probe",))
    assert res.status.status is Outcome.partial
    assert f"{runner.MAX_INVALID_TOOL_TURNS} consecutive turns calling only tools past the cap" in res.status.reason
    assert model.calls == runner.MAX_TOOL_CALLS + runner.MAX_INVALID_TOOL_TURNS


def test_a_valid_call_resets_the_invalid_count(tmp_path, monkeypatch):
    under = runner.MAX_INVALID_TOOL_TURNS - 1
    model = _Scripted([[("no_such_tool", {})]] * under + [[("probe", {})]] + [[("no_such_tool", {})]] * 100)
    res = _run(model, tmp_path, monkeypatch, tools=("probe",))
    assert model.calls == under + 1 + runner.MAX_INVALID_TOOL_TURNS
    assert res.invalid_tool_turns == under + runner.MAX_INVALID_TOOL_TURNS
