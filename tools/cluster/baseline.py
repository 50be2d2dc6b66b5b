"""The cluster's measured all-reduce bus bandwidth, read from what ``eval-cluster`` wrote (the raw
JSON or the markdown report), for ``run --baseline``: the rules compare a job's achieved busbw with
it (:func:`ai4s_graph.graph.rules.context.busbw_context`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import InputError

_IEC = {"B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "KB": 1000, "MB": 10**6, "GB": 10**9}


def _parse_size(s: str) -> float | None:
    """Bytes of a payload cell such as ``64 MiB`` or ``1 GB`` (IEC and SI units), else None."""
    m = re.match(r"^\s*([0-9.]+)\s*([KMG]i?B|B)\s*$", s, re.I)
    if not m:
        return None
    return float(m.group(1)) * _IEC[m.group(2).upper()]


def load_baseline(path: str | Path) -> tuple[list[tuple[float, float]], str]:
    """All-reduce busbw measured by ``eval-cluster``: ``([(payload bytes, busbw GB/s)], source)``.

    Reads the raw JSON (``network.intra|inter.rows[{bytes, busbw_gbps}]``; inter-node rows win when
    present, the fabric a multi-node job crosses) or the markdown report's all-reduce table
    (``| payload | time (µs) | algbw (GB/s) | busbw (GB/s) |``). Raises :class:`InputError` when the
    file is unreadable or holds no all-reduce measurement."""
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as e:
        raise InputError(f"--baseline {p}: {e.strerror or e}") from e
    rows: list[tuple[float, float]] = []
    if p.suffix == ".json":
        try:
            d = json.loads(text)
        except ValueError as e:
            raise InputError(f"--baseline {p}: not JSON ({e})") from e
        net = d.get("network") or {}
        for part in ("inter", "intra"):
            rr = [(float(r["bytes"]), float(r["busbw_gbps"])) for r in (net.get(part) or {}).get("rows") or []
                  if r.get("busbw_gbps") is not None and r.get("correct", True)]
            if rr:
                rows = rr
                src = f"{p.name} ({part}-node all-reduce, {(net.get(part) or {}).get('ranks', '?')} ranks)"
                break
    else:
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4:
                size = _parse_size(cells[0])
                try:
                    bw = float(cells[3])
                except ValueError:
                    continue
                if size:
                    rows.append((size, bw))
        src = f"{p.name} (all-reduce table)"
    if not rows:
        raise InputError(f"--baseline {p}: no all-reduce busbw measurement in it (a 1-GPU node skips the benchmark)")
    return sorted(rows), src
