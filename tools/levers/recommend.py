"""Lever recommendation for a diagnosed bottleneck: the model's own catalog first
(:mod:`.catalog`, ``catalogs/<model>.yaml``), then the generic rules (:mod:`.rules`). The
analysis graph's synthesizer writes them into the report; the optimizer reads them from there."""

from __future__ import annotations

from . import catalog as lever_tool
from .policy import LeverPolicy, policy_from
from .rules import LEVERS, lever_applies
from ...state import Bottleneck, LeverRecommendation, Manifest
from ..errors import Ai4sError


BUNDLED_MODELS = ("gnn",)
"""The project's own workloads (``workloads/train.py --model``) whose bundled catalog of the same
``model`` name the report reads: ``catalogs/gnn.yaml`` (the configuration of examples/perf-runs/92001),
because it BLOCKS levers (torch.compile and CUDA graphs: the double backward of the force loss,
seed 000 lesson 6) that the generic rules would otherwise propose. ``catalogs/vit.yaml`` blocks
nothing and holds 92002's loader settings only, so a ``vit`` job keeps the generic levers (measured:
mapping it moved the first lever of the bundled ViT controls from the generic list to its
experimental ``torch_compile``, which lesson 22 found neutral on GEMM-heavy ViT work)."""


def catalog_for_model(model: str | None) -> str | None:
    """The bundled lever catalog of a model family (``levers/<name>.yaml``), matched on the
    manifest's model name: HydraGNN/MLIP → ``hydragnn``, ORBIT-2 → ``orbit2``, the project's own
    workloads by their exact name (:data:`BUNDLED_MODELS`); None otherwise."""
    m = (model or "").lower()
    if "hydra" in m or "mlip" in m:
        return "hydragnn"
    if "orbit" in m:
        return "orbit2"
    if m in BUNDLED_MODELS:
        return m
    return None


GENERIC_CATALOG = "workload"
"""The catalog of the generic lever ids the causes name (``catalogs/workload.yaml`` =
``bench/accuracy/cases.py:LEVERS``): its ``implies`` / ``requires`` hold for every job."""


def policy_for(model_catalog: str | None) -> LeverPolicy:
    """The :class:`~.policy.LeverPolicy` for a job whose model maps to the bundled catalog
    ``model_catalog`` (``hydragnn``, ``gnn``, ... or None: the generic levers only), with the generic
    catalog's declarations. A catalog that cannot be read leaves its part out (as
    :func:`recommend_levers` does)."""
    def load(name: str):
        try:
            return lever_tool.load_catalog(lever_tool.bundled_catalog(name))
        except (Ai4sError, OSError):
            return None

    generic = load(GENERIC_CATALOG)
    model = load(model_catalog) if model_catalog else None
    return policy_from(generic, model, f"levers/{model_catalog}.yaml" if model is not None else None)


def lever_policy(manifest: Manifest) -> LeverPolicy:
    """The :class:`~.policy.LeverPolicy` of the job's model catalog (blocked levers, mechanisms,
    preconditions) for :func:`ai4s_graph.graph.rules.levers.choose`."""
    return policy_for(catalog_for_model(manifest.model))


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
