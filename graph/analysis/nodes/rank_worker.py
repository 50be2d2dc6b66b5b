"""The worker-process body of the ``trace_rank`` task: the one read of one rank trace and its
record in the shape the analyst reads. Kept apart from :mod:`.trace_analyst` so that a spawned
worker imports only the tools and the rules registry, not LangGraph (measured on the 2-core
machine: 0.26 s of CPU and 49 MiB for this module's imports against 0.71 s and 85 MiB for the
analyst's, per worker).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..schema import RankResult
from ...rules import registry
from ....tools.trace import onepass, tables as trace_tables
from ....tools.trace.models import TraceAnalysis

#: Keys of a rank result that only the verifier reads (the verifier's reader's tables): never part
#: of the analyst's findings.
VERIFIER_KEYS = ("reader", "reader_error", "raw_counts", "roofline_correlation", "steps_sampled")
#: Keys of a rank result kept out of the analyst's findings (the LLM's input, report.json): the
#: verifier's side and the CSV folder (listed under ``tables``).


def as_rank_result(rec: dict[str, Any], out_dir: str | None = None) -> RankResult:
    """An ``analyze_rank`` record in the shape the analyst reads: the engine's ``TraceAnalysis``
    fields on top, the per-rank record (timeline, comm kernels, steps, header facts) under
    ``stream``, plus ``label``, ``tables`` (kernel rows of the CSVs) and ``cross_checks``. With
    ``out_dir`` the rank's TraceLens-layout CSVs are written here, into
    ``<out_dir>/perf_report_csvs/rank<label>/`` (``csv_dir``; its large sheets never enter the
    graph state)."""
    rec = dict(rec)
    sheets = rec.pop("tracelens_sheets", None) or {}
    out = dict(rec.pop("analysis"))
    out["tables"] = rec.pop("tables", None)
    if out_dir is not None and out["tables"] is not None:
        out["csv_dir"] = _write_rank_csvs(Path(out_dir), out, rec.get("label") or str(rec.get("rank")), sheets)
    out["cross_checks"] = rec.get("cross_checks") or []
    out["stream"] = rec
    out["from_cache"] = rec.get("from_cache", False)
    out["rank"] = rec.get("rank")
    out["label"] = rec.get("label") or str(rec.get("rank"))
    out["path"] = rec.get("path")
    out["device_name"] = rec.get("device_name") or ""
    return out


def _write_rank_csvs(out_dir: Path, res: dict[str, Any], label: str, sheets: dict[str, Any]) -> str | None:
    """One rank's CSVs (:func:`ai4s_graph.tools.trace.tables.write_tables`, every TraceLens sheet);
    the folder relative to ``out_dir``, or None when it cannot be written (the report says so under
    missing)."""
    d = out_dir / "perf_report_csvs" / f"rank{label}"
    try:
        fields = {k: res[k] for k in TraceAnalysis.model_fields if k in res}
        trace_tables.write_tables(d, TraceAnalysis.model_validate(fields), {**(res.get("tables") or {}), **sheets})
    except (OSError, ValueError):
        return None
    return str(d.relative_to(out_dir))


def analyze_one(path: str, rank: int, cache_dir: str | None, label: str, cross_check: tuple[str, ...] = (),
                out_dir: str | None = None, annotate: bool = False) -> RankResult:
    """Worker-process body: the ONE read of one rank trace (:func:`ai4s_graph.tools.trace.onepass.read_rank`),
    counting the event names and raw text the registered causes read, with the optional
    ``cross_check`` tools, as a :class:`RankResult`; with ``out_dir`` the rank's CSVs are written
    there by this worker (:func:`as_rank_result`); with ``annotate`` (the run's single rank, read in
    the report's process) the pass also makes the annotated trace's copy (``read_rank``'s ``annotate``)."""
    got = onepass.read_rank(path, rank, cache_dir, label, wanted=registry.event_name_wanted,
                            raw_patterns=registry.raw_patterns(), cross_check=cross_check, annotate=annotate)
    res = as_rank_result(got["record"], out_dir)
    res["event_names"] = got["names"]
    res["kernel_us"] = got["kernel_us"]
    res["roofline_totals"] = got["roofline_totals"]
    res["name_dur_us"] = got.get("name_dur_us") or {}
    for k in ("step_accounting", "step_accounting_error"):
        if k in got:
            res[k] = got[k]
    for k in VERIFIER_KEYS:
        if k in got:
            res[k] = got[k]
    return res
