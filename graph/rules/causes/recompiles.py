"""torch.compile recompiling in the steady state (seed 001 T16): compile events inside the
profiled steps (Dynamo's ``convert_frame._compile`` / Inductor's ``compile_fx_inner`` python events
and ``compile_fx_inner (dynamo_timed)`` cpu ops), or ``Recompiling function`` / ``recompile_limit``
lines in the training log.

A compiled region's id ``frame/N`` with N past 0 (``Torch-Compiled Region: 1/1``) is NOT counted: it
names which cached graph of the frame runs, and a graph break's resume function gets such ids while
nothing recompiles in the steady state (bundled run ``graph-break``: 12 ``1/1`` regions in its 3
profiled steps, no compile event, no recompile line; that kind is ``graph_breaks``). Past ``recompile_limit`` (default 8) Dynamo runs the
function eagerly.

Detects from the trace's event-name counts and the log's line counts (the one read of each);
re-derived from the raw text of the trace and the verifier's own re-read of the log. Lever
``compile_dynamic_shapes`` (no saving model: its effect is not visible in one trace). Finding
``share``: the compile time in the profiled steps (the largest summed ``dur`` of one compile event
name, so nested compile events count once) per step of the trace over the step accounting's mean
wall time, at most 1; None when only the log shows the recompiles."""

from __future__ import annotations

import re

from .base import Cause, Finding, LeverSpec, ev, file_name
from .graph_breaks import time_share
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

COMPILE_EV = re.compile(r"_dynamo/convert_frame\.py\(\d+\): _compile\b|compile_fx_inner")
RECOMPILE_LOG = re.compile(r"Recompiling function|recompile_limit|cache_size_limit|torch\._dynamo hit config", re.I)
RAW_COMPILE = r"(?:[^\"]*_dynamo/convert_frame\.py\(\d+\): _compile\"|[^\"]*compile_fx_inner)"
"""The same events as :data:`COMPILE_EV`, as the raw text after ``"name": "`` (verifier side)."""
CLAIM_ID = "triage.t16.recompiles"


class Recompilation(Cause):
    """torch.compile recompiling in the steady state (seed 001 T16)."""

    seed = "seed 001 T16"
    causes = {"recompilation": "torch.compile recompiles inside the steady state (guards fail on changing shapes)"}
    analyst = "trace_analyst"
    reads = ("event_names", "log", "rank")
    figures = (Figure("recompile_events", "events", "compile events in the profiled steps plus recompile lines in "
                      "the log", "cause", Tolerance(), from_evidence=lambda returned: sum(
                          int(v) for v in returned if isinstance(v, (int, float)) and not isinstance(v, bool))),)
    constants = {}
    levers = (LeverSpec("compile_dynamic_shapes", "compile with torch.compile(dynamic=True) or "
                        "torch._dynamo.mark_dynamic(x, dim) on the varying dimension, or "
                        "pad shapes to a few buckets; TORCH_LOGS=recompiles names the failing guard"),)
    event_name_patterns = (COMPILE_EV,)
    raw_patterns = {"compile": RAW_COMPILE}
    log_patterns = {"recompile_lines": RECOMPILE_LOG}
    verifier_log_patterns = {"recompile_lines": RECOMPILE_LOG}
    verifier_needs = ("log",)

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank:
            return []
        n_trace = sum(v for k, v in x.event_names.items() if COMPILE_EV.search(k))
        n_log = int((x.log.get("counts") or {}).get("recompile_lines") or 0)
        if not n_trace and not n_log:
            return []
        path = str(x.rank["path"])
        log = {"log": x.log["path"]} if x.log.get("path") else {}
        rank = x.rank.get("rank")
        evidence = []
        if n_trace:
            evidence.append(ev("trace.event_names", f"{file_name(path)}: count /{COMPILE_EV.pattern}/", n_trace,
                               path=path, **log, rank=rank))
        if n_log:
            evidence.append(ev("log.grep", f"/{RECOMPILE_LOG.pattern}/", n_log, path=path, **log, rank=rank))
        c = self.claim(CLAIM_ID, f"torch.compile recompiled during the run ({n_trace} compile events in the profiled "
                       f"steps, {n_log} recompile lines in the log): past recompile_limit (default 8) Dynamo runs the "
                       "function eagerly (seed 001 T16)", "recompile_events", n_trace + n_log, "events", evidence, 0.8)
        steps = int(x.rank.get("n_steps") or 0)
        sh = time_share(x, COMPILE_EV, steps, outermost=True) if n_trace else None
        return [Finding(("recompilation",), c, (self.lever("compile_dynamic_shapes"),), share=sh)]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        n = ((r.rank or {}).get("raw_counts") or {}).get("compile")
        if n is None:
            return Rederived(None, "no independent path for this triage claim", Tolerance())
        has_log = any((e.args or {}).get("log") for e in c.evidence)
        n_log = int((r.log.get("counts") or {}).get("recompile_lines") or 0) if has_log else 0
        return Rederived(n + n_log, "raw-text count of compile events plus log grep", Tolerance())


CAUSE = Recompilation()
