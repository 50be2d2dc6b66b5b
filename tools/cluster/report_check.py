"""Checker of a cluster-evaluation report against seed 003's report rules (``eval-cluster --check``).

The report is parsed into its structure (:mod:`ai4s_graph.tools.cluster.mdparse`: sections,
tables, prose blocks, sentences with their numbers and units, by markdown-it-py) and each of the
62 rules of seed 003 (:mod:`ai4s_graph.tools.cluster.rules`, docs/rules.md) is a function of that
structure. A house rule stricter than the seed is a named warning, never a failure.

:func:`check_report` returns the errors (an empty list: the report passes);
:func:`check_report_all` also returns the warnings.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .mdparse import anchors, parse, slug  # noqa: F401  (re-exported)
from .rules import HOUSE_IDS, RULE_IDS, RULEBOOK, Violation, check_doc

RULES = ("structure",) + RULE_IDS
"""Every rule name an error :class:`Violation` can carry ("structure": not a report at all)."""
WARNINGS = HOUSE_IDS


def _structure(text: str) -> list[Violation]:
    doc = parse(text)
    if doc.title is None:
        return [Violation("structure", 1, "no '# ' title: not a report")]
    if not doc.top:
        return [Violation("structure", 1, "no '## ' section: not a report")]
    return []


def check_report_all(text: str, filename: str | None = None) -> list[Violation]:
    """Every error and house warning in report ``text`` (Markdown), in line order. ``filename``
    (the report's base name) adds the file-name rule. A text with no title or no section is
    reported as ``structure`` only."""
    v = _structure(text)
    if v:
        return v
    return check_doc(parse(text, filename))


def check_report(text: str, filename: str | None = None) -> list[Violation]:
    """The seed-rule violations of report ``text`` (no warnings); ``[]`` means it passes."""
    return [x for x in check_report_all(text, filename) if x.severity == "error"]


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        from ..errors import InputError

        raise InputError(f"{path}: not UTF-8 text: not a markdown report") from None


def check_file(path: str | Path) -> list[Violation]:
    """:func:`check_report` on a file. Raises FileNotFoundError when it does not exist and
    :class:`~ai4s_graph.tools.errors.InputError` when it is not UTF-8 text."""
    return check_report(_read(path), filename=Path(path).name)


def check_file_all(path: str | Path) -> list[Violation]:
    """:func:`check_report_all` on a file (errors and warnings)."""
    return check_report_all(_read(path), filename=Path(path).name)


__all__ = ["RULES", "WARNINGS", "RULEBOOK", "Violation", "anchors", "check_file", "check_file_all", "check_report",
           "check_report_all", "slug"]

if __name__ == "__main__":  # pragma: no cover
    bad = check_file(sys.argv[1])
    for x in bad:
        print(x)
    sys.exit(1 if bad else 0)
