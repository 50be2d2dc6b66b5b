"""The batch against the staged sample count (seed 000 lesson 25), an integrity check of a run.

Lesson 25: at a 1704-sample staging cap, batch 1024 (~21% HBM) gave the best throughput (4098
samples/s) while batch 1704 (~34% HBM) was 27% slower; "batch > sample-count just
repeats/partial-fills a step". More HBM in use is not more work done: a global batch larger than
the samples staged for an epoch fills its steps with repeats or leaves them partial, so its
throughput is not comparable (lock the baseline at the throughput-optimal batch; chase HBM % only
after staging more data).

The staged sample count is what the workload says it staged for one epoch (``staged_samples`` in
its ``run_info.json``, copied into the run's FOM record); without it the check is "not checked".
"""

from __future__ import annotations

import math
from typing import Any

from ...state.loop import GuardCheck


def _int(d: dict[str, Any], k: str) -> int | None:
    v = d.get(k)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else None


def batch_vs_staged(fom: dict[str, Any]) -> GuardCheck:
    """``staged_samples``: passed when the nominal global batch (``global_batch_size``) is at most
    the staged sample count (``staged_samples``); failed above it (lesson 25); not checked when
    either is unknown."""
    b, n = _int(fom, "global_batch_size"), _int(fom, "staged_samples")
    if b is None or n is None:
        return GuardCheck(name="staged_samples", value=b, reference=n, passed=True, checked=False,
                          why="batch vs staged samples: not checked: needs global_batch_size and the workload's "
                              "staged_samples (run_info.json)")
    ok = b <= n
    return GuardCheck(name="staged_samples", value=b, reference=n, passed=ok,
                      why=(f"global batch {b} <= {n} staged samples per epoch" if ok else
                           f"global batch {b} > {n} staged samples per epoch: each step repeats or partially fills "
                           "(lesson 25: batch 1704 on a 1704-sample cap was 27% slower than 1024); stage more data "
                           "before raising the batch"))
