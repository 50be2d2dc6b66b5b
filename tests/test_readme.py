"""README.md against the tree it describes: the list of lever catalogs names every catalog file
bundled in ``tools/levers/catalogs/`` (a catalog added there must be named, with what it holds)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def _catalog_list() -> str:
    """The README's sentence that lists the catalogs: from ``Catalogs (`tools/levers/catalogs/*.yaml`):``
    to its full stop, on one line."""
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"Catalogs \(`tools/levers/catalogs/\*\.yaml`\): (.*?\))\.(?: |$)", text)
    assert m, "README.md has no 'Catalogs (`tools/levers/catalogs/*.yaml`): ...' list"
    return m.group(1)


def test_the_readme_names_every_bundled_lever_catalog():
    files = sorted(REPO.glob("tools/levers/catalogs/*.yaml"))
    stems = [f.stem for f in files]
    assert "workload" in stems, stems
    for f in files:  # the name the README gives is the catalog's own model name
        assert yaml.safe_load(f.read_text(encoding="utf-8"))["model"] == f.stem, f
    listed = _catalog_list()
    named = [n for n in re.findall(r"`([^`]+)`", listed) if "/" not in n]  # a path in a description is not a name
    assert sorted(named) == stems, named
    # each entry says what it holds (a parenthesis follows it, or a group sharing one)
    assert "`workload` (the `bench/accuracy` workload, one lever per injected cause;" in listed
