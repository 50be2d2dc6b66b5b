"""The one read of a training log by the analysts: its text (handed to the figure-of-merit parser,
:func:`ai4s_graph.tools.trainlog.fom.parse_log`), and the facts the rules read from it, so no
other node opens the log again: pattern counts for the causes (``graph/rules/causes/``) and the
last step line's timestamp (for where a failed job stopped, ``graph/rules/context.py:progress``)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

_TS = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?)(Z|[+-]\d{2}:?\d{2})?")
STEP_LINE = re.compile(r"Batch \d+:.*time [0-9.eE+-]+ seconds|tic4-tic1 in [0-9.eE+-]+ seconds|s/it|it/s")
"""A step line of the logs :mod:`.formats` reads (batch_time, EDM tic, tqdm rates)."""


def read_log(path: str | Path) -> str | None:
    """The log's text (UTF-8, undecodable bytes replaced), or None when it is missing or
    unreadable (the parser then reports why, with its own one-line error)."""
    try:
        return Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def last_step_timestamp(text: str, step_pattern: re.Pattern[str] = STEP_LINE) -> float | None:
    """Unix time of the last line matching ``step_pattern`` that carries an ISO-8601 timestamp
    (``2026-11-30 10:01:02``, UTC unless an offset is given), or None."""
    last = None
    for line in text.splitlines():
        if step_pattern.search(line):
            m = _TS.search(line)
            if m:
                s = m.group(1).replace(" ", "T")
                tz = m.group(2)
                dt = datetime.fromisoformat(s + ("+00:00" if not tz or tz == "Z" else tz))
                last = dt.astimezone(timezone.utc).timestamp()
    return last


def log_facts(path: str | Path, text: str | None, patterns: dict[str, re.Pattern[str]]) -> dict[str, Any]:
    """``{"path", "counts", "last_step_unix"}`` of one read log: ``path`` (None when the text is
    empty or missing), ``counts``: key -> number of matches of each pattern in the whole text,
    ``last_step_unix``: :func:`last_step_timestamp`."""
    t = text or ""
    return {"path": str(path) if t else None, "counts": {k: len(p.findall(t)) for k, p in patterns.items()},
            "last_step_unix": last_step_timestamp(t) if t else None}
