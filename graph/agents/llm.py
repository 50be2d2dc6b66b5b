"""The LLM agents: analysts, verifiers, the synthesizer and the lever picker as tool-calling agents.

The deterministic graph computes every figure, claim and verdict by code. With ``--llm`` the nodes
call the entry points below and the LLM adds what rules cannot: extra queries through the same
typed tools, the mechanism in words, an independent re-derivation, the report's prose. The code,
never the model, decides what is true:

- every number an LLM writes (claim values, statements, prose, notes, summary, lever rationale)
  maps to one specific tool-result field, exactly or by the written rounding, in its unit
  (:mod:`.tracing`); statements are never sources;
- verifiers get only re-derivation tools (:mod:`.verifier_tools`: the full-load kineto reader, the
  streaming reader, raw telemetry samples over the claim's own window, the log re-read, the
  1-node srun probe), and a verdict changes only through an independent, field-specific
  re-derivation (:mod:`.merge`);
- failures never raise: the node keeps its deterministic result with ``STATUS=partial``.

Modules: :mod:`.runner` (chat model from a model string, the tool loop, retries, budget),
:mod:`.passes` (analyst/verifier/synthesizer), :mod:`.picker` (lever picker), :mod:`.render`
(their words in report.md), :mod:`.schemas`, :mod:`.usage`. This module re-exports the entry
points the nodes import.
"""

from __future__ import annotations

from ...state.claimkit import SUPPORT_TOL, is_supported, numbers_in  # noqa: F401
from .merge import merge_verdicts  # noqa: F401
from .passes import analyst_pass, synthesizer_pass, verifier_pass  # noqa: F401
from .render import agent_notes_markdown  # noqa: F401
from .runner import (DEFAULT_MODEL, MAX_MALFORMED_RETRIES, MAX_TOOL_CALLS, load_prompt, make_chat_model,  # noqa: F401
                     scrub, split_model)
from .schemas import LlmResult  # noqa: F401
from .tracing import NumberRef, check_text, numbers_in_prose, trace_ref  # noqa: F401
from .usage import PRICE_SOURCE, PRICES_USD_PER_MTOK, cost_usd, price_for, tokens_used  # noqa: F401
