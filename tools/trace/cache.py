"""Cache of per-rank trace analysis results, keyed by the trace's content hash.

A rank trace already analysed (same bytes, same analysis version, same parameters) is served from
the cache when the graph resumes or re-runs, instead of being parsed again. Entries are JSON files
``<cache_dir>/<kind>/<sha256[:2]>/<sha256>-<version>-<params>.json``, written atomically (temp file +
``os.replace``), so concurrent worker processes (a process pool, a SLURM job array on a shared
file system) can fill the same cache safely.

Cache directory: the ``cache_dir`` argument, else ``$AI4S_STATE_DIR/trace-cache``, else
``~/.cache/ai4s-graph/traces``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Callable

from ...state.publish import publish
from ..errors import InputError
from .rawfile import raw_of

_CHUNK = 1 << 20  # 1 MiB: the hash streams the file, memory stays constant


def default_cache_dir() -> Path:
    """``$AI4S_STATE_DIR/trace-cache`` when AI4S_STATE_DIR is set, else ``~/.cache/ai4s-graph/traces``."""
    state = os.environ.get("AI4S_STATE_DIR")
    if state:
        return Path(state) / "trace-cache"
    return Path.home() / ".cache" / "ai4s-graph" / "traces"


_digest_memo: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | os.PathLike, raw: BinaryIO | None = None) -> str:
    """Hex sha256 of the file's bytes, read in 1 MiB chunks (constant memory, ~1 GB/s); ``raw``:
    the file already open (read from its start, not reopened).

    Memoized per process on (path, size, mtime_ns). Raises InputError if the file is missing."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as err:
        raise InputError(f"trace not found: {p}") from err
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    hit = _digest_memo.get(key)
    if hit:
        return hit
    h = hashlib.sha256()
    with raw_of(p, raw) as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    _digest_memo[key] = digest
    return digest


def params_key(params: dict[str, Any] | None) -> str:
    """Short stable hash of the analysis parameters (part of the cache key)."""
    if not params:
        return "default"
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


class TraceCache:
    """JSON results keyed by (kind, trace sha256, analysis version, parameters).

    ``hits`` / ``misses`` count lookups in this object (tests and the bench read them)."""

    def __init__(self, cache_dir: str | os.PathLike | None = None):
        self.root = Path(cache_dir) if cache_dir else default_cache_dir()
        self.hits = 0
        self.misses = 0

    def entry_path(self, kind: str, digest: str, version: str, params: dict[str, Any] | None = None) -> Path:
        return self.root / kind / digest[:2] / f"{digest}-{version}-{params_key(params)}.json"

    def get(self, kind: str, digest: str, version: str, params: dict[str, Any] | None = None) -> dict | None:
        """The stored result, or None (a missing or unreadable entry is a miss)."""
        p = self.entry_path(kind, digest, version, params)
        try:
            with open(p, "rb") as fh:
                value = json.load(fh)
        except (OSError, ValueError):
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, kind: str, digest: str, version: str, value: dict, params: dict[str, Any] | None = None) -> Path:
        """Store ``value`` (JSON-able) atomically; returns the entry's path."""
        p = self.entry_path(kind, digest, version, params)
        p.parent.mkdir(parents=True, exist_ok=True)
        publish(p, json.dumps(value, separators=(",", ":"), allow_nan=True))  # atomic; refuses a link
        return p

    def get_or_compute(self, kind: str, path: str | os.PathLike, version: str,
                       compute: Callable[[], dict], params: dict[str, Any] | None = None,
                       raw: BinaryIO | None = None) -> tuple[dict, bool]:
        """``(result, from_cache)``: the cached result for this trace's content, or ``compute()``
        stored and returned. The trace is hashed, never parsed, on a hit; ``raw``: the file
        already open (hashed from it)."""
        digest = file_sha256(path, raw)
        cached = self.get(kind, digest, version, params)
        if cached is not None:
            return cached, True
        value = compute()
        self.put(kind, digest, version, value, params)
        return value, False
