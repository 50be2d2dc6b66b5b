"""Raw telemetry samples: the JSON-lines export format (VictoriaMetrics ``/api/v1/export``) read
from a file or a live server into :class:`Series`, with bounded retries on connection errors.

This is the raw-sample input of the verifiers' path (:mod:`.rawstats`): no PromQL evaluation,
the server returns stored samples. Errors: an unreachable TSDB raises
:class:`ToolUnavailableError` with one line ("TSDB at http://127.0.0.1:9 unreachable: connection
refused") after at most 2 attempts (connection errors only; a 4xx is never retried); a missing,
empty or malformed export raises :class:`InputError` naming the line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import requests
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_fixed

from ..errors import InputError, ToolUnavailableError


@dataclass(frozen=True)
class Series:
    """One raw time series: ``metric`` labels (with ``__name__``), ``timestamps`` in unix
    **seconds** (ascending, unique) and ``values``."""

    metric: dict[str, str]
    timestamps: tuple[float, ...]
    values: tuple[float, ...]

    @property
    def name(self) -> str:
        return self.metric.get("__name__", "")

    @property
    def instance(self) -> str:
        return self.metric.get("instance", "")

    @property
    def host(self) -> str:
        """The host part of ``instance`` (``node1:9400`` -> ``node1``): exporters on one host
        may carry different ports, so joins match on this (:func:`host_of`)."""
        return host_of(self.instance)

    def labels_without_name(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in self.metric.items() if k != "__name__"))


def host_of(instance: str) -> str:
    """``instance`` without a trailing ``:<port>`` (``node1:9400`` -> ``node1``, ``node1`` ->
    ``node1``, ``[::1]:9100`` -> ``[::1]``); the same rule as the PromQL ``label_replace`` in
    :data:`HOST_RE`."""
    m = re.fullmatch(HOST_RE, instance)
    return m.group(1) if m else instance


#: ``instance`` = host, optionally ``:port`` (RE2 syntax, anchored by both PromQL and fullmatch).
HOST_RE = r"(.+?)(?::[0-9]+)?"


# --------------------------------------------------------------------------------------------
# HTTP with bounded retries
# --------------------------------------------------------------------------------------------

_CONN_ERRORS = (requests.ConnectionError, requests.Timeout)


def _unreachable(url: str, err: BaseException, timeout_s: float) -> ToolUnavailableError:
    text = str(err).lower()
    if isinstance(err, requests.Timeout):
        why = f"no answer within {timeout_s:g}s"
    elif "refused" in text:
        why = "connection refused"
    elif "name or service not known" in text or "nodename nor servname" in text or "resolve" in text:
        why = "host name not resolved"
    elif "no route" in text:
        why = "no route to host"
    else:
        why = type(err).__name__
    return ToolUnavailableError(f"TSDB at {url} unreachable: {why}")


def with_retry(fn: Callable[[], Any], url: str, timeout_s: float, attempts: int = 2) -> Any:
    """Run ``fn`` with a bounded retry on connection errors only (never on HTTP 4xx/5xx)."""
    wrapped = retry(retry=retry_if_exception_type(_CONN_ERRORS), stop=stop_after_attempt(attempts),
                    wait=wait_fixed(0.2), reraise=True)(fn)
    try:
        return wrapped()
    except _CONN_ERRORS as e:
        raise _unreachable(url, e, timeout_s) from None


def _parse_export_lines(lines: Iterable[bytes | str], origin: str) -> list[Series]:
    merged: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    labels_of: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    n = 0
    for i, line in enumerate(lines, 1):
        if isinstance(line, str):
            line = line.encode()
        if not line.strip():
            continue
        try:
            try:
                d = orjson.loads(line)
            except orjson.JSONDecodeError:  # bare NaN/Infinity (Python's json.dumps writes them): stdlib reads them
                d = json.loads(line)
            metric = {str(k): str(v) for k, v in d["metric"].items()}
            ts, vs = d["timestamps"], d["values"]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # RecursionError: nested too deep
            raise InputError(f"malformed telemetry export {origin}: line {i} is not a "
                             f'{{"metric","values","timestamps"}} JSON object') from None
        if len(ts) != len(vs):
            raise InputError(f"malformed telemetry export {origin}: line {i} has "
                             f"{len(vs)} values but {len(ts)} timestamps")
        key = tuple(sorted(metric.items()))
        labels_of[key] = metric
        bucket = merged.setdefault(key, {})
        for t, v in zip(ts, vs):
            bucket[float(t) / 1000.0] = float(v)  # later duplicates win, as VM dedup keeps the last
        n += 1
    out = []
    for key, bucket in merged.items():
        ts_sorted = sorted(bucket)
        out.append(Series(labels_of[key], tuple(ts_sorted), tuple(bucket[t] for t in ts_sorted)))
    return out


def load_export(path: str | Path) -> list[Series]:
    """Read a VictoriaMetrics JSON-lines export (``/api/v1/export`` format; timestamps in ms)
    into :class:`Series` (timestamps in s). Lines of the same series are merged (an export may
    split one series over several lines) and duplicate timestamps are kept once.

    Raises ``InputError`` for a missing, empty or malformed file (one line, with line number)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"telemetry export not found: {p}")
    with p.open("rb") as f:
        series = _parse_export_lines(f, str(p))
    if not series:
        raise InputError(f"telemetry export is empty: {p}")
    return series


def export_raw(url: str, match: str | Sequence[str], start: float | None = None, end: float | None = None,
               *, timeout_s: float = 30.0) -> list[Series]:
    """Raw samples from a live VictoriaMetrics via ``GET /api/v1/export`` (no PromQL
    evaluation: the server returns stored samples). ``match``: one or more series selectors
    (``rmsjob_info{jobid="91003"}``); ``start``/``end``: unix seconds (optional).

    Returns ``[]`` when nothing matches. Raises ``ToolUnavailableError`` when unreachable
    (bounded retry), ``InputError`` when the server rejects the selector (HTTP 4xx)."""
    base = url.rstrip("/")
    params: list[tuple[str, str]] = [("match[]", m) for m in ([match] if isinstance(match, str) else match)]
    if start is not None:
        params.append(("start", f"{float(start):.3f}"))
    # Without an explicit end, VictoriaMetrics 1.79 stops about a second before "now" and drops
    # just-written samples (seen here); ask up to an hour ahead instead.
    params.append(("end", f"{float(end) if end is not None else time.time() + 3600:.3f}"))

    def call() -> requests.Response:
        return requests.get(f"{base}/api/v1/export", params=params, timeout=timeout_s)

    r = with_retry(call, base, timeout_s)
    if 400 <= r.status_code < 500:
        raise InputError(f"TSDB at {base} rejected export of {match!r}: HTTP {r.status_code}: "
                         f"{' '.join(r.text.split())[:160]}")
    if r.status_code >= 500:
        raise ToolUnavailableError(f"TSDB at {base} failed export: HTTP {r.status_code}")
    return _parse_export_lines(r.content.splitlines(), f"{base}/api/v1/export")
