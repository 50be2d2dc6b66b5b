"""pyproject.toml lists every package folder of the tree, and only those, so a non-editable
install carries every module (a moved or renamed folder cannot silently drop out of the wheel); the
folders the commands write into the current directory by default are in .gitignore."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

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


def _git_ignores(rel: str) -> bool:
    """Whether git ignores ``rel`` (a path under the repository root; it need not exist)."""
    cp = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", rel], capture_output=True, text=True)
    assert cp.returncode in (0, 1), cp.stderr  # 128: not a git checkout
    return cp.returncode == 0


def test_the_default_output_folders_of_the_commands_are_git_ignored(monkeypatch):
    """What the commands write into the current directory by default (``probe --out``,
    ``optimize --loop-root``, ``run``'s ``./ai4s-reports/<job>/``) never shows up as untracked
    files in a checkout: each default, as the CLI itself holds it, is in .gitignore."""
    import typer.main

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    from ai4s_graph.cli import app
    from ai4s_graph.cli.run import resolve_out_dir

    cmds = typer.main.get_command(app).commands
    defaults = {name: next(p.default for p in cmds[name].params if p.name == param)
                for name, param in (("probe", "out"), ("optimize", "loop_root"))}
    assert defaults == {"probe": Path("probe-out"), "optimize": Path("ai4s-loops")}
    monkeypatch.chdir(REPO)
    run_out = resolve_out_dir(None, None, "92001").relative_to(REPO)
    assert run_out == Path("ai4s-reports/92001")
    for folder, inside in ((defaults["probe"], "node_health_probe.json"), (defaults["optimize"], "loop-1/LOOP.md"),
                           (run_out, "report.md")):
        assert _git_ignores(f"{folder}/{inside}"), f"{folder}/ is not in .gitignore"
    assert not _git_ignores("probe-outcome.txt")  # the folder only
