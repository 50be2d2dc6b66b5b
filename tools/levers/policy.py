"""What a workload's lever catalog says about levers that are not its own: the levers it blocks,
the mechanisms those block, and every lever's declared mechanisms and preconditions, in one
:class:`LeverPolicy` the lever choice (``graph/rules/levers.py``, which reads no file) applies.

Sources, merged (a lever id's declarations are the union of its declarations): the generic levers'
:data:`~.rules.TRAITS`, the generic catalog ``catalogs/workload.yaml`` (the lever ids of the causes),
the model's own catalog (:func:`~.recommend.catalog_for_model`; :func:`~.recommend.policy_for` reads
them: this module reads no file, so the rules room may import it). A lever of the model's catalog that
is ``blocked`` blocks its own name and every mechanism it ``implies`` (seed 000 lesson 6: HydraGNN's
``torch_compile_e3nn`` fails with "torch.compile with aot_autograd does not currently support double
backward", and every torch.compile mode, CUDA graphs through ``reduce-overhead`` included, goes
through AOT Autograd)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ...state.loop import Catalog, LeverStatus
from .rules import EVIDENCE, MECHANISMS, TRAITS


@dataclass(frozen=True)
class LeverPolicy:
    """The catalog's word on levers (module doc). ``catalog``: the model catalog's report name
    (``levers/<model>.yaml``) or None; ``blocked``: lever -> why (its verbatim error and lessons);
    ``implies`` / ``requires``: lever -> mechanism ids (:data:`~.rules.MECHANISMS`) / evidence
    family ids (:data:`~.rules.EVIDENCE`)."""

    catalog: str | None = None
    blocked: Mapping[str, str] = field(default_factory=dict)
    implies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    requires: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def blocked_mechanisms(self) -> dict[str, str]:
        """Mechanism -> the blocked lever that blocks it (the first in catalog order)."""
        out: dict[str, str] = {}
        for lever in self.blocked:
            for m in self.implies.get(lever, ()):
                out.setdefault(m, lever)
        return out

    def why_blocked(self, lever: str) -> str | None:
        """Why the catalog rules ``lever`` out, or None when it does not: the lever itself is
        blocked, or it implies a mechanism a blocked lever implies."""
        where = self.catalog or "the lever catalog"
        if lever in self.blocked:
            return f"{where} blocks it ({self.blocked[lever]})"
        mech = self.blocked_mechanisms()
        for m in self.implies.get(lever, ()):
            if m in mech:
                by = mech[m]
                return f"it implies {m}, which {where} blocks ({self.blocked[by]})"
        return None

    def missing_precondition(self, lever: str, counts: Mapping[str, int] | None) -> str | None:
        """Why ``lever``'s precondition fails on the trace's event-name counts ``counts`` (name ->
        count, every rank's, as the one pass counted them), or None when it holds. ``counts`` None
        (no trace read) checks nothing: None."""
        need = self.requires.get(lever, ())
        if not need or counts is None:
            return None
        for fam in need:
            pat, meaning = EVIDENCE[fam]
            if not any(n > 0 and pat.search(name) for name, n in counts.items()):
                return f"its precondition, {meaning}, is absent: no such event in the trace"
        return None


def _merge(into_implies: dict[str, tuple[str, ...]], into_requires: dict[str, tuple[str, ...]],
           cat: Catalog) -> None:
    for lv in cat.levers:  # a union: a catalog adds to a lever id's declarations, never erases them
        into_implies[lv.name] = tuple(dict.fromkeys((*into_implies.get(lv.name, ()), *lv.implies)))
        into_requires[lv.name] = tuple(dict.fromkeys((*into_requires.get(lv.name, ()), *lv.requires)))


def policy_from(generic: Catalog | None, model: Catalog | None, catalog_name: str | None = None) -> LeverPolicy:
    """The :class:`LeverPolicy` of already loaded catalogs (module doc for the order). Raises
    ``ValueError`` for a mechanism or evidence id no table defines."""
    implies = {k: tuple(v.get("implies", ())) for k, v in TRAITS.items()}
    requires = {k: tuple(v.get("requires", ())) for k, v in TRAITS.items()}
    blocked: dict[str, str] = {}
    for cat in (generic, model):
        if cat is not None:
            _merge(implies, requires, cat)
    if model is not None:
        for lv in model.levers:
            if lv.status == LeverStatus.blocked:
                errs = [e.error for e in lv.evidence if e.error]
                lessons = sorted({n for e in lv.evidence for n in e.lessons})
                blocked[lv.name] = (f"{lv.name}: {errs[0] if errs else 'blocked'}"
                                    + (f"; lesson {', '.join(map(str, lessons))}" if lessons else ""))
    check_ids(implies, requires)
    return LeverPolicy(catalog=catalog_name, blocked=blocked, implies=implies, requires=requires)


def check_ids(implies: Mapping[str, Iterable[str]], requires: Mapping[str, Iterable[str]]) -> None:
    """Raise ``ValueError`` naming the lever when it implies a mechanism not in
    :data:`~.rules.MECHANISMS` or requires an evidence family not in :data:`~.rules.EVIDENCE`."""
    for lever, ms in implies.items():
        for m in ms:
            if m not in MECHANISMS:
                raise ValueError(f"lever {lever}: implies {m!r}, not one of {sorted(MECHANISMS)}")
    for lever, fs in requires.items():
        for f in fs:
            if f not in EVIDENCE:
                raise ValueError(f"lever {lever}: requires {f!r}, not one of {sorted(EVIDENCE)}")
