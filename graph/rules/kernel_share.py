"""Kernel-time shares for the kernel-level causes: the time of one kernel family (a name pattern)
as a share of the profiled window (and :class:`KernelFamilyCause`, the base of the causes whose
signature that share is), from the tables the one pass made (the analyst's kernel time by
name, :attr:`ai4s_graph.tools.trace.onepass.NameCounter.kernel_us`; the verifier reader's,
:func:`ai4s_graph.tools.trace.onepass.kernel_time_by_name`). Pure functions of tables."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from .causes.base import Cause, Finding, ev, file_name
from .figures import Inputs, Reader, Rederived
from ...state import Claim, Tolerance


def family_us(kernel_us: dict[str, float] | None, include: re.Pattern[str],
              exclude: re.Pattern[str] | None = None) -> float:
    """Summed kernel time (µs) of the names ``include`` matches and ``exclude`` does not."""
    return sum(v for k, v in (kernel_us or {}).items()
               if include.search(k) and not (exclude is not None and exclude.search(k)))


def window_us(timeline: dict[str, Any] | None) -> float | None:
    """The GPU timeline's ``total_time`` (the profiled window, µs), or None when absent or zero."""
    row = (timeline or {}).get("total_time") or {}
    ms = row.get("time_ms") if isinstance(row, dict) else getattr(row, "time_ms", None)
    return float(ms) * 1e3 if ms else None


def share(part_us: float, total_us: float | None) -> float | None:
    """``part_us / total_us`` rounded to 4 digits and capped at 1 (kernels on several streams can
    overlap), or None without a window."""
    if not total_us:
        return None
    return round(min(1.0, part_us / total_us), 4)


class KernelFamilyCause(Cause):
    """A cause whose signature is the time of one kernel family: it fires when that family's kernel
    time is at least :attr:`min_share` of the profiled window (:func:`share` of :func:`family_us`
    over :func:`window_us`), and its finding's ``share`` is that fraction (an upper bound of what
    the lever saves). The analyst reads the one pass's kernel time by name (``rank["kernel_us"]``),
    the verifier its own reader's (``reader["kernel_us"]``) over its own timeline.

    Subclasses set :attr:`include` / :attr:`exclude` (the family), :attr:`context` (kernels named in
    the statement for context, e.g. what the control runs), :attr:`min_share`, :attr:`claim_id`,
    :attr:`metric`, :attr:`cause_id`, :attr:`lever_name` and :meth:`statement`."""

    include: ClassVar[re.Pattern[str]]
    exclude: ClassVar[re.Pattern[str] | None] = None
    context: ClassVar[re.Pattern[str] | None] = None
    min_share: ClassVar[float] = 1.0
    claim_id: ClassVar[str] = ""
    metric: ClassVar[str] = ""
    cause_id: ClassVar[str] = ""
    lever_name: ClassVar[str] = ""
    tolerance: ClassVar[Tolerance] = Tolerance(abs=0.02)
    """Two readers of one trace: the raw durations vs the reader's clipped ones (tf32-off measured
    0.9231 vs 0.9231; a clip moves a share by far less than 0.02)."""
    method: ClassVar[str] = "kernel-family time of the verifier reader's kernels over its own GPU timeline"

    def wants_name(self, name: str) -> bool:
        return bool(self.include.search(name) or (self.context is not None and self.context.search(name)))

    def statement(self, s: float, part_us: float, context_us: float) -> str:
        """The claim's statement for share ``s`` (``part_us`` of the family, ``context_us`` of the
        context kernels)."""
        raise NotImplementedError

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank:
            return []
        ku = x.rank.get("kernel_us") or {}
        part = family_us(ku, self.include, self.exclude)
        s = share(part, window_us(x.rank.get("timeline")))
        if s is None or s < self.min_share:
            return []
        ctx = family_us(ku, self.context) if self.context is not None else 0.0
        path = str(x.rank["path"])
        c = self.claim(self.claim_id, self.statement(s, part, ctx), self.metric, s, "fraction",
                       [ev("trace.kernel_time", f"{file_name(path)}: {self.cause_id} kernel time / total time", s,
                           path=path, rank=x.rank.get("rank"), family_us=round(part, 1))], 0.85)
        return [Finding((self.cause_id,), c, (self.lever(self.lever_name),), share=s)]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        rd = (r.rank or {}).get("reader") or {}
        if "kernel_us" not in rd:
            return Rederived(None, "no independent path for this triage claim", self.tolerance)
        return Rederived(share(family_us(rd["kernel_us"], self.include, self.exclude), window_us(rd.get("timeline"))),
                         self.method, self.tolerance)
