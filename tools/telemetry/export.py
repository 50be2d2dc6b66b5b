"""Raw telemetry samples: the JSON-lines export format (VictoriaMetrics ``/api/v1/export``) read
from a file or a live server into :class:`Series`, with bounded retries on connection errors.

This is the raw-sample input of the verifiers' path (:mod:`.rawstats`): no PromQL evaluation,
the server returns stored samples. Errors: an unreachable TSDB raises
:class:`ToolUnavailableError` with one line ("TSDB at http://127.0.0.1:9 unreachable: connection
refused") after at most 2 attempts (connection errors only; a 4xx is never retried); a missing
or empty export, or one with no usable series, raises :class:`InputError`. Lines that are not
series, null values (staleness markers), non-numeric values and implausible samples are left out
and counted in an :class:`ExportReport` (:func:`read_export`), never silently.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
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

    def labels_key(self) -> tuple[tuple[str, str], ...]:
        """Every label, ``__name__`` included, sorted: the series' identity."""
        return tuple(sorted(self.metric.items()))

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


@dataclass
class ExportReport:
    """What reading a JSON-lines export left out, and why, so a report can say it.

    ``dropped_lines``: ``(line number, why)`` of every non-empty line that is not a series
    (not JSON, a non-object ``metric``, no ``__name__``, ``values``/``timestamps`` of other
    lengths or not lists); ``bom``: a UTF-8 byte-order mark was removed from the first line (an
    encoding marker, not data); ``nulls``: ``{metric name: null values}``, the staleness markers
    ``/api/v1/export`` writes when an exporter restarts (each a missing sample, skipped);
    ``non_numeric``: ``{metric name: values that are not numbers}`` (strings, booleans; skipped);
    ``out_of_range``: ``{metric name: (count, first value, bound text)}`` of samples outside their
    plausibility bound (:mod:`.bounds`; excluded); ``series``: distinct series read; ``empty``:
    series left with no sample at all (every value null or non-numeric)."""

    origin: str = ""
    dropped_lines: list[tuple[int, str]] = field(default_factory=list)
    bom: bool = False
    nulls: dict[str, int] = field(default_factory=dict)
    non_numeric: dict[str, int] = field(default_factory=dict)
    out_of_range: dict[str, tuple[int, float, str]] = field(default_factory=dict)
    series: int = 0
    empty: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """One line per kind of loss, naming the file, the lines and the metrics
        (``[]`` when the export was read whole)."""
        name = Path(self.origin).name or self.origin
        out = []
        if self.dropped_lines:
            first = "; ".join(f"line {i}: {why}" for i, why in self.dropped_lines[:3])
            more = f"; {len(self.dropped_lines) - 3} more" if len(self.dropped_lines) > 3 else ""
            out.append(f"{name}: {len(self.dropped_lines)} line(s) dropped ({first}{more})")
        if self.nulls:
            n = sum(self.nulls.values())
            out.append(f"{name}: {n} stale marker(s) (null values, an exporter restart) skipped as missing samples "
                       f"({_counts(self.nulls)})")
        if self.non_numeric:
            out.append(f"{name}: {sum(self.non_numeric.values())} non-numeric value(s) skipped ({_counts(self.non_numeric)})")
        for m, (n, v, b) in sorted(self.out_of_range.items()):
            out.append(f"{name}: {n} {m} sample(s) out of range excluded (plausible {b}; first {v:g})")
        if self.empty:
            out.append(f"{name}: {len(self.empty)} series with no usable sample ({', '.join(self.empty[:3])}"
                       f"{', ...' if len(self.empty) > 3 else ''})")
        return out


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items()))


def _series_text(metric: dict[str, str]) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{metric.get('__name__', '')}{{{labels}}}"


def _decode(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:  # bare NaN/Infinity (Python's json.dumps writes them): stdlib reads them
        return json.loads(line)


def _line_series(d: Any) -> tuple[dict[str, str], list[Any], list[Any]] | str:
    """``(metric, timestamps, values)`` of one decoded export line, or why it is not a series."""
    if not isinstance(d, dict):
        return f"a JSON {type(d).__name__}, not an object"
    missing = [k for k in ("metric", "values", "timestamps") if k not in d]
    if missing:
        return f"no {'/'.join(missing)}"
    if not isinstance(d["metric"], dict):
        return f"'metric' is a {type(d['metric']).__name__}, not an object"
    ts, vs = d["timestamps"], d["values"]
    if not isinstance(ts, list) or not isinstance(vs, list):
        return "'values' and 'timestamps' are not both lists"
    if len(ts) != len(vs):
        return f"{len(vs)} values but {len(ts)} timestamps"
    if any(isinstance(v, (dict, list)) for v in d["metric"].values()):
        return "a label value that is not a string"
    # an empty label is an absent one (Prometheus data model): the store keeps none
    metric = {str(k): str(v) for k, v in d["metric"].items() if v is not None and str(v) != ""}
    if not metric.get("__name__"):
        return "no __name__ label"
    return metric, ts, vs


def _parse_export_lines(lines: Iterable[bytes | str], origin: str, report: ExportReport | None = None,
                        gpu_name: str | None = None) -> list[Series]:
    from .bounds import bound_for, is_finite_number

    rep = report if report is not None else ExportReport()
    rep.origin = origin
    merged: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    labels_of: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for i, line in enumerate(lines, 1):
        if isinstance(line, str):
            line = line.encode()
        if i == 1 and line.startswith(b"\xef\xbb\xbf"):
            line, rep.bom = line[3:], True
        if not line.strip():
            continue
        try:
            got = _line_series(_decode(line))
        except ValueError:
            got = "not JSON"
        except RecursionError:  # the stdlib fallback on a line nested too deep
            got = "nested too deep to be a series"
        if isinstance(got, str):
            rep.dropped_lines.append((i, got))
            continue
        metric, ts, vs = got
        name = metric["__name__"]
        key = tuple(sorted(metric.items()))
        labels_of[key] = metric
        bucket = merged.setdefault(key, {})
        bound = bound_for(name, metric, gpu_name)
        for t, v in zip(ts, vs):
            if v is None or t is None:
                rep.nulls[name] = rep.nulls.get(name, 0) + 1
                continue
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)) or not is_finite_number(t):
                rep.non_numeric[name] = rep.non_numeric.get(name, 0) + 1
                continue
            v = float(v)
            if bound is not None and math.isfinite(v) and not bound.holds(v):
                n, first, _ = rep.out_of_range.get(name, (0, v, ""))
                rep.out_of_range[name] = (n + 1, first, bound.text())
                continue
            bucket[float(t) / 1000.0] = v  # later duplicates win, as VM dedup keeps the last
    out = []
    for key, bucket in merged.items():
        if not bucket:
            rep.empty.append(_series_text(labels_of[key]))
            continue
        ts_sorted = sorted(bucket)
        out.append(Series(labels_of[key], tuple(ts_sorted), tuple(bucket[t] for t in ts_sorted)))
    rep.series = len(out)
    return out


def read_export(path: str | Path, gpu_name: str | None = None) -> tuple[list[Series], ExportReport]:
    """Read a VictoriaMetrics JSON-lines export (``/api/v1/export`` format; timestamps in ms) into
    :class:`Series` (timestamps in s) and an :class:`ExportReport` of what was left out.

    Lines of one series are merged (an export may split a series over several lines) and a
    duplicate timestamp is kept once (the later). A null value (a staleness marker) or a
    non-numeric one is a missing sample; a line that is not a series is dropped; samples outside
    their plausibility bound (:mod:`.bounds`, the board ``gpu_name`` unless the series names its
    own) are excluded: each counted and named in the report. NaN/inf samples are kept (the
    statistics count them). Raises ``InputError`` for a missing file, or one with no usable
    series (the message names the first dropped lines)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"telemetry export not found: {p}")
    rep = ExportReport()
    with p.open("rb") as f:
        series = _parse_export_lines(f, str(p), rep, gpu_name)
    if not series:
        why = "; ".join(rep.problems()) or "no series"
        raise InputError(f"telemetry export has no usable series: {p}: {why}" if why != "no series"
                         else f"telemetry export is empty: {p}")
    return series, rep


def load_export(path: str | Path, gpu_name: str | None = None) -> list[Series]:
    """The series of :func:`read_export` (what it left out is in its report). Raises
    ``InputError`` for a missing or empty file, or one with no usable series."""
    return read_export(path, gpu_name)[0]


def to_jsonl(series: Iterable[Series]) -> bytes:
    """``series`` as JSON lines in the ``/api/v1/import`` format (ms timestamps), finite samples
    only (VictoriaMetrics drops NaN at import; a series with no finite sample is left out)."""
    out = []
    for s in series:
        pts = [(t, v) for t, v in zip(s.timestamps, s.values) if math.isfinite(v)]
        if pts:
            out.append(orjson.dumps({"metric": s.metric, "values": [v for _, v in pts],
                                     "timestamps": [int(round(t * 1000)) for t, _ in pts]}))
    return b"\n".join(out) + (b"\n" if out else b"")


def export_raw(url: str, match: str | Sequence[str], start: float | None = None, end: float | None = None,
               *, timeout_s: float = 30.0, gpu_name: str | None = None,
               report: ExportReport | None = None) -> list[Series]:
    """Raw samples from a live VictoriaMetrics via ``GET /api/v1/export`` (no PromQL
    evaluation: the server returns stored samples). ``match``: one or more series selectors
    (``rmsjob_info{jobid="91003"}``); ``start``/``end``: unix seconds (optional). Samples are
    read as :func:`read_export` reads a file (``gpu_name`` for the bounds; what was left out goes
    to ``report`` when one is given).

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
    return _parse_export_lines(r.content.splitlines(), f"{base}/api/v1/export", report, gpu_name)
