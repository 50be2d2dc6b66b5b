"""The layer contract, read from the source with ``ast`` (nothing imported, nothing installed).

- Layers: ``cli`` -> ``graph`` -> ``tools`` -> ``state``, never upward; ``workloads`` (runs on the GPU
  nodes with torch only) imports nothing of the project; ``prompts``/``sbatch`` hold data.
- No import cycle between modules, lazy (function-level) imports included: a lazy import is how a
  cycle hides.
- No optional-import guard around the project's own modules (``try: from ..x import y / except
  ImportError``, or ``hasattr(<project module>, ...)``): a missing module is an error. Third-party
  optional extras (TraceLens, HTA, Postgres, torch) may be guarded.
- No non-test module over 700 lines: split by concern.

Each allow-list below names what is still being changed today and by whom; the lead empties them
at merge time, and then they must stay empty.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "ai4s_graph"
# folder -> layer rank: a module may import modules of its own rank or lower.
LAYERS = {"cli": 3, "graph": 2, "tools": 1, "state": 0}
# folders that are sub-packages of ai4s_graph but no layer: imports nothing of the project.
ISOLATED = ("workloads", "prompts", "sbatch")
MAX_LINES = 700

# ---- allow-lists (lead: empty these at merge time) -------------------------------------------
# Modules over MAX_LINES that their owners are splitting today.
SIZE_ALLOWED = {
}
# Optional-import guards around our own modules that their owners are removing today.
GUARD_ALLOWED = {
}
# Import cycles (as sorted module tuples) being untangled today.
CYCLE_ALLOWED: set[tuple[str, ...]] = set()


def _source_files() -> list[Path]:
    """Every non-test Python file of the repository (the package folders, bench/, scripts/)."""
    skip = {"tests", ".git", ".device", "build", "dist"}
    out = []
    for p in sorted(REPO.rglob("*.py")):
        rel = p.relative_to(REPO)
        if rel.parts[0] in skip or any(part.startswith(".") or part.endswith(".egg-info") for part in rel.parts):
            continue
        out.append(p)
    return out


def _module_name(p: Path) -> str | None:
    """The dotted module name of a package file (``graph/analysis/schema.py`` ->
    ``ai4s_graph.graph.analysis.schema``), or None for a file outside the package."""
    rel = p.relative_to(REPO)
    if rel.parts[0] == PACKAGE:
        parts = list(rel.parts)
    elif rel.parts[0] in LAYERS or rel.parts[0] in ISOLATED:
        parts = [PACKAGE, *rel.parts]
    else:
        return None
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {m: p for p in _source_files() if (m := _module_name(p))}


MODULES = _modules()


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    """Absolute project module names an ``ImportFrom`` in ``mod`` refers to (``from . import x``
    names the sub-module ``x`` when it exists, else the package)."""
    if node.level:
        base = mod.split(".") if is_pkg else mod.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
        return []
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        out.append(sub if sub in MODULES else target)
    return out


def _imports(mod: str, path: Path) -> list[tuple[str, int]]:
    """(imported project module, line) for every import anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom):
            out += [(t, node.lineno) for t in _resolve(mod, is_pkg, node)]
    return [(t if t in MODULES else _nearest(t), line) for t, line in out]


def _nearest(name: str) -> str:
    """The closest existing module of a dotted name (``a.b.Cls`` -> ``a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _room(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else None


GRAPH = {m: sorted({t for t, _ in _imports(m, p) if t and t != m}) for m, p in MODULES.items()}


def test_the_tree_is_read():
    # the contract means nothing if the walk finds nothing: every room has modules
    rooms = {_room(m) for m in MODULES}
    assert {"cli", "graph", "tools", "state", "workloads"} <= rooms
    assert "ai4s_graph.graph.analysis.schema" in MODULES
    # relative imports resolve: cli/run.py -> graph/analysis/configuration.py, a lazy one too
    assert "ai4s_graph.graph.analysis.configuration" in GRAPH["ai4s_graph.cli.run"]
    assert "ai4s_graph.graph.analysis.graph" in GRAPH["ai4s_graph.cli.run"]
    # ``from ....tools.trace import kineto`` names the sub-module, not the package
    assert "ai4s_graph.tools.trace.kineto" in GRAPH["ai4s_graph.graph.analysis.nodes.trace_verifier"]



def test_layers_never_import_upward():
    bad = []
    for m, p in MODULES.items():
        room = _room(m)
        for t, line in _imports(m, p):
            troom = _room(t)
            if not t or troom is None or troom == room:
                continue
            if room in ISOLATED:
                bad.append(f"{p.relative_to(REPO)}:{line}: {room}/ imports {t} ({room}/ imports nothing of the project)")
            elif room in LAYERS and (troom not in LAYERS or LAYERS[troom] > LAYERS[room]):
                bad.append(f"{p.relative_to(REPO)}:{line}: {room} imports {t} (upward: cli -> graph -> tools -> state)")
    assert not bad, "\n".join(bad)


def _cycles() -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[tuple[str, ...]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def _is_package_edge(a: str, b: str) -> bool:
    """A package and its own sub-module (``__init__`` re-exporting it): not a cycle of concerns."""
    return a.startswith(b + ".") or b.startswith(a + ".")


def test_no_import_cycles():
    found = []
    for comp in _cycles():
        if comp in CYCLE_ALLOWED:
            continue
        # a package __init__ re-exporting its sub-modules forms a component with them; only
        # cycles through at least two modules that are not package/sub-module of each other count
        mods = [m for m in comp if not any(_is_package_edge(m, o) and MODULES[m].name == "__init__.py"
                                           for o in comp if o != m)]
        if len(mods) > 1:
            found.append(" <-> ".join(comp))
    assert not found, "import cycles:\n" + "\n".join(found)


def _project_names(tree: ast.AST, mod: str, is_pkg: bool) -> set[str]:
    """Local names bound to project modules by imports (``from ...tools.trace import collectives``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _resolve(mod, is_pkg, node):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == PACKAGE}
    return names


def _guards(mod: str, is_pkg: bool, text: str, label: str) -> list[str]:
    """``label:line: what`` for every optional-import guard around a project module in ``text``
    (the source of module ``mod``)."""
    tree = ast.parse(text, filename=label)
    ours = _project_names(tree, mod, is_pkg)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            catches = set()
            for h in node.handlers:
                for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type] if h.type else []):
                    if isinstance(t, ast.Name):
                        catches.add(t.id)
            if not catches & {"ImportError", "ModuleNotFoundError"}:
                continue
            for sub in node.body:
                for n in ast.walk(sub):
                    if (isinstance(n, ast.ImportFrom) and _resolve(mod, is_pkg, n)) or \
                            (isinstance(n, ast.Import) and any(a.name.split(".")[0] == PACKAGE for a in n.names)):
                        out.append(f"{label}:{n.lineno}: import of our own module under "
                                   "'except ImportError'")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr":
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in ours:
                out.append(f"{label}:{node.lineno}: hasattr({node.args[0].id}, ...) on our own module")
    return out


def test_no_optional_import_guard_around_our_own_modules():
    bad = []
    for m, p in MODULES.items():
        if str(p.relative_to(REPO)) in GUARD_ALLOWED:
            continue
        bad += _guards(m, p.name == "__init__.py", p.read_text(), str(p.relative_to(REPO)))
    assert not bad, "\n".join(bad)


def test_the_guard_detector_finds_both_kinds():
    # a known answer: the two shapes of guard the issue names; the TraceLens extra is allowed
    src = ("from ...tools.trace import collectives\n"
           "try:\n    from ...tools.trace import missing\nexcept ImportError:\n    missing = None\n"
           "try:\n    import TraceLens\nexcept ImportError:\n    TraceLens = None\n"
           "ok = hasattr(collectives, 'rederive_claim')\n")
    found = _guards("ai4s_graph.graph.analysis.nodes.probe", False, src, "probe.py")
    assert found == ["probe.py:3: import of our own module under 'except ImportError'",
                     "probe.py:10: hasattr(collectives, ...) on our own module"]


def test_no_module_over_700_lines():
    big = {str(p.relative_to(REPO)): n for p in _source_files() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    bad = {k: n for k, n in big.items() if k not in SIZE_ALLOWED}
    assert not bad, f"split by concern (> {MAX_LINES} lines): {bad}"


def test_every_allow_list_entry_is_still_needed():
    # a stale entry would let the fault it excuses come back: remove an entry once it is fixed
    def lines(r: str) -> int:
        return len((REPO / r).read_text().splitlines()) if (REPO / r).exists() else 0

    stale = [f"SIZE_ALLOWED: {r} ({lines(r)} lines)" for r in sorted(SIZE_ALLOWED) if lines(r) <= MAX_LINES]
    for r in sorted(GUARD_ALLOWED):
        p = REPO / r
        m = _module_name(p)
        if not p.exists() or not _guards(m, p.name == "__init__.py", p.read_text(), r):
            stale.append(f"GUARD_ALLOWED: {r}")
    cycles = set(_cycles())
    stale += [f"CYCLE_ALLOWED: {c}" for c in sorted(CYCLE_ALLOWED) if c not in cycles]
    assert not stale, "remove from the allow-lists:\n" + "\n".join(stale)
