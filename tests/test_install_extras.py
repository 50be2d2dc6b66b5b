"""``pip install .`` without extras pulls no Jupyter, plotly or HolisticTraceAnalysis (issue 27: the
always-on ``traceinsight`` brought jupyterlab, plotly, debugpy, ... 153 packages in all against 75 now,
measured with ``pip install --dry-run --report``); those and psutil live in extras.

Offline: the base requirements of pyproject.toml are followed through the metadata of the installed
distributions (``importlib.metadata``: what pip would resolve for this environment), extras left out.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
HEAVY = re.compile(r"^(jupyter.*|notebook.*|ipykernel|ipython|debugpy|plotly|traceinsight|holistictraceanalysis|psutil)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(reqs: list[str]) -> tuple[set[str], set[str]]:
    seen, missing = set(), set()
    todo = [Requirement(r) for r in reqs]
    while todo:
        r = todo.pop()
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement, or another platform's
        n = _norm(r.name)
        if n in seen:
            continue
        seen.add(n)
        try:
            dist = md.distribution(r.name)
        except md.PackageNotFoundError:
            missing.add(n)
            continue
        todo += [Requirement(x) for x in dist.requires or []]
    return seen, missing


def test_base_install_pulls_no_jupyter_plotly_or_hta():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    base = cfg["project"]["dependencies"]
    assert not [r for r in base if HEAVY.match(_norm(Requirement(r).name))]
    seen, missing = _closure(base)
    if len(missing) > len(seen) // 2:
        pytest.skip(f"the base requirements are not installed here ({len(missing)} of {len(seen)} missing)")
    assert not sorted(n for n in seen if HEAVY.match(n)), "a base requirement pulls a heavy package"


def test_heavy_packages_are_in_extras():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {k: {_norm(Requirement(r).name) for r in v} for k, v in extras.items()}
    assert "traceinsight" in names["hta"] and "psutil" in names["hta"]  # traceinsight imports psutil undeclared
    assert "psutil" in names["bench"] and "psutil" in names["test"]
    assert "tracelens" in names["tracelens"]


def test_psutil_is_imported_only_by_bench():
    """The tool itself never needs psutil (only bench/ measures process RSS with it)."""
    users = [p.relative_to(REPO) for p in REPO.rglob("*.py")
             if not p.relative_to(REPO).parts[0] in ("tests", "bench", ".git")
             and re.search(r"^\s*(import psutil|from psutil)", p.read_text(errors="replace"), re.M)]
    assert users == []
