"""Graph breaks inside a compiled model (seed 001 T15/T16; issue 24): Dynamo splits a frame at each
untraceable call into a compiled graph plus a resume function compiled on its own, so one step runs
several ``Torch-Compiled Region: <frame>/<n>`` regions (torch/_dynamo/convert_frame.py names them)
with eager Python between them instead of one graph. Recompiling is another kind
(:mod:`.recompiles`): there compile events run inside the steps; here nothing compiles, the step
just enters many regions.

Detects from the trace's event-name counts and the rank's step count; re-derived from the raw-text
count of the region events in the same trace. Lever ``remove_graph_breaks``. Finding ``share``: the
summed duration of the ``Torch-Compiled Region`` events per profiled step (the trace's step count)
over the step accounting's mean wall time, at most 1: an upper bound, the step time inside the
fragmented graphs whose breaks cost the launches and guards between them; None without the
accounting."""

from __future__ import annotations

import re

from .base import Cause, Constant, Finding, LeverSpec, ev, file_name, raw_count
from ..step_budget import budget, mean_wall_us
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

REGION = re.compile(r"^Torch-Compiled Region: \d+/\d+$")
RAW_REGION = r"Torch-Compiled Region: \d+/\d+\""
MIN_REGIONS_PER_STEP = 3
CLAIM_ID = "triage.graph_breaks"


def time_share(x: Inputs, pattern: re.Pattern[str], steps: int, outermost: bool = False) -> float | None:
    """The summed ``dur`` (the one pass's ``rank["name_dur_us"]``) of the events whose name
    ``pattern`` matches, per step of the trace (``steps``), over the step accounting's mean wall
    time, at most 1.0; with ``outermost`` the largest of the names' sums only (nested events of
    different names, e.g. a compile and its inner compile, counted once). None without the
    accounting, the durations or steps."""
    b = budget(x)
    durs = [v for k, v in ((x.rank or {}).get("name_dur_us") or {}).items() if pattern.search(k)]
    wall = mean_wall_us(b) if b is not None else 0.0
    if not durs or steps <= 0 or wall <= 0:
        return None
    return min(1.0, (max(durs) if outermost else sum(durs)) / steps / wall)


class GraphBreaks(Cause):
    """A compiled model split into several graphs a step by graph breaks."""

    seed = "seed 001 T15/T16; issue 24"
    causes = {"graph-break": "graph breaks inside the compiled model: many small compiled fragments a step with eager "
                             "Python between them"}
    analyst = "trace_analyst"
    reads = ("event_names", "rank")
    figures = (Figure("compiled_regions", "regions", "Torch-Compiled Region events in one rank trace", "cause",
                      Tolerance()),)
    constants = {"MIN_REGIONS_PER_STEP": Constant(
        MIN_REGIONS_PER_STEP,
        "measurement on the bundled runs: 6 compiled regions a step on graph-break (a break in each of 5 hidden "
        "layers, 2.06x its control) vs 1 a step on compiled-no-breaks, compile-dynamic and recompile; 3 leaves room "
        "for a job that compiles two callables (model and loss) on purpose")}
    levers = (LeverSpec("remove_graph_breaks", "find the breaks with torch._dynamo.explain(model)(inputs) or "
                        "TORCH_LOGS=graph_breaks and remove the untraceable calls (.item(), print, data-dependent "
                        "control flow) so the model compiles to one graph; fullgraph=True makes a break an error"),)
    event_name_patterns = (REGION,)
    raw_patterns = {"compiled_regions": RAW_REGION}

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank:
            return []
        steps = int(x.rank.get("n_steps") or 0)
        by_name = {k: v for k, v in x.event_names.items() if REGION.match(k)}
        n = sum(by_name.values())
        if steps <= 0 or n < MIN_REGIONS_PER_STEP * steps:
            return []
        frames = sorted({k.rsplit(" ", 1)[-1].split("/")[0] for k in by_name})
        path = str(x.rank["path"])
        c = self.claim(CLAIM_ID, f"{n} compiled regions in {steps} profiled steps ({n / steps:.1f} a step, frames "
                       f"{', '.join(frames)}) instead of one: graph breaks split the compiled model, eager Python "
                       "runs between the fragments", "compiled_regions", n, "regions",
                       [ev("trace.event_names", f"{file_name(path)}: count /{REGION.pattern}/", n, path=path,
                           rank=x.rank.get("rank"), n_steps=steps)], 0.8)
        return [Finding(("graph-break",), c, (self.lever("remove_graph_breaks"),), share=time_share(x, REGION, steps))]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        return raw_count(r, "compiled_regions", "raw-text count of Torch-Compiled Region events in the trace file")


CAUSE = GraphBreaks()
