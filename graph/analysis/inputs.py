"""The run's inputs other than the traces and telemetry, as the nodes read them through the tools,
once per run: the training log's path, the job script, and the verifiers' own re-read of the log
(memoized in :func:`ai4s_graph.tools.trainlog.reread.reread_log`, so both verifiers share one read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .configuration import run_dir
from ..rules import registry
from ..rules.figures import Reader
from ...state import Claim
from ...tools.errors import Ai4sError
from ...tools.slurm.scriptparse import parse_job_script, read_job_script
from ...tools.telemetry import export, spans as tel_spans
from ...tools.trainlog.reread import reread_log


def log_path(state: Mapping[str, Any]) -> Path:
    """The training log of the run (``artifacts.train_log``, default ``train.log``)."""
    m = state.get("manifest")
    return run_dir(state) / ((m.artifacts.train_log if m is not None else None) or "train.log")


def job_script(state: Mapping[str, Any]) -> str:
    """The job script's text (the manifest's ``artifacts.job_script``), "" when there is none."""
    m = state.get("manifest")
    rel = m.artifacts.model_dump(mode="json").get("job_script") if m is not None else None
    return read_job_script(run_dir(state), rel)


def verifier_log(state: Mapping[str, Any]) -> dict[str, Any]:
    """The verifiers' own re-read of the training log (:func:`~ai4s_graph.tools.trainlog.reread.reread_log`
    with the causes' verifier patterns). Raises OSError when it cannot be read."""
    return reread_log(log_path(state), registry.log_patterns(verifier=True))


def cause_reader(state: Mapping[str, Any], claims: list[Claim]) -> Reader:
    """The verifier inputs the causes of ``claims`` declare they re-derive from
    (:attr:`~ai4s_graph.graph.rules.causes.base.Cause.verifier_needs`): the job script's text and
    fields, the telemetry series, the verifiers' re-read of the log (``{}`` when unreadable), and
    (``raw_telemetry``) each telemetry statistic a claim's evidence names over its ``spans``,
    re-derived from the raw samples into ``raw_stats[(metric, "avg", spans)]`` (:func:`raw_span_stats`)."""
    needs = registry.verifier_needs(claims)
    r = Reader(manifest=state.get("manifest"))
    if "job" in needs:
        r.job_script = job_script(state)
        r.job = parse_job_script(r.job_script)
    if "series" in needs:
        r.series = (((state.get("findings") or {}).get("telemetry") or {}).get("series")) or {}
    if "log" in needs:
        try:
            r.log = verifier_log(state)
        except OSError:
            r.log = {}
    if "raw_telemetry" in needs:
        r.raw_stats.update(raw_span_stats(state, claims))
    return r


def raw_span_stats(state: Mapping[str, Any], claims: list[Claim]) -> dict[tuple, float | None]:
    """``{(metric, "avg", spans): value}`` for every evidence item of ``claims`` naming ``spans``
    (:func:`~ai4s_graph.tools.telemetry.spans.claim_spans`), from the raw samples of the run's
    telemetry export (``--tsdb-url``'s ``/api/v1/export`` when the run has none): the verifier's
    own path, no PromQL (:func:`~ai4s_graph.tools.telemetry.spans.raw_spans_stat`). A value is
    None when the samples cannot be read or do not cover the spans."""
    wanted = {k for c in claims for k in tel_spans.claim_spans(e.args for e in c.evidence)}
    m = state.get("manifest")
    if not wanted or m is None:
        return {}
    try:
        files = [run_dir(state) / p for p in m.artifacts.telemetry]
        url = getattr(state.get("request"), "tsdb_url", None)
        series = ([s for f in files for s in export.load_export(f, m.gpu)] if files else
                  export.export_raw(url, ['{__name__=~"node_.*|rmsjob_info"}'], gpu_name=m.gpu) if url else [])
    except (Ai4sError, OSError):
        series = []
    out: dict[tuple, float | None] = {}
    for metric, key in wanted:
        try:
            out[(metric, "avg", key)] = tel_spans.raw_spans_stat(series, metric, m.jobid, key)[0] if series else None
        except Ai4sError:
            out[(metric, "avg", key)] = None
    return out
