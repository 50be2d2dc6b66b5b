"""Small helpers the analysts and verifiers share to build claims and verdicts."""

from __future__ import annotations

import math
from typing import Any

from ai4s_graph.state import Claim, Evidence, Tolerance, Verdict, VerifiedClaim

# Agreement tolerances used by the verifiers (documented in the report):
# percentages of the GPU timeline: ±1 percentage point, the "within 1% of total time";
PCT_TOL = Tolerance(abs=1.0)
# times, rates, counts re-derived by another code path: ±2% relative;
REL_TOL = Tolerance(rel=0.02)
# telemetry statistics re-derived from raw samples instead of PromQL subqueries: ±5% or ±2 units.
# PromQL's 1 s subquery step reads one of every four 0.25 s samples; on a bursty signal (a GPU that
# a starved DataLoader feeds in bursts, bundled example 92002) the two averages differ by ~1 pp / 3%.
TELEMETRY_TOL = Tolerance(abs=2.0, rel=0.05)


def claim(cid: str, analyst: str, statement: str, metric: str, value: Any, unit: str,
          evidence: list[Evidence], confidence: float = 0.9) -> dict[str, Any]:
    """A validated :class:`Claim` as a dict (raises ``ValueError`` on a malformed one)."""
    return Claim(id=cid, analyst=analyst, statement=statement, metric=metric, value=value, unit=unit,
                 evidence=evidence, confidence=confidence).model_dump(mode="json")


def numbers_in(obj: Any) -> list[float]:
    """Every finite number found recursively in ``obj`` (dicts, lists, scalars)."""
    out: list[float] = []
    if isinstance(obj, bool):
        return out
    if isinstance(obj, (int, float)):
        if math.isfinite(float(obj)):
            out.append(float(obj))
    elif isinstance(obj, dict):
        for v in obj.values():
            out.extend(numbers_in(v))
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            out.extend(numbers_in(v))
    return out


def strings_in(obj: Any) -> list[str]:
    """Every string found recursively in ``obj``."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in strings_in(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in strings_in(v)]
    return []


def is_supported(c: dict[str, Any], tol: Tolerance = Tolerance(abs=1e-6, rel=0.01)) -> bool:
    """True when the claim's value appears in what its evidence's tool calls returned.

    A numeric value must match some number in ``evidence[*].returned`` within ``tol``; a string
    value must equal a returned string; a boolean must equal a returned boolean. This guards
    against a number no tool returned (an LLM's invention): such a claim is ``unsupported``."""
    v = c.get("value")
    returned = [e.get("returned") for e in c.get("evidence", [])]
    if isinstance(v, bool):
        return any(r is v for r in returned) or any(isinstance(r, dict) and v in r.values() for r in returned)
    if isinstance(v, (int, float)):
        return any(tol.agrees(v, n) for n in numbers_in(returned))
    if isinstance(v, str):
        return v in strings_in(returned)
    return False


def verdict(c: dict[str, Any], verifier: str, rederived: Any, tol: Tolerance, method: str,
            note: str = "", evidence: list[Evidence] | None = None) -> dict[str, Any]:
    """Compare a claim with the verifier's re-derived value and return a VerifiedClaim dict.

    ``rederived is None`` → inconclusive (could not re-derive). A claim whose value is not in its
    own evidence → unsupported, whatever the re-derivation says."""
    cl = Claim.model_validate(c)
    if not is_supported(c):
        v = Verdict.unsupported
        note = (note + "; " if note else "") + "claim value matches no number its evidence returned"
    elif rederived is None:
        v = Verdict.inconclusive
    elif isinstance(cl.value, (int, float)) and not isinstance(cl.value, bool) and isinstance(rederived, (int, float)):
        v = Verdict.confirmed if tol.agrees(float(cl.value), float(rederived)) else Verdict.refuted
    else:
        v = Verdict.confirmed if cl.value == rederived else Verdict.refuted
    return VerifiedClaim(claim=cl, verdict=v, verifier=verifier, rederived_value=rederived, tolerance=tol,
                         method=method, note=note, evidence=evidence or []).model_dump(mode="json")
