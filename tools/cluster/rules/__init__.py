"""Seed 003's 62 report rules as functions of the parsed report, and the house warnings.

:data:`RULEBOOK` holds the rules in seed order (``Rule.n`` 1..62), :data:`HOUSE` the house rules
(named warnings, stricter than the seed). :func:`check_doc` runs them all. docs/rules.md lists
every rule with its check and its tests.
"""

from __future__ import annotations

from . import compute, findings, header, network, prose, storage, toc_env  # noqa: F401  (register the rules)
from .base import HOUSE, RULEBOOK, Rule, Violation
from ..mdparse import Doc

RULEBOOK.sort(key=lambda r: r.n)
RULE_IDS = tuple(r.id for r in RULEBOOK)
HOUSE_IDS = tuple(r.id for r in HOUSE)


def check_doc(doc: Doc, *, house_rules: bool = True) -> list[Violation]:
    """Every violation of the seed rules (``severity='error'``) and, with ``house_rules``, every
    house warning (``severity='warning'``) in ``doc``, in line order."""
    out = [x for r in RULEBOOK for x in r.check(doc)]
    if house_rules:
        out += [x for r in HOUSE for x in r.check(doc)]
    return sorted(set(out), key=lambda x: (x.line, x.rule, x.message))


__all__ = ["RULEBOOK", "HOUSE", "RULE_IDS", "HOUSE_IDS", "Rule", "Violation", "check_doc"]
