"""Which files of a run directory are rank traces, by name alone (no import beyond the standard
library: the command line asks it before its own imports, :mod:`ai4s_graph.cli.early`)."""

from __future__ import annotations

from pathlib import Path

#: Files the tool itself writes (reports, manifests, loop records): never a rank trace, even when
#: an output directory was put inside ``traces/``.
NOT_TRACES = frozenset({"report.json", "diff.json", "manifest.json", "foms.json", "run_info.json", "best_config.json",
                        "loop.json", "node_health_probe.json"})


def is_trace_name(name: str) -> bool:
    """Whether a file name may be a rank trace: ``*.json`` or ``*.json.gz``, not hidden
    (temporary files of an atomic write start with ``.``), not one of :data:`NOT_TRACES`."""
    return name.endswith((".json", ".json.gz")) and not name.startswith(".") and name.removesuffix(".gz") not in NOT_TRACES


def run_traces(run_dir: str | Path) -> list[str]:
    """The rank traces of a perf-run directory as the launcher adopts them: ``traces/*.json`` and
    ``traces/*.json.gz`` that are files with trace-like names (:func:`is_trace_name`), relative to
    ``run_dir``, sorted; [] when there are none (or no ``traces/`` folder)."""
    d = Path(run_dir)
    return sorted(str(p.relative_to(d)) for p in list(d.glob("traces/*.json")) + list(d.glob("traces/*.json.gz"))
                  if p.is_file() and is_trace_name(p.name))
