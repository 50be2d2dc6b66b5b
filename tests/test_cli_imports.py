"""Which modules a fresh interpreter loads for the CLI's light paths (a fact about imports, not a timing):
``import ai4s_graph.cli``, ``--version`` and ``trace timeline`` must not load LangGraph (and, through
langchain_core, langsmith's run trees: ~1.2 s of CPU on the device host, issue 29) nor matplotlib;
those load inside ``run`` / ``optimize`` / the plots only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("langgraph", "langchain_core", "langsmith", "matplotlib")

_CHILD = """
import contextlib, io, json, sys
sys.argv = ["ai4s-graph"] + json.loads(sys.argv[1])
import ai4s_graph.cli as cli
rc = None
if len(sys.argv) > 1:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            cli.main()
        except SystemExit as e:
            rc = e.code
print(json.dumps({"rc": rc, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _loaded(args: list[str], tmp_path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), AI4S_STATE_DIR=str(tmp_path / "state"))
    env.pop("AI4S_TRACE_CACHE", None)
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], env=env, cwd=str(tmp_path),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [[], ["--version"]], ids=["import", "version"])
def test_light_paths_load_no_graph_or_plots(args, tmp_path):
    got = _loaded(args, tmp_path)
    assert got["rc"] in (None, 0)
    assert "ai4s_graph" in got["modules"]
    assert [m for m in HEAVY if m in got["modules"]] == []


def test_trace_timeline_loads_no_graph_or_plots(tmp_path):
    trace = REPO / "examples" / "perf-runs" / "92001" / "traces" / "trace_rank0.json.gz"
    got = _loaded(["trace", "timeline", str(trace), "--json"], tmp_path)
    assert got["rc"] == 0
    assert "msgspec" in got["modules"] or "ijson" in got["modules"]  # it did parse the trace
    assert [m for m in HEAVY if m in got["modules"]] == []


def test_run_help_loads_no_graph(tmp_path):
    """``run --help`` builds the option list only: the graph loads when a run starts."""
    got = _loaded(["run", "--help"], tmp_path)
    assert got["rc"] in (None, 0)
    assert [m for m in HEAVY if m in got["modules"]] == []
