"""The verifier's independent path for cross-rank claims (straggler, bus bandwidth).

Nothing here shares code with the analyst's path (:mod:`.collectives`, :mod:`.stragglers`: the
streaming engine's columnar records, pandas, TraceLens's process-group matching). Each rank's trace
is re-read with the full-load reader (:mod:`.kineto`), and:

* **arrival order**: per rank, the communication kernels of each collective type (from the kernel
  name: ``...AllReduce...``, ``...AllGather...``) in start order; the k-th kernel of a type on each
  rank is the same collective (NCCL and RCCL require every rank of a communicator to issue its
  collectives in the same order: NCCL User Guide, "Collective Operations"). Each rank's trace has
  its own clock; every rank leaves a synchronising collective together, so a rank's clock offset
  is the median of its kernels' ends minus the lowest rank's ends over those collectives, and
  starts are compared after subtracting it. A collective whose starts spread no wider than its
  (aligned) ends has no resolved last arrival. The rank whose kernel starts last arrived last: the
  others wait for it. The straggler is the rank that arrives last most often at resolved
  collectives (over collectives present on every rank).
* **bus bandwidth** (nccl-tests ``doc/PERFORMANCE.md``): for the k-th collective of a type and
  message size, time t = the shortest kernel duration across ranks (the ranks that arrived early
  also wait), size S = the kernel's own ``In msg nelems`` x dtype bytes (``Out msg nelems`` for
  all_gather: nccl-tests reports all_gather by its total output size), algbw = S / t and busbw =
  algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather / reduce_scatter / all_to_all, 1 for
  broadcast / reduce, n = the kernel's ``Group size``. GB/s = 1e9 B/s, as nccl-tests prints.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from ...state import Tolerance
from ..errors import Ai4sError
from . import kineto

_TYPES = (("allreduce", re.compile(r"all_?reduce|cross_device_reduce", re.I)),
          ("reducescatter", re.compile(r"reduce_?scatter", re.I)),
          ("allgather", re.compile(r"all_?gather", re.I)),
          ("alltoall", re.compile(r"all_?to_?all", re.I)),
          ("broadcast", re.compile(r"broadcast", re.I)),
          ("reduce", re.compile(r"reduce", re.I)))
_SYNC = ("allreduce", "reducescatter", "allgather", "alltoall")  # every rank waits for the last
_BYTES = {"Float": 4, "Int": 4, "Long": 8, "BFloat16": 2, "Half": 2, "Double": 8, "Byte": 1, "Char": 1, "Bool": 1,
          "Short": 2, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1}


def _type_of(kernel_name: str, args: dict | None) -> str | None:
    for src in ((args or {}).get("Collective name") or "", kernel_name):
        for t, rx in _TYPES:
            if src and rx.search(str(src)):
                return t
    return None


def _bus_factor(ctype: str, n: int) -> float | None:
    """nccl-tests doc/PERFORMANCE.md: busbw = algbw x this factor."""
    if n <= 0:
        return None
    if ctype == "allreduce":
        return 2.0 * (n - 1) / n
    if ctype in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if ctype in ("broadcast", "reduce"):
        return 1.0
    return None


def comm_kernels(path: str | Path) -> dict[str, list[kineto.GpuEvent]]:
    """``{collective type: [communication kernels in start order]}`` of one trace (linked kernels,
    as the timeline counts them; every communication kernel when nothing links)."""
    tr = kineto.load_events(path)
    out: dict[str, list[kineto.GpuEvent]] = defaultdict(list)
    for g in sorted(tr.gpu, key=lambda g: g.ts):
        if g.kind != kineto.COMM or (tr.linked_only and not g.linked):
            continue
        t = _type_of(g.name, g.comm_args)
        if t:
            out[t].append(g)
    return out


def _ranks(rank_results: list[dict[str, Any]]) -> dict[int, str]:
    """First file of each rank (a duplicate file of a rank is never mixed in)."""
    out: dict[int, str] = {}
    for r in sorted(rank_results, key=lambda r: (int(r.get("rank", 0)), str(r.get("label") or ""), str(r.get("path")))):
        if "error" in r or r.get("path") is None:
            continue
        out.setdefault(int(r["rank"]), str(r["path"]))
    return out


def arrival_straggler(rank_paths: dict[int, str]) -> dict[str, Any]:
    """The rank that arrives last most often at collectives every rank ran (module docstring), on
    clocks aligned on the collectives' ends.

    Returns ``{"rank", "times_last", "n_collectives", "n_resolved", "last_counts": {rank: n},
    "offsets_us": {rank: µs}}``; ``rank`` is None without a collective common to all ranks. Raises
    InputError (a trace that cannot be read)."""
    kernels = {r: comm_kernels(p) for r, p in rank_paths.items()}
    counts = {r: 0 for r in kernels}
    matched = []  # one {rank: kernel} per collective common to all ranks
    for t in _SYNC:
        k_common = min((len(v.get(t, [])) for v in kernels.values()), default=0)
        matched += [{r: v[t][k] for r, v in kernels.items()} for k in range(k_common)]
    ref = min(kernels) if kernels else 0
    offsets = {r: statistics.median(m[r].end - m[ref].end for m in matched) if matched else 0.0 for r in kernels}
    resolved = 0
    for m in matched:
        starts = {r: g.ts - offsets[r] for r, g in m.items()}
        ends = [g.end - offsets[r] for r, g in m.items()]
        if max(starts.values()) - min(starts.values()) <= max(ends) - min(ends):
            continue  # the clocks cannot tell which rank came last
        resolved += 1
        counts[max(starts, key=lambda r: (starts[r], -r))] += 1
    n = len(matched)
    out = {"rank": None, "times_last": 0, "n_collectives": n, "n_resolved": resolved, "last_counts": counts,
           "offsets_us": offsets}
    if resolved == 0 or len(kernels) < 2:
        return out
    top = max(counts, key=lambda r: (counts[r], -r))
    return dict(out, rank=top, times_last=counts[top])


def busbw(rank_paths: dict[int, str], ctype: str, msg_bytes: float) -> dict[str, Any]:
    """Mean bus bandwidth (GB/s) of the collectives of type ``ctype`` and size ``msg_bytes``, from
    the kernels' own sizes and durations (module docstring). Returns ``{"busbw_gbps", "count"}``;
    ``busbw_gbps`` None when no kernel of that type and size carries its size."""
    kernels = {r: comm_kernels(p).get(ctype, []) for r, p in rank_paths.items()}
    sized: dict[int, list[tuple[float, int, float]]] = {}
    for r, ks in kernels.items():
        rows = []
        for g in ks:
            a = g.comm_args or {}
            b = _BYTES.get(a.get("dtype"))
            nel = a.get("Out msg nelems") if ctype == "allgather" else a.get("In msg nelems")
            if b is None or not isinstance(nel, (int, float)):
                continue
            size = float(nel) * b
            if abs(size - msg_bytes) <= 1e-6 * max(1.0, msg_bytes):
                gs = a.get("Group size")
                rows.append((g.dur, int(gs) if isinstance(gs, (int, float)) else len(rank_paths), size))
        sized[r] = rows
    k_common = min((len(v) for v in sized.values()), default=0)
    vals = []
    for k in range(k_common):
        t = min(v[k][0] for v in sized.values())
        n, size = next(iter(sized.values()))[k][1:]
        f = _bus_factor(ctype, n)
        if t > 0 and f is not None:
            vals.append(size / (t * 1e-6) / 1e9 * f)
    return {"busbw_gbps": (sum(vals) / len(vals)) if vals else None, "count": len(vals)}


def rederive_claim(metric: str, rank_results: list[dict[str, Any]]) -> tuple[Any, Tolerance, str]:
    """``(value, tolerance, method)`` for a cross-rank claim's ``metric`` (``collectives.straggler_rank``,
    ``collectives.<type>.<bytes>.busbw_gbps``); value None (-> inconclusive) with the reason in
    ``method`` when this path cannot re-derive it (a trace it cannot read, an unknown metric)."""
    paths = _ranks(rank_results)
    try:
        if metric == "collectives.straggler_rank":
            s = arrival_straggler(paths)
            shift = ", ".join(f"rank {r} {v:+.1f} us" for r, v in sorted(s["offsets_us"].items()) if v)
            return (s["rank"], Tolerance(abs=0.0),
                    f"arrival order re-derived from each rank's kernels by the full-load reader on clocks aligned on "
                    f"the collectives' ends ({shift or 'no offset'}): rank {s['rank']} starts last at "
                    f"{s['times_last']} of {s['n_collectives']} collectives common to all ranks "
                    f"({s['n_resolved']} resolved)")
        m = re.match(r"^collectives\.([a-z_]+)\.([0-9.eE+-]+)\.busbw_gbps$", metric)
        if m:
            b = busbw(paths, m.group(1), float(m.group(2)))
            return (round(b["busbw_gbps"], 6) if b["busbw_gbps"] is not None else None, Tolerance(rel=0.02),
                    f"busbw from the kernels' own message sizes and durations over {b['count']} matched instances "
                    "(nccl-tests doc/PERFORMANCE.md factors), full-load reader")
    except Ai4sError as e:
        return None, Tolerance(), f"the full-load reader could not read a rank trace: {e}"
    return None, Tolerance(), f"no independent path for metric {metric}"
