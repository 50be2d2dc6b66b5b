"""The cause protocol: what one cause module declares and does (one check, one cause, one module).

A cause module defines one :class:`Cause` subclass and an instance ``CAUSE`` of it, listed once in
:data:`ai4s_graph.graph.rules.registry.CAUSES`. It declares:

- ``causes``: the cause id(s) it names (``bench/accuracy/cases.py:CAUSES`` where the benchmark has
  the id, so a report's cause can be scored by it) with what each means;
- ``analyst``: which analyst makes its claim (``trace_analyst`` or ``telemetry_analyst``; a cause
  that reads both the trace and telemetry runs in the trace analyst, one superstep after the
  telemetry analyst, so both are in the state);
- ``reads``: the registered figures and input tables it reads (:class:`~..figures.Inputs`
  attributes, or figure ids of :data:`~..figures.CORE`);
- ``figures``: the :class:`~..figures.Figure` (s) its claims carry as ``metric``, with unit,
  tolerance and, for a formula value, ``from_evidence``;
- ``constants``: every threshold as a :class:`Constant` with its source;
- ``levers``: the :class:`LeverSpec` (s) a finding may add, each with its precondition and saving
  model;
- ``event_names`` / ``raw_patterns`` / ``log_patterns`` / ``verifier_log_patterns``: what the one
  pass over each rank trace and the one read of the log must count for it (the tools count, the
  rules decide);
- ``detect(inputs) -> [Finding]``: the check, a pure function of tables;
- ``rederive(claim, reader) -> Rederived``: the verifier's independent re-derivation of its claim
  from the verifier's own readers (:class:`~..figures.Reader`);
- ``not_checked(inputs) -> [str]`` (optional): what it needs, said when its inputs are absent
  (``not checked: ... needs ...``: the report's "What was missing", never lowering STATUS).

Adding a cause = one module + its test (``tests/causes/test_<module>.py``) + one registry line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple

from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Evidence, Tolerance
from ....state.claimkit import claim as make_claim


class Constant(NamedTuple):
    """A rule constant and where it comes from (seed file + section, datasheet, paper, measurement)."""

    value: float
    source: str


@dataclass(frozen=True)
class LeverSpec:
    """A lever a cause may add: its name (a lever of ``tools/levers/``), what it does, when it
    applies (``when(inputs)``: the precondition; None: always) and its saving model (``saving``:
    the name of the model in :mod:`ai4s_graph.tools.levers.impact` that estimates it, the lever's
    own name when that module models it, or a callable ``(trace, roofline) -> LeverImpact``)."""

    name: str
    what: str
    when: Callable[[Inputs], bool] | None = None
    saving: str | Callable[..., Any] | None = None


@dataclass(frozen=True)
class Lever:
    """A lever a finding adds to the report, with its reason (the :class:`LeverSpec` it instantiates)."""

    name: str
    why: str


@dataclass(frozen=True)
class Finding:
    """What a cause found: the cause id(s), the claim (its evidence holds the numbers) and the
    lever(s) it adds when a verifier confirms the claim."""

    causes: tuple[str, ...]
    claim: Claim
    levers: tuple[Lever, ...]
    explains: str | None = None
    """For a class-level cause (:attr:`Cause.explains`): the bottleneck class it explains; the
    verdict names it only when that is the verdict's class (set by ``registry.detect``)."""
    supersedes: tuple[str, ...] = ()
    """The cause ids whose readings this finding explains (:attr:`Cause.supersedes`, set by
    ``registry.detect``): once this finding is confirmed, the verdict does not name them."""
    share: float | None = None
    """The measured share (0..1) of the profiled step time this cause costs (the time the control
    would not spend), from the claim's own evidence; None when the cause's cost is not measurable
    from the inputs. The verdict names the confirmed cause with the largest share first."""

    def entries(self) -> list[dict[str, Any]]:
        """``[{"id", "lever", "why", "causes", "share"}]``: the findings' lever list as the
        analysts record it (one entry per lever; a finding without a lever still gives one entry
        with ``lever`` None, so its cause can be named)."""
        base = {"id": self.claim.id, "causes": list(self.causes), "share": self.share, "explains": self.explains,
                "supersedes": list(self.supersedes)}
        if not self.levers:
            return [{**base, "lever": None, "why": ""}]
        return [{**base, "lever": lv.name, "why": lv.why} for lv in self.levers]


class Cause:
    """Base of a cause module's class (see the module docstring). Subclasses set the class
    attributes and implement :meth:`detect` and :meth:`rederive`."""

    seed: ClassVar[str] = ""
    causes: ClassVar[dict[str, str]] = {}
    analyst: ClassVar[str] = "trace_analyst"
    reads: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[tuple[Figure, ...]] = ()
    constants: ClassVar[dict[str, Constant]] = {}
    levers: ClassVar[tuple[LeverSpec, ...]] = ()
    event_names: ClassVar[tuple[str, ...]] = ()
    event_name_patterns: ClassVar[tuple[re.Pattern[str], ...]] = ()
    raw_patterns: ClassVar[dict[str, str]] = {}
    log_patterns: ClassVar[dict[str, str]] = {}
    verifier_log_patterns: ClassVar[dict[str, str]] = {}
    verifier_needs: ClassVar[tuple[str, ...]] = ()
    explains: ClassVar[str | None] = None
    """A class-level cause (what a class's own measurement shows, e.g. memory-bound kernels) sets
    the class it explains: the verdict names it only when the job has that class, so a few
    bandwidth-bound kernels in a communication-bound job are a claim, not the job's cause."""

    supersedes: ClassVar[tuple[str, ...]] = ()
    """Cause ids of other modules whose readings this cause explains (another process on the GPU
    explains its power-capped clocks): a confirmed finding of this cause keeps them from being named."""

    def detect(self, x: Inputs) -> list[Finding]:
        """The findings on these inputs ([] when the cause is absent or its inputs are missing)."""
        raise NotImplementedError

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        """The claim's value re-derived by a path independent of the analyst's."""
        raise NotImplementedError

    def not_checked(self, x: Inputs) -> list[str]:
        """``not checked: <check>: needs ...`` lines (issue 28) when the inputs this cause needs are
        absent, so a check that could not run never reads as a clean bill; [] when it could run
        (the default: a cause whose inputs are always there)."""
        return []

    @property
    def name(self) -> str:
        """The cause module's name (``sdpa_math``): its test is ``tests/causes/test_<name>.py``."""
        return type(self).__module__.rsplit(".", 1)[-1]

    # ---- helpers for subclasses -------------------------------------------------------------

    def claim(self, cid: str, statement: str, metric: str, value: Any, unit: str, evidence: list[Evidence],
              confidence: float) -> Claim:
        """A claim of this cause's analyst (:func:`ai4s_graph.state.claimkit.claim`)."""
        return make_claim(cid, self.analyst, statement, metric, value, unit, evidence, confidence)

    def lever(self, name: str, why: str | None = None) -> Lever:
        """A :class:`Lever` of one of this cause's :attr:`levers` (its ``what`` unless ``why``).
        Raises KeyError for a lever the module does not declare."""
        spec = next((s for s in self.levers if s.name == name), None)
        if spec is None:
            raise KeyError(f"{type(self).__name__} declares no lever {name!r}")
        return Lever(name, spec.what if why is None else why)

    def offer(self, x: Inputs, *levers: Lever) -> tuple[Lever, ...]:
        """The levers whose precondition (:attr:`LeverSpec.when`) holds on these inputs."""
        specs = {s.name: s for s in self.levers}
        return tuple(lv for lv in levers if specs[lv.name].when is None or specs[lv.name].when(x))

    def saving_models(self) -> dict[str, Callable[..., Any]]:
        """Lever name -> its own saving model, for the levers that declare a callable one."""
        return {s.name: s.saving for s in self.levers if callable(s.saving)}

    def wants_name(self, name: str) -> bool:
        """Whether the analysis pass must count trace events of this name for this cause."""
        return name in self.event_names or any(p.search(name) for p in self.event_name_patterns)


def raw_count(r: Reader, key: str, method: str) -> Rederived:
    """A claim's count re-derived as the raw-text count ``key`` of the claim's rank trace (the
    verifier pass's :class:`~ai4s_graph.tools.trace.onepass.RawCounter`, no JSON parse), exact
    tolerance; inconclusive (value None) when the reader has no such count."""
    n = ((r.rank or {}).get("raw_counts") or {}).get(key)
    if n is None:
        return Rederived(None, "no independent path for this triage claim", Tolerance())
    return Rederived(n, method, Tolerance())


def ev(tool: str, query: str, returned: Any, **args: Any) -> Evidence:
    """One :class:`~ai4s_graph.state.Evidence` (tool, query, what it returned, its arguments)."""
    return Evidence(tool=tool, query=query, returned=returned, args=args)


def file_name(path: str) -> str:
    """The last part of a path (``/run/traces/trace_rank0.json.gz`` -> ``trace_rank0.json.gz``),
    as evidence queries name a trace; pure text (the rules room touches no file)."""
    return re.split(r"[\\/]", str(path))[-1]
