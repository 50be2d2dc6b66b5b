import json

import pytest

from ai4s_graph.state import Claim, Evidence, Manifest, Outcome, StatusLine, Tolerance, with_note, worst


def test_status_line_round_trip_and_strict_parse():
    s = StatusLine.make("partial", "no GPU events\n  in trace")
    assert s.format() == "STATUS=partial; reason=no GPU events in trace"
    assert StatusLine.parse(s.format()) == s
    for bad in ["STATUS=ok reason=x", "status=ok; reason=x", "STATUS=good; reason=x",
                "STATUS=ok; reason=", " STATUS=ok; reason=x", "STATUS=ok; reason=x\nmore"]:
        with pytest.raises(ValueError):
            StatusLine.parse(bad)
    assert StatusLine.last_in("working...\nSTATUS=fail; reason=TSDB unreachable\n\n").status is Outcome.fail
    assert len(StatusLine.make("ok", "x" * 500).reason) == 160
    assert worst("ok", "partial", "ok") is Outcome.partial and worst() is Outcome.ok


def test_with_note_adds_a_fallback_after_the_reason_and_keeps_it_whole():
    """A node's line with its LLM pass's fallback: the worse outcome, the note after the node's own
    reason; an ok or absent note changes nothing; a long reason is cut so the note stays whole."""
    line = StatusLine.make("ok", "11 confirmed")
    note = StatusLine.make("partial", "telemetry_verifier LLM: ANTHROPIC_API_KEY is not set; deterministic result kept")
    got = with_note(line, note)
    assert got.format() == ("STATUS=partial; reason=11 confirmed; telemetry_verifier LLM: ANTHROPIC_API_KEY is not "
                            "set; deterministic result kept")
    assert with_note(line, None) == line
    assert with_note(line, StatusLine.make("ok", "trace_verifier LLM: 3 tool calls, 900 tokens")) == line
    assert with_note(StatusLine.make("fail", "no input"), note).status is Outcome.fail
    long = with_note(StatusLine.make("ok", "report.md in /" + "d/" * 70), note)
    assert len(long.reason) == 160  # the path cut mid-word (no blank in it) to 160 - 2 - len(note)
    assert long.reason.endswith("; " + note.reason) and "…; telemetry_verifier LLM:" in long.reason
    huge = with_note(line, StatusLine.make("partial", "x LLM: " + "y" * 300))
    assert huge.reason.startswith("11 confirmed; x LLM: ") and len(huge.reason) == 14 + 100


def test_manifest_reads_a_real_run_nodes_first(perf_runs, tmp_path):
    src = perf_runs / "92003" / "manifest.json"  # the bundled ViT bf16 run (batch 64, one H200 on host vm)
    m = Manifest.read(src)
    assert (m.jobid, m.state, m.nodes_list, m.precision, m.global_batch_size) == ("92003", "COMPLETED", ["vm"], "bf16", 64)
    raw = json.loads(src.read_text())  # the duration is SLURM's end minus start, read here from the raw JSON
    assert m.duration_s == pytest.approx(raw["end_unix"] - raw["start_unix"], abs=1e-6)
    assert m.duration_s == pytest.approx(27.872, abs=1e-3)  # 1795963750.742 - 1795963722.870, by hand
    out = m.write(tmp_path / "manifest.json")
    keys = list(json.loads(out.read_text()))
    assert keys[:3] == ["jobid", "state", "nodes_list"]
    assert Manifest.read(out).start == m.start


def test_manifest_rejects_garbage(tmp_path):
    p = tmp_path / "manifest.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Manifest.read(p)


def test_claim_requires_evidence_and_tolerance_semantics():
    ev = Evidence(tool="tracelens.gpu_timeline", query="idle_time.percent", returned=89.0)
    c = Claim(id="tl.idle", analyst="trace_analyst", statement="GPU idle 89%",
              metric="gpu_timeline.idle_time.percent", value=89.0, unit="%", evidence=[ev])
    assert c.evidence[0].returned == 89.0
    with pytest.raises(ValueError):
        Claim(id="x", analyst="trace_analyst", statement="s", metric="m", value=1.0, unit="%", evidence=[])
    t = Tolerance(abs=1.0, rel=0.02)
    assert t.agrees(89.0, 89.9) and t.agrees(1000, 1019) and not t.agrees(10, 12)
