"""The Findings of the cluster-evaluation report (seed 003 "## Findings"): which subsystem is
Healthy, Underperforming, or Needs operator input, each judged only against a target.

Targets (seed 003: "Official TFLOPS, NVLink spec GBps and a vendor-advertised FS figure are
targets"): the node median for a GPU (the three-pass lemon rule), the NVLink spec for the
intra-node fabric, the vendor's figures for a disk or a shared filesystem (unknown here, so those
go to Needs operator input with the ask in the shape of the measurement).
"""

from __future__ import annotations

from typing import Any

from . import gpu_bench

NVLINK_RING_FRACTION = 0.80
"""A ring collective's peak busbw on NVLink reaches ~80% of the link's unidirectional spec: "~80%
is the normal case" for all-reduce, all-gather and reduce-scatter on 8x H200 with NVLS off (80-82%
of 450 GBps), the ordinary NVLink efficiency (ml-engineering network/README.md, "Unidirectional vs
Bidirectional (Duplex)" and "SHARP"; the README seed 003 links for the NVLink spec). Below it the
intra-node fabric is underperforming against its spec; at or above it, healthy."""
NETWORK_README = "https://github.com/stas00/ml-engineering/blob/master/network/README.md#unidirectional-vs-bidirectional-duplex"
RISING = 0.97
"""The sweep's largest payload still gains more than 3% over the one before: the peak is not yet
reached, which the bullet says (a fact about the measurement, not a verdict)."""


def gpu_label(host: str, idx: int, g: int) -> str:
    """Seed 003's GPU name for Findings: ```host(nodeN):gpuK```."""
    return f"`{host}(node{idx}):gpu{g}`"


def fio_line(rows: list[dict[str, Any]]) -> str:
    """``read / write: 16 KiB **a MiB/s / b MiB/s**, ...``: the whole sweep, each value with its unit."""
    by = {(r["size"], r["rw"]): r["bw_mibps"] for r in rows}
    parts = []
    for s in dict.fromkeys(r["size"] for r in rows):
        parts.append(f"{s} **{by.get((s, 'read')):_.1f} MiB/s / {by.get((s, 'write')):_.1f} MiB/s**")
    return "read / write: " + ", ".join(parts)


def _pct(v: float, ref: float) -> str:
    return f"{100 * v / ref:.1f}%"


def peak_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``{busbw, bytes, rising, prev}`` of a busbw sweep: the peak row, whether the largest
    payload is the peak and still rising (:data:`RISING`), and the row before it."""
    rows = sorted(rows, key=lambda r: r["bytes"])
    pk = max(rows, key=lambda r: r["busbw_gbps"])
    last, prev = rows[-1], rows[-2] if len(rows) > 1 else None
    rising = pk is last and prev is not None and prev["busbw_gbps"] < RISING * last["busbw_gbps"]
    return {"busbw": pk["busbw_gbps"], "bytes": pk["bytes"], "rising": rising,
            "prev": (prev["busbw_gbps"], prev["bytes"]) if prev else None}


def _fabric_bullet(s: dict[str, Any], link_spec: float | None, link: str) -> tuple[str, str]:
    """(verdict, bullet) of one intra-node benchmark section: ``healthy`` / ``under`` against the
    link spec (:data:`NVLINK_RING_FRACTION`), ``operator`` without a spec."""
    name = s["heading"].replace("Intra-node ", "").replace(" benchmark", "")
    head = f"intra-node fabric, {name} over {s['ranks']} ranks"
    peaks = s.get("peaks") or []
    main = next((p for p in peaks if not p.get("disabled")), None)
    if not link_spec or main is None:
        return "operator", (f"{head} — {s['peak'].rstrip('.')}; obtain the link's advertised unidirectional GB/s to judge it.")
    pct = 100 * main["busbw"] / link_spec
    ref = f"the [~80% of the unidirectional spec]({NETWORK_README}) that a ring collective reaches on NVLink"
    verdict = "healthy" if pct >= 100 * NVLINK_RING_FRACTION else "under"
    txt = (f"{main['label']}: peak busbw {main['busbw']:.1f} GB/s at {gpu_bench.format_iec(main['bytes'])}, "
           f"{_pct(main['busbw'], link_spec)} of the {link} spec of {link_spec:.0f} GB/s per direction, "
           + ("at or above " if verdict == "healthy" else "below ") + ref)
    if main["rising"] and main["prev"]:
        txt += (f"; {gpu_bench.format_iec(main['bytes'])} was the sweep's largest payload and busbw was still rising there "
                f"(from {main['prev'][0]:.1f} GB/s at {gpu_bench.format_iec(main['prev'][1])})")
    for p in peaks:
        if p is not main:
            txt += f"; {p['label']}: peak busbw {p['busbw']:.1f} GB/s at {gpu_bench.format_iec(p['bytes'])}"
    return verdict, f"{head} — {txt}."


def findings(nodes, spec, local, shared, inter, net_sections=(), link_spec=None, link="") -> tuple[list[str], list[str], list[str]]:
    """(healthy, underperforming, needs-operator-input) bullets (seed 003 "Findings"): a verdict
    only against a target (official TFLOPS, the node median, the NVLink spec); a measurement
    without a known target goes to needs-operator-input with the ask in the measurement's shape."""
    healthy: list[str] = []
    under: list[str] = []
    operator: list[str] = []
    comp = nodes[0].get("compute", {})
    if comp.get("lemon") or comp.get("msmf"):
        bad = []
        for i, n in enumerate(nodes):
            lem = n["compute"].get("lemon") or {}
            for g in lem.get("slow", []):
                nums = " / ".join(f"{row[g]:.0f}" for row in lem["passes"])
                pct = " / ".join(f"{100 * (1 - row[g] / m):.1f}%" for row, m in zip(lem["passes"], lem["medians"]))
                bad.append(f"{gpu_label(n['node'], i, g)} — lemon GEMM {nums} TFLOPS in three passes, {pct} below the node median")
            for g in lem.get("dead", []):
                bad.append(f"{gpu_label(n['node'], i, g)} — dead: the lemon GEMM failed ({lem['errors'].get(str(g), 'no result')})")
        under += bad
        if not bad:
            parts = []
            if comp.get("mamf") and spec:
                b = comp["mamf"]["best"]
                parts.append(f"MAMF {b['tflops']:.0f} TFLOPS ({_pct(round(b['tflops']), spec)} of the official {spec:.0f} TFLOPS)")
            if comp.get("msmf"):
                t = min(g["tflops"] for n in nodes for g in n["compute"]["msmf"]["per_gpu"])
                parts.append(f"MSMF {round(t)} TFLOPS" + (f" ({_pct(round(t), spec)} of the official {spec:.0f} TFLOPS)" if spec else ""))
            if comp.get("lemon"):
                ps = [v for n in nodes for row in n["compute"]["lemon"]["passes"] for v in row if v is not None]
                parts.append(f"lemon GEMM {min(ps):.0f}–{max(ps):.0f} TFLOPS on every GPU in three passes with no GPU more than 2% "
                             "below its node median in all three")
            healthy.append("GPUs: " + "; ".join(parts) + ".")
    for s in net_sections:
        if s["heading"].startswith("Inter-node"):
            continue
        verdict, bullet = _fabric_bullet(s, link_spec, link)
        {"healthy": healthy, "under": under, "operator": operator}[verdict].append(bullet)
    if inter:
        pk = max(inter["rows"], key=lambda r: r["busbw_gbps"])
        operator.append(f"inter-node fabric: peak busbw {pk['busbw_gbps']:.1f} GB/s at {gpu_bench.format_iec(pk['bytes'])} over "
                        f"{inter['ranks']} ranks (a mixed NVLink + NIC figure, not a NIC rate); obtain the expected busbw per payload "
                        "at this rank count to judge it.")
    for r in local:
        fs = r["fs"]
        operator.append(
            f"local disk (`{fs.get('mount')}`, {_size(fs.get('size_bytes', 0))}, {fs.get('type')} on `{fs.get('source')}`): "
            f"{fio_line(r['rows'])}. The provisioned figures of this disk are unknown, so there is no target to compare against; "
            "obtain the expected MiB/s or IOPS at each measured file size, read and write, from one client with "
            f"{r['numjobs']} jobs, 4 KiB blocks and `O_DIRECT`.")
    for r in shared:
        fs = r["fs"]
        operator.append(
            f"shared network FS `{fs.get('mount')}` ({_size(fs.get('size_bytes', 0))}, {fs.get('type')}): {fio_line(r['rows'])}. "
            "Its provisioned throughput is unknown, so there is no target to compare against: filesystem software publishes no "
            "performance figures, because throughput is a property of the deployment (storage targets, their devices, the network, "
            "the stripe count). Obtain the service tier purchased for this mount and its default stripe layout, as expected MiB/s "
            f"or IOPS per measured file size, read and write, per client with {r['numjobs']} jobs, 4 KiB blocks and `O_DIRECT`.")
    return healthy, under, operator


def _size(nbytes: float) -> str:
    for unit, m in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= m:
            v = nbytes / m
            return f"{v:.0f} {unit}" if v >= 10 else f"{v:.1f} {unit}"
    return f"{nbytes:.0f} B"
