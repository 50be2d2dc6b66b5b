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
from ...tools.slurm.scriptparse import parse_job_script, read_job_script
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
    fields, the telemetry series, the verifiers' re-read of the log (``{}`` when unreadable)."""
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
    return r
