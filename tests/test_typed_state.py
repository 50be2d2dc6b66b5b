"""The analysis graph's state is typed, the request is read-only, and both survive a checkpoint:
the bundled run 92001 (dispatch-bound, README) analysed in-process, interrupted before the
synthesizer, then resumed from SQLite."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ai4s_graph.cli.run import execute
from ai4s_graph.graph.analysis.configuration import ResolvedRun, RunRequest
from ai4s_graph.graph.analysis.schema import AnalysisState
from ai4s_graph.graph.runtime import read_journal
from ai4s_graph.state import Claim, Manifest, Report, VerifiedClaim

pytestmark = pytest.mark.vm
REPO = Path(__file__).resolve().parents[1]


def test_resumed_state_is_typed_and_the_request_is_never_rewritten(tmp_path, monkeypatch):
    # --job only: the launcher finds $AI4S_SHARED_DIR/models/gnn/perf-runs/92001 itself
    shared = tmp_path / "shared"
    run_dir = shared / "models" / "gnn" / "perf-runs" / "92001"
    shutil.copytree(REPO / "examples" / "perf-runs" / "92001", run_dir)
    monkeypatch.setenv("AI4S_SHARED_DIR", str(shared))
    req = RunRequest(jobid="92001", out_dir=str(tmp_path / "out"))
    ck = str(tmp_path / "ck.sqlite")

    monkeypatch.setenv("AI4S_FAULT", "raise-before:synthesizer")
    with pytest.raises(RuntimeError, match="injected fault before synthesizer"):
        execute(req, checkpoint=ck)
    monkeypatch.delenv("AI4S_FAULT")
    values: AnalysisState = execute(req, checkpoint=ck)  # resumes: every value below came from SQLite

    ends = [r["node"] for r in read_journal(req.out_dir) if r["event"] == "end"]
    assert ends.count("trace_analyst") == 1 and ends.count("synthesizer") == 1  # resumed, not re-run
    assert values["request"] == req and values["request"].perf_run is None      # as the user gave it
    assert values["run"] == ResolvedRun(perf_run=str(run_dir), jobid="92001")    # what the launcher found
    assert isinstance(values["manifest"], Manifest) and values["manifest"].nodes_list == ["vm"]
    assert values["claims"] and all(isinstance(c, Claim) for c in values["claims"])
    assert values["verdicts"] and all(isinstance(v, VerifiedClaim) for v in values["verdicts"])
    rep = values["report"]
    assert isinstance(rep, Report) and rep.bottleneck.klass.value == "dispatch-bound"
    # the report on disk says what the state says
    assert Report.model_validate_json((Path(req.out_dir) / "report.json").read_text()).bottleneck == rep.bottleneck
