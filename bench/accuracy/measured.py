"""What the bundled runs showed, case by case: the truth of :mod:`cases` completed from the
measurement (stdlib only, like ``cases.py``; the entries are ``measured.toml``).

Each entry of :data:`MEASURED` is applied to its case by ``cases.py``: ``note`` is appended to the
truth's notes (the numbers an engineer reads off the run: the step ratio against the control, the
cause's signature in the trace, log or telemetry); ``klass`` replaces the construction's class where
the run showed another; ``present`` (controls) names the causes of :data:`cases.CAUSES` the control
does have by measurement (a report naming one of them is not wrong); ``score_cause: False`` keeps a
case whose injected cause had no measurable effect as a run, scored for its class but not for the
cause or the lever. The figures themselves are in each bundled ``truth.json`` (``measured``, written
by ``bundle.py`` from the run as returned), so every number here can be checked there.

How the class was read: by the project's rules (``graph/rules/diagnosis.py``: computing
>= BUSY_COMPUTE_PCT 80% -> compute-bound, idle >= IDLE_DISPATCH_PCT 40% -> dispatch-bound, the
DataLoader >= 30% of the step with the GPU idle -> data-loader-bound) over the profiled window, and,
where the profiler stretched the step (profiled / unprofiled step > REPR_STEP_RATIO 1.10), over the
unprofiled steady step: GPU time per profiled step / the log's median step outside the profiler's
steps (issue 24 point 2: a profiler-stretched but GPU-bound run keeps its class). "Borderline" marks
a class whose figure lies within BORDERLINE_MARGIN (10%) of its threshold, or between the two
thresholds and nearer this one: the class is then the nearest, said with its numbers.

Effect: a cause counts as measurable when the case's steady median step, or its steady mean (a
stall every epoch moves the mean, not the median), is >= 1.10x the control's (twice seed 000
lesson 9's +-5% run-to-run band, the band ``diagnosis.REPR_STEP_RATIO`` uses).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

MEASURED_ON = {
    "new": "2026-12-01, one NVIDIA H200 (driver 580.159.04, 700 W, 1980 MHz), torch 2.11.0+cu130, cuDNN 9.19; "
           "generate.py in two calls (the second ran the 19 cases the first call's budget skipped)",
    "first": "2026-11-30, an nvidia-h200-x2 lease (2 H200, NV18), torch 2.11.0+cu130",
}
"""When and where the bundled runs were made (the README's table repeats it per case)."""

EFFECT_RATIO = 1.10
"""Case / control step ratio at and above which the injected cause had an effect (see the module
docstring: twice lesson 9's +-5% band)."""

MEASURED: dict[str, dict] = tomllib.loads((Path(__file__).resolve().parent / "measured.toml").read_text())
"""Jobid -> what its run showed (``measured.toml``; see the module docstring)."""
