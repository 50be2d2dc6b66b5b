"""Merge an LLM verifier's reviews into the deterministic verdicts, by rules the model cannot bend.

A review changes a verdict only through a re-derivation of the verifier's own (:func:`merge_verdicts`):
it names one field of one of its tool results (``rederived_ref = "ev3:<field>"``), the code reads
the value there (the model never supplies it), and that result must come from a different tool
than every piece of the claim's own evidence (a confirmation resting on the analyst's own call is
refused), in the claim's unit, and over the claim's own telemetry window (a claim about a
sub-window is only judged by a result over that sub-window). A cited result that merely contains
the claim's number somewhere is never enough.
"""

from __future__ import annotations

from typing import Any

from ...state.claimkit import SUPPORT_TOL, as_float, is_supported
from ...state.claims import Evidence, Tolerance, Verdict, VerifiedClaim
from ...tools.telemetry.subwindow import subwindow_of
from .tracing import canon_unit, convert, field_unit, lookup

__all__ = ["merge_verdicts", "window_of", "independent", "reader_of", "to_evidence"]


def to_evidence(rec: dict[str, Any]) -> Evidence:
    """A recorded tool result ``{tool, query, args, returned}`` as :class:`Evidence`."""
    return Evidence(tool=rec["tool"], query=rec.get("query", ""), returned=rec.get("returned"),
                    args=dict(rec.get("args") or {}))


def window_of(args: dict[str, Any] | None) -> tuple[float, float | None] | None:
    """The telemetry sub-window named by a tool call's arguments (see
    :func:`~ai4s_graph.tools.telemetry.subwindow.subwindow_of`); None = the whole job."""
    return subwindow_of(args)


def reader_of(tool: str, args: dict[str, Any] | None = None, backends: dict[str, str] | None = None) -> str:
    """The code path (reader) behind a tool: the part of its name before the dot (``kineto``,
    ``stream``, ``promql``, ``telemetry``, ``fom``, ``trainlog``, ``slurm``), except that
    ``tracelens.analyze_trace`` is the backend the analyst ran on that trace file (``backends``:
    trace path -> ``tracelens``/``hta``/``kineto``/...; the findings' ``ranks[].backend``)."""
    if tool == "tracelens.analyze_trace" and backends:
        b = backends.get(str((args or {}).get("path")))
        if b:
            return str(b).split("-")[0].lower()
    return tool.split(".", 1)[0]


def independent(record: dict[str, Any], claim_evidence: list[Evidence], backends: dict[str, str] | None = None) -> bool:
    """True when ``record`` comes from a reader (:func:`reader_of`) none of the claim's own evidence
    used: a re-run of the claim's own call, or the same reader under another tool name, is not an
    independent path."""
    own = {reader_of(e.tool, e.args, backends) for e in claim_evidence}
    return reader_of(record.get("tool", ""), record.get("args"), backends) not in own


def _join(a: str, b: str) -> str:
    a, b = (a or "").strip(), (b or "").strip()
    return f"{a}; {b}" if a and b else (a or b)


def _rederived(vc: VerifiedClaim, ref: str | None, records: dict[str, dict[str, Any]],
               backends: dict[str, str] | None = None) -> tuple[Any, dict | None, str | None]:
    """(value in the claim's unit, record, None) or (None, None, why it cannot be used)."""
    if not ref or ":" not in ref:
        return None, None, "no rederived_ref (ev<n>:<field>) of a tool result of its own"
    eid, path = ref.split(":", 1)
    rec = records.get(eid)
    if rec is None:
        return None, None, f"{eid} is not a tool result of this verifier"
    if not independent(rec, vc.claim.evidence, backends):
        return None, None, (f"{rec['tool']} reads with the same code path as the claim's own evidence "
                            "(not an independent path)")
    cw = next((w for w in (window_of(e.args) for e in vc.claim.evidence) if w is not None), None)
    rw = window_of(rec.get("args"))
    if cw != rw:
        return None, None, f"{eid} covers window {rw or 'the whole job'}, the claim {cw or 'the whole job'}"
    found, val, container, key = lookup(rec.get("returned"), path)
    if not found:
        return None, None, f"{eid} has no field {path!r}"
    if isinstance(vc.claim.value, (bool, str)) or isinstance(val, (bool, str)):
        return val, rec, None
    v = as_float(val)
    if v is None:
        return None, None, f"{ref} is not a number"
    conv = convert(v, field_unit(key, container), vc.claim.unit)
    if conv is None:
        return None, None, f"{ref} is in {field_unit(key, container) or 'no unit'}, the claim in {canon_unit(vc.claim.unit)}"
    return conv, rec, None


def _agrees(vc: VerifiedClaim, tol: Tolerance, got: Any) -> bool:
    cv = vc.claim.value
    if isinstance(cv, (bool, str)) or isinstance(got, (bool, str)):
        return cv == got
    return tol.agrees(float(cv), float(got))


def merge_verdicts(
    deterministic: list[dict[str, Any]],
    reviews: list[dict[str, Any]],
    agent: str,
    records: dict[str, dict[str, Any]] | None = None,
    backends: dict[str, str] | None = None,
) -> tuple[list[VerifiedClaim], list[str]]:
    """Merge an LLM verifier's reviews into the deterministic verdicts.

    ``deterministic``: VerifiedClaim dicts; ``reviews``: dicts ``{claim_id, verdict,
    rederived_ref, note}``; ``records``: evidence id -> the verifier's recorded tool results
    ``{tool, query, args, returned}``; ``backends``: trace path -> the analyst's backend
    (:func:`reader_of`). Rules:

    - ``unsupported`` and ``refuted`` stay as they are (only a note is added); a claim failing
      :func:`~ai4s_graph.state.claimkit.is_supported` becomes ``unsupported``;
    - ``confirmed`` (upgrading ``inconclusive``) and ``refuted`` are accepted only with a
      ``rederived_ref`` into one of the verifier's own results that is independent of the claim's
      evidence, over the claim's window, in its unit (:func:`_rederived`), and that agrees
      (confirm) or disagrees (refute) with the claim's value within the verdict's tolerance
      (:data:`SUPPORT_TOL` when it has none);
    - anything else from the LLM becomes a note.

    Returns the merged verdicts (same order as ``deterministic``) and one line per refused change."""
    records = records or {}
    by_id = {r.get("claim_id"): r for r in reviews}
    out: list[VerifiedClaim] = []
    refused: list[str] = []
    for d in deterministic:
        vc = VerifiedClaim.model_validate(d)
        cid = vc.claim.id
        r = by_id.get(cid)
        if not is_supported(vc.claim) and vc.verdict != Verdict.unsupported:
            vc = vc.model_copy(update={"verdict": Verdict.unsupported,
                                       "note": _join(vc.note, "value matches no tool result it cites")})
        if r is None:
            out.append(vc)
            continue
        note = (r.get("note") or "").strip()
        want = str(r.get("verdict") or "").strip().lower()
        tol = vc.tolerance if (vc.tolerance.abs is not None or vc.tolerance.rel is not None) else SUPPORT_TOL
        upd: dict[str, Any] = {"note": _join(vc.note, f"{agent} (LLM): {note}" if note else "")}
        if vc.verdict in (Verdict.unsupported, Verdict.refuted) or want not in ("confirmed", "refuted"):
            if want and want != vc.verdict.value:
                refused.append(f"{cid}: kept {vc.verdict.value} (LLM said {want})")
            out.append(vc.model_copy(update=upd))
            continue
        if want == "confirmed" and vc.verdict == Verdict.confirmed:
            out.append(vc.model_copy(update=upd))
            continue
        got, rec, why = _rederived(vc, r.get("rederived_ref"), records, backends)
        if rec is None:
            refused.append(f"{cid}: {want} refused: {why}")
        elif (want == "confirmed") != _agrees(vc, tol, got):
            refused.append(f"{cid}: {want} refused: its re-derived value {got!r} "
                           f"{'disagrees' if want == 'confirmed' else 'agrees'} with the claim's {vc.claim.value!r}")
        else:
            upd.update(verdict=Verdict(want), rederived_value=got, evidence=[*vc.evidence, to_evidence(rec)],
                       method=_join(vc.method, f"re-derived by {agent} (LLM) with {rec['tool']} "
                                                f"({r.get('rederived_ref')})"))
        out.append(vc.model_copy(update=upd))
    return out, refused
