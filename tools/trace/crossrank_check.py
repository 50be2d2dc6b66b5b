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


def _size(ctype: str, args: dict | None) -> float | None:
    """A communication kernel's message size (bytes): ``In msg nelems`` (``Out msg nelems`` for
    all_gather, as nccl-tests sizes it) x the dtype's bytes; None when the kernel lacks them."""
    a = args or {}
    b = _BYTES.get(a.get("dtype"))
    nel = a.get("Out msg nelems") if ctype == "allgather" else a.get("In msg nelems")
    return float(nel) * b if b is not None and isinstance(nel, (int, float)) else None


def _same(size: float | None, msg_bytes: float) -> bool:
    return size is not None and abs(size - msg_bytes) <= 1e-6 * max(1.0, msg_bytes)


def comm_table(tr: kineto.KinetoTrace) -> dict[str, list[dict[str, Any]]]:
    """``{collective type: [{"ts", "end", "dur", "args"}, ...] in start order}`` (µs, ``end`` and
    ``dur`` clipped at the next start on the kernel's stream as the reader clips them): the
    communication kernels of one trace loaded by the full-load reader (linked kernels, as the
    timeline counts them; every communication kernel when nothing links), JSON-able so the analysis
    pass can hand it to the verifier (the reader is fed by that pass; nothing is read again)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for g in sorted(tr.gpu, key=lambda g: g.ts):
        if g.kind != kineto.COMM or (tr.linked_only and not g.linked):
            continue
        t = _type_of(g.name, g.comm_args)
        if t:
            out[t].append({"ts": g.ts, "end": g.end, "dur": g.dur, "args": dict(g.comm_args or {})})
    return dict(out)


def comm_kernels(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """:func:`comm_table` of a trace file read now (for a rank whose pass did not feed the reader)."""
    return comm_table(kineto.load_events(path))


def first_files(rank_results: list[dict[str, Any]]) -> dict[int, str]:
    """Rank -> the path of its first file (a duplicate file of a rank is never mixed in)."""
    out: dict[int, str] = {}
    for r in sorted(rank_results, key=lambda r: (int(r.get("rank", 0)), str(r.get("label") or ""), str(r.get("path")))):
        if "error" in r or r.get("path") is None:
            continue
        out.setdefault(int(r["rank"]), str(r["path"]))
    return out


def arrival_straggler(rank_paths: dict[int, str]) -> dict[str, Any]:
    """:func:`arrival_order` of the rank traces ``rank_paths`` (rank -> path) read now with the
    full-load reader. Raises InputError (a trace that cannot be read)."""
    return arrival_order({r: comm_kernels(p) for r, p in rank_paths.items()})


def arrival_order(kernels: dict[int, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """The rank that arrives last most often at collectives every rank ran (module docstring), on
    clocks aligned on the collectives' ends. ``kernels``: rank -> its :func:`comm_table`.

    Returns ``{"rank", "times_last", "n_collectives", "n_resolved", "last_counts": {rank: n},
    "offsets_us": {rank: µs}}``; ``rank`` is None without a collective common to all ranks."""
    counts = {r: 0 for r in kernels}
    matched = []  # one {rank: kernel} per collective common to all ranks
    for t in _SYNC:
        k_common = min((len(v.get(t, [])) for v in kernels.values()), default=0)
        matched += [{r: v[t][k] for r, v in kernels.items()} for k in range(k_common)]
    ref = min(kernels) if kernels else 0
    offsets = {r: statistics.median(m[r]["end"] - m[ref]["end"] for m in matched) if matched else 0.0 for r in kernels}
    resolved = 0
    for m in matched:
        starts = {r: g["ts"] - offsets[r] for r, g in m.items()}
        ends = [g["end"] - offsets[r] for r, g in m.items()]
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


def busbw(tables: dict[int, dict[str, list[dict[str, Any]]]], ctype: str, msg_bytes: float) -> dict[str, Any]:
    """Mean bus bandwidth (GB/s) of the collectives of type ``ctype`` and size ``msg_bytes``, from
    the kernels' own sizes and durations (module docstring); ``tables``: rank -> its
    :func:`comm_table`. Returns ``{"busbw_gbps", "count"}``; ``busbw_gbps`` None when no kernel of
    that type and size carries its size."""
    kernels = {r: t.get(ctype, []) for r, t in tables.items()}
    sized: dict[int, list[tuple[float, int, float]]] = {}
    for r, ks in kernels.items():
        rows = []
        for g in ks:
            a, size = g["args"], _size(ctype, g["args"])
            if _same(size, msg_bytes):
                gs = a.get("Group size")
                rows.append((g["dur"], int(gs) if isinstance(gs, (int, float)) else len(tables), size))
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


def rank_tables(rank_results: list[dict[str, Any]]) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """Rank -> :func:`comm_table` of the first file of each rank: the one the analysis pass fed to
    the reader (``reader.comm``), else the trace read now. Raises InputError (a trace it cannot read)."""
    by_path = {str(r.get("path")): r for r in rank_results}
    out = {}
    for rank, path in first_files(rank_results).items():
        comm = ((by_path.get(path) or {}).get("reader") or {}).get("comm")
        out[rank] = comm if comm is not None else comm_kernels(path)
    return out


def rederive_claim(metric: str, rank_results: list[dict[str, Any]]) -> tuple[Any, Tolerance, str]:
    """``(value, tolerance, method)`` for a cross-rank claim's ``metric`` (``collectives.straggler_rank``,
    ``collectives.<type>.<bytes>.busbw_gbps``) from every rank's :func:`rank_tables`; value None
    (-> inconclusive) with the reason in ``method`` when this path cannot re-derive it (a trace it
    cannot read, an unknown metric)."""
    m = re.match(r"^collectives\.([a-z_]+)\.([0-9.eE+-]+)\.busbw_gbps$", metric)
    if metric != "collectives.straggler_rank" and not m:
        return None, Tolerance(), f"no independent path for metric {metric}"
    try:
        tables = rank_tables(rank_results)
    except Ai4sError as e:
        return None, Tolerance(), f"the full-load reader could not read a rank trace: {e}"
    if m is None:
        s = arrival_order(tables)
        shift = ", ".join(f"rank {r} {v:+.1f} us" for r, v in sorted(s["offsets_us"].items()) if v)
        return (s["rank"], Tolerance(abs=0.0),
                f"arrival order re-derived from each rank's kernels by the full-load reader on clocks aligned on "
                f"the collectives' ends ({shift or 'no offset'}): rank {s['rank']} starts last at "
                f"{s['times_last']} of {s['n_collectives']} collectives common to all ranks "
                f"({s['n_resolved']} resolved)")
    b = busbw(tables, m.group(1), float(m.group(2)))
    return (round(b["busbw_gbps"], 6) if b["busbw_gbps"] is not None else None, Tolerance(rel=0.02),
            f"busbw from the kernels' own message sizes and durations over {b['count']} matched instances "
            "(nccl-tests doc/PERFORMANCE.md factors), full-load reader")


def collective_summary(tables: dict[int, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """The verifier's cross-rank summary of every rank's :func:`comm_table` (``tables``: rank ->
    table): ``{"straggler_rank"}`` (:func:`arrival_order`) and ``"groups"``: one row per collective
    type and message size, ``{"collective", "msg_bytes", "count", "latency_us", "busbw_gbps"}`` --
    ``latency_us`` the summed shortest duration across ranks of each matched instance (the
    collective's own time, without the early ranks' wait; µs), ``busbw_gbps`` as :func:`busbw`
    (GB/s = 1e9 B/s). Sizes are the kernels' own ``In msg nelems`` (``Out msg nelems`` for
    all_gather) x dtype bytes; a kernel without them is left out."""
    sizes: set[tuple[str, float]] = set()
    for t in tables.values():
        for ctype, ks in t.items():
            sizes.update((ctype, z) for z in (_size(ctype, g.get("args")) for g in ks) if z is not None)
    groups = []
    for ctype, size in sorted(sizes):
        bw = busbw(tables, ctype, size)
        if not bw["count"]:
            continue
        groups.append({"collective": ctype, "msg_bytes": size, "count": bw["count"],
                       "latency_us": _latency_us(tables, ctype, size), "busbw_gbps": bw["busbw_gbps"]})
    return {"straggler_rank": arrival_order(tables)["rank"] if len(tables) > 1 else None, "groups": groups}


def _latency_us(tables: dict[int, dict[str, list[dict[str, Any]]]], ctype: str, size: float) -> float:
    """Σ over the matched instances of type ``ctype`` and size ``size`` of the shortest kernel
    duration across ranks (µs), matched as :func:`busbw` matches them (k-th of each rank)."""
    per = []
    for t in tables.values():
        per.append([float(g["dur"]) for g in t.get(ctype, []) if _same(_size(ctype, g.get("args")), size)])
    k = min((len(d) for d in per), default=0)
    return sum(min(d[i] for d in per) for i in range(k))
