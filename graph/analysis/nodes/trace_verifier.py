"""The trace verifier: re-derives every trace claim from the raw trace by a different code path
than the analyst's. The analyst's figures come from the engine (:mod:`ai4s_graph.tools.trace.engine`,
a streaming scan into numpy arrays); the verifier re-reads each trace with the full-load reader
(:mod:`ai4s_graph.tools.trace.kineto`: per-event objects, its own linking, stream clipping, step
assignment and interval arithmetic in plain Python), and re-derives cross-rank claims (straggler,
busbw) from the kernels of every rank (:func:`ai4s_graph.tools.trace.collectives.rederive_claim`).
It marks each claim confirmed, refuted, inconclusive or unsupported; a path that cannot read a
trace gives ``inconclusive`` with the reason, never ``refuted``. Claims are CHECKED here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..claimkit import PCT_TOL, REL_TOL, verdict
from .. import triage
from ..configuration import llm_manifest, llm_request
from ..schema import AnalysisState, RankResult
from ...runtime import node
from ....state import Claim, Outcome, StatusLine, Tolerance, VerifiedClaim
from ....tools.errors import Ai4sError
from ....tools.trace import collectives
from ....tools.trace.kineto import REDERIVE_METHOD, rederive_figures
from .trace_analyst import trace_class

VERIFIER = "trace_verifier"
METHOD = REDERIVE_METHOD


def rederive(path: str) -> dict[str, Any]:
    """Re-derive a trace's figures with the full-load reader
    (:func:`ai4s_graph.tools.trace.kineto.rederive_figures`), memoized per path, size and mtime.
    Raises :class:`~ai4s_graph.tools.errors.InputError` on a trace it cannot read."""
    import os

    try:
        st = os.stat(path)
    except OSError:
        st = None
    return _rederive(path, st.st_size if st else -1, st.st_mtime_ns if st else -1)


@lru_cache(maxsize=8)
def _rederive(path: str, _size: int, _mtime_ns: int) -> dict[str, Any]:
    return rederive_figures(path)


def _value_for(metric: str, d: dict[str, Any]) -> tuple[Any, Tolerance]:
    """The re-derived value of one claim metric, and the tolerance it is judged with."""
    parts = metric.split(".")
    if parts[0] == "gpu_timeline":
        return float(d["timeline"][parts[1]]["percent"]), PCT_TOL
    if metric == "kernels.mean_kernel_us":
        return float(d["launch"]["mean_kernel_us"]), REL_TOL
    if metric == "kernels.short_kernel_count_pct":
        if not d.get("kernel_count"):
            return None, PCT_TOL
        return 100.0 * d["short_kernels"]["count"] / d["kernel_count"], PCT_TOL
    if metric == "kernels.kernels_per_step":
        if not d.get("n_steps"):  # this reader found no ProfilerStep: no per-step figure to compare
            return None, REL_TOL
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
        return trace_class(d).klass.value, Tolerance()
    return None, Tolerance()


def verify_trace_claims(claims: list[Claim], rank_results: list[RankResult]) -> list[VerifiedClaim]:
    """Verdicts for every ``trace_analyst`` claim. A claim about one rank trace is matched to that
    trace by the path its evidence cites (two files claiming one rank never swap claims) and
    re-derived by :func:`rederive`; a cross-rank claim (straggler, busbw) by
    :func:`ai4s_graph.tools.trace.collectives.rederive_claim`."""
    by_path = {str(r.get("path")): r for r in rank_results if "error" not in r}
    out = []
    for c in claims:
        if c.analyst != "trace_analyst":
            continue
        res = by_path.get(str(c.evidence[0].args.get("path"))) if c.evidence else None
        if res is None or c.metric.startswith("collectives.") or c.id.startswith("triage."):
            out.append(_other_claim(c, rank_results))
            continue
        try:
            if res.get("rederive_error"):
                raise Ai4sError(res["rederive_error"])
            d = res.get("rederived") or rederive(str(res["path"]))
        except Ai4sError as e:
            out.append(verdict(c, VERIFIER, None, Tolerance(), METHOD,
                               note=f"the full-load reader could not read the trace: {e}"))
            continue
        value, tol = _value_for(c.metric, d)
        if value is None:
            out.append(verdict(c, VERIFIER, None, Tolerance(), METHOD, note=f"no re-derivation of {c.metric} here"))
            continue
        if isinstance(value, float):
            value = round(value, 4)
        out.append(verdict(c, VERIFIER, value, tol, d["method"]))
    return out


def _other_claim(c: Claim, rank_results: list[RankResult]) -> VerifiedClaim:
    """A cross-rank claim, re-derived from every rank's kernels by the independent path."""
    if c.id.startswith("triage."):
        return verdict(c, VERIFIER, *triage.verify_claim(c, {"rank_results": rank_results}))
    value, tol, method = collectives.rederive_claim(c.metric, rank_results)
    return verdict(c, VERIFIER, value, tol, method)


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
