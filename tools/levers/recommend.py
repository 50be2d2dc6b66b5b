"""Lever recommendation for a diagnosed bottleneck: the model's own catalog first
(:mod:`.catalog`, ``catalogs/<model>.yaml``), then the generic rules (:mod:`.rules`). The
analysis graph's synthesizer writes them into the report; the optimizer reads them from there."""

from __future__ import annotations

from . import catalog as lever_tool
from .rules import LEVERS, lever_applies
from ...state import Bottleneck, LeverRecommendation, Manifest
from ..errors import Ai4sError


def catalog_for_model(model: str | None) -> str | None:
    """The bundled lever catalog of a model family (``levers/<name>.yaml``), matched on the
    manifest's model name: HydraGNN/MLIP → ``hydragnn``, ORBIT-2 → ``orbit2``; None otherwise."""
    m = (model or "").lower()
    if "hydra" in m or "mlip" in m:
        return "hydragnn"
    if "orbit" in m:
        return "orbit2"
    return None


def recommend_levers(b: Bottleneck, manifest: Manifest, vendor: str | None,
                     ranks: int) -> tuple[list[LeverRecommendation], str | None]:
    """Levers for the class and the catalog they came from.

    First the model's lever catalog (``levers/<model>.yaml``) levers that target this class and are
    ``candidate`` or ``experimental`` (never ``blocked`` or ``accepted-baked-in``), in catalog order;
    then the generic levers of :data:`.rules.LEVERS` (cost order) that fit the job
    (:func:`.rules.lever_applies`) and that the catalog does not block."""
    recs: list[LeverRecommendation] = []
    blocked: set[str] = set()
    cat_name = catalog_for_model(manifest.model)
    cat_path = None
    if cat_name:
        try:
            path = lever_tool.bundled_catalog(cat_name)
            cat = lever_tool.load_catalog(path)
            cat_path = f"levers/{path.name}"
            for lv in cat.levers:
                status = getattr(lv.status, "value", str(lv.status))
                if status in ("blocked", "accepted-baked-in"):
                    blocked.add(lv.name)
                elif b.klass in lv.targets:
                    recs.append(LeverRecommendation(name=lv.name, why=f"{lv.description} ({cat_path}, {status})",
                                                    claims=b.supporting_claims[:3]))
        except (Ai4sError, OSError):
            cat_path = None
    for n, w in LEVERS.get(b.klass, []):
        if n not in blocked and lever_applies(n, precision=manifest.precision, vendor=vendor, ranks=ranks):
            recs.append(LeverRecommendation(name=n, why=w, claims=b.supporting_claims[:3]))
    return recs, cat_path
