"""pyproject.toml lists every package folder of the tree, and only those, so a non-editable
install carries every module (a moved or renamed folder cannot silently drop out of the wheel)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _tree_packages(cfg: dict) -> set[str]:
    found: set[str] = set()
    for name, folder in cfg["tool"]["setuptools"]["package-dir"].items():
        for ini in (REPO / folder).rglob("__init__.py"):
            rel = ini.parent.relative_to(REPO / folder)
            found.add(name + ("" if rel == Path(".") else "." + ".".join(rel.parts)))
    return found


def test_pyproject_lists_every_package_folder():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(cfg["tool"]["setuptools"]["packages"])
    tree = _tree_packages(cfg)
    assert listed == tree, f"missing from pyproject: {sorted(tree - listed)}; not in the tree: {sorted(listed - tree)}"


def test_package_data_globs_match_files():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    dirs = cfg["tool"]["setuptools"]["package-dir"]
    for pkg, globs in cfg["tool"]["setuptools"]["package-data"].items():
        top = next(k for k in sorted(dirs, key=len, reverse=True) if pkg == k or pkg.startswith(k + "."))
        folder = REPO / dirs[top] / Path(*pkg[len(top) + 1:].split(".")) if pkg != top else REPO / dirs[top]
        assert folder.is_dir(), f"{pkg}: no folder {folder}"
        assert any(any(folder.glob(g)) for g in globs), f"{pkg}: no file matches {globs} in {folder}"
