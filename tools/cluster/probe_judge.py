"""Pass/fail of the node probe's measurements (seed 000 lessons 18, 19, 26).

Each measurement is judged against a reference, in this order:

1. the same measurement on the other nodes (or GPUs) probed together: their median (lesson 18:
   a node is judged against its peers, never against a "node class");
2. with no peer (a 1-node probe would compare the node with itself and could never flag STREAM,
   copy or all-reduce degradation): a MEASURED cluster baseline, the median over a previous
   healthy probe's parts (``node_health_probe.json``, ``--baseline``);
3. with neither: an absolute datasheet floor where one exists for that quantity and GPU (the
   device-to-device copy of a GPU family whose copy efficiency was measured, :data:`D2D_EFFICIENCY`;
   the launch-latency ceiling);
4. otherwise the check is NOT judged and says so: ``not checked: needs ...`` (never a silent pass).

Thresholds (:class:`Thresholds`) are the same relative limits whatever the reference.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from ..perfmodel.datasheet import find_gpu, gpu_key
from ..slurm.health import ProbeRow
from . import roce_gid


@dataclass(frozen=True)
class Thresholds:
    """Pass/fail limits, relative to the reference of the module docstring.

    - ``stream_rel_min`` 0.80: lesson 18/19's degraded dual-NUMA STREAM node stood out against
      statistically equivalent peers; 20% below the reference is well outside run-to-run noise.
    - ``launch_rel_max`` 2.0 and ``launch_abs_max_us`` 20.0: lesson 18 measured 3.5-3.8 µs per
      empty launch on every GPU of every node; 20 µs is over 5x that.
    - ``d2d_rel_min`` 0.80, ``allreduce_rel_min`` 0.80: the same relative rule for device copy and
      all-reduce bus bandwidth.
    """

    stream_rel_min: float = 0.80
    launch_rel_max: float = 2.0
    launch_abs_max_us: float = 20.0
    d2d_rel_min: float = 0.80
    allreduce_rel_min: float = 0.80


D2D_EFFICIENCY = {"H200": 4213.8 / 4800}
"""Device-to-device copy (read + write) GB/s over the datasheet HBM bandwidth, measured on healthy
GPUs: H200 4217.9, 4213.8 and 4214.3 GB/s of 4800 GB/s (reports/raw-2026-11-29/
node_health_probe-h200.json, reports/raw-2026-11-30-2gpu/node_health_probe-2gpu.json); the
lowest, 87.8%. A family without a measurement has no datasheet floor."""
NOT_CHECKED_PEERS = "not checked: needs other nodes probed with it or a measured baseline (--baseline node_health_probe.json)"


def _median(vals: Iterable[float | None]) -> float | None:
    v = [x for x in vals if x is not None]
    return statistics.median(v) if v else None


def peak_busbw(p: dict[str, Any]) -> float | None:
    ar = (p.get("gpu") or {}).get("allreduce") or {}
    return max((r["busbw_gbps"] for r in ar.get("rows", [])), default=None)


def _gpus(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [g for p in parts for g in (p.get("gpu") or {}).get("gpus", [])]


def _ref(peers: list[float | None], base: list[float | None], n_peers: int) -> tuple[float | None, str]:
    """(reference, what it is): the peers' median with two or more peers, else the baseline's."""
    if n_peers >= 2 and _median(peers) is not None:
        return _median(peers), f"median of {n_peers}"
    if _median(base) is not None:
        return _median(base), f"baseline median of {len([x for x in base if x is not None])}"
    return None, ""


def d2d_floor(name: str | None) -> tuple[float | None, str]:
    """(GB/s, source): the device copy a healthy GPU of this family reaches (datasheet HBM
    bandwidth x :data:`D2D_EFFICIENCY`), the reference of the absolute floor ``d2d_rel_min`` x it;
    (None, "") for a family without a measurement."""
    spec = find_gpu(name or "")
    eff = D2D_EFFICIENCY.get(gpu_key(name or "") or "")
    if spec is None or eff is None:
        return None, ""
    return spec.hbm_tbps * 1000 * eff, f"{spec.name} datasheet {spec.hbm_tbps * 1000:.0f} GB/s x measured {eff:.1%}"


def judge(parts: list[dict[str, Any]], th: Thresholds = Thresholds(), expected_nodes: Iterable[str] = (),
          baseline: list[dict[str, Any]] | None = None) -> tuple[list[ProbeRow], list[str]]:
    """Rows for every part and the ``not checked: needs ...`` lines of what could not be judged.
    ``baseline``: parts of a previous healthy probe (the reference when there are no peers)."""
    base = baseline or []
    rows: list[ProbeRow] = []
    notes: list[str] = []
    n_nodes = len(parts)
    gpus, base_gpus = _gpus(parts), _gpus(base)
    launch_ref, launch_src = _ref([g.get("launch_us") for g in gpus], [g.get("launch_us") for g in base_gpus], len(gpus))
    d2d_ref, d2d_src = _ref([g.get("d2d_gbps") for g in gpus], [g.get("d2d_gbps") for g in base_gpus], len(gpus))
    ar_ref, ar_src = _ref([peak_busbw(p) for p in parts], [peak_busbw(p) for p in base], n_nodes)
    seen = set()
    for p in parts:
        node = p["node"]
        seen.add(node)
        for m in p.get("mounts", []):
            rows.append(ProbeRow(node, f"mount:{m['label']}", m["ok"], m["detail"]))
        if p.get("stream_error"):
            rows.append(ProbeRow(node, "stream", False, p["stream_error"]))
        for dom, ks in (p.get("stream") or {}).items():
            vals = ", ".join(f"{k} {v:.1f}" for k, v in ks.items())
            refs = {k: _ref([q.get("stream", {}).get(dom, {}).get(k) for q in parts],
                            [q.get("stream", {}).get(dom, {}).get(k) for q in base], n_nodes) for k in ks}
            if all(r is None for r, _s in refs.values()):
                notes.append(f"{node}: stream:{dom}: GB/s {vals}; {NOT_CHECKED_PEERS}")
                continue
            bad = [k for k, v in ks.items() if refs[k][0] and v < th.stream_rel_min * refs[k][0]]
            src = next(s for r, s in refs.values() if r is not None)
            meds = ", ".join(f"{k} {refs[k][0]:.1f}" for k in ks if refs[k][0] is not None)
            detail = f"GB/s {vals}; {src} node(s): {meds}; limit {th.stream_rel_min:.0%} of it"
            rows.append(ProbeRow(node, f"stream:{dom}", not bad, (f"below limit: {', '.join(bad)}; " if bad else "") + detail))
        g = p.get("gpu") or {}
        for gi in g.get("gpus", []):
            i = gi["index"]
            if "launch_error" in gi:
                rows.append(ProbeRow(node, f"gpu{i}:launch_latency", False, gi["launch_error"]))
            elif "launch_us" in gi:
                v = gi["launch_us"]
                ok = v <= th.launch_abs_max_us and (launch_ref is None or v <= th.launch_rel_max * launch_ref)
                rel = f"{launch_src} GPU(s) {launch_ref:.2f} µs; limit {th.launch_rel_max:g}x it and " if launch_ref else "limit "
                rows.append(ProbeRow(node, f"gpu{i}:launch_latency", ok,
                                     f"{v:.2f} µs per empty launch; {rel}{th.launch_abs_max_us:g} µs"))
            if "d2d_error" in gi:
                rows.append(ProbeRow(node, f"gpu{i}:d2d_copy", False, gi["d2d_error"]))
            elif "d2d_gbps" in gi:
                v = gi["d2d_gbps"]
                ref, src = d2d_ref, f"{d2d_src} GPU(s)"
                if ref is None:
                    ref, src = d2d_floor(gi.get("name"))
                if ref is None:
                    notes.append(f"{node}: gpu{i}:d2d_copy: {v:.1f} GB/s read+write; not checked: needs other GPUs probed "
                                 "with it, a measured baseline (--baseline), or a GPU whose copy efficiency was measured")
                    continue
                rows.append(ProbeRow(node, f"gpu{i}:d2d_copy", v >= th.d2d_rel_min * ref,
                                     f"{v:.1f} GB/s read+write; {src} {ref:.1f} GB/s; limit {th.d2d_rel_min:.0%} of it"))
        ar = g.get("allreduce") or {}
        if "error" in ar:
            rows.append(ProbeRow(node, "allreduce", False, ar["error"]))
        elif ar.get("rows"):
            wrong = [r["bytes"] for r in ar["rows"] if not r["correct"]]
            pk = peak_busbw(p)
            if ar_ref is None and not wrong:
                notes.append(f"{node}: allreduce: peak busbw {pk:.1f} GB/s over {ar['ranks']} GPUs, sums correct; "
                             + NOT_CHECKED_PEERS)
                continue
            ok = not wrong and (ar_ref is None or pk >= th.allreduce_rel_min * ar_ref)
            detail = (f"peak busbw {pk:.1f} GB/s over {ar['ranks']} GPUs; "
                      + (f"{ar_src} node(s) {ar_ref:.1f} GB/s; limit {th.allreduce_rel_min:.0%} of it" if ar_ref else
                         "the sum is the check here (no peer, no baseline)"))
            rows.append(ProbeRow(node, "allreduce", ok, (f"wrong sum at {len(wrong)} payload(s); " if wrong else "") + detail))
    gid_rows, gid_notes = roce_gid.check(parts)
    rows += [ProbeRow(*r) for r in gid_rows]
    notes += gid_notes
    for n in expected_nodes:
        if n not in seen:
            rows.append(ProbeRow(n, "probe", False, "no probe result from this node"))
    return rows, notes
