"""Which files of a run directory are rank traces, by name alone (no import beyond the standard
library: the command line asks it before its own imports, :mod:`ai4s_graph.cli.early`)."""

from __future__ import annotations

#: Files the tool itself writes (reports, manifests, loop records): never a rank trace, even when
#: an output directory was put inside ``traces/``.
NOT_TRACES = frozenset({"report.json", "diff.json", "manifest.json", "foms.json", "run_info.json", "best_config.json",
                        "loop.json", "node_health_probe.json"})


def is_trace_name(name: str) -> bool:
    """Whether a file name may be a rank trace: ``*.json`` or ``*.json.gz``, not hidden
    (temporary files of an atomic write start with ``.``), not one of :data:`NOT_TRACES`."""
    return name.endswith((".json", ".json.gz")) and not name.startswith(".") and name.removesuffix(".gz") not in NOT_TRACES
