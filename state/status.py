"""The one-line node outcome every node ends with: ``STATUS=ok|partial|fail; reason=<short>``.

The contract comes from the primary seed's subagent rules: each agent writes a single line
``STATUS=ok|partial|fail; reason=<short>`` to stdout as its last line.
"""

from __future__ import annotations

import re
import unicodedata
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field, field_validator


class Outcome(str, Enum):
    """How a node ended: ``ok`` (all inputs present and used), ``partial`` (some input was
    missing or bad and the node said so), ``fail`` (the node produced nothing usable)."""

    ok = "ok"
    partial = "partial"
    fail = "fail"


_LINE = re.compile(r"^STATUS=(ok|partial|fail); reason=(\S(?:[^\n]*\S)?)$")
MAX_REASON_CHARS = 160
#: Unicode categories escaped by :func:`one_line`: controls (C0, DEL, C1: newline, ESC of terminal
#: sequences, NEL), format characters (bidirectional overrides that reorder what a reader sees)
#: and the line/paragraph separators that ``str.splitlines`` treats as line ends.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def one_line(value: Any, limit: int | None = None) -> str:
    """``str(value)`` as one line a reader (or a script reading ``STATUS=`` lines) cannot be fooled
    by: runs of blanks, tabs and line breaks become one space; any other control, format or
    line-separator character is written as an escape (``\\x1b``, ``\\u202e``); leading and
    trailing blanks are cut. ``limit``: at most that many characters (the last one ``…``), cut at
    the last blank within them when that keeps over half of them (never mid-word), else mid-word."""
    text = " ".join(str(value).split())
    if any(not ch.isprintable() for ch in text):
        out = []
        for ch in text:
            if unicodedata.category(ch) in _ESCAPED_CATEGORIES:
                o = ord(ch)
                out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
            else:
                out.append(ch)
        text = "".join(out)
    if limit is not None and len(text) > limit:
        head = text[: limit - 1]
        cut = head.rfind(" ")
        # at a word boundary (a reader never meets half a word), unless that drops over half the room
        text = (head[:cut] if cut > (limit - 1) // 2 else head).rstrip(" ;,:") + "…"
    return text


def one_line_model(model: Any) -> Any:
    """A copy of the pydantic ``model`` with :func:`one_line_all` applied to its fields (by alias,
    extra fields included), validated again. Raises ``pydantic.ValidationError`` only when the
    model would not validate from its own dump."""
    return type(model).model_validate(one_line_all(model.model_dump(by_alias=True)))


def one_line_all(value: Any) -> Any:
    """:func:`one_line` applied to every string inside ``value`` (dicts, lists, tuples; keys too);
    other values (enum members included) unchanged."""
    if isinstance(value, Enum):
        return value
    if isinstance(value, str):
        return one_line(value)
    if isinstance(value, dict):
        return {one_line_all(k): one_line_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(one_line_all(v) for v in value)
    return value


class StatusLine(BaseModel):
    """A parsed STATUS line.

    ``reason`` is short (at most 160 characters), on one line, and never empty.
    """

    status: Outcome
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)

    @field_validator("reason")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if any(unicodedata.category(ch) in _ESCAPED_CATEGORIES and ch != "\t" for ch in v):
            raise ValueError("reason must be on one line, without control characters")
        if v != v.strip():
            raise ValueError("reason must not start or end with blanks")
        return v

    @classmethod
    def make(cls, status: Outcome | str, reason: str) -> "StatusLine":
        """Build a STATUS line, ``reason`` made one line by :func:`one_line` (control characters
        escaped) and cut to 160 chars.

        Raises ``ValueError`` for an unknown status."""
        text = one_line(reason, MAX_REASON_CHARS) or "no reason given"
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


#: The most of a note's reason :func:`with_note` keeps (the rest of the 160 goes to the line's own).
MAX_NOTE_CHARS = 100


def with_note(line: StatusLine, note: StatusLine | None) -> StatusLine:
    """``line`` with ``note`` (the STATUS of a pass inside the same node, such as its LLM pass
    falling back to the deterministic result: ``trace_analyst LLM: ANTHROPIC_API_KEY is not set;
    deterministic result kept``) added when that note is not ``ok``: the worse outcome of the two
    (:func:`worst`), reason ``<line's reason>; <note's reason>``. The note's reason is cut to
    :data:`MAX_NOTE_CHARS` characters and the line's own reason so that the whole stays within
    :data:`MAX_REASON_CHARS` with the note whole (a cut part ends in ``…``). An ``ok`` or absent
    note gives ``line`` back unchanged. Never raises."""
    if note is None or note.status is Outcome.ok:
        return line
    tail = one_line(note.reason, MAX_NOTE_CHARS)
    head = one_line(line.reason, MAX_REASON_CHARS - len(tail) - 2)
    return StatusLine.make(worst(line.status, note.status), f"{head}; {tail}")


def worst(*statuses: Outcome | str) -> Outcome:
    """The worst of several outcomes (fail > partial > ok); ``ok`` for none."""
    order = {Outcome.ok: 0, Outcome.partial: 1, Outcome.fail: 2}
    out = Outcome.ok
    for s in statuses:
        s = Outcome(s)
        if order[s] > order[out]:
            out = s
    return out
