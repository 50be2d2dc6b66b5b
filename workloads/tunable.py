"""A time-boxed PyTorch TunableOp tune (seed 000 lesson 28), torch only.

Lesson 28: live TunableOp tuning of giant GEMMs is impractically slow (ORBIT-2's first two ops
took ~3.5 and >12 minutes; a full tune would be hours), and no env knob bounds it:
``PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS`` / ``_MAX_TUNING_ITERATIONS`` bound the timing of one
candidate, not the number of candidates. The practical way is to time-box the tune and keep the
partial cache: the few giant ops dominate the run, so a partial cache holds most of any gain.

:class:`TimeBox` does that inside the training process: it enables TunableOp with tuning on,
writes the results to one file per rank (``tunableop_results_rank<RANK>.csv``, so ranks never
clobber one file), and at the first :meth:`TimeBox.check` after ``seconds`` it turns tuning off
and writes the cache; the run goes on with the tuned solutions (and the default for the rest).
``check`` is called between steps (a forward pre-hook), never inside an op.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable


class TimeBox:
    """Tune for ``seconds`` of wall time, then stop tuning and keep the partial cache.

    ``api``: the TunableOp module (``torch.cuda.tunable``: ``enable``, ``tuning_enable``,
    ``set_filename``, ``write_file``); ``cache_dir``: where the per-rank result file goes;
    ``rank``: this process's rank (file name); ``clock``: seconds, monotonic (injectable)."""

    def __init__(self, api: Any, seconds: float, cache_dir: str | os.PathLike[str], rank: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not seconds > 0:
            raise ValueError(f"TunableOp time box must be > 0 s, got {seconds}")
        self.api, self.seconds, self.clock = api, float(seconds), clock
        self.path = Path(cache_dir) / f"tunableop_results_rank{rank}.csv"
        self.t0: float | None = None
        self.closed_at: float | None = None

    def arm(self) -> str:
        """Enable TunableOp with tuning on, results to :attr:`path`; start the clock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.api.enable(True)
        self.api.tuning_enable(True)
        self.api.set_filename(str(self.path), False)
        self.t0 = self.clock()
        return f"tunableop(tune for {self.seconds:g} s, cache {self.path})"

    def check(self) -> bool:
        """Close the time box once ``seconds`` have passed: tuning off, partial cache written.
        Returns True on the call that closed it."""
        if self.t0 is None or self.closed_at is not None:
            return False
        now = self.clock()
        if now - self.t0 < self.seconds:
            return False
        self.api.tuning_enable(False)
        self.api.write_file(str(self.path))
        self.closed_at = now - self.t0
        print(f"ai4s-tunableop: tuning stopped after {self.closed_at:.1f} s; partial cache {self.path}", file=sys.stderr)
        return True


def from_env(env: dict[str, str], api: Any = None) -> TimeBox | None:
    """The time box the environment asks for: ``AI4S_TUNABLEOP_TIMEBOX_S`` (seconds) and
    ``AI4S_TUNABLEOP_DIR`` (cache directory, default ``$AI4S_PERF_RUN_DIR/tunableop`` or
    ``./tunableop``), rank from ``RANK``; None when the time box is not set."""
    s = env.get("AI4S_TUNABLEOP_TIMEBOX_S")
    if not s:
        return None
    if api is None:
        import torch.cuda.tunable as api  # noqa: PLC0415
    d = env.get("AI4S_TUNABLEOP_DIR") or os.path.join(env.get("AI4S_PERF_RUN_DIR", "."), "tunableop")
    return TimeBox(api, float(s), d, int(env.get("RANK", "0") or 0))
