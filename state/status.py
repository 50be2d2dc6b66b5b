"""The one-line node outcome every node ends with: ``STATUS=ok|partial|fail; reason=<short>``.

The contract comes from the primary seed's subagent rules: each agent writes a single line
``STATUS=ok|partial|fail; reason=<short>`` to stdout as its last line.
"""

from __future__ import annotations

import re
from enum import Enum

from pydantic import BaseModel, Field, field_validator


class Outcome(str, Enum):
    """How a node ended: ``ok`` (all inputs present and used), ``partial`` (some input was
    missing or bad and the node said so), ``fail`` (the node produced nothing usable)."""

    ok = "ok"
    partial = "partial"
    fail = "fail"


_LINE = re.compile(r"^STATUS=(ok|partial|fail); reason=(\S(?:[^\n]*\S)?)$")
MAX_REASON_CHARS = 160


class StatusLine(BaseModel):
    """A parsed STATUS line.

    ``reason`` is short (at most 160 characters), on one line, and never empty.
    """

    status: Outcome
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)

    @field_validator("reason")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v or "\r" in v:
            raise ValueError("reason must be on one line")
        if v != v.strip():
            raise ValueError("reason must not start or end with blanks")
        return v

    @classmethod
    def make(cls, status: Outcome | str, reason: str) -> "StatusLine":
        """Build a STATUS line, squeezing ``reason`` onto one line and cutting it to 160 chars.

        Raises ``ValueError`` for an unknown status."""
        text = " ".join(str(reason).split()) or "no reason given"
        if len(text) > MAX_REASON_CHARS:
            text = text[: MAX_REASON_CHARS - 1].rstrip() + "…"
        return cls(status=Outcome(status), reason=text)

    def format(self) -> str:
        """The line as printed: ``STATUS=partial; reason=no GPU events in trace``."""
        return f"STATUS={self.status.value}; reason={self.reason}"

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.format()

    @classmethod
    def parse(cls, line: str) -> "StatusLine":
        """Strictly parse one STATUS line (no leading/trailing text, exact separators).

        Raises ``ValueError`` naming what is wrong when the line is not of the form
        ``STATUS=ok|partial|fail; reason=<short>``."""
        if line is None:
            raise ValueError("no STATUS line")
        stripped = line.rstrip("\n")
        m = _LINE.match(stripped)
        if not m:
            raise ValueError(f"not a STATUS line: {stripped[:80]!r}")
        return cls(status=Outcome(m.group(1)), reason=m.group(2))

    @classmethod
    def last_in(cls, text: str) -> "StatusLine":
        """Parse the last non-empty line of an agent's output as its STATUS line.

        Raises ``ValueError`` when the output is empty or its last line is not a STATUS line."""
        lines = [ln for ln in (text or "").splitlines() if ln.strip()]
        if not lines:
            raise ValueError("empty output: no STATUS line")
        return cls.parse(lines[-1].strip())


def worst(*statuses: Outcome | str) -> Outcome:
    """The worst of several outcomes (fail > partial > ok); ``ok`` for none."""
    order = {Outcome.ok: 0, Outcome.partial: 1, Outcome.fail: 2}
    out = Outcome.ok
    for s in statuses:
        s = Outcome(s)
        if order[s] > order[out]:
            out = s
    return out
