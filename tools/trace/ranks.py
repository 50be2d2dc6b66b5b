"""Which rank each trace file is: ``distributedInfo.rank`` in the trace, then a ``rank<N>``-style
name pattern, then file order. Digits elsewhere in a name (a GPU model such as ``MI300``, a job id,
a host number) never make a rank. Two files that claim the same rank are reported and kept apart
(each keeps its own label and its own claims), never merged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Ai4sError, InputError
from .stream import read_header
from .trace_files import NOT_TRACES, is_trace_name  # noqa: F401 (re-exported: the names every caller asks here)

#: ``rank3``, ``rank_3``, ``rank-03``, ``RANK3`` as a word part: preceded by the start or a non-letter
#: (``trace_rank3.json``, ``worker-rank_3.pt.trace.json``, HTA's ``sampled_rank-0.json.gz``), followed
#: by a non-digit. kineto's ``tensorboard_trace_handler`` writes ``<worker_name>.<pid>...pt.trace.json``
#: and PyTorch's examples name the worker ``rank_<N>`` / ``rank<N>``.
RANK_NAME_RE = re.compile(r"(?:^|[^A-Za-z])rank[_-]?(\d+)(?!\d)", re.IGNORECASE)


@dataclass(frozen=True)
class RankFile:
    """One trace file and the rank it stands for.

    ``source``: ``distributedInfo``, ``file name`` or ``file order``. ``label``: unique among the
    files given (``"3"``, or ``"3-dup1"`` for the second file claiming rank 3). ``duplicate_of``:
    the path of the first file with the same rank, for a duplicate."""

    rank: int
    path: Path
    source: str
    label: str
    duplicate_of: str | None = None


def rank_from_name(name: str) -> int | None:
    """The rank in a ``rank<N>``-style file name, else None (``mi300_trace.json`` -> None)."""
    m = RANK_NAME_RE.search(name)
    return int(m.group(1)) if m else None


def _header_rank(path: Path, trailer: bool = False) -> int | None:
    """``distributedInfo.rank`` of a trace; with ``trailer`` also when it is written after the events."""
    try:
        info = read_header(path, ("distributedInfo",), trailer=trailer).get("distributedInfo")
    except Ai4sError:
        return None  # the analysis of that file reports the error
    return header_rank(info)


def header_rank(info: object) -> int | None:
    """The rank a ``distributedInfo`` value gives (a non-negative integer ``rank``), else None."""
    r = info.get("rank") if isinstance(info, dict) else None
    if isinstance(r, bool) or not isinstance(r, (int, float)) or r < 0:
        return None
    return int(r)


def identify_ranks(paths: list[str | Path], header_ranks: list[int | None] | None = None,
                   ) -> tuple[list[RankFile], list[str]]:
    """Rank identity of each trace file (see the module docstring), in the order given.

    ``header_ranks``: each file's ``distributedInfo.rank`` (None where absent) when the caller's
    one pass over the files already read it; else each file's header is read here (the trailer
    too when there are several files). Returns ``(files, notes)``; ``notes`` says which files got
    their rank from the file order and which files claim a rank another file already claimed
    (both are kept, apart)."""
    ps = [Path(p) for p in paths]
    found: list[tuple[int | None, str]] = []
    for i, p in enumerate(ps):
        # one file alone needs no identity: the trailer (a full read of a gzip file) only when several
        r = header_ranks[i] if header_ranks is not None else _header_rank(p, trailer=len(ps) > 1)
        if r is not None:
            found.append((r, "distributedInfo"))
            continue
        r = rank_from_name(p.name)
        found.append((r, "file name") if r is not None else (None, "file order"))
    used = {r for r, _ in found if r is not None}
    nxt = 0
    out: list[RankFile] = []
    first: dict[int, Path] = {}
    count: dict[int, int] = {}
    notes: list[str] = []
    for p, (r, src) in zip(ps, found):
        if r is None:
            while nxt in used:
                nxt += 1
            r = nxt
            used.add(r)
            notes.append(f"{p.name}: no distributedInfo.rank and no rank<N> in the name: rank {r} by file order")
        k = count.get(r, 0)
        count[r] = k + 1
        if k == 0:
            first[r] = p
            out.append(RankFile(r, p, src, str(r)))
        else:
            out.append(RankFile(r, p, src, f"{r}-dup{k}", str(first[r])))
            notes.append(f"{p.name} and {first[r].name} both say rank {r} ({src}): kept apart as ranks "
                         f"{r} and {r}-dup{k}; cross-rank figures use {first[r].name}")
    return out, notes


def find_rank_traces(perf_run_dir: str | Path) -> list[Path]:
    """Trace files of one profiled run: ``<dir>/traces/*.json`` and ``*.json.gz`` (or the folder
    itself when it has no ``traces/``; trace-like names only, :func:`is_trace_name`), ordered by
    rank identity (:func:`identify_ranks`), then name.

    Raises :class:`InputError` when the folder does not exist or holds no trace."""
    d = Path(perf_run_dir)
    if not d.is_dir():
        raise InputError(f"{d}: run folder not found")
    tdir = d / "traces" if (d / "traces").is_dir() else d
    files = sorted(p for p in tdir.iterdir() if p.is_file() and is_trace_name(p.name))
    if not files:
        raise InputError(f"{tdir}: no *.json or *.json.gz trace files")
    ident, _ = identify_ranks(files)
    return [f.path for f in sorted(ident, key=lambda f: (f.rank, f.label, f.path.name))]


def assign_identity(paths: list[str], results: list[dict]) -> tuple[list[dict], list[str]]:
    """Per-rank analysis results (dicts with ``path``, and ``stream.trace_rank`` = the
    ``distributedInfo.rank`` their pass read) given their final identity: :func:`identify_ranks`
    over ``paths`` (the run's traces in manifest order; a result's path not among them is added)
    with those header ranks, so no file is read. Returns (copies of the results with ``rank`` and
    ``label`` set, also in ``stream``, sorted by rank; the identity notes)."""
    by_path = {str(r.get("path")): r for r in results}
    ps = [str(p) for p in paths]
    ps += [p for p in by_path if p not in ps]
    header = [header_rank({"rank": ((by_path.get(p) or {}).get("stream") or {}).get("trace_rank")}) for p in ps]
    files, notes = identify_ranks(ps, header_ranks=header)
    out = []
    for f in files:
        r = by_path.get(str(f.path))
        if r is None:
            continue
        r = dict(r, rank=f.rank, label=f.label)
        if isinstance(r.get("stream"), dict):
            r["stream"] = dict(r["stream"], rank=f.rank, label=f.label)
        out.append(r)
    return sorted(out, key=lambda r: r.get("rank", 0)), notes


#: Seconds a rank trace's GPU events may lie outside its job's window and still be the job's:
#: SLURM's Start and End are whole seconds (``sacct``; up to 1 s off each way) and the nodes of one
#: job keep NTP time, milliseconds apart. The bundled runs' traces start 0.4-12 s after their job's
#: start and end 0.1-49 s before its end; a trace of the run before (93003 beside 93004) lies 20 s
#: outside, so the slack cannot be much larger without accepting the neighbouring job.
FOREIGN_SLACK_S = 2.0
#: Unix seconds a trace timestamp may take when a trace writes absolute times without
#: ``baseTimeNanoseconds`` (older kineto): 2001-09-09 to 2096-10-02 (1e9 .. 4e9 s).
UNIX_RANGE_S = (1e9, 4e9)


def trace_unix_span(rec: dict) -> tuple[float, float] | None:
    """When a rank's GPU events ran, in unix seconds ``(first start, last end)``, from its record
    (``gpu_span_us``, trace µs, plus ``base_time_ns``: kineto writes ``ts`` relative to
    ``baseTimeNanoseconds``); without a base, the timestamps themselves when they read as unix
    µs (:data:`UNIX_RANGE_S`); else None (relative clocks say nothing of when)."""
    span = rec.get("gpu_span_us")
    if not (isinstance(span, (list, tuple)) and len(span) == 2 and all(isinstance(v, (int, float)) for v in span)):
        return None
    base = rec.get("base_time_ns")
    off = float(base) / 1e9 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    t0, t1 = off + float(span[0]) / 1e6, off + float(span[1]) / 1e6
    lo, hi = UNIX_RANGE_S
    return (t0, t1) if lo <= t0 <= hi else None


def _utc(t: float) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def foreign_traces(results: list[dict], *, jobid: str | None = None, start: float | None = None,
                   end: float | None = None, world_size: int | None = None) -> dict[str, str]:
    """Rank traces that belong to another run: ``{path: one-line reason}`` for each rank result
    (dicts with ``path`` and ``stream``, the rank's record) whose GPU events lie outside the job's
    window ``[start, end]`` (unix s) by more than :data:`FOREIGN_SLACK_S` (:func:`trace_unix_span`),
    or whose ``distributedInfo.world_size`` differs from the job's ``world_size`` (the manifest's,
    else the one most of the traces give). Results without the facts a test needs pass that test
    (a relative clock, no window, no world size). A trace carries no SLURM job id (kineto writes
    none), so when and how wide it ran is the evidence."""
    out: dict[str, str] = {}
    sizes = [((r.get("stream") or {}).get("world_size")) for r in results]
    sizes = [int(w) for w in sizes if isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0]
    job_ws = world_size if world_size else (max(set(sizes), key=sizes.count) if sizes else None)
    src = "the manifest's" if world_size else "the other traces'"
    job = f"job {jobid}" if jobid else "the job"
    for r in results:
        rec = r.get("stream") or {}
        name = Path(str(r.get("path"))).name
        ws = rec.get("world_size")
        if job_ws and isinstance(ws, (int, float)) and not isinstance(ws, bool) and int(ws) != job_ws:
            out[str(r.get("path"))] = (f"{name}: a trace of another run, left out of the analysis: its "
                                       f"distributedInfo.world_size {int(ws)} is not {job}'s world size {job_ws} ({src})")
            continue
        span = trace_unix_span(rec)
        if span is None or start is None or end is None:
            continue
        t0, t1 = span
        if t1 < start - FOREIGN_SLACK_S or t0 > end + FOREIGN_SLACK_S:
            off = start - t1 if t1 < start else t0 - end
            side = "before" if t1 < start else "after"
            out[str(r.get("path"))] = (f"{name}: a trace of another run, left out of the analysis: its GPU events ran "
                                       f"{off:.1f} s {side} {job}'s window ({_utc(t0)} to {_utc(t1)}, the job "
                                       f"{_utc(start)} to {_utc(end)}; slack {FOREIGN_SLACK_S:g} s)")
    return out


def mark_foreign(results: list[dict], manifest: Any = None) -> list[dict]:
    """The rank results with each trace of another run (:func:`foreign_traces` against
    ``manifest``: its job id, ``start``/``end`` and ``world_size`` or ``ranks`` field) turned into
    a failed rank (``error`` = the reason, ``foreign`` True): left out of every figure, and said
    where failed ranks are (``STATUS=partial``). Results unchanged without a manifest."""
    if manifest is None:
        return results
    ws = None
    extra = getattr(manifest, "model_extra", None) or {}
    for k in ("world_size", "ranks"):
        v = extra.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            ws = v
            break
    good = [r for r in results if "error" not in r]
    bad = foreign_traces(good, jobid=getattr(manifest, "jobid", None), start=getattr(manifest, "start", None),
                         end=getattr(manifest, "end", None), world_size=ws)
    if not bad:
        return results
    return [dict(r, error=bad[str(r.get("path"))], foreign=True) if str(r.get("path")) in bad else r for r in results]
