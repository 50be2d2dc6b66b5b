"""The step accounting (issue 34) as the host-side causes read it: the time budget of the profiled
steps (``rank["step_accounting"]``: :class:`~ai4s_graph.state.steps.StepBreakdown` as a dict, made
by the one pass, :mod:`ai4s_graph.tools.trace.onepass`) and its one claimable figure,
``steps.{where}.{category}.share``: the mean µs per profiled step the host spent in ``category``
(one of ``state/steps.py:HOST_CATEGORIES``) over the whole step (``where`` = ``host``)
or over the GPU-idle time only (``idle``), divided by the mean wall time of the profiled steps
(0..1).

The verifier re-derives the share from the verifier's own reader through a different method: the
host sampler (:func:`ai4s_graph.tools.trace.host_sampling.sample_steps`) paints every step on a grid
of cells from the verifier reader's tables and counts the cells per host state (``rank["steps_sampled"]``);
the tolerance is the sampler's own (cells holding an event boundary, as a share of the step),
at least :data:`MIN_TOL`.

Also the shared helpers of the host-side cause modules (``causes/allocator_churn.py``,
``d2h_param_copy.py``, ``python_outside_ops.py``, ``gc_pause.py``, ``checkpoint_io.py``; ``python_outside_ops``
declares the template, the others their exact state (:func:`figure`); every step cause re-derives by
the claim's metric): pure functions of the tables, no file is read.
"""

from __future__ import annotations

from typing import Any

from .causes.base import Cause, ev, file_name
from .figures import Figure, Inputs, Reader, Rederived
from ...state import Claim, Evidence, Tolerance

WHERE = {"host": "host_us", "idle": "idle_by_host_us"}
"""``where`` of the figure -> the per-step table of the accounting and of the sampler."""
MIN_TOL = 0.01
"""Smallest agreement of the two shares (one percent of the step): the engine's and the sampler's
split of a step into host states differ by the boundary cells only (host_sampling docstring)."""


def budget(x: Inputs) -> dict[str, Any] | None:
    """The rank's step accounting (a ``StepBreakdown`` dict) with at least one step, or None."""
    b = (x.rank or {}).get("step_accounting")
    return b if isinstance(b, dict) and b.get("steps") else None


def mean_wall_us(b: dict[str, Any]) -> float:
    """Mean wall time (µs) of the accounting's profiled steps (0.0 without steps)."""
    st = b.get("steps") or []
    return sum(float(s["wall_us"]) for s in st) / len(st) if st else 0.0


def share(b: dict[str, Any], where: str, category: str) -> float:
    """``steps.{where}.{category}.share`` of an accounting (see the module docstring); 0.0 when the
    steps have no wall time. Raises KeyError for an unknown ``where``."""
    key = WHERE[where]
    st = b.get("steps") or []
    wall = sum(float(s["wall_us"]) for s in st)
    return sum(float((s.get(key) or {}).get(category, 0.0)) for s in st) / wall if wall > 0 else 0.0


def median_count(b: dict[str, Any], key: str) -> float:
    """The per-step median of a structure count (``median_counts``; 0.0 when absent)."""
    return float((b.get("median_counts") or {}).get(key, 0.0))


def top_site(b: dict[str, Any], category: str) -> tuple[str, float]:
    """The Python call site with the most GPU-idle µs per step in ``category`` over the steps
    (``file:line (function)`` as the profiler names the innermost user frame: the function's
    ``def`` line) and those µs per step; ``("", 0.0)`` without stacks."""
    tot: dict[str, float] = {}
    st = b.get("steps") or []
    for s in st:
        for ss in s.get("idle_sites") or []:
            if ss.get("category") == category:
                tot[ss["site"]] = tot.get(ss["site"], 0.0) + float(ss["us"])
    if not tot:
        return "", 0.0
    site = max(tot, key=lambda k: tot[k])
    return site, tot[site] / len(st)


def where_text(b: dict[str, Any], site: str) -> str:
    """The claim's "where" clause: ``", at <site>"`` with a Python call site, else why there is none
    (``" (no Python stacks: ...)"``: the accounting's note, so the user knows to profile with stacks)."""
    if site:
        return f", at {site}"
    return f" (no Python stacks: {b.get('python_stack_note') or 'profile with with_stack=True to name the line'})"


def python_fn_share(x: Inputs, b: dict[str, Any], pattern: Any) -> tuple[dict[str, float], float, float]:
    """``(µs per name, µs per step, share of the step)`` of the ``python_function`` events whose name
    ``pattern`` (a compiled regex) matches: their summed ``dur`` from the one pass
    (``rank["name_dur_us"]``) over the accounting's profiled steps and mean wall time."""
    durs = {k: v for k, v in ((x.rank or {}).get("name_dur_us") or {}).items() if pattern.search(k)}
    wall, n = mean_wall_us(b), len(b.get("steps") or [])
    per_step = sum(durs.values()) / n if n else 0.0
    return durs, per_step, per_step / wall if wall > 0 else 0.0


def _make(x: Inputs, where: str, category: str) -> float | None:
    b = budget(x)
    return None if b is None or where not in WHERE else share(b, where, category)


def sampled_share(sampled: list[dict[str, Any]], where: str, category: str) -> tuple[float, float] | None:
    """``(share, tolerance share)`` of ``category`` from the verifier's sampled steps (µs over the
    cells' total time; tolerance: their boundary cells' time over the same), or None without steps."""
    key = WHERE[where]
    wall = sum(float(s["cells"]) * float(s["cell_us"]) for s in sampled)
    if not sampled or wall <= 0:
        return None
    v = sum(float((s.get(key) or {}).get(category, 0.0)) for s in sampled) / wall
    return v, sum(float(s["tolerance_us"]) for s in sampled) / wall


def _rederive(r: Reader, c: Claim, where: str, category: str) -> Rederived:
    sampled = (r.rank or {}).get("steps_sampled")
    got = sampled_share(sampled, where, category) if sampled and where in WHERE else None
    if got is None:
        return Rederived(None, "no sampled steps: the verifier's reader has no ProfilerStep window", Tolerance())
    v, tol = got
    return Rederived(v, f"host state sampled on {int(sampled[0]['cells'])} cells per step (verifier's reader)",
                     Tolerance(abs=max(MIN_TOL, tol)))


def figure(where: str = "{where}", category: str = "{category}") -> Figure:
    """The share figure, as the template :data:`FIGURE` or one exact state (a cause's own id)."""
    return Figure(f"steps.{where}.{category}.share", "fraction",
                  "mean µs per profiled step the host spent in a host state (whole step or GPU-idle time) over "
                  "the mean step wall time", "rank", Tolerance(abs=MIN_TOL), make=_make, rederive=_rederive)


FIGURE = figure()


def budget_evidence(b: dict[str, Any], path: str, rank: Any, where: str, category: str) -> Evidence:
    """The evidence of a share claim: what the accounting returned for it (µs per step, wall)."""
    key = WHERE[where]
    st = b["steps"]
    us = sum(float((s.get(key) or {}).get(category, 0.0)) for s in st) / len(st)
    return ev("trace.step_accounting", f"{file_name(path)}: {where} {category} µs per profiled step",
              {"us_per_step": round(us, 3), "wall_us": round(mean_wall_us(b), 3), "steps": len(st),
               "share": share(b, where, category)}, path=path, rank=rank, where=where, category=category)


class StepCause(Cause):
    """A cause read from the step accounting: its claim is a ``steps.{where}.{category}.share``
    (re-derived by the sampler, :data:`FIGURE`); subclasses set :attr:`where` and :attr:`category`."""

    where: str = "idle"
    category: str = "outside_ops"
    reads = ("step_accounting",)

    def share_claim(self, x: Inputs, b: dict[str, Any], cid: str, statement: str, extra: list[Evidence],
                    confidence: float = 0.8) -> Claim:
        """The claim of this cause's share of the step (its evidence: the accounting's numbers, then ``extra``)."""
        path, rank = str((x.rank or {}).get("path", "")), (x.rank or {}).get("rank")
        metric = f"steps.{self.where}.{self.category}.share"
        value = share(b, self.where, self.category)
        return self.claim(cid, statement, metric, value, "fraction",
                          [budget_evidence(b, path, rank, self.where, self.category), *extra], confidence)

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        """The sampler's share of the state the claim's metric names (every step cause shares
        :data:`FIGURE`, so the metric, not the module, says which state)."""
        m = FIGURE.pattern.match(c.metric)
        if m is None:
            return Rederived(None, f"not a step-accounting share: {c.metric}", Tolerance())
        return _rederive(r, c, m["where"], m["category"])


def missing(x: Inputs) -> str | None:
    """Why the one pass made no usable step accounting of this rank (its error, or no profiled
    step in it); None when it made one, or when the rank has none to speak of (older inputs)."""
    rank = x.rank or {}
    if "step_accounting_error" in rank:
        return str(rank["step_accounting_error"])
    if "step_accounting" in rank and budget(x) is None:
        return "no ProfilerStep window in the trace"
    return None

