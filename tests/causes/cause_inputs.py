"""Hand-built inputs for the cause tests: a kineto trace written by code (each event name a known
number of times), and the tables the analysis pass would hand the causes (event-name counts, raw
counts), made by the same tools the pass uses (``tools/trace/onepass.py``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.tools.trace import onepass, stream
from bench.accuracy.score import run_case


def trace(tmp_path: Path, names: dict[str, int], name: str = "t.json.gz") -> Path:
    """A gzipped trace whose cpu ops are ``names`` (name -> how many), plus one kernel."""
    ev, ts = [], 0.0
    for n, k in names.items():
        for _ in range(k):
            ev.append({"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": 1.0, "args": {}})
            ts += 2.0
    ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0.0, "dur": 1.0, "args": {}})
    p = tmp_path / name
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": ev}, f)
    return p


def inputs_for(path: Path, **kw: Any) -> Inputs:
    """The analyst's inputs of one trace: its event-name counts as the pass counts them."""
    c = onepass.NameCounter(registry.event_name_wanted)
    stream.feed_events(path, (c.feed,))
    return Inputs(rank={"path": str(path), "rank": 0, **kw.pop("rank", {})}, event_names=c.counts, **kw)


def reader_for(path: Path, **kw: Any) -> Reader:
    """The verifier's inputs of one trace: its raw-text counts as the pass counts them."""
    return Reader(rank={"raw_counts": onepass.raw_counts(str(path), registry.raw_patterns())}, **kw)


def bundled_score(repo_root: Path, work: Path, case: str) -> dict[str, Any]:
    """``ai4s-graph run`` on the bundled accuracy case ``bench/accuracy/cases/<case>`` and its score
    (:func:`bench.accuracy.score.run_case`: named cause, class, first lever and whether each is right)."""
    d = repo_root / "bench/accuracy/cases" / case
    return run_case(d, json.loads((d / "truth.json").read_text()), work)


def assert_bundled(repo_root: Path, work: Path, case: str, cause: str | None, lever: str | None) -> None:
    """The bundled case scores right: its class, the cause named (``cause``; None for a control that
    must name none) and, when ``lever`` is given, that lever first."""
    row = bundled_score(repo_root, work, case)
    assert (row["named_cause"], row["cause_ok"], row["class_ok"]) == (cause, True, True), row
    if lever:
        assert (row["first_lever"], row["lever_ok"]) == (lever, True), row


def bundled_row(case: str, work: Path) -> dict[str, Any]:
    """The accuracy score row of the bundled run ``bench/accuracy/cases/<case>`` (its truth.json),
    run through the CLI as the benchmark runs it (:func:`bench.accuracy.score.run_case`)."""
    from bench.accuracy import score

    d = Path(__file__).resolve().parents[2] / "bench" / "accuracy" / "cases" / case
    return score.run_case(d, json.loads((d / "truth.json").read_text()), work, timeout=300)


def assert_bundled_run(case: str, work: Path, cause: str | None, lever: str | None) -> None:
    """The bundled run gets its class right, names ``cause`` and, with ``lever``, leads with it; a
    control (``cause`` None) names no cause or only one its truth measures it has (``present``, the
    benchmark's rule: e.g. kernel launch overhead on a foreach-optimizer control), never another."""
    r = bundled_row(case, work)
    assert r["error"] == "" and r["class_ok"] is True
    assert r["cause_ok"] is True if cause is None else r["named_cause"] == cause, r
    if lever:
        assert r["first_lever"] == lever


def bundled(case: str) -> tuple[Inputs, Reader]:
    """The analyst's and the verifier's tables of a bundled accuracy run's rank-0 trace
    (``bench/accuracy/cases/<case>``) as the one pass makes them: the kernel/copy time by name and
    the engine's timeline; the verifier reader's tables."""
    p = Path(__file__).resolve().parents[2] / "bench" / "accuracy" / "cases" / case / "traces" / "trace_rank0.json.gz"
    g = onepass.read_rank(str(p), 0, None, "0", wanted=registry.event_name_wanted, raw_patterns={})
    rank = {"path": str(p), "rank": 0, "kernel_us": g["kernel_us"], "timeline": g["record"]["timeline"]}
    return Inputs(rank=rank), Reader(rank={"reader": g["reader"]})


def confirmed(cause: Any, claim: Any, r: Reader) -> str:
    """The verdict (``confirmed`` / ``refuted`` / ...) of ``cause``'s re-derivation of ``claim`` from ``r``."""
    rd = cause.rederive(claim, r)
    return registry.judge(claim, "trace_verifier", rd.value, rd.tolerance, rd.method).verdict.value
