"""The trace verifier: re-derives every trace claim from the raw trace by a different code path
than the analyst used (our own kineto reader, :mod:`ai4s_graph.tools.trace.kineto`, when the analyst
used TraceLens/HTA/TraceLens CSVs; HolisticTraceAnalysis when the analyst used the kineto path),
and marks each claim confirmed, refuted, inconclusive or unsupported. Claims are CHECKED here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..claimkit import PCT_TOL, REL_TOL, verdict
from .. import triage
from ..configuration import llm_manifest, llm_request
from ..diagnosis import classify_trace
from ..schema import AnalysisState, RankResult
from ...runtime import node
from ....state import Claim, Outcome, StatusLine, Tolerance, VerifiedClaim
from ....tools.errors import Ai4sError

VERIFIER = "trace_verifier"


@lru_cache(maxsize=8)
def rederive(path: str, analyst_backend: str) -> dict[str, Any]:
    """Re-derive a trace's figures by the path the analyst did NOT use.

    Returns a dict shaped like ``TraceAnalysis.model_dump()`` (timeline, launch, short_kernels,
    kernel_count, n_steps, step_time_ms, dataloader_ms_per_step, ops_by_category) plus
    ``method``. Raises :class:`~ai4s_graph.tools.errors.InputError` on a bad trace."""
    if analyst_backend == "kineto":
        from ....tools.trace import backends as tracelens

        res = tracelens.analyze_trace(path, backend="hta").model_dump()
        res["method"] = "HolisticTraceAnalysis temporal breakdown (the analyst used the kineto path)"
        return res
    from ....tools.trace import kineto

    tr = kineto.load_events(path)
    ks = kineto.kernel_stats(tr)
    out: dict[str, Any] = {
        "timeline": {k: v.model_dump() for k, v in kineto.timeline_of(tr).items()},
        "launch": kineto.launch_stats(tr),
        "ops_by_category": kineto.ops_by_category(tr),
        **{k: ks[k] for k in ("kernel_count", "short_kernels")},
        **kineto.step_stats(tr),
        "method": "own kineto reader + interval unions (tools/kineto.py), independent of "
                  f"the analyst's {analyst_backend} backend",
    }
    if out.get("n_steps"):
        out["kernels_per_step"] = out["kernel_count"] / out["n_steps"]
    return out


def _value_for(metric: str, d: dict[str, Any]) -> tuple[Any, Tolerance]:
    """The re-derived value of one claim metric, and the tolerance it is judged with."""
    parts = metric.split(".")
    if parts[0] == "gpu_timeline":
        return float(d["timeline"][parts[1]]["percent"]), PCT_TOL
    if metric == "kernels.mean_kernel_us":
        return float(d["launch"]["mean_kernel_us"]), REL_TOL
    if metric == "kernels.short_kernel_count_pct":
        return 100.0 * d["short_kernels"]["count"] / d["kernel_count"], PCT_TOL
    if metric == "kernels.kernels_per_step":
        return float(d["kernel_count"]) / float(d["n_steps"]), REL_TOL
    if parts[0] == "ops_by_category":
        cat = parts[1]
        for row in d.get("ops_by_category") or []:
            if row.get("category") == cat:
                return float(row["percent"]), Tolerance(abs=2.0)
        return 0.0, Tolerance(abs=2.0)
    if metric == "cpu.dataloader_step_share_pct":
        if not d.get("step_time_ms"):
            return None, PCT_TOL
        return 100.0 * float(d["dataloader_ms_per_step"]) / float(d["step_time_ms"]), Tolerance(abs=2.0)
    if metric == "diagnosis.trace_bottleneck_class":
        return classify_trace(d).klass.value, Tolerance()
    return None, Tolerance()


def verify_trace_claims(claims: list[Claim], rank_results: list[RankResult]) -> list[VerifiedClaim]:
    """Verdicts for every ``trace_analyst`` claim about a single rank (ids ``tl.r<rank>.*``);
    claims with other metrics (multi-rank collectives) are re-derived by
    :func:`ai4s_graph.tools.trace.collectives.rederive_claim` when present, else inconclusive."""
    by_rank = {r.get("rank"): r for r in rank_results if "error" not in r}
    out = []
    for c in claims:
        if c.analyst != "trace_analyst":
            continue
        res = by_rank.get(c.evidence[0].args.get("rank"))
        if res is None:
            out.append(_other_claim(c, rank_results))
            continue
        try:
            d = rederive(res["path"], res.get("backend", "hta"))
        except Ai4sError as e:
            out.append(verdict(c, VERIFIER, None, Tolerance(), "re-derivation failed", note=str(e)))
            continue
        value, tol = _value_for(c.metric, d)
        if value is None:
            out.append(_other_claim(c, rank_results))
            continue
        if isinstance(value, float):
            value = round(value, 4)
        out.append(verdict(c, VERIFIER, value, tol, d["method"]))
    return out


def _other_claim(c: Claim, rank_results: list[RankResult]) -> VerifiedClaim:
    if c.id.startswith("triage."):
        return verdict(c, VERIFIER, *triage.verify_claim(c))
    try:
        from ....tools.trace import collectives

        if hasattr(collectives, "rederive_claim"):
            value, tol, method = collectives.rederive_claim(c, rank_results)
            return verdict(c, VERIFIER, value, tol, method)
    except ImportError:
        pass
    return verdict(c, VERIFIER, None, Tolerance(), "no independent path for this metric")


@node(VERIFIER)
def trace_verifier(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Re-derive and judge every trace claim. A refuted claim stays, with ``verdict=refuted``."""
    claims = [c for c in state.get("claims") or [] if c.analyst == "trace_analyst"]
    if not claims:
        return {}, StatusLine.make(Outcome.partial, "no trace claims to verify")
    verdicts = verify_trace_claims(claims, state.get("rank_results") or [])
    update: dict[str, Any] = {"verdicts": verdicts}
    if state["request"].llm != "none":
        from ...agents import llm

        res = llm.verifier_pass(VERIFIER, llm_request(state), {"manifest": llm_manifest(state),
                                                               "findings": state.get("findings", {}).get("trace")},
                                verdicts)
        update["usage"] = {VERIFIER: res.usage}
        if res.verdicts is not None:  # the LLM's answer (JSON): validated into verdicts here
            update["verdicts"] = [VerifiedClaim.model_validate(v) for v in res.verdicts]
    counts = _counts(update["verdicts"])
    bad = counts.get("refuted", 0) + counts.get("unsupported", 0)
    st = Outcome.ok if counts.get("inconclusive", 0) == 0 else Outcome.partial
    return update, StatusLine.make(st, ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
                                   + ("" if not bad else " (kept in the report)"))


def _counts(verdicts: list[VerifiedClaim]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in verdicts:
        k = v.verdict.value
        out[k] = out.get(k, 0) + 1
    return out
