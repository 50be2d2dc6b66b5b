"""Joining a consumer's parts of consecutive chunks of one trace (the parallel pass,
:mod:`.scan_parallel`): the code tables each chunk built in its order of first appearance merged
into the joining consumer's (:func:`codes_of`), and the chunk's code and ordinal columns re-coded
(:func:`recoded`) or offset (:func:`offset`). Used by :mod:`.step_feed`, :mod:`.reader_feed` and
:mod:`.op_args`; imported by the joining process only (numpy)."""

from __future__ import annotations

from typing import Any

import numpy as np


def codes_of(items: list, ix: dict, table: list | None = None) -> np.ndarray:
    """The joining consumer's code of each of a chunk's ``items`` (its table, in the chunk's order
    of first appearance): ``ix`` (item -> code) gets the new ones, codes ``len(table)`` (or
    ``len(ix)`` without ``table``) onwards, and ``table`` (code -> item) their items. Shape
    ``(len(items),)``, int64."""
    m = np.empty(len(items), dtype=np.int64)
    for j, key in enumerate(items):
        i = ix.get(key)
        if i is None:
            i = ix[key] = len(ix) if table is None else len(table)
            if table is not None:
                table.append(key)
        m[j] = i
    return m


def recoded(buf: bytes, m: np.ndarray, dtype: Any = np.int32, keep_negative: bool = False) -> bytes:
    """A chunk's code column (``buf``: the bytes of a ``dtype`` array) in the joining consumer's
    codes (``m``: :func:`codes_of`); with ``keep_negative`` a negative code (none) stays as it is."""
    a = np.frombuffer(buf, dtype=dtype)
    if not m.size:
        return a.tobytes()
    if keep_negative:
        return np.where(a < 0, a, m[np.maximum(a, 0)]).astype(dtype).tobytes()
    return m[a].astype(dtype).tobytes()


def offset(buf: bytes, by: int, dtype: Any = np.int32) -> bytes:
    """A chunk's ordinal column (event numbers within the chunk) plus ``by`` (the elements before it)."""
    return (np.frombuffer(buf, dtype=dtype) + np.asarray(by, dtype=dtype)).astype(dtype).tobytes()
