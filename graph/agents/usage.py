"""LLM token use: prices, cost, and the per-run token ledger that the budget is checked against."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from ...state.publish import append

__all__ = ["PRICES_USD_PER_MTOK", "PRICE_SOURCE", "price_for", "cost_usd", "ledger_path", "tokens_used",
           "ledger_add", "BudgetExceeded"]

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


def price_for(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for ``model`` from :data:`PRICES_USD_PER_MTOK`
    (longest matching prefix; a ``provider:`` prefix is ignored), or ``None`` for an unpriced model."""
    model = model.split(":", 1)[1] if ":" in model else model
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


def ledger_add(out_dir: str | Path, agent: str, model: str, inp: int, outp: int) -> None:
    """Append one call's tokens to the ledger of ``out_dir``."""
    line = json.dumps({"agent": agent, "model": model, "input_tokens": inp, "output_tokens": outp}) + "\n"
    with _LEDGER_LOCK:
        append(ledger_path(out_dir), line, root=out_dir)  # a link on the way is refused


class BudgetExceeded(Exception):
    """The run's ``max_tokens_total`` is spent."""
