"""The trace verifier: re-derives every trace claim through the figure registry
(``graph/rules/registry.py``) from the verifier's own readers, a different code path than the
analyst's, and compares. The analyst's figures come from the engine (:mod:`ai4s_graph.tools.trace.engine`,
a streaming scan into numpy arrays); the verifier's from the full-load reader
(:mod:`ai4s_graph.tools.trace.kineto`: per-event objects, its own linking, stream clipping, step
assignment and interval arithmetic in plain Python), fed by the same read of each trace, from the
raw-text counts of that read (the causes' claims), and, across ranks, from every rank's
communication kernels as that reader loaded them (:mod:`ai4s_graph.tools.trace.crossrank_check`:
arrival order, busbw). It marks each claim confirmed, refuted, inconclusive or unsupported; a path
that cannot read a trace gives ``inconclusive`` with the reason, never ``refuted``. Claims are
CHECKED here.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..configuration import llm_manifest, llm_request, trace_paths
from ..inputs import cause_reader, verifier_log
from ..schema import AnalysisState, RankResult
from ...agents import llm
from ...rules import context as ctx, registry, verdict
from ...rules.figures import Reader
from ...runtime import node
from ....state import Claim, Outcome, StatusLine, Tolerance, VerifiedClaim, with_note
from ....tools.errors import Ai4sError, InputError
from ....tools.perfmodel.datasheet import device_for
from ....tools.perfmodel.roofline import roofline, roofline_of
from ....tools.trace import crossrank_check, onepass
from ....tools.trace.kineto import REDERIVE_METHOD, rederive_figures
from ....tools.trace.ranks import assign_identity, mark_foreign

VERIFIER = "trace_verifier"
METHOD = REDERIVE_METHOD


def rederive(path: str) -> dict[str, Any]:
    """The verifier reader's tables of a trace read now (:func:`ai4s_graph.tools.trace.kineto.rederive_figures`),
    for a rank whose pass did not feed that reader (a SLURM-array rank); memoized per path, size
    and mtime. Raises :class:`~ai4s_graph.tools.errors.InputError` on a trace it cannot read."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    return _rederive(path, st.st_size if st else -1, st.st_mtime_ns if st else -1)


@lru_cache(maxsize=8)
def _rederive(path: str, _size: int, _mtime_ns: int) -> dict[str, Any]:
    return rederive_figures(path)


def _judge(c: Claim, value: Any, tol: Tolerance, method: str, note: str = "") -> VerifiedClaim:
    return registry.judge(c, VERIFIER, value, tol, method, note)


def cause_tables(res: RankResult, gpu: str | None) -> dict[str, Any]:
    """What the causes' re-derivations read of one rank: the raw-text counts and the roofline with
    kernels linked by correlation id (``roofline_correlation_rf``) and the verifier reader's tables
    (``reader``: its timeline, step figures and kernel time by name, or None), from the rank's one pass; read
    now only for a rank whose pass did not count them (a SLURM-array rank)."""
    path = str(res["path"])
    raw = res.get("raw_counts")
    if raw is None:
        try:
            raw = onepass.raw_counts(path, registry.raw_patterns())
        except Ai4sError:
            raw = {}
    if "roofline_correlation" in res:
        corr = res["roofline_correlation"]
        try:
            rf = roofline_of(corr, device_for(gpu, res.get("device_name"))[0], Path(path).name) \
                if corr is not None else None
        except InputError:
            rf = None
    else:
        try:
            rf = roofline(path, device_for(gpu, res.get("device_name"))[0] or None, link="correlation")
        except InputError:
            rf = None
    return {"raw_counts": raw, "roofline_correlation_rf": rf, "steps_sampled": res.get("steps_sampled"),
            "reader": res.get("reader")}


def _reader(state: AnalysisState, c: Claim, res: RankResult | None, ranked: list[RankResult]) -> Reader:
    """The verifier inputs a cause's claim re-derives from: those its cause declares, plus the
    rank's cause tables (:func:`cause_tables`); for a cause that declares ``ranks``, every rank's
    reader tables and the verifier's own cross-rank summary of their communication kernels
    (:func:`ai4s_graph.tools.trace.crossrank_check.collective_summary`; left empty when a rank
    trace cannot be read)."""
    r = cause_reader(state, [c])
    if res is not None:
        m = state.get("manifest")
        r.rank = cause_tables(res, m.gpu if m is not None else None)
    if "ranks" in registry.verifier_needs([c]):
        by_path = {str(x.get("path")): x for x in ranked if "error" not in x}
        try:
            tables = crossrank_check.rank_tables(list(by_path.values()))
        except Ai4sError:
            tables = {}
        firsts = crossrank_check.first_files(list(by_path.values()))
        r.ranks = {k: (by_path[p].get("reader") or {}) for k, p in firsts.items()}
        r.collectives = crossrank_check.collective_summary(tables) if len(tables) > 1 else {}
    return r


CLASS_METRIC = "diagnosis.trace_bottleneck_class"


def run_step_of(state: AnalysisState | dict[str, Any], tables: dict[str, Any]) -> dict[str, Any]:
    """The verifier reader's tables with the run's steady step outside the profiler
    (:func:`ai4s_graph.graph.rules.context.with_run_step`) from the verifiers' own re-read of the log
    (its step times, the warm-up steps the analyst declared skipped), for the class rules; the
    tables unchanged when the log cannot be read or gives no run step."""
    fom_ = ((state.get("findings") or {}).get("fom")) or {}
    if state.get("manifest") is None or fom_.get("step_time_source") != "per-step log lines":
        return tables
    try:
        steps = list(verifier_log(state).get("steps") or [])
    except OSError:
        return tables
    w = int(fom_.get("warmup_steps_skipped") or 0)
    return ctx.with_run_step(tables, steps[w:], w, fom_.get("batches_per_epoch"), state["manifest"].num_workers)


def verify_trace_claims(claims: list[Claim], rank_results: list[RankResult],
                        state: AnalysisState | None = None) -> list[VerifiedClaim]:
    """Verdicts for every ``trace_analyst`` claim. A claim about one rank trace is matched to that
    trace by the path an evidence item cites, else by its rank or label
    (:func:`~ai4s_graph.graph.rules.verdict.rank_result_of`: two files claiming one rank never swap claims) and
    re-derived by its figure of the registry from that rank's reader tables; a cause's claim
    (``triage.*``) by its cause module; a cross-rank claim (straggler, busbw) by
    :func:`ai4s_graph.tools.trace.crossrank_check.rederive_claim` over every rank's reader tables."""
    st = state or {}
    ranked, _ = assign_identity([str(p) for p in trace_paths(st)] if st.get("manifest") is not None else [],
                                list(rank_results))
    ranked = mark_foreign(ranked, st.get("manifest"))  # another run's trace: left out, as the analyst did
    good = [r for r in ranked if "error" not in r]
    out = []
    for c in claims:
        if c.analyst != "trace_analyst":
            continue
        res = verdict.rank_result_of(c, good)  # the path any evidence item cites, else its rank or label
        if c.id.startswith("triage."):
            rd = registry.rederive(c, _reader(st, c, res, ranked))
            out.append(_judge(c, rd.value, rd.tolerance or Tolerance(), rd.method or ""))
            continue
        if res is None or c.metric.startswith("collectives."):
            value, tol, method = crossrank_check.rederive_claim(c.metric, ranked)
            out.append(_judge(c, value, tol, method))
            continue
        try:
            if res.get("reader_error"):
                raise Ai4sError(res["reader_error"])
            d = res.get("reader") or rederive(str(res["path"]))
        except Ai4sError as e:
            out.append(_judge(c, None, Tolerance(), METHOD, note=f"the full-load reader could not read the trace: {e}"))
            continue
        fig, params = registry.figure_of(c.metric)
        if c.metric == CLASS_METRIC:
            d = run_step_of(st, d)
        rd = fig.rederive(Reader(rank=d), c, **params) if fig is not None and fig.rederive else None
        value = rd.value if rd is not None else None
        if value is None:  # the figure's own reason (e.g. no launch events) when it gave one
            out.append(_judge(c, None, Tolerance(), METHOD,
                              note=(rd.note if rd is not None and rd.note else f"no re-derivation of {c.metric} here")))
            continue
        if isinstance(value, float):
            value = round(value, 4)
        out.append(_judge(c, value, fig.tolerance, d["method"]))
    return out


@node(VERIFIER)
def trace_verifier(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Re-derive and judge every trace claim. A refuted claim stays, with ``verdict=refuted``."""
    claims = [c for c in state.get("claims") or [] if c.analyst == "trace_analyst"]
    if not claims:
        return {}, StatusLine.make(Outcome.partial, "no trace claims to verify")
    verdicts = verify_trace_claims(claims, state.get("rank_results") or [], state)
    update: dict[str, Any] = {"verdicts": verdicts}
    llm_status = None  # the LLM pass's STATUS: a fallback is said after the deterministic reason
    if state["request"].llm != "none":
        res = llm.verifier_pass(VERIFIER, llm_request(state), {"manifest": llm_manifest(state),
                                                               "findings": state.get("findings", {}).get("trace")},
                                verdicts)
        update["usage"] = {VERIFIER: res.usage}
        if res.verdicts is not None:  # the LLM's answer (JSON): validated into verdicts here
            update["verdicts"] = [VerifiedClaim.model_validate(v) for v in res.verdicts]
        llm_status = res.status
    counts = _counts(update["verdicts"])
    bad = counts.get("refuted", 0) + counts.get("unsupported", 0)
    st = Outcome.ok if counts.get("inconclusive", 0) == 0 else Outcome.partial
    return update, with_note(StatusLine.make(st, ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
                                             + ("" if not bad else " (kept in the report)")), llm_status)


def _counts(verdicts: list[VerifiedClaim]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in verdicts:
        k = v.verdict.value
        out[k] = out.get(k, 0) + 1
    return out
