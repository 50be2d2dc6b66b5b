"""Claim construction, verdict arithmetic and the agreement tolerances: what the analysts, the
verifiers and the LLM agents share to build a :class:`~.claims.Claim` and judge a re-derived value
against it (a :class:`~.claims.VerifiedClaim`). Pure functions over the models of :mod:`.claims`."""

from __future__ import annotations

import math
from typing import Any

from .claims import Claim, Evidence, Tolerance, Verdict, VerifiedClaim

# Agreement tolerances used by the verifiers (documented in the report):
# percentages of the GPU timeline: ±1 percentage point, the "within 1% of total time";
PCT_TOL = Tolerance(abs=1.0)
# times, rates, counts re-derived by another code path: ±2% relative;
REL_TOL = Tolerance(rel=0.02)
# telemetry statistics re-derived from raw samples instead of PromQL: ±2% or ±1 unit, as the
# telemetry_verifier prompt says (prompts/telemetry_verifier.md, rule 2; the value of the first
# commit, 8abc092). tests/test_verdict.py keeps these constants equal to the prompts.
TELEMETRY_TOL = Tolerance(abs=1.0, rel=0.02)


def claim(cid: str, analyst: str, statement: str, metric: str, value: Any, unit: str,
          evidence: list[Evidence], confidence: float = 0.9) -> Claim:
    """A validated :class:`Claim` (raises ``ValueError`` on a malformed one)."""
    return Claim(id=cid, analyst=analyst, statement=statement, metric=metric, value=value, unit=unit,
                 evidence=evidence, confidence=confidence)


# Default tolerance of the "is this number in the evidence?" guard: a stated number may be rounded.
SUPPORT_TOL = Tolerance(abs=1e-6, rel=0.01)


def as_float(x: Any) -> float | None:
    """``x`` as a finite float (ints, floats, numeric strings such as ``"1,024.5"``), else None;
    booleans are not numbers here."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, str):
        try:
            f = float(x.strip().replace(",", ""))
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def numbers_in(obj: Any) -> list[float]:
    """Every finite number found recursively in ``obj`` (dict values, list items, numeric
    strings such as ``"92.1"``); booleans are not numbers here."""
    out: list[float] = []
    if isinstance(obj, dict):
        for v in obj.values():
            out.extend(numbers_in(v))
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            out.extend(numbers_in(v))
    else:
        f = as_float(obj)
        if f is not None:
            out.append(f)
    return out


def _leaves(obj: Any) -> list[Any]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, (list, tuple)):
        return [x for v in obj for x in _leaves(v)]
    return [obj]


def is_supported(claim: dict[str, Any] | Claim, tol: Tolerance = SUPPORT_TOL) -> bool:
    """True when the claim's value was returned by one of the tool calls it cites.

    ``claim`` is a :class:`~ai4s_graph.state.Claim` or its dict. A numeric value (int, float, or a
    numeric string) is supported when some number found recursively in its evidence's
    ``returned`` values agrees within ``tol`` (default ``abs=1e-6, rel=0.01``). A boolean must
    equal a returned boolean; any other string must equal a returned string (blanks stripped).
    A claim with no evidence or a ``None`` value is not supported. Never raises for a well-formed
    claim dict. Used by both verifiers in both modes: a claim failing it gets verdict
    ``unsupported`` (issue 3)."""
    if isinstance(claim, Claim):
        value, returned = claim.value, [e.returned for e in claim.evidence]
    else:
        value = claim.get("value")
        returned = [e.returned if isinstance(e, Evidence) else e.get("returned") for e in claim.get("evidence") or []]
    if value is None or not returned:
        return False
    if isinstance(value, bool):
        return any(isinstance(x, bool) and x == value for x in _leaves(returned))
    num = as_float(value)
    if num is not None:
        return any(tol.agrees(num, x) for x in numbers_in(returned))
    text = str(value).strip()
    return any(isinstance(x, str) and x.strip() == text for x in _leaves(returned))


def verdict(cl: Claim, verifier: str, rederived: Any, tol: Tolerance, method: str,
            note: str = "", evidence: list[Evidence] | None = None, supported: bool | None = None) -> VerifiedClaim:
    """Compare a claim with the verifier's re-derived value and return the :class:`VerifiedClaim`.

    ``rederived is None`` → inconclusive (could not re-derive). A claim whose value is not in its
    own evidence → unsupported, whatever the re-derivation says. ``supported``: the caller's
    support judgement (the figure registry's, ``graph/rules/figures.py:supported``, which also
    accepts a value that follows from its evidence by the figure's own formula); default
    :func:`is_supported`."""
    if not (is_supported(cl) if supported is None else supported):
        v = Verdict.unsupported
        note = (note + "; " if note else "") + "claim value matches no number its evidence returned"
    elif rederived is None:
        v = Verdict.inconclusive
    elif isinstance(cl.value, (int, float)) and not isinstance(cl.value, bool) and isinstance(rederived, (int, float)):
        v = Verdict.confirmed if tol.agrees(float(cl.value), float(rederived)) else Verdict.refuted
    else:
        v = Verdict.confirmed if cl.value == rederived else Verdict.refuted
    return VerifiedClaim(claim=cl, verdict=v, verifier=verifier, rederived_value=rederived, tolerance=tol,
                         method=method, note=note, evidence=evidence or [])
