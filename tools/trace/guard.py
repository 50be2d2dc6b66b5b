"""Malformed trace events named in one line instead of a traceback.

Kineto writes every event as a JSON object whose ``ts``/``dur`` are numbers, ``name``/``cat``/
``ph`` strings, ``pid``/``tid`` numbers or strings and ``args`` an object. A hand-edited or
converted trace may not (``"args": [1, 2]``, ``"ts": {}``, an event that is a bare number), and
the readers' hot loops do not check each field: checking 40k events costs ~30-60 ms, 5-10 % of
``trace timeline`` on the 13 MB ``91003`` trace. So the check runs only after a reader failed:
:func:`named_malformed_events` wraps a reader call; a ``TypeError``, ``AttributeError``,
``ValueError`` or ``KeyError`` out of it makes :func:`first_malformed_event` re-read the trace
(through the same bounded reader) and name the first event of the wrong shape in an
:class:`~ai4s_graph.tools.errors.InputError`; when every event is well-typed the original error
is raised unchanged (it is a bug, not bad input).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

from ..errors import Ai4sError, InputError

_NUMBER = (int, float)
_SCALAR = (int, float, str)


def event_problem(ev: Any) -> str | None:
    """What is wrong with the shape of one trace event (one phrase), or None when every field the
    readers use has a type kineto writes."""
    if not isinstance(ev, dict):
        return f"is a JSON {type(ev).__name__}, not an object"
    a = ev.get("args")
    if a is not None and not isinstance(a, dict):
        return f"has args of type {type(a).__name__}, not an object"
    for k in ("ts", "dur"):
        v = ev.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, _NUMBER + (str,)):
            return f"has {k} of type {type(v).__name__}, not a number"
        if isinstance(v, str):
            try:
                float(v)
            except ValueError:
                return f"has {k} {v[:40]!r}, not a number"
    for k in ("name", "cat", "ph"):
        v = ev.get(k)
        if v is not None and not isinstance(v, str):
            return f"has {k} of type {type(v).__name__}, not a string"
    for k in ("pid", "tid"):
        v = ev.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, _SCALAR)):
            return f"has {k} of type {type(v).__name__}, not a number or string"
    if isinstance(a, dict):
        for k in ("stream", "correlation", "device", "External id"):
            v = a.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, _SCALAR)):
                return f"has args.{k} of type {type(v).__name__}, not a number"
    return None


def first_malformed_event(path: str | os.PathLike[str]) -> str | None:
    """One line naming the first event of ``path`` whose shape is wrong (its index, category and
    name), or None when there is none. Raises :class:`InputError` like the readers on a file that
    is not a trace."""
    from .stream import iter_events

    name = os.path.basename(os.fspath(path))
    for i, ev in enumerate(iter_events(path)):
        why = event_problem(ev)
        if why is not None:
            label = ""
            if isinstance(ev, dict):
                label = f" (cat {str(ev.get('cat'))[:30]!r}, name {str(ev.get('name'))[:50]!r})"
            return f"{name}: traceEvents[{i}]{label} {why}: not what the PyTorch profiler writes"
    return None


@contextlib.contextmanager
def named_malformed_events(path: str | os.PathLike[str]) -> Iterator[None]:
    """Around a reader call on ``path``: turn the ``TypeError`` / ``AttributeError`` /
    ``ValueError`` / ``KeyError`` a malformed event causes into an :class:`InputError` naming that
    event (see the module docstring); any other error, or one no malformed event explains, passes
    unchanged."""
    try:
        yield
    except Ai4sError:
        raise
    except (TypeError, AttributeError, ValueError, KeyError) as e:
        try:
            why = first_malformed_event(path)
        except Ai4sError:
            why = None
        if why is None:
            raise
        raise InputError(why) from e

