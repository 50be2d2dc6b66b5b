"""The LLM agents: analysts, verifiers and the synthesizer as Anthropic tool-calling agents.

The deterministic graph computes every figure, claim and verdict by code. When the run asks for
``--llm anthropic`` the lead's nodes call the three entry points below, and the LLM adds what rules
cannot: it chooses extra queries (top kernels of a category, one metric over a sub-window, the ops
behind a hot kernel, a FOM re-read) through the same typed tools, explains the mechanism, and
writes the report's prose. Every number an LLM states must come from a recorded tool result:

- an analyst's new claim cites tool results by id (``ev3``) or a deterministic claim's evidence
  (``det:<claim id>``); the code, never the model, copies those results into the claim's
  :class:`~ai4s_graph.state.Evidence`, and :func:`is_supported` (run by the verifiers in both modes)
  marks a claim whose number matches none of them ``unsupported``;
- a verifier may add notes and refute with a disagreeing tool result, but the code never lets it
  upgrade an ``unsupported`` or ``refuted`` verdict (:func:`merge_verdicts`);
- the synthesizer's prose may only state numbers found in the report's claims
  (:func:`prose_numbers_supported`); otherwise it is retried, then the deterministic summary is kept.

Entry points (the lead's nodes import them lazily, only when ``request["llm"] == "anthropic"``):
:func:`analyst_pass`, :func:`verifier_pass`, :func:`synthesizer_pass`; all return
:class:`LlmResult`. A failure of the LLM path never raises: the node keeps its deterministic result
and the result's ``status`` says ``STATUS=partial`` with the reason.

The model is :class:`langchain_anthropic.ChatAnthropic` (``request["llm_model"]``, default
:data:`DEFAULT_MODEL`), with the SDK's own retries off (``max_retries=0``): 429 (rate limit) and 529
(overloaded) are retried here with tenacity's exponential backoff, nothing else is. The API key is
read by the SDK from ``ANTHROPIC_API_KEY`` only; this module never reads, stores or prints it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from ..analysis.claimkit import SUPPORT_TOL, _as_float, _leaves, is_supported, numbers_in  # noqa: F401
from ...state.claims import Claim, Evidence, Tolerance, Verdict, VerifiedClaim
from ...state.report import Usage
from ...state.status import Outcome, StatusLine
from ...tools.errors import Ai4sError

log = logging.getLogger(__name__)

#: Default model when ``request["llm_model"]`` is empty (a current Claude model name).
DEFAULT_MODEL = "claude-sonnet-4-5"

#: USD per million tokens (input, output), by model-name prefix, longest prefix first.
#: Source: Anthropic's pricing page, https://platform.claude.com/docs/en/about-claude/pricing
#: ("Model pricing" table; base input and output rates, no caching, no batch discount).
PRICES_USD_PER_MTOK: dict[str, tuple[float, float]] = {
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),  # Sonnet 4 and 4.5
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
}
PRICE_SOURCE = "https://platform.claude.com/docs/en/about-claude/pricing"

#: Cap on calls of the analysis tools per agent pass (the final answer is not counted).
MAX_TOOL_CALLS = 8
#: How many times a malformed final answer is sent back with the validation error.
MAX_MALFORMED_RETRIES = 2
#: ``max_tokens`` of one Messages API call.
MAX_OUTPUT_TOKENS = 4096
#: Attempts for one call when the API answers 429 or 529 (the first attempt included).
RETRY_ATTEMPTS = 5
#: tenacity wait between those attempts (tests patch this to ``wait_none()``).
RETRY_WAIT = wait_exponential(multiplier=2, min=2, max=60)
#: HTTP statuses that are retried: 429 rate limit, 529 overloaded (Anthropic API error docs,
#: https://docs.claude.com/en/api/errors). Every other 4xx/5xx fails at once.
RETRY_STATUSES = frozenset({429, 529})

#: Default tolerance of :func:`is_supported`: a claim's number within 1 % (or 1e-6 absolute) of a
#: returned number counts as taken from it (rounding to 3 significant digits stays inside it).

AgentName = Literal[
    "trace_analyst", "telemetry_analyst", "trace_verifier", "telemetry_verifier", "synthesizer"
]


# --------------------------------------------------------------------------------------------
# Result model
# --------------------------------------------------------------------------------------------


class LlmResult(BaseModel):
    """What one LLM pass returns to its node.

    - ``claims`` (analysts): :class:`~ai4s_graph.state.Claim` dicts (``model_dump(mode="json")``,
      ready for the graph state): the deterministic claims, unchanged, followed by the claims the
      LLM added from its own tool calls (ids ``llm.<domain>.<name>``); ``None`` when the LLM path
      gave nothing (the node keeps its deterministic claims).
    - ``verdicts`` (verifiers): :class:`~ai4s_graph.state.VerifiedClaim` dicts: the deterministic
      verdicts with the LLM's reviews merged by :func:`merge_verdicts`; ``None`` when the LLM path
      gave nothing.
    - ``prose``: the analyst's mechanism explanation, the verifier's review, or the executive
      summary (synthesizer; on failure the deterministic summary).
    - ``levers``: lever name -> explanation (synthesizer only).
    - ``endorsed`` / ``disputed``: deterministic claim ids the analyst stands behind / rejects
      (id -> reason); a disputed claim stays in the report (seed 000: a refuted claim stays).
    - ``usage``: tokens and USD cost of this pass (:data:`PRICES_USD_PER_MTOK`).
    - ``status``: the node's STATUS line for the LLM part (``partial`` when it fell back).
    - ``tool_calls``: analysis tool calls made; ``evidence``: every tool result recorded.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    agent: str
    claims: list[dict[str, Any]] | None = None
    verdicts: list[dict[str, Any]] | None = None
    prose: str | None = None
    levers: dict[str, str] = Field(default_factory=dict)
    endorsed: list[str] = Field(default_factory=list)
    disputed: dict[str, str] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    status: StatusLine
    tool_calls: int = 0
    llm_calls: int = 0
    malformed_retries: int = 0
    evidence: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the LLM path finished with ``STATUS=ok``."""
        return self.status.status == Outcome.ok


# --------------------------------------------------------------------------------------------
# Deterministic guards
# --------------------------------------------------------------------------------------------


_NUM = re.compile(r"(?<![A-Za-z0-9_.\-])(-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)")


def numbers_in_prose(text: str) -> list[tuple[str, float]]:
    """Numbers stated in prose: ``[(as written, value)]``. Digits glued to a preceding letter,
    digit, underscore, dot or hyphen are part of a name (``bf16``, ``H200``, ``num_workers_8``,
    ``v1.2``) and are skipped; a unit may follow (``92%``, ``0.91s``)."""
    out = []
    for m in _NUM.finditer(text or ""):
        s = m.group(1)
        if "," in s and not re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
            s = s.split(",")[0]
        f = _as_float(s)
        if f is not None:
            out.append((s, f))
    return out


def _stated_agrees(written: str, stated: float, ref: float, tol: Tolerance) -> bool:
    """``stated`` (written as ``written``) is ``ref`` rounded to the written precision, or within
    ``tol`` of it; a percentage may be written for a fraction (0.921 -> 92.1 %)."""
    decimals = len(written.split(".")[1]) if "." in written and "e" not in written.lower() else 0
    half_ulp = 0.5 * 10 ** (-decimals)
    for r in (ref, ref * 100.0):
        if abs(stated - r) <= half_ulp + 1e-12 or tol.agrees(stated, r):
            return True
    return False


def prose_numbers_supported(
    prose: str, report: dict[str, Any], tol: Tolerance = SUPPORT_TOL
) -> tuple[bool, list[str]]:
    """Check every number in ``prose`` against the report's claims.

    Allowed reference numbers: each claim's value and each verdict's re-derived value (the
    report's ``claims`` are VerifiedClaim dicts), the numbers in the claims' statements (written
    by the analysts from the same tool results: a rank, a kernel count), and the job id. A stated number agrees when it
    is the reference rounded to the written precision or within ``tol`` of it (a percentage may
    state a fraction). Returns ``(all_ok, offending numbers as written)``."""
    refs: list[float] = []
    for vc in report.get("claims") or []:
        cl = vc.get("claim", vc)
        for v in (cl.get("value"), vc.get("rederived_value")):
            f = _as_float(v)
            if f is not None:
                refs.append(f)
        refs.extend(f for _, f in numbers_in_prose(cl.get("statement") or ""))
    jid = _as_float(report.get("jobid"))
    if jid is not None:
        refs.append(jid)
    bad = [w for w, f in numbers_in_prose(prose) if not any(_stated_agrees(w, f, r, tol) for r in refs)]
    return (not bad, bad)


def merge_verdicts(
    deterministic: list[dict[str, Any]],
    reviews: list[dict[str, Any]],
    agent: str,
    records: dict[str, dict[str, Any]] | None = None,
) -> tuple[list[VerifiedClaim], list[str]]:
    """Merge an LLM verifier's reviews into the deterministic verdicts, enforcing the rules:

    - ``unsupported`` and ``refuted`` stay as they are (never upgraded); only a note is added;
    - a claim failing :func:`is_supported` becomes ``unsupported`` whatever anyone says;
    - ``refuted`` is accepted from the LLM only with a ``rederived_value`` that one of its cited
      tool results returned and that disagrees with the claim's value beyond the tolerance;
    - ``confirmed`` on an ``inconclusive`` verdict is accepted only when a cited tool result holds
      the claim's number (within the tolerance); a ``confirmed`` verdict is otherwise kept;
    - anything else from the LLM becomes a note.

    ``reviews`` are dicts ``{claim_id, verdict, rederived_value, evidence_ids, note}``;
    ``records`` maps evidence ids to recorded tool results ``{tool, query, args, returned}``.
    Returns the merged verdicts (same order as ``deterministic``) and notes on ignored changes."""
    records = records or {}
    by_id = {r.get("claim_id"): r for r in reviews}
    out: list[VerifiedClaim] = []
    ignored: list[str] = []
    for d in deterministic:
        vc = VerifiedClaim.model_validate(d)
        cid = vc.claim.id
        r = by_id.get(cid)
        if not is_supported(vc.claim):
            if vc.verdict != Verdict.unsupported:
                vc = vc.model_copy(update={"verdict": Verdict.unsupported,
                                           "note": _join(vc.note, "value matches no tool result it cites")})
        if r is None:
            out.append(vc)
            continue
        note = (r.get("note") or "").strip()
        want = str(r.get("verdict") or "").strip().lower()
        ev = [_evidence(records[e]) for e in r.get("evidence_ids") or [] if e in records]
        tol = vc.tolerance if (vc.tolerance.abs is not None or vc.tolerance.rel is not None) else SUPPORT_TOL
        upd: dict[str, Any] = {"note": _join(vc.note, f"{agent} (LLM): {note}" if note else "")}
        if vc.verdict in (Verdict.unsupported, Verdict.refuted):
            if want and want != vc.verdict.value:
                ignored.append(f"{cid}: kept {vc.verdict.value} (LLM said {want})")
        elif want == "refuted":
            rv = r.get("rederived_value")
            rvf = _as_float(rv)
            cvf = _as_float(vc.claim.value)
            backed = rvf is not None and any(SUPPORT_TOL.agrees(rvf, x) for x in numbers_in([e.returned for e in ev]))
            if backed and cvf is not None and not tol.agrees(cvf, rvf):
                upd.update(verdict=Verdict.refuted, rederived_value=rv, evidence=[*vc.evidence, *ev],
                           method=_join(vc.method, f"re-checked by {agent} (LLM) with {', '.join(e.tool for e in ev)}"))
            else:
                ignored.append(f"{cid}: refutation not backed by a disagreeing tool result")
        elif want == "confirmed" and vc.verdict == Verdict.inconclusive:
            probe = {"value": vc.claim.value, "evidence": [e.model_dump() for e in ev]}
            if ev and is_supported(probe, tol):
                upd.update(verdict=Verdict.confirmed, evidence=[*vc.evidence, *ev],
                           rederived_value=vc.claim.value,
                           method=_join(vc.method, f"re-checked by {agent} (LLM) with {', '.join(e.tool for e in ev)}"))
            else:
                ignored.append(f"{cid}: confirmation not backed by a cited tool result")
        elif want and want != vc.verdict.value:
            ignored.append(f"{cid}: kept {vc.verdict.value} (LLM said {want})")
        out.append(vc.model_copy(update=upd))
    return out, ignored


def _join(a: str, b: str) -> str:
    a, b = (a or "").strip(), (b or "").strip()
    return f"{a}; {b}" if a and b else (a or b)


def _evidence(rec: dict[str, Any]) -> Evidence:
    return Evidence(tool=rec["tool"], query=rec.get("query", ""), returned=rec.get("returned"),
                    args=dict(rec.get("args") or {}))


# --------------------------------------------------------------------------------------------
# Usage, cost and the per-run token budget
# --------------------------------------------------------------------------------------------


def price_for(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for ``model`` from :data:`PRICES_USD_PER_MTOK`
    (longest matching prefix), or ``None`` for an unpriced model."""
    for prefix in sorted(PRICES_USD_PER_MTOK, key=len, reverse=True):
        if model.startswith(prefix):
            return PRICES_USD_PER_MTOK[prefix]
    return None


def cost_usd(model: str, input_tokens: int, output_tokens: int) -> float:
    """USD cost of the tokens at :data:`PRICES_USD_PER_MTOK` (source :data:`PRICE_SOURCE`);
    0.0 for an unpriced model."""
    p = price_for(model)
    if p is None:
        return 0.0
    return round((input_tokens * p[0] + output_tokens * p[1]) / 1e6, 6)


_LEDGER_LOCK = threading.Lock()


def ledger_path(out_dir: str | Path) -> Path:
    """Per-run token ledger: one JSON line per Messages API call (agent, model, tokens); read
    on resume so the budget spans the whole run. Holds no key and no content."""
    return Path(out_dir) / ".ai4s-graph" / "llm_usage.jsonl"


def tokens_used(out_dir: str | Path) -> int:
    """Input plus output tokens spent so far in this run (all agents)."""
    p = ledger_path(out_dir)
    if not p.exists():
        return 0
    total = 0
    with _LEDGER_LOCK:
        for line in p.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            total += int(rec.get("input_tokens", 0)) + int(rec.get("output_tokens", 0))
    return total


def _ledger_add(out_dir: str | Path, agent: str, model: str, inp: int, outp: int) -> None:
    p = ledger_path(out_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    with _LEDGER_LOCK, p.open("a") as f:
        f.write(json.dumps({"agent": agent, "model": model, "input_tokens": inp, "output_tokens": outp}) + "\n")


class BudgetExceeded(Exception):
    """The run's ``max_tokens_total`` is spent."""


# --------------------------------------------------------------------------------------------
# The agent loop
# --------------------------------------------------------------------------------------------


def load_prompt(agent: str) -> str:
    """The system prompt of ``agent``: ``prompts/<agent>.md`` (package ``ai4s_graph.prompts``).
    Raises ``FileNotFoundError`` for an unknown agent."""
    return (resources.files("ai4s_graph.prompts") / f"{agent}.md").read_text(encoding="utf-8")


def _retryable(e: BaseException) -> bool:
    import anthropic

    return isinstance(e, anthropic.APIStatusError) and e.status_code in RETRY_STATUSES


def _default_model_factory(model: str, max_tokens: int) -> Any:
    from langchain_anthropic import ChatAnthropic

    # The SDK reads ANTHROPIC_API_KEY itself; its own retries are off (tenacity retries here).
    return ChatAnthropic(model=model, max_tokens=max_tokens, temperature=0.0, max_retries=0,
                         timeout=120.0)


#: Builds the chat model (tests may replace it; the cassette tests use the real one).
MODEL_FACTORY: Callable[[str, int], Any] = _default_model_factory


def _dumps(obj: Any) -> str:
    """Compact, key-sorted JSON (a stable request body for cassette matching)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)


@dataclass
class _Outcome:
    answer: BaseModel | None = None
    status: StatusLine | None = None
    usage: Usage = field(default_factory=Usage)
    tool_calls: int = 0
    llm_calls: int = 0
    malformed: int = 0


def _finish_tool(name: str, schema: type[BaseModel], description: str) -> Any:
    from langchain_core.tools import StructuredTool

    def _noop(**kwargs: Any) -> str:  # never executed: the loop intercepts the final tool
        return "ok"

    return StructuredTool.from_function(func=_noop, name=name, description=description, args_schema=schema)


def run_agent(
    agent: str,
    request: dict[str, Any],
    user_content: str,
    tools: list[Any],
    final_name: str,
    final_schema: type[BaseModel],
    validate: Callable[[BaseModel], str | None],
    final_description: str,
) -> _Outcome:
    """Run one agent: system prompt ``prompts/<agent>.md``, one user message, a bounded tool loop.

    Every turn must call a tool (``tool_choice=any``); analysis tools run and their JSON results
    go back as ``tool_result`` blocks; at :data:`MAX_TOOL_CALLS` the final tool ``final_name``
    (arguments = ``final_schema``) is forced. A final answer that fails ``final_schema`` or
    ``validate`` (returns an error text or ``None``) goes back as an error ``tool_result`` at most
    :data:`MAX_MALFORMED_RETRIES` times. 429/529 are retried with tenacity (:data:`RETRY_WAIT`).
    Never raises for API, budget or answer problems: the outcome's ``status`` is ``partial`` with
    the reason, and ``answer`` is ``None``."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    model_name = request.get("llm_model") or DEFAULT_MODEL
    out_dir = request["out_dir"]
    budget = request.get("max_tokens_total")
    res = _Outcome(usage=Usage(model=model_name))

    def partial(reason: str) -> _Outcome:
        res.status = StatusLine.make(Outcome.partial, f"{agent} LLM: {reason}; deterministic result kept")
        return res

    if not os.environ.get("ANTHROPIC_API_KEY"):
        return partial("ANTHROPIC_API_KEY is not set")
    try:
        system = load_prompt(agent)
    except FileNotFoundError:
        return partial(f"no prompt prompts/{agent}.md")

    by_name = {t.name: t for t in tools}
    finish = _finish_tool(final_name, final_schema, final_description)
    chat = MODEL_FACTORY(model_name, MAX_OUTPUT_TOKENS)
    free = chat.bind_tools([*tools, finish], tool_choice="any")
    forced = chat.bind_tools([*tools, finish], tool_choice=final_name)
    messages: list[Any] = [SystemMessage(content=system), HumanMessage(content=user_content)]

    def call(bound: Any) -> Any:
        if budget is not None and tokens_used(out_dir) >= int(budget):
            raise BudgetExceeded()
        retrying = Retrying(retry=retry_if_exception(_retryable), wait=RETRY_WAIT,
                            stop=stop_after_attempt(RETRY_ATTEMPTS), reraise=True)
        msg = retrying(bound.invoke, messages)
        um = getattr(msg, "usage_metadata", None) or {}
        inp, outp = int(um.get("input_tokens", 0)), int(um.get("output_tokens", 0))
        res.usage.input_tokens += inp
        res.usage.output_tokens += outp
        res.usage.cost_usd = cost_usd(model_name, res.usage.input_tokens, res.usage.output_tokens)
        res.llm_calls += 1
        _ledger_add(out_dir, agent, model_name, inp, outp)
        return msg

    import anthropic

    while True:
        bound = forced if res.tool_calls >= MAX_TOOL_CALLS else free
        try:
            ai = call(bound)
        except BudgetExceeded:
            return partial(f"token budget {budget} exceeded ({tokens_used(out_dir)} used)")
        except anthropic.APIStatusError as e:
            return partial(f"Anthropic API error {e.status_code} ({type(e).__name__})")
        except anthropic.APIConnectionError as e:
            c = e.__cause__
            while c is not None and c.__cause__ is not None:
                c = c.__cause__
            log.warning("%s: Anthropic API call failed: %s: %s", agent, type(c or e).__name__,
                        " ".join(str(c or e).split())[:300])
            return partial(f"Anthropic API unreachable ({type(e).__name__})")
        messages.append(ai)
        calls = list(getattr(ai, "tool_calls", None) or [])
        if not calls:
            res.malformed += 1
            if res.malformed > MAX_MALFORMED_RETRIES:
                return partial(f"no tool call after {res.malformed} answers")
            messages.append(HumanMessage(content=f"Answer only by calling the tool {final_name}."))
            continue
        replies: list[Any] = []
        final_ok: BaseModel | None = None
        for tc in calls:
            name, args, tid = tc["name"], tc.get("args") or {}, tc["id"]
            if name == final_name:
                err: str | None
                try:
                    parsed = final_schema.model_validate(args)
                    err = validate(parsed)
                except ValidationError as e:
                    parsed, err = None, _short_validation(e)
                if err is None and parsed is not None:
                    final_ok = parsed
                    replies.append(ToolMessage(content="accepted", tool_call_id=tid))
                else:
                    replies.append(ToolMessage(content=f"rejected: {err}. Call {final_name} again with a corrected answer.",
                                               tool_call_id=tid, status="error"))
            elif name in by_name and res.tool_calls < MAX_TOOL_CALLS:
                res.tool_calls += 1
                try:
                    content = by_name[name].invoke(args)
                except Exception as e:  # a tool's bad-argument error goes back to the model
                    content = _dumps({"error": " ".join(str(e).split())[:300]})
                replies.append(ToolMessage(content=content if isinstance(content, str) else _dumps(content),
                                           tool_call_id=tid))
            elif name in by_name:
                replies.append(ToolMessage(content=f"tool-call cap of {MAX_TOOL_CALLS} reached; call {final_name} now.",
                                           tool_call_id=tid, status="error"))
            else:
                replies.append(ToolMessage(content=f"unknown tool {name}", tool_call_id=tid, status="error"))
        if final_ok is not None:
            res.answer = final_ok
            res.status = StatusLine.make(
                Outcome.ok, f"{agent} LLM: {res.tool_calls} tool calls, {res.usage.input_tokens + res.usage.output_tokens} tokens")
            return res
        if any(tc["name"] == final_name for tc in calls):
            res.malformed += 1
            if res.malformed > MAX_MALFORMED_RETRIES:
                messages.extend(replies)
                return partial(f"malformed answer after {res.malformed} tries")
        messages.extend(replies)


def _short_validation(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg')}")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# Output schemas (the final tool's arguments)
# --------------------------------------------------------------------------------------------


class NewClaim(BaseModel):
    """A claim the analyst adds from its own tool calls."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="short id, e.g. gemm_share")
    statement: str = Field(min_length=1, description="one sentence a performance engineer can check")
    metric: str = Field(min_length=1, description="dotted key of what was measured, as the tool named it")
    value: float | int | str | bool = Field(description="the number exactly as a cited tool returned it")
    unit: str
    evidence_ids: list[str] = Field(min_length=1, description="ids of tool results (ev1, ...) or det:<claim id>")
    confidence: float = Field(ge=0.0, le=1.0, default=0.7)


class AnalystAnswer(BaseModel):
    """Final answer of an analyst."""

    model_config = ConfigDict(extra="forbid")

    endorsed: list[str] = Field(default_factory=list, description="ids of the given claims you stand behind")
    disputed: dict[str, str] = Field(default_factory=dict, description="given claim id -> why you doubt it")
    new_claims: list[NewClaim] = Field(default_factory=list)
    prose: str = Field(min_length=1, description="the mechanism, citing claim ids; numbers only from tool results")


class Review(BaseModel):
    """A verifier's review of one verdict."""

    model_config = ConfigDict(extra="forbid")

    claim_id: str
    verdict: Literal["confirmed", "refuted", "inconclusive", "unsupported"]
    rederived_value: float | int | str | bool | None = None
    evidence_ids: list[str] = Field(default_factory=list)
    note: str = ""


class VerifierAnswer(BaseModel):
    """Final answer of a verifier."""

    model_config = ConfigDict(extra="forbid")

    reviews: list[Review] = Field(default_factory=list)
    prose: str = ""


class SynthAnswer(BaseModel):
    """Final answer of the synthesizer."""

    model_config = ConfigDict(extra="forbid")

    executive_summary: str = Field(min_length=1)
    lever_explanations: dict[str, str] = Field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------

_DOMAIN = {"trace_analyst": "trace", "trace_verifier": "trace",
           "telemetry_analyst": "telemetry", "telemetry_verifier": "telemetry"}


def _fail_result(agent: str, reason: str) -> LlmResult:
    return LlmResult(agent=agent, status=StatusLine.make(Outcome.partial, f"{agent} LLM: {reason}; deterministic result kept"))


def _result(agent: str, o: _Outcome, records: list[dict[str, Any]], **kw: Any) -> LlmResult:
    return LlmResult(agent=agent, usage=o.usage, status=o.status or StatusLine.make(Outcome.partial, "no outcome"),
                     tool_calls=o.tool_calls, llm_calls=o.llm_calls, malformed_retries=o.malformed,
                     evidence=records, **kw)


def _claim_citations(claims: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {f"det:{c['id']}": [dict(e) for e in c.get("evidence") or []] for c in claims}


def analyst_pass(agent: str, request: dict[str, Any], context: dict[str, Any],
                 claims: list[dict[str, Any]]) -> LlmResult:
    """Run an LLM analyst over the deterministic figures and claims.

    ``agent``: ``trace_analyst`` or ``telemetry_analyst``. ``context``: ``manifest`` (dict),
    ``findings`` (the deterministic figures: TraceAnalysis dicts, or telemetry stats with their
    PromQL and the FOM result), and for the omnistat analyst ``tsdb_url`` (the running
    VictoriaMetrics). ``claims``: the deterministic Claim dicts.

    The LLM may call the domain's tools (:mod:`ai4s_graph.tools.llm_tools`) at most
    :data:`MAX_TOOL_CALLS` times, then answers with :class:`AnalystAnswer`. New claims get ids
    ``llm.<agent>.<name>`` and evidence copied by code from the tool results they cite; a citation
    of an unknown id is a malformed answer. Returns :class:`LlmResult` with ``claims`` = the
    deterministic claims (unchanged) + the new ones, ``prose``, ``endorsed``/``disputed``; on any
    failure ``claims=None`` and ``STATUS=partial``."""
    from ...tools import llm_tools as agent_tools

    if agent not in ("trace_analyst", "telemetry_analyst"):
        raise ValueError(f"unknown analyst {agent!r}")
    det = [Claim.model_validate(c).model_dump(mode="json") for c in claims]
    recorder = agent_tools.Recorder()
    cites = _claim_citations(det)
    det_ids = {c["id"] for c in det}

    def validate(ans: BaseModel) -> str | None:
        assert isinstance(ans, AnalystAnswer)
        known = set(recorder.by_id()) | set(cites)
        for nc in ans.new_claims:
            bad = [e for e in nc.evidence_ids if e not in known]
            if bad:
                return f"claim {nc.name}: unknown evidence ids {bad}; cite ev<n> ids from tool results or det:<claim id>"
        unknown = [i for i in [*ans.endorsed, *ans.disputed] if i not in det_ids]
        if unknown:
            return f"unknown claim ids {unknown}"
        return None

    user = _dumps(scrub({
        "task": f"{agent}: review the deterministic claims, run extra queries with the tools where they help, "
                "and answer with submit_analysis.",
        "manifest": _compact(context.get("manifest") or {}),
        "findings": _compact(context.get("findings") or {}),
        "claims": [{"id": c["id"], "statement": c["statement"], "metric": c["metric"], "value": c["value"],
                    "unit": c["unit"], "cite_as": f"det:{c['id']}"} for c in det],
    }, request))
    try:
        with agent_tools.toolset(_DOMAIN[agent], request, context, recorder) as tools:
            o = run_agent(agent, request, user, tools, "submit_analysis", AnalystAnswer, validate,
                          "Submit your analysis: endorsed/disputed claim ids, new claims citing tool results, "
                          "and prose.")
    except Ai4sError as e:  # a missing input for the tools must not lose the deterministic result
        return _fail_result(agent, f"tools unavailable: {e}")
    records = recorder.dump()
    if o.answer is None:
        return _result(agent, o, records)
    ans: AnalystAnswer = o.answer  # type: ignore[assignment]
    rec = recorder.by_id()
    new: list[Claim] = []
    for nc in ans.new_claims:
        ev: list[Evidence] = []
        for eid in nc.evidence_ids:
            ev.extend(_evidence(r) for r in ([rec[eid]] if eid in rec else cites.get(eid, [])))
        cid = f"llm.{agent.split('_')[0]}.{nc.name}"
        if cid in det_ids or any(c.id == cid for c in new):
            continue
        new.append(Claim(id=cid, analyst=agent, statement=nc.statement, metric=nc.metric, value=nc.value,
                         unit=nc.unit, evidence=ev, confidence=nc.confidence))
    return _result(agent, o, records, claims=[dict(c) for c in claims] + [c.model_dump(mode="json") for c in new],
                   prose=ans.prose,
                   endorsed=ans.endorsed, disputed=ans.disputed)


def verifier_pass(agent: str, request: dict[str, Any], context: dict[str, Any],
                  verdicts: list[dict[str, Any]]) -> LlmResult:
    """Let an LLM verifier re-check the deterministic verdicts with its domain's tools.

    ``agent``: ``trace_verifier`` or ``telemetry_verifier``; ``context`` as for
    :func:`analyst_pass`; ``verdicts``: VerifiedClaim dicts from the deterministic re-derivation.
    The LLM answers with :class:`VerifierAnswer`; :func:`merge_verdicts` applies it (never
    upgrading ``unsupported``/``refuted``). Returns ``verdicts`` (merged), ``prose``; on failure
    ``verdicts=None`` and ``STATUS=partial``."""
    from ...tools import llm_tools as agent_tools

    if agent not in ("trace_verifier", "telemetry_verifier"):
        raise ValueError(f"unknown verifier {agent!r}")
    det = [VerifiedClaim.model_validate(v).model_dump(mode="json") for v in verdicts]
    recorder = agent_tools.Recorder()
    ids = {v["claim"]["id"] for v in det}

    def validate(ans: BaseModel) -> str | None:
        assert isinstance(ans, VerifierAnswer)
        unknown = [r.claim_id for r in ans.reviews if r.claim_id not in ids]
        if unknown:
            return f"unknown claim ids {unknown}"
        known = set(recorder.by_id())
        bad = [e for r in ans.reviews for e in r.evidence_ids if e not in known]
        if bad:
            return f"unknown evidence ids {bad}; cite ev<n> ids of your own tool results"
        return None

    user = _dumps(scrub({
        "task": f"{agent}: re-check these verdicts with your own tool calls and answer with submit_review.",
        "manifest": _compact(context.get("manifest") or {}),
        "verdicts": [{"claim_id": v["claim"]["id"], "statement": v["claim"]["statement"], "metric": v["claim"]["metric"],
                      "value": v["claim"]["value"], "unit": v["claim"]["unit"], "verdict": v["verdict"],
                      "rederived_value": v.get("rederived_value"), "method": v.get("method", ""),
                      "evidence": [{"tool": e["tool"], "args": e.get("args", {}), "query": e.get("query", "")}
                                   for e in v["claim"].get("evidence") or []]} for v in det],
    }, request))
    try:
        with agent_tools.toolset(_DOMAIN[agent], request, context, recorder) as tools:
            o = run_agent(agent, request, user, tools, "submit_review", VerifierAnswer, validate,
                          "Submit your review: one entry per verdict you re-checked, with the ids of your "
                          "tool results.")
    except Ai4sError as e:
        return _fail_result(agent, f"tools unavailable: {e}")
    records = recorder.dump()
    if o.answer is None:
        return _result(agent, o, records)
    ans: VerifierAnswer = o.answer  # type: ignore[assignment]
    merged, ignored = merge_verdicts(det, [r.model_dump() for r in ans.reviews], agent, recorder.by_id())
    status = o.status
    if ignored and status is not None:
        status = StatusLine.make(status.status, f"{status.reason}; {len(ignored)} LLM verdict changes refused")
    o.status = status
    return _result(agent, o, records, verdicts=[v.model_dump(mode="json") for v in merged], prose=ans.prose or None,
                   disputed={i.split(":")[0]: i for i in ignored})


def synthesizer_pass(request: dict[str, Any], report: dict[str, Any]) -> LlmResult:
    """Write the executive summary (and lever explanations) of ``report`` (a Report dict).

    Every number in the summary and explanations must agree with a claim's value or re-derived
    value (:func:`prose_numbers_supported`); a summary that does not is sent back (at most
    :data:`MAX_MALFORMED_RETRIES` times), then the deterministic ``executive_summary`` is kept
    with ``STATUS=partial``. Lever explanations are only kept for levers in the report."""
    agent = "synthesizer"
    fallback = report.get("executive_summary") or ""
    lever_names = {lv.get("name") for lv in report.get("levers") or []}

    def validate(ans: BaseModel) -> str | None:
        assert isinstance(ans, SynthAnswer)
        text = "\n".join([ans.executive_summary, *ans.lever_explanations.values()])
        ok, bad = prose_numbers_supported(text, report)
        if not ok:
            return (f"numbers {bad[:8]} match no claim value or re-derived value in the report; "
                    "state only numbers from the claims (rounding allowed) and no derived numbers")
        unknown = [n for n in ans.lever_explanations if n not in lever_names]
        if unknown:
            return f"unknown levers {unknown}; explain only the report's levers"
        return None

    user = _dumps({"task": "synthesizer: write the executive summary and lever explanations; answer with submit_summary.",
                   "report": _compact(scrub(_report_view(report), request), max_list=80)})
    o = run_agent(agent, request, user, [], "submit_summary", SynthAnswer, validate,
                  "Submit the executive summary (markdown) and one explanation per recommended lever.")
    if o.answer is None:
        r = _result(agent, o, [])
        r.prose = fallback
        return r
    ans: SynthAnswer = o.answer  # type: ignore[assignment]
    return _result(agent, o, [], prose=ans.executive_summary, levers=dict(ans.lever_explanations))


def _report_view(report: dict[str, Any]) -> dict[str, Any]:
    """What the synthesizer sees: the report without plots, statuses and usage; claims sorted by id."""
    keep = ("jobid", "model", "state", "nodes_list", "bottleneck", "levers", "missing", "executive_summary")
    view = {k: report.get(k) for k in keep if k in report}
    view["claims"] = [{"id": vc["claim"]["id"], "statement": vc["claim"]["statement"], "metric": vc["claim"]["metric"],
                       "value": vc["claim"]["value"], "unit": vc["claim"]["unit"], "verdict": vc["verdict"],
                       "rederived_value": vc.get("rederived_value"), "note": vc.get("note", "")}
                      for vc in sorted(report.get("claims") or [], key=lambda vc: vc["claim"]["id"])]
    # the two branches' claims and problems arrive in thread-finishing order: sort for a stable prompt
    if view.get("missing"):
        view["missing"] = sorted(view["missing"])
    return view


_LOOPBACK = re.compile(r"https?://(?:127\.0\.0\.1|localhost|\[::1\]):\d+")
#: Finding keys left out of prompts: plot series (long), TSDB URLs and start-up notes (volatile).
_DROP_KEYS = frozenset({"series", "url", "source", "plots"})


def scrub(obj: Any, request: dict[str, Any]) -> Any:
    """``obj`` for a prompt: paths under the run or output directory made relative, loopback URLs
    (the throw-away VictoriaMetrics) replaced by ``<tsdb>``, plot series and URLs dropped. Keeps a
    request body independent of where the data sits, so cassettes replay anywhere."""
    roots = []
    for key in ("perf_run", "out_dir"):
        if request.get(key):
            roots += [str(Path(request[key]).resolve()), str(request[key]).rstrip("/")]
    roots = sorted({r for r in roots if r and r != "."}, key=len, reverse=True)

    def fix(x: Any) -> Any:
        if isinstance(x, str):
            for r in roots:
                x = x.replace(r + "/", "").replace(r, ".")
            return _LOOPBACK.sub("<tsdb>", x)
        if isinstance(x, dict):
            return {k: fix(v) for k, v in x.items() if k not in _DROP_KEYS}
        if isinstance(x, (list, tuple)):
            return [fix(v) for v in x]
        return x

    return fix(obj)


def _compact(obj: Any, max_list: int = 15, depth: int = 0) -> Any:
    """A bounded copy of ``obj`` for the prompt: lists cut to ``max_list`` items (with a note),
    floats to 6 significant digits (1e6 and above, e.g. unix times, to 3 decimals), depth at
    most 6."""
    if depth > 6:
        return "…"
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): _compact(v, max_list, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_compact(v, max_list, depth + 1) for v in list(obj)[:max_list]]
        if len(obj) > max_list:
            items.append(f"… {len(obj) - max_list} more")
        return items
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return float(f"{obj:.6g}") if abs(obj) < 1e6 else round(obj, 3)
    return obj
