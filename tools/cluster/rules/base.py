"""The rule registry of the report checker: :class:`Violation`, :class:`Rule` and the
:func:`rule` decorator the topic modules register their checks with.

A rule is a function of the parsed report (:class:`~ai4s_graph.tools.cluster.mdparse.Doc`) that
returns its violations; it never reads a file. Seed 003's report rules are numbered 1..62 in the
order of :data:`RULEBOOK` (docs/rules.md lists them with their checks and tests); a house rule
(stricter than the seed, kept because the product wants it) is a separate, named warning in
:data:`HOUSE` and never fails a report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

from ..mdparse import Block, Doc

SEED = "seed 003 (/work/shared/seeds/003_*.txt)"


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``rule`` (a :class:`Rule` id), 1-based ``line``, ``message``;
    ``severity`` is ``error`` (a seed rule) or ``warning`` (a house rule)."""

    rule: str
    line: int
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        tag = self.rule if self.severity == "error" else f"{self.rule} (house warning)"
        return f"{self.line}: [{tag}] {self.message}"


@dataclass(frozen=True)
class Rule:
    """A report rule: ``n`` (1..62, seed 003 order), ``id``, the seed ``section`` it comes from,
    ``text`` (the rule in one line), ``check`` and ``grade`` (``checked`` or ``partly: <what the
    check cannot see>``)."""

    n: int
    id: str
    section: str
    text: str
    check: Callable[[Doc], list[Violation]]
    grade: str = "checked"


RULEBOOK: list[Rule] = []
HOUSE: list[Rule] = []


def rule(n: int, rid: str, section: str, text: str, grade: str = "checked"):
    """Register ``fn(doc) -> [Violation]`` as seed 003 rule ``n``."""

    def deco(fn: Callable[[Doc], list[Violation]]):
        RULEBOOK.append(Rule(n, rid, section, text, fn, grade))
        return fn

    return deco


def house(rid: str, text: str):
    """Register ``fn(doc) -> [Violation]`` as a house rule (a warning, stricter than the seed)."""

    def deco(fn: Callable[[Doc], list[Violation]]):
        HOUSE.append(Rule(0, rid, "house rule", text, fn))
        return fn

    return deco


def sentences_of(blocks: list[Block]) -> Iterator[tuple[Block, str]]:
    """(block, sentence) of every sentence of ``blocks`` (prose: code spans replaced)."""
    for b in blocks:
        for s in b.sentences:
            yield b, s


def prose_sentences(doc: Doc) -> Iterator[tuple[Block, str]]:
    """Every prose sentence of the report (paragraphs and list items, TOC included)."""
    yield from sentences_of(doc.blocks)


def first_match(rx: re.Pattern[str], blocks: list[Block], field: str = "prose") -> Iterator[tuple[Block, re.Match[str]]]:
    for b in blocks:
        m = rx.search(getattr(b, field))
        if m:
            yield b, m


def words(s: str) -> str:
    """``s`` lowercased with emphasis markers dropped (for phrase search)."""
    return s.replace("**", "").replace("*", "").lower()
