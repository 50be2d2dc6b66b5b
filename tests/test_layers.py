"""The layer contract, read from the source with ``ast`` (nothing imported, nothing installed).

- Layers: ``cli`` -> ``graph`` -> ``tools`` -> ``state``, never upward; ``workloads`` (runs on the GPU
  nodes with torch only) imports nothing of the project; ``prompts``/``sbatch`` hold data.
- No import cycle between modules, lazy (function-level) imports included: a lazy import is how a
  cycle hides.
- No optional-import guard around the project's own modules (``try: from ..x import y / except
  ImportError``, or ``hasattr(<project module>, ...)``): a missing module is an error. Third-party
  optional extras (TraceLens, HTA, Postgres, torch) may be guarded.
- No non-test module over 700 lines: split by concern.
- The rules room (``graph/rules/``) reads no file and no environment, and imports only modules
  that do neither (transitively); every registered cause module has its test
  (``tests/causes/test_<module>.py``); no package cycle between ``graph/agents`` and
  ``graph/analysis``.
- End to end: a default ``run`` of the bundled 2-rank example opens each rank trace at most twice
  and the training log at most twice, across all its processes (an audit hook inherited by the
  worker processes counts the opens).

Each allow-list below names what is still being changed today and by whom; the lead empties them
at merge time, and then they must stay empty.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

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


# ---- the rules room ---------------------------------------------------------------------------

RULES_ROOM = "ai4s_graph.graph.rules"
#: Calls and names that touch the file system or the environment.
IO_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob", "exists",
            "is_file", "is_dir", "stat", "unlink", "mkdir", "getenv", "putenv", "listdir", "scandir", "walk"}
IO_NAMES = {"environ", "getenv"}
IO_MODULES = {"os", "io", "gzip", "pathlib", "subprocess", "shutil", "tempfile", "glob", "sqlite3", "socket",
              "urllib", "requests", "orjson", "ijson", "yaml"}


def _io_uses(text: str, label: str) -> list[str]:
    """``label:line: what`` for every file or environment access in a module's source: a call of
    :data:`IO_CALLS` (``open(...)``, ``p.read_text()``), a name of :data:`IO_NAMES` (``os.environ``),
    an import of a module of :data:`IO_MODULES`."""
    out = []
    for node in ast.walk(ast.parse(text, filename=label)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in IO_CALLS:
                out.append(f"{label}:{node.lineno}: calls {name}()")
        elif isinstance(node, ast.Attribute) and node.attr in IO_NAMES:
            out.append(f"{label}:{node.lineno}: reads .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in IO_NAMES:
            out.append(f"{label}:{node.lineno}: reads {node.id}")
        elif isinstance(node, ast.Import):
            out += [f"{label}:{node.lineno}: imports {a.name}" for a in node.names if a.name.split(".")[0] in IO_MODULES]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in IO_MODULES:
            out.append(f"{label}:{node.lineno}: imports {node.module}")
    return sorted(out, key=lambda w: int(w.split(":")[1]))


def _does_io(mod: str, seen: dict[str, list[str]]) -> list[str]:
    """Why a project module touches files or the environment, itself or through a project module
    it imports ([] when it does not)."""
    if mod in seen:
        return seen[mod]
    seen[mod] = []  # a cycle adds nothing
    p = MODULES[mod]
    why = _io_uses(p.read_text(), str(p.relative_to(REPO)))
    for t in GRAPH.get(mod, []):
        if t in MODULES and not t.startswith(mod + "."):
            sub = _does_io(t, seen)
            if sub:
                why.append(f"{p.relative_to(REPO)}: imports {t} ({sub[0]})")
    seen[mod] = why
    return why


def test_the_rules_room_reads_no_file_and_no_environment():
    rules = [m for m in MODULES if m == RULES_ROOM or m.startswith(RULES_ROOM + ".")]
    assert f"{RULES_ROOM}.registry" in rules and f"{RULES_ROOM}.causes.base" in rules
    seen: dict[str, list[str]] = {}
    bad = [w for m in sorted(rules) for w in _does_io(m, seen)[:1]]
    assert not bad, "the rules room must take tables, not read files or the environment:\n" + "\n".join(bad)


def test_the_io_detector_finds_each_kind():
    src = ("import os\nfrom pathlib import Path\nx = os.environ.get('A')\nt = Path('f').read_text()\n"
           "with open('f') as fh:\n    pass\ny = len([1])\n")
    assert _io_uses(src, "m.py") == ["m.py:1: imports os", "m.py:2: imports pathlib", "m.py:3: reads .environ",
                                     "m.py:4: calls read_text()", "m.py:5: calls open()"]
    # a module that imports a reader is not pure either (tools/trace/stream.py opens traces)
    assert _does_io("ai4s_graph.tools.perfmodel.roofline", {})
    assert _does_io("ai4s_graph.tools.perfmodel.datasheet", {}) == []


def _registered_causes() -> list[str]:
    """The cause modules listed in ``graph/rules/registry.py``'s ``CAUSES`` (``<module>.CAUSE``)."""
    tree = ast.parse((REPO / "graph" / "rules" / "registry.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "CAUSES":
            return [e.value.id for e in node.value.elts if isinstance(e, ast.Attribute) and e.attr == "CAUSE"]
    raise AssertionError("no CAUSES tuple in graph/rules/registry.py")


def test_every_cause_module_is_registered_and_has_its_test():
    modules = sorted(p.stem for p in (REPO / "graph" / "rules" / "causes").glob("*.py")
                     if p.stem not in ("__init__", "base"))
    registered = _registered_causes()
    assert sorted(registered) == modules, "every cause module is listed once in registry.CAUSES"
    missing = []
    for m in modules:
        t = REPO / "tests" / "causes" / f"test_{m}.py"
        if not t.is_file() or not re.search(rf"causes import {m}\b|causes\.{m}\b", t.read_text()):
            missing.append(f"graph/rules/causes/{m}.py: no tests/causes/test_{m}.py importing it")
    assert not missing, "\n".join(missing)


def test_no_package_cycle_between_agents_and_analysis():
    def pkg_imports(a: str, b: str) -> list[str]:
        return [f"{m} -> {t}" for m in MODULES if m.startswith(a + ".") for t in GRAPH[m] if t.startswith(b + ".")]

    a, b = "ai4s_graph.graph.agents", "ai4s_graph.graph.analysis"
    assert not (pkg_imports(a, b) and pkg_imports(b, a)), pkg_imports(a, b)


# ---- read once: the opens of a whole run -------------------------------------------------------

_AUDIT = """
import os, sys
_LOG = os.environ["AI4S_OPEN_LOG"]
_WATCH = tuple(os.environ["AI4S_OPEN_WATCH"].split(os.pathsep))
def _hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        p = os.fsdecode(args[0])
        if any(p.endswith(w) for w in _WATCH):
            with open(_LOG, "a") as fh:
                fh.write(f"{os.getpid()} {os.path.basename(p)}\\n")
sys.addaudithook(_hook)
"""


@pytest.mark.slow
def test_a_default_run_opens_each_rank_trace_and_the_log_at_most_twice(tmp_path):
    import os
    import subprocess
    import sys

    run = REPO / "examples" / "perf-runs" / "93004"
    watch = ["trace_rank0.json.gz", "trace_rank1.json.gz", "train.log"]
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_AUDIT)
    log = tmp_path / "opens.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(REPO)]), "AI4S_OPEN_LOG": str(log),
           "AI4S_OPEN_WATCH": os.pathsep.join(watch), "AI4S_STATE_DIR": str(tmp_path / "state")}
    for k in ("ANTHROPIC_API_KEY", "AI4S_TSDB_URL", "AI4S_TRACE_CACHE"):
        env.pop(k, None)
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", "--job", "93004", "--perf-run", str(run),
                         "--out", str(tmp_path / "out"), "--llm", "none", "--fresh"],
                        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    assert (tmp_path / "out" / "report.json").is_file()
    lines = log.read_text().splitlines()
    counts = {w: sum(1 for x in lines if x.split(" ", 1)[1] == w) for w in watch}
    assert len({x.split(" ", 1)[0] for x in lines}) >= 2, "the rank traces are read in worker processes"
    assert counts["trace_rank0.json.gz"] >= 1 and counts["trace_rank1.json.gz"] >= 1 and counts["train.log"] >= 1
    assert all(n <= 2 for n in counts.values()), counts
