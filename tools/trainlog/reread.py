"""The telemetry verifier's own second reading of a training log (rank-0 step times, epochs and
losses), with regular expressions of its own, independent of :mod:`ai4s_graph.tools.trainlog.fom`'s
parser. Used by the deterministic verifiers and by the LLM verifier's ``log_reread`` tool. One read
per log and run: the result is memoized per file (path, size, mtime) and patterns, so both verifiers
share it."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

__all__ = ["reread_log"]

_MEMO: dict[tuple, dict[str, Any]] = {}

_STEP_TIME = re.compile(r"^\s*(?:0:\s*)?Batch \d+: .*?time ([0-9.eE+-]+) seconds")
_TIC = re.compile(r"my rank 0\. tic4-tic1 in ([0-9.eE+-]+) seconds")
_EPOCH_END = re.compile(r"Epoch (\d+) completed")
_LOSS = re.compile(r"loss (?:tensor\()?([-+]?(?:nan|inf(?:inity)?)\b|[0-9.eE+-]+)", re.IGNORECASE)
_EDM_EPOCH = re.compile(r"^epoch: (\d+) batch_idx \d+")
# terminal escapes (colour, cursor moves, OSC titles) are display only: removed before reading
_ANSI = re.compile(r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[\x20-\x2f]*[\x30-\x7e]?")


def reread_log(path: Path, patterns: dict[str, re.Pattern[str]] | None = None) -> dict[str, Any]:
    """Step times (s), epochs (lists of step times), per-epoch mean losses (finite values only),
    ``n_losses`` and ``n_nonfinite_losses`` (NaN/inf loss values) of rank 0, read with this
    module's own patterns, and ``counts``: key -> matches of each of ``patterns`` in the whole
    text. Empty lists and zero counts when nothing matches. Raises OSError when the log cannot be
    read. Memoized per (path, size, mtime, patterns): a second call reads nothing."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns,
           tuple(sorted((k, v.pattern, v.flags) for k, v in (patterns or {}).items())))
    hit = _MEMO.get(key)
    if hit is None:
        hit = _MEMO[key] = _reread(p.read_text(errors="replace"), patterns or {})
    return hit


def _reread(text: str, patterns: dict[str, re.Pattern[str]]) -> dict[str, Any]:
    steps: list[float] = []
    epochs: list[list[float]] = []
    losses: list[list[float]] = []
    cur: list[float] = []
    cur_loss: list[float] = []
    edm_epoch = None

    def close_epoch() -> None:
        nonlocal cur, cur_loss
        if cur:
            epochs.append(cur)
            losses.append(cur_loss)
            cur, cur_loss = [], []

    def add_loss(line: str) -> None:
        lm = _LOSS.search(line)
        if lm:
            cur_loss.append(float(lm.group(1)))

    for line in _ANSI.sub("", text).splitlines():
        m = _STEP_TIME.search(line) or _TIC.search(line)
        if m:
            steps.append(float(m.group(1)))
            cur.append(float(m.group(1)))
            if m.re is _STEP_TIME:
                add_loss(line)
            continue
        m = _EDM_EPOCH.search(line)
        if m:
            e = int(m.group(1))
            if edm_epoch is not None and e != edm_epoch:
                close_epoch()
            edm_epoch = e
            add_loss(line)
            continue
        if _EPOCH_END.search(line):
            close_epoch()
    return {"steps": steps, "epochs": epochs,
            "epoch_losses": [sum(f) / len(f) for f in ([v for v in x if math.isfinite(v)] for x in losses) if f],
            "n_losses": sum(len(x) for x in losses) + len(cur_loss),
            "n_nonfinite_losses": sum(1 for x in [*losses, cur_loss] for v in x if not math.isfinite(v)),
            "counts": {k: len(v.findall(text)) for k, v in patterns.items()}}
