"""ai4s-graph: finds out why a GPU training job is slow, and makes it faster.

The project's top-level folders are sub-packages of this one namespace:

- ``ai4s_graph.graph``   (``graph/``):   the LangGraph state machines and their nodes;
- ``ai4s_graph.tools``   (``tools/``):   typed tools (slurm, tracelens, promql, fom, probe);
- ``ai4s_graph.state``   (``state/``):   pydantic models (manifest, claims, verdicts, loop state);
- ``ai4s_graph.prompts`` (``prompts/``): one prompt per LLM agent;
- ``ai4s_graph.sbatch``  (``sbatch/``):  job-script templates.

An installed wheel maps those folders into the package (see pyproject.toml). In a source
checkout (editable install, or running from the repository root) the folders sit beside
this one, so the package path is extended to the repository root below.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

_ROOT = Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "graph" / "__init__.py").is_file():
    if str(_ROOT) not in __path__:  # type: ignore[name-defined]
        __path__.append(str(_ROOT))  # type: ignore[name-defined]

REPO_ROOT: Path | None = _ROOT if (_ROOT / "pyproject.toml").is_file() else None
