"""The agent loop: one system prompt, one user message, a bounded tool-calling loop, a final
answer validated against a schema, retries on 429/529, and the token budget.

The chat model is built from a model string ``"<provider>:<model>"`` with LangChain's
``init_chat_model`` (:func:`make_chat_model`; default :data:`DEFAULT_MODEL`, Anthropic), so a site
with another LangChain chat model plugs it in with ``--model <provider>:<name>``; a bare name
(``claude-sonnet-4-5``) means Anthropic. Anthropic's SDK reads ``ANTHROPIC_API_KEY`` itself; this
module never reads, stores or prints a key (it only checks that the variable is set).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from ...state.report import Usage
from ...state.status import Outcome, StatusLine
from .usage import BudgetExceeded, cost_usd, ledger_add, tokens_used

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MODEL", "MAX_TOOL_CALLS", "MAX_MALFORMED_RETRIES", "MAX_INVALID_TOOL_TURNS", "MAX_TURNS",
           "MAX_OUTPUT_TOKENS", "RETRY_ATTEMPTS",
           "RETRY_STATUSES", "load_prompt", "split_model", "make_chat_model", "run_agent", "scrub", "compact",
           "dumps", "AgentOutcome"]

#: Default model string (``provider:model``) when ``request["llm_model"]`` is empty.
DEFAULT_MODEL = "anthropic:claude-sonnet-4-5"
#: Cap on calls of the analysis tools per agent pass (the final answer is not counted).
MAX_TOOL_CALLS = 8
#: How many times a malformed final answer (or a turn without a tool call) is sent back.
MAX_MALFORMED_RETRIES = 2
#: Consecutive turns whose every tool call is invalid (a tool the agent does not have, or an
#: analysis tool past :data:`MAX_TOOL_CALLS`) after which the pass stops: the same allowance as a
#: malformed answer gets (:data:`MAX_MALFORMED_RETRIES`) plus one. Without it a model that keeps
#: calling an unknown tool looped without bound (1332 API calls in 300 s, issue 26).
MAX_INVALID_TOOL_TURNS = MAX_MALFORMED_RETRIES + 1
#: Model calls one agent pass may make in all: every analysis tool call in its own turn, every
#: allowed send-back of a malformed answer, the allowed invalid turns, and the final answer. A
#: well-behaved pass needs at most ``MAX_TOOL_CALLS + 1``.
MAX_TURNS = MAX_TOOL_CALLS + MAX_MALFORMED_RETRIES + MAX_INVALID_TOOL_TURNS + 1
#: ``max_tokens`` of one Messages API call.
MAX_OUTPUT_TOKENS = 4096
#: Attempts for one call when the API answers 429 or 529 (the first attempt included).
RETRY_ATTEMPTS = 5
#: tenacity wait between those attempts (tests patch this to ``wait_none()``).
RETRY_WAIT = wait_exponential(multiplier=2, min=2, max=60)
#: HTTP statuses that are retried: 429 rate limit, 529 overloaded (Anthropic API error docs,
#: https://docs.claude.com/en/api/errors). Every other 4xx/5xx fails at once.
RETRY_STATUSES = frozenset({429, 529})


def split_model(model: str | None) -> tuple[str, str]:
    """``(provider, model name)`` of a model string: ``"anthropic:claude-sonnet-4-5"`` ->
    ``("anthropic", "claude-sonnet-4-5")``; a bare name is Anthropic's; None -> the default."""
    m = (model or DEFAULT_MODEL).strip()
    if ":" in m:
        p, n = m.split(":", 1)
        return p.strip().lower(), n.strip()
    return "anthropic", m


def make_chat_model(model: str, max_tokens: int) -> Any:
    """A LangChain chat model for the model string ``model`` (see :func:`split_model`), built with
    ``langchain.chat_models.init_chat_model``: temperature 0, the provider SDK's own retries off
    (``max_retries=0``; 429/529 are retried here), 120 s timeout. Raises what the provider's
    integration raises for an unknown provider or a missing package."""
    # lazy: +183 ms import time (python -X importtime after the analysis graph), paid by LLM runs only
    from langchain.chat_models import init_chat_model

    provider, name = split_model(model)
    return init_chat_model(f"{provider}:{name}", max_tokens=max_tokens, temperature=0.0, max_retries=0,
                           timeout=120.0)


#: Builds the chat model (tests may replace it; the cassette tests use the real one).
MODEL_FACTORY: Callable[[str, int], Any] = make_chat_model


def load_prompt(agent: str) -> str:
    """The system prompt of ``agent``: ``prompts/<agent>.md`` (package ``ai4s_graph.prompts``).
    Raises ``FileNotFoundError`` for an unknown agent."""
    return (resources.files("ai4s_graph.prompts") / f"{agent}.md").read_text(encoding="utf-8")


def _retryable(e: BaseException) -> bool:
    """429/529 from any provider's SDK (an exception with that ``status_code``)."""
    return getattr(e, "status_code", None) in RETRY_STATUSES


def dumps(obj: Any) -> str:
    """Compact, key-sorted JSON (a stable request body for cassette matching)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)


@dataclass
class AgentOutcome:
    """What :func:`run_agent` returns: the validated final answer (None on failure), the STATUS
    line, token usage, and how the loop went (tool calls, model calls, answers sent back, turns
    without a tool call, whether the final tool had to be forced)."""

    answer: BaseModel | None = None
    status: StatusLine | None = None
    usage: Usage = field(default_factory=Usage)
    tool_calls: int = 0
    llm_calls: int = 0
    malformed: int = 0
    no_tool_turns: int = 0
    invalid_tool_turns: int = 0
    forced_final: bool = False


def _finish_tool(name: str, schema: type[BaseModel], description: str) -> Any:
    from langchain_core.tools import StructuredTool  # lazy: +22 ms import time, LLM runs only

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
) -> AgentOutcome:
    """Run one agent: system prompt ``prompts/<agent>.md``, one user message, a bounded tool loop.

    Every turn must call a tool (``tool_choice=any``); analysis tools run and their JSON results
    go back as ``tool_result`` blocks; at :data:`MAX_TOOL_CALLS` the final tool ``final_name``
    (arguments = ``final_schema``) is forced. A final answer that fails ``final_schema`` or
    ``validate`` (returns an error text or ``None``) goes back as an error ``tool_result`` at most
    :data:`MAX_MALFORMED_RETRIES` times. 429/529 are retried with tenacity (:data:`RETRY_WAIT`).
    The loop is bounded: it stops after :data:`MAX_TURNS` model calls, and after
    :data:`MAX_INVALID_TOOL_TURNS` consecutive turns whose every tool call is invalid (an unknown
    tool, or an analysis tool past the cap), whatever the token budget.
    Never raises for API, budget, loop or answer problems: the outcome's ``status`` is ``partial``
    with the reason, and ``answer`` is ``None``."""
    # lazy: +500 ms import time (python -X importtime after the analysis graph), paid by LLM runs only
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

    model_string = request.get("llm_model") or DEFAULT_MODEL
    provider, model_name = split_model(model_string)
    out_dir = request["out_dir"]
    budget = request.get("max_tokens_total")
    res = AgentOutcome(usage=Usage(model=model_name))

    def partial(reason: str) -> AgentOutcome:
        res.status = StatusLine.make(Outcome.partial, f"{agent} LLM: {reason}; deterministic result kept")
        return res

    if provider == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        return partial("ANTHROPIC_API_KEY is not set")
    try:
        system = load_prompt(agent)
    except FileNotFoundError:
        return partial(f"no prompt prompts/{agent}.md")

    by_name = {t.name: t for t in tools}
    finish = _finish_tool(final_name, final_schema, final_description)
    try:
        chat = MODEL_FACTORY(f"{provider}:{model_name}", MAX_OUTPUT_TOKENS)
    except Exception as e:  # an unknown provider, its package missing, its key missing
        return partial(f"cannot build chat model {provider}:{model_name} ({type(e).__name__}: "
                       f"{' '.join(str(e).split())[:120]})")
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
        ledger_add(out_dir, agent, model_name, inp, outp)
        return msg

    api = provider.capitalize() + " API"
    invalid_run = 0  # consecutive turns with only invalid tool calls
    while True:
        if res.llm_calls >= MAX_TURNS:
            return partial(f"turn limit of {MAX_TURNS} model calls reached without a final answer")
        bound = forced if res.tool_calls >= MAX_TOOL_CALLS else free
        res.forced_final = res.forced_final or bound is forced
        try:
            ai = call(bound)
        except BudgetExceeded:
            return partial(f"token budget {budget} exceeded ({tokens_used(out_dir)} used)")
        except Exception as e:  # any provider's API error: the deterministic result is kept
            code = getattr(e, "status_code", None)
            if code is not None:
                return partial(f"{api} error {code} ({type(e).__name__})")
            c = e.__cause__
            while c is not None and c.__cause__ is not None:
                c = c.__cause__
            log.warning("%s: %s call failed: %s: %s", agent, api, type(c or e).__name__,
                        " ".join(str(c or e).split())[:300])
            return partial(f"{api} unreachable ({type(e).__name__})")
        messages.append(ai)
        calls = list(getattr(ai, "tool_calls", None) or [])
        if not calls:
            res.malformed += 1
            res.no_tool_turns += 1
            if res.malformed > MAX_MALFORMED_RETRIES:
                return partial(f"no tool call after {res.malformed} answers")
            messages.append(HumanMessage(content=f"Answer only by calling the tool {final_name}."))
            continue
        replies: list[Any] = []
        final_ok: BaseModel | None = None
        valid = False
        unknown: list[str] = []
        for tc in calls:
            name, args, tid = tc["name"], tc.get("args") or {}, tc["id"]
            if name == final_name:
                valid = True
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
                valid = True
                res.tool_calls += 1
                try:
                    content = by_name[name].invoke(args)
                except Exception as e:  # a tool's bad-argument error goes back to the model
                    content = dumps({"error": " ".join(str(e).split())[:300]})
                replies.append(ToolMessage(content=content if isinstance(content, str) else dumps(content),
                                           tool_call_id=tid))
            elif name in by_name:
                replies.append(ToolMessage(content=f"tool-call cap of {MAX_TOOL_CALLS} reached; call {final_name} now.",
                                           tool_call_id=tid, status="error"))
            else:
                unknown.append(str(name))
                replies.append(ToolMessage(content=f"unknown tool {name}; the tools are: "
                                                   f"{', '.join([*by_name, final_name])}", tool_call_id=tid,
                                           status="error"))
        if final_ok is not None:
            res.answer = final_ok
            res.status = StatusLine.make(
                Outcome.ok, f"{agent} LLM: {res.tool_calls} tool calls, {res.usage.input_tokens + res.usage.output_tokens} tokens")
            return res
        if not valid:
            res.invalid_tool_turns += 1
            invalid_run += 1
            if invalid_run >= MAX_INVALID_TOOL_TURNS:
                what = f"unknown tool {unknown[-1][:40]!r}" if unknown else f"tools past the cap of {MAX_TOOL_CALLS}"
                return partial(f"{invalid_run} consecutive turns calling only {what}")
        else:
            invalid_run = 0
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


def compact(obj: Any, max_list: int = 15, depth: int = 0) -> Any:
    """A bounded copy of ``obj`` for the prompt: lists cut to ``max_list`` items (with a note),
    floats to 6 significant digits (1e6 and above, e.g. unix times, to 3 decimals), depth at
    most 6."""
    if depth > 6:
        return "…"
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): compact(v, max_list, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [compact(v, max_list, depth + 1) for v in list(obj)[:max_list]]
        if len(obj) > max_list:
            items.append(f"… {len(obj) - max_list} more")
        return items
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return float(f"{obj:.6g}") if abs(obj) < 1e6 else round(obj, 3)
    return obj
