"""Errors the typed tools raise. Each carries a one-line, user-facing message."""

from __future__ import annotations


class Ai4sError(Exception):
    """Base class: ``str(err)`` is one line a user can act on."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class InputError(Ai4sError):
    """A bad or missing input: truncated or empty trace, trace with no GPU events, empty or
    malformed log, unknown job id, a value with shell metacharacters."""


class NoGpuEventsError(InputError):
    """The trace parsed, but holds no GPU kernel, memcpy or memset events (a CPU-only run)."""


class ToolUnavailableError(Ai4sError):
    """A service or program the tool needs is not reachable or not installed (an unreachable
    TSDB, no ``victoria-metrics`` binary, no ``sbatch``)."""
