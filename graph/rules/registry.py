"""The two registries of the rules room: every cause module (:data:`CAUSES`) and every claimable
figure (:data:`FIGURES`: the tools' figures of :mod:`.figures` plus each cause's own). The
analysts, the verifiers and the lever choice loop over these; nothing dispatches on a claim id.

Adding a cause: write ``graph/rules/causes/<module>.py`` (:mod:`.causes.base` says what it
declares), its test ``tests/causes/test_<module>.py``, and add ``<module>.CAUSE`` to :data:`CAUSES`
below (the order is the order of its claims in the report).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from .causes import (  # one per line: each cause module is one line here and one in CAUSES
    activation_checkpointing,
    allocator_churn,
    checkpoint_io,
    clocks_power,
    cpu_preprocess,
    d2h_param_copy,
    data_split,
    debug_apis,
    exposed_comm,
    gc_pause,
    gpu_contention,
    graph_breaks,
    host_syncs,
    kernel_launch,
    nchw_conv,
    oversubscription,
    pageable_h2d,
    per_param_optimizer,
    per_sample_loop,
    python_outside_ops,
    recompiles,
    roofline_memory,
    sdpa_math,
    shallow_prefetch,
    slow_link,
    tf32_off,
    worker_respawn,
)
from . import diagnosis as dg
from .causes.base import Cause, Finding
from .figures import CORE, Figure, Inputs, Reader, Rederived, find, supported
from ...state import Claim, Evidence, Tolerance, VerifiedClaim
from ...state.claimkit import verdict
from ...tools.levers import rules as lever_rules

CAUSES: tuple[Cause, ...] = (
    sdpa_math.CAUSE,
    tf32_off.CAUSE,
    nchw_conv.CAUSE,
    pageable_h2d.CAUSE,
    recompiles.CAUSE,
    graph_breaks.CAUSE,
    debug_apis.CAUSE,
    per_param_optimizer.CAUSE,
    host_syncs.CAUSE,
    roofline_memory.CAUSE,
    worker_respawn.CAUSE,
    shallow_prefetch.CAUSE,
    d2h_param_copy.CAUSE,
    allocator_churn.CAUSE,
    gc_pause.CAUSE,
    checkpoint_io.CAUSE,
    python_outside_ops.CAUSE,
    cpu_preprocess.CAUSE,
    per_sample_loop.CAUSE,
    kernel_launch.CAUSE,
    slow_link.CAUSE,
    exposed_comm.CAUSE,
    gpu_contention.CAUSE,
    data_split.CAUSE,
    oversubscription.CAUSE,
    clocks_power.CAUSE,
    activation_checkpointing.CAUSE,
)
"""Every cause module, in report order (trace causes, then telemetry causes)."""

FIGURES: tuple[Figure, ...] = CORE + tuple(f for c in CAUSES for f in c.figures)
"""Every claimable figure: the tools' (:data:`~.figures.CORE`) and the causes'."""

NO_PATH = "no independent path for this triage claim"


def causes_of(analyst: str) -> tuple[Cause, ...]:
    """The causes whose claims ``analyst`` makes (``trace_analyst`` / ``telemetry_analyst``)."""
    return tuple(c for c in CAUSES if c.analyst == analyst)


def detect(analyst: str, x: Inputs) -> list[Finding]:
    """Every finding of ``analyst``'s causes on these inputs, in registry order, each offering only
    the levers whose precondition holds on them (:meth:`~.causes.base.Cause.offer`)."""
    return [replace(f, levers=c.offer(x, *f.levers), explains=c.explains, supersedes=c.supersedes)
            for c in causes_of(analyst) for f in c.detect(x)]


def not_checked(analyst: str, x: Inputs) -> list[str]:
    """The ``not checked: ... needs ...`` lines of ``analyst``'s causes whose inputs are absent
    (:meth:`~.causes.base.Cause.not_checked`), in registry order."""
    return [line for c in causes_of(analyst) for line in c.not_checked(x)]


def cause_of_metric(metric: str) -> Cause | None:
    """The cause that claims ``metric`` (one of its :attr:`~.causes.base.Cause.figures`), or None."""
    for c in CAUSES:
        if find(metric, c.figures)[0] is not None:
            return c
    return None


def figure_of(metric: str) -> tuple[Figure | None, dict[str, str]]:
    """The registered figure of a claim metric and its template fields (:func:`~.figures.find`)."""
    return find(metric, FIGURES)


def rederive(c: Claim, r: Reader) -> Rederived:
    """A claim's value re-derived through the registry: the cause that claims its metric, else the
    metric's figure's own re-derivation; ``Rederived(None, ...)`` (inconclusive) when no entry has
    a path."""
    cause = cause_of_metric(c.metric)
    if cause is not None:
        return cause.rederive(c, r)
    fig, params = figure_of(c.metric)
    if fig is None or fig.rederive is None:
        return Rederived(None, NO_PATH if c.id.startswith("triage.") else None, Tolerance())
    return fig.rederive(r, c, **params)


def judge(c: Claim, verifier: str, value: Any, tol: Tolerance, method: str, note: str = "",
          evidence: list[Evidence] | None = None) -> VerifiedClaim:
    """The verdict on a claim given the re-derived ``value`` (:func:`ai4s_graph.state.claimkit.verdict`),
    its support judged by the registry (:func:`~.figures.supported`: the value returned by its
    evidence, or its figure's formula of what that evidence returned)."""
    return verdict(c, verifier, value, tol, method, note=note, evidence=evidence, supported=supported(c, FIGURES))


def supports(metric: str, klass: str) -> bool:
    """Whether a confirmed claim of ``metric`` supports class ``klass`` (the figure's ``supports``)."""
    fig, _ = figure_of(metric)
    return fig is not None and klass in fig.supports


def event_name_wanted(name: str) -> bool:
    """Whether the analysis pass counts trace events of this name (some cause, the class rules
    of :mod:`.diagnosis`, or a lever's precondition, ``tools/levers/rules.py:EVIDENCE``, reads it)."""
    return any(c.wants_name(name) for c in CAUSES) or dg.wants_name(name) or lever_rules.wants_name(name)


def raw_patterns() -> dict[str, str]:
    """Key -> regex (text after ``"name": "``) of the raw-text counts the verifier's causes read."""
    out: dict[str, str] = {}
    for c in CAUSES:
        out.update(c.raw_patterns)
    return out


def log_patterns(verifier: bool = False) -> dict[str, re.Pattern[str]]:
    """Key -> compiled pattern of the log counts the causes read: the analyst's (default) or the
    verifier's own (``verifier``)."""
    out: dict[str, re.Pattern[str]] = {}
    for c in CAUSES:
        out.update(c.verifier_log_patterns if verifier else c.log_patterns)
    return out


def verifier_needs(claims: list[Claim]) -> set[str]:
    """The verifier inputs (``log``, ``job``, ``series``, ``ranks``) the causes of these claims re-derive from."""
    out: set[str] = set()
    for c in claims:
        cause = cause_of_metric(c.metric)
        if cause is not None:
            out.update(cause.verifier_needs)
    return out


def lever_entries(findings: list[Finding]) -> list[dict[str, Any]]:
    """The findings' levers as the analysts record them (``[{"id", "lever", "why"}]``)."""
    return [e for f in findings for e in f.entries()]
