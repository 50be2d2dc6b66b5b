"""The words of ``report.md`` read in ten seconds (issue 27): the headline (at most three lines:
class and scope, the named cause with its share of the step and the claim that shows it, the first
lever with its estimated saving), the executive summary (at most :data:`SUMMARY_WORDS` words), the
causes / top-kernels / levers tables, the claims appendix (each verifier's "how it was checked"
written once) and the rules appendix. Rendering only: the verdict, the causes and the levers are
decided upstream (``graph/rules``) and read here from the :class:`~ai4s_graph.state.Report`.

User-facing text cites no document the user does not have: references to the project's seeds
("seed 001 T15", "lesson 6") are taken out of the body by :func:`scrub` and listed once, as the rule
ids of ``docs/rules.md`` (T15, L6), in the rules appendix.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ...state import Manifest, NamedCause, Report
from .lead import short_text
from ..levers.impact import step_words

#: The executive summary's word limit (issue 27 "What" 2: "a short summary (<= 80 words)").
SUMMARY_WORDS = 80
#: Top kernels shown in report.md (the engine keeps 15 per rank, ``tools/trace/rank_analysis.py``).
TOP_KERNELS = 10

_REF = re.compile(r"(?:seed\s+\d{3}\s+)?lessons?\s+(\d+)[a-z]?(?:(?:,\s*|\s+and\s+)\d+)*"
                  r"|seed\s+\d{3}\s+([TS]\d+[a-z]?)(?:\s*/\s*T?\d+[a-z]?)*(?![A-Za-z0-9])"
                  r"|seed\s+\d{3}(?:\s*§\s*\d+)?")
"""A reference to a seed: ``lesson 6`` / ``lessons 24, 25``, ``seed 001 T15`` (``T15/T16``),
``seed 003 § 2`` or a bare ``seed 000``. A bare rule id (``T8``) is a ``docs/rules.md`` id and stays."""
_PAREN = re.compile(r"\s?\(([^()]*)\)")


def _ids(text: str) -> list[str]:
    out = []
    for m in _REF.finditer(text):
        if m.group(1):
            out += [f"L{n}" for n in re.findall(r"\d+", m.group(0).split("lesson", 1)[1])]
        elif m.group(2):
            out.append(m.group(2))
    return out


def _strip(text: str) -> str:
    lead = text[:len(text) - len(text.lstrip(" "))]  # a markdown continuation line keeps its indent
    t = _REF.sub("", text)
    t = re.sub(r"\s*[;,]\s*(?=[;,):]|$)", "", t)
    t = re.sub(r"^\s*[;,:]\s*", "", t)
    t = re.sub(r"\(\s*[;,:]\s*", "(", t)
    t = re.sub(r"\s+([,;.])", r"\1", t)
    return lead + re.sub(r" {2,}", " ", t).strip()


def scrub(text: str, found: list[str] | None = None) -> str:
    """``text`` without references to the project's seeds: ``"fused attention backend (seed 001
    T14; lesson 21: EFFICIENT, never MATH primary)"`` -> ``"fused attention backend (EFFICIENT,
    never MATH primary)"``; a parenthesis left empty goes. The rule ids taken out (``T14``, ``L21``,
    as ``docs/rules.md`` names them) are appended to ``found`` when given."""
    if found is not None:
        found.extend(i for i in _ids(text) if i not in found)

    def paren(m: re.Match) -> str:
        inner = m.group(1)
        if not _REF.search(inner):
            return m.group(0)
        rest = _strip(inner).strip(" ;,:")
        return f" ({rest})" if rest else ""

    return _strip(_PAREN.sub(paren, text)) if _REF.search(text) else text


_MARKUP = re.compile(r"^(?:[*_(\"']+)")
_END = (".", "!", "?")


def paragraph(text: str) -> str:
    """``text`` as a prose paragraph of report.md: blanks folded, its first letter a capital and a
    full stop at its end. The rules write their reasons as clauses that a caller joins (``over the
    run's steady step ...: GPU idle 92.4% ≥ 40% ...``, :func:`ai4s_graph.graph.rules.diagnosis.
    classify_trace`); rendered alone, such a clause must still read as a sentence. A leading markup
    run (``**``, a parenthesis, a quote) is kept and the letter after it raised; a text that
    starts with a digit, a symbol or a code span (a backtick: a name keeps its case) is left as it starts. ``""`` stays ``""``."""
    t = " ".join(str(text).split())
    if not t:
        return t
    m = _MARKUP.match(t)
    i = m.end() if m else 0
    if i < len(t) and t[i].islower():
        t = t[:i] + t[i].upper() + t[i + 1:]
    if not t.rstrip("*_`").endswith(_END):
        t = t.rstrip(" ;,:") + "."
    return t


def cause_label(cause_id: str) -> str:
    """A cause id of ``bench/accuracy/cases.py:CAUSES`` in words: ``memory-bound-elementwise`` ->
    ``memory-bound elementwise`` (any id renders; a hyphen inside a compound such as ``memory-bound``,
    ``host-sync`` or ``d2h`` stays)."""
    keep = ("memory-bound", "compute-bound", "host-sync", "cuda-launch", "per-step", "per-sample", "per-parameter",
            "python-outside", "slow-link", "worker-respawn", "in-step", "io-wait", "find-unused", "no-prefetch")
    s = cause_id
    for k in keep:
        s = s.replace(k, k.replace("-", "\0"))
    return s.replace("-", " ").replace("\0", "-")


def step_share(rep: Report, c: NamedCause) -> tuple[float | None, str]:
    """The share (0..1) of the step a named cause costs, and what it is a share of. A straggler's
    ``share`` is the share of the other ranks' exposed communication spent waiting for it
    (``Bottleneck.waiting_share``); its cost to the step is that times their exposed communication
    (``ranks[].exposed_comm_pct``, the largest over the waiting ranks)."""
    b = rep.bottleneck
    if c.id == "straggler" and b.straggler is not None and c.share is not None:
        exposed = [r.get("exposed_comm_pct") for r in rep.ranks if r.get("rank") != b.straggler]
        exposed = [x for x in exposed if isinstance(x, (int, float))]
        if exposed:
            return c.share * max(exposed) / 100.0, "of the waiting ranks' profiled step"
        return None, ""
    ms = profiled_step_ms(rep)
    return c.share, (f"of the {ms:.2f} ms profiled step" if ms else "of the profiled step")


def profiled_step_ms(rep: Report) -> float | None:
    """The mean profiled step (ms) a named cause's share is of: the step accounting's mean wall
    time of the critical rank (``step_budget[].step_ms``, the rank of ``bottleneck.critical_rank``,
    else the first), the base of every ``steps.*.share`` claim (``graph/rules/step_budget.py``);
    None without a step accounting (a cause's share is then "of the profiled step", unnumbered)."""
    rows = [x for x in rep.step_budget if isinstance(x, dict) and x.get("step_ms")]
    crit = rep.bottleneck.critical_rank
    row = next((x for x in rows if crit is not None and x.get("rank") == crit), rows[0] if rows else None)
    return float(row["step_ms"]) if row else None


def _pct(x: float | None) -> str:
    return "share not measured" if x is None else f"{x * 100:.1f}%"


def saving_text(lv: Any) -> str:
    """``estimated saving 41.8–46.6 ms per step (18–21% of the run's 226.7 ms steady step)`` (or ``of
    the 226.7 ms profiled step``: the lever's ``step_basis``, :func:`~ai4s_graph.tools.levers.impact.
    step_words`) or ``saving not estimated``."""
    lo, hi, step = getattr(lv, "saving_ms_low", None), getattr(lv, "saving_ms_high", None), getattr(lv, "step_ms", None)
    if hi is None or lo is None:
        return "saving not estimated"
    pct = f" ({100 * lo / step:.0f}–{100 * hi / step:.0f}% of {step_words(step, getattr(lv, 'step_basis', None))})" \
        if step else ""
    return f"estimated saving {lo:.1f}–{hi:.1f} ms per step{pct}"


def scope_text(rep: Report) -> str:
    """The class with its scope, e.g. ``compute-bound on rank 1, which the other ranks wait for
    (straggler)``; ``unknown`` when nothing decided."""
    b = rep.bottleneck
    return b.scope or b.klass.value


def lead_text(lead: Any) -> str:
    """A lead's sentence with where it was measured and the measurement that would confirm it:
    ``rank 0: The host spent ... — to confirm: ...`` (no trailing full stop)."""
    who = f"rank {lead.rank}: " if lead.rank is not None else ""
    return f"{who}{lead.text.rstrip('.')} — to confirm: {lead.confirm}"


def headline(rep: Report) -> list[str]:
    """At most three lines: class and scope; the named cause with its share of the step and its
    claim (when none is named, the lead: the step's largest attribution with its numbers and the
    measurement that would confirm it, else "no cause named"); the first lever with its estimated
    saving."""
    b = rep.bottleneck
    out = [f"**{scope_text(rep)}**" + (" (borderline)" if b.borderline else "")]
    if b.causes:
        c = b.causes[0]
        share, of = step_share(rep, c)
        out.append(f"**Cause:** {cause_label(c.id)} — {_pct(share)} {of if share is not None else ''}".rstrip()
                   + f" (claim `{c.claim}`).")
    elif b.lead is not None:
        out.append(f"**Lead (no cause named):** {lead_text(b.lead)}.")
    else:
        out.append("**Cause:** no cause named — no confirmed claim names one.")
    if rep.levers:
        out.append(f"**First lever:** `{rep.levers[0].name}` — {saving_text(rep.levers[0])}.")
    else:
        out.append("**First lever:** none — the class is unknown; fill the missing inputs first.")
    return out


def throughput(fom: dict[str, Any] | None) -> dict[str, Any] | None:
    """``{"median_step_samples_per_s", "realized_samples_per_s", "steady_step_s", "warmup_steps",
    "steady_steps", "includes_warmup": False}`` from the log's figures of merit
    (:func:`ai4s_graph.tools.trainlog.fom.parse_log`). Neither includes the warm-up steps: the first
    is the global batch over the median steady step, the second (the run's FOM when the log has
    realized batches) the samples over the summed time of the same steady steps, so slow steps
    after warm-up pull it down. None without a throughput."""
    if not fom or fom.get("throughput_samples_per_s") is None:
        return None
    n, w = fom.get("n_timed_steps") or fom.get("n_steps"), fom.get("warmup_steps_skipped")
    return {"median_step_samples_per_s": fom.get("throughput_samples_per_s"),
            "realized_samples_per_s": fom.get("throughput_realized_samples_per_s"),
            "steady_step_s": fom.get("steady_step_time_s"), "warmup_steps": w,
            "steady_steps": (n - w) if isinstance(n, int) and isinstance(w, int) else None, "includes_warmup": False}


def throughput_text(t: dict[str, Any] | None) -> str:
    """One sentence with both throughputs and what each is over (the same numbers the CLI prints:
    the telemetry analyst's STATUS line gives the FOM, the realized one when the log has it)."""
    if not t:
        return ""
    w = f", {t['warmup_steps']} warm-up steps excluded" if t.get("warmup_steps") is not None else ""
    s = f"Throughput {t['median_step_samples_per_s']:.0f} samples/s at the median step"
    if t.get("realized_samples_per_s") is not None:
        s += (f", {t['realized_samples_per_s']:.0f} samples/s realized over "
              + (f"the {t['steady_steps']} steady steps" if t.get("steady_steps") else "the steady steps")
              + f" (slow steps included{w})")
    elif w:
        s += f" ({w.lstrip(', ')})"
    return s + "."


def _first_sentence(s: str) -> str:
    """The first sentence of ``s`` (up to a full stop followed by a space); over 30 words, its
    clauses up to the last ``;`` within the first 30 words, ended by a full stop (never a cut
    mid-clause: a reader must not meet a sentence that stops in the middle)."""
    m = re.match(r"(.+?[.!?])(?:\s|$)", s)
    out = m.group(1) if m else s
    if len(out.split()) <= 30:
        return paragraph(out)
    head = " ".join(out.split()[:30])
    cut = head.rfind("; ")
    return paragraph(head[:cut] if cut > 0 else out)


def _words(s: str) -> int:
    return len(s.split())


def executive_summary(rep: Report, manifest: Manifest, t: dict[str, Any] | None = None) -> str:
    """At most :data:`SUMMARY_WORDS` words: the job, the class and scope, the cause, the throughput
    (steady and realized, saying which includes warm-up), the GPU time split, the claims tally, the
    first lever, contradictions and missing inputs; later sentences are dropped when over."""
    if not rep.claims and rep.missing:
        return f"Nothing was analysed for job {rep.jobid}: {scrub(rep.missing[0])[:200]}."
    counts: dict[str, int] = {}
    for v in rep.claims:
        counts[v.verdict.value] = counts.get(v.verdict.value, 0) + 1
    b = rep.bottleneck
    nranks = len(rep.ranks) or 1
    parts = [f"Job {rep.jobid} ({manifest.model}, {manifest.precision}, {rep.state}"
             + (f", {nranks} ranks" if nranks > 1 else "") + f") is {scope_text(rep)}"
             + (" (borderline)" if b.borderline else "") + "."]
    if rep.progress and rep.progress.get("statement"):
        parts.append(_first_sentence(scrub(rep.progress["statement"])))
    if rep.representativeness and not rep.representativeness.get("representative", True):
        parts.append("The profiled steps are not representative of the run (see Representativeness).")
    if b.causes:
        c = b.causes[0]
        share, of = step_share(rep, c)
        parts.append(f"Cause: {cause_label(c.id)}" + (f", {_pct(share)} {of}" if share is not None else "") + ".")
    elif b.lead is not None:
        parts.append(f"No cause named; lead: {short_text(b.lead)}.")
    else:
        parts.append("No cause named.")
    if t:
        parts.append(throughput_text(t))
    split = [f"{k} {v['value']:.1f}%" for k, v in rep.figures.items() if v.get("unit") == "%" and k.startswith(
        ("GPU", "exposed"))]
    if split:
        parts.append("GPU " + ", ".join(s.removeprefix("GPU ") for s in split) + " of the profiled window.")
    if rep.levers:
        parts.append(f"First lever: {rep.levers[0].name} ({saving_text(rep.levers[0])}).")
    if b.contradictions:
        res = sum(1 for c in b.contradictions if c.resolved)
        parts.append(f"{len(b.contradictions)} contradiction(s) between sources, {res} resolved.")
    parts.append("Claims: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none") + ".")
    if rep.missing:
        parts.append(f"{len(rep.missing)} input(s) missing.")
    out: list[str] = []
    for p in parts:
        if _words(" ".join(out + [p])) <= SUMMARY_WORDS:
            out.append(p)
    return " ".join(out)


def causes_rows(rep: Report, checks: dict[str, str], dropped: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """One row per named cause: ``cause``, ``share`` (text), ``claim``, ``verified`` (the check id
    of the claims appendix and the verdict), ``lever``: the cause's levers the lever filter kept
    (``bottleneck.causes[].levers``, :func:`~ai4s_graph.graph.rules.levers.drop_from_causes`), else
    ``—`` naming those of ``dropped`` (the report's "Left out" levers) that came from its claim."""
    by_id = {v.claim.id: v for v in rep.claims}
    rows = []
    for c in rep.bottleneck.causes:
        share, of = step_share(rep, c)
        v = by_id.get(c.claim)
        how = f"{v.verdict.value} by {v.verifier} ({checks.get(v.method, '?')})" if v else "—"
        rows.append({"cause": cause_label(c.id), "share": f"{_pct(share)} {of}" if share is not None else _pct(None),
                     "claim": c.claim, "verified": how, "lever": ", ".join(f"`{x}`" for x in c.levers) or _left_out(c, dropped)})
    return rows


def _left_out(c: NamedCause, dropped: Iterable[Any]) -> str:
    gone = [lv.name for lv in dropped if c.claim in (lv.claims or [])]
    return "— (" + ", ".join(f"`{x}`" for x in gone) + " left out, see Recommended levers)" if gone else "—"


def check_ids(rep: Report) -> dict[str, str]:
    """Each distinct "how it was checked" text -> ``C1``, ``C2``... in order of first use."""
    out: dict[str, str] = {}
    for v in rep.claims:
        out.setdefault(v.method, f"C{len(out) + 1}")
    return out


def top_kernel_rows(rows: Iterable[dict[str, Any]], n: int = TOP_KERNELS) -> list[dict[str, Any]]:
    """The engine's top kernels (``name``, ``count``, ``total_us``, ``percent``) as report rows:
    ``name`` (cut at 90 characters), ``count``, ``total_ms``, ``mean_us``, ``percent`` (of kernel time)."""
    out = []
    for r in list(rows)[:n]:
        name = str(r.get("name", ""))
        cnt = int(r.get("count") or 0)
        tot = float(r.get("total_us") or 0.0)
        out.append({"name": name if len(name) <= 90 else name[:89] + "…", "count": cnt, "total_ms": tot / 1e3,
                    "mean_us": tot / cnt if cnt else None,
                    "percent": float(r["percent"]) if r.get("percent") is not None else None})
    return out


def rule_ids(text: str, found: list[str] | None = None) -> str:
    """``text`` with its seed references written as ``docs/rules.md`` rule ids, for lines whose rule
    must stay named (a "not checked: T8" line): ``seed 001 T8`` -> ``T8``, ``lesson 6`` -> ``L6``.
    The ids are appended to ``found`` when given."""
    if found is not None:
        found.extend(i for i in _ids(text) if i not in found)
    t = re.sub(r"seed\s+\d{3}\s+(?=[TS]\d|lesson)", "", text)
    return re.sub(r"lesson\s+(\d+)", r"L\1", t)
