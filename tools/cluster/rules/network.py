"""Seed 003 rules 33-38: the Network section.

Sources (seed 003): "## Network / ### Introduction" (numbered tool list, the payload sweep, busbw
and algbw defined there, rank counts, NVLS and who set ``NCCL_NVLS_ENABLE``, never "kept"),
"### Intra-node all-reduce benchmark" (transport, spec uni GBps, table, peak % of spec),
"Transport detection" / "Inter-node" (never score multi-node busbw against the NIC spec, no
``(k-1)/(n-1)``; quote peak busbw, the NCCL path, the 1-node figure at the same payload), "Do not
name the launcher" / "Do not credit DeepSpeed / torchrun / srun".
"""

from __future__ import annotations

import re

from ..mdparse import Doc
from .base import Violation, prose_sentences, rule


def benchmarks(doc: Doc):
    net = doc.top.get("Network")
    return [c for c in (net.children if net else []) if c.title.endswith("benchmark")]


@rule(33, "network_intro", "Network / Introduction", "with a Network benchmark, the Network ### Introduction is a numbered "
      "list of the tools, says what the sweep covers (payloads) and on how many ranks, and defines busbw (bus bandwidth) and "
      "algbw (algorithm bandwidth) there")
def network_intro(doc: Doc) -> list[Violation]:
    net = doc.top.get("Network")
    if net is None or not benchmarks(doc):
        return []
    intro = net.child("Introduction")
    if intro is None:
        return [Violation("network_intro", net.line, "Network has benchmarks but no ### Introduction")]
    t = " ".join(b.text for b in intro.blocks)
    v = []
    for term, exp in (("busbw", "bus bandwidth"), ("algbw", "algorithm bandwidth")):
        if not re.search(rf"{term} \({exp}", t):
            v.append(Violation("network_intro", intro.line, f"define {term} ({exp}) in the Network Introduction"))
    if not re.search(r"\bpayloads?\b", t) or not re.search(r"\d+ (KiB|MiB|GiB)", t):
        v.append(Violation("network_intro", intro.line, "say what the sweep covers (the payloads, e.g. from 32 KiB)"))
    if not re.search(r"\branks?\b|process per GPU", t):
        v.append(Violation("network_intro", intro.line, "say how many ranks (one process per GPU) it ran on"))
    return v


@rule(34, "nvls", "Network / Introduction", "the Network Introduction explains NVLS (in-network all-reduce on the NVSwitch, "
      "no help to other collectives) and records NCCL_NVLS_ENABLE and who set it (container image, cluster), or that it was "
      "unset; never that it was 'kept'")
def nvls(doc: Doc) -> list[Violation]:
    net = doc.top.get("Network")
    if net is None or not benchmarks(doc):
        return []
    intro = net.child("Introduction")
    if intro is None:
        return []
    v = []
    t = " ".join(b.text for b in intro.blocks)
    if not (re.search(r"NVLS \(NVLink SHARP\)", t) and re.search(r"NVSwitch", t) and re.search(r"does not", t)):
        v.append(Violation("nvls", intro.line, "explain NVLS: NVLink SHARP, all-reduce inside the NVSwitch, does not speed up "
                                               "other collectives"))
    m = re.search(r"`NCCL_NVLS_ENABLE=(\w+)` was set by ([^.]+)\.", t)
    if m is None and not re.search(r"`NCCL_NVLS_ENABLE` was unset", t):
        v.append(Violation("nvls", intro.line, "record NCCL_NVLS_ENABLE and who set it (or that it was unset)"))
    elif m is not None and re.match(r"\s*`?(NCCL|TORCH|NVSHMEM)_\w+", m.group(2)):
        v.append(Violation("nvls", intro.line, "'set by' names a variable, not who set it (the container image, the cluster)"))
    if re.search(r"\bkept\b", t):
        v.append(Violation("nvls", intro.line, "name who set the NCCL variables, not that they were 'kept'"))
    return v


@rule(35, "intra_node", "Network / Intra-node all-reduce benchmark", "each intra-node benchmark gives a busbw table and its "
      "peak busbw as % of the link's unidirectional spec; the transport (NVLink gen or PCIe) and its spec GB/s are named")
def intra_node(doc: Doc) -> list[Violation]:
    v = []
    fab = doc.sec("Environment", "Fabric")
    fab_txt = " ".join(c for t in (fab.tables if fab else []) for r in t.rows for c in r)
    for s in benchmarks(doc):
        if not s.title.startswith("Intra-node"):
            continue
        if not any(any("busbw" in h for h in t.header) for t in s.tables):
            v.append(Violation("intra_node", s.line, f"### {s.title} has no busbw table"))
        t = " ".join(b.text for b in s.blocks)
        if not re.search(r"(?i)peak busbw \d[\d.]* GB/s", t):
            v.append(Violation("intra_node", s.line, f"### {s.title}: quote the peak busbw"))
        if not re.search(r"\d+(\.\d+)?% of the .*spec of \d+ GB/s", t):
            v.append(Violation("intra_node", s.line, f"### {s.title}: the peak as % of the link's unidirectional spec"))
        if not re.search(r"NVLink|PCIe", t + " " + fab_txt):
            v.append(Violation("intra_node", s.line, "name the transport (NVLink gen, NV#, or PCIe)"))
    return v


NIC_PERCENT = re.compile(
    r"\d+(\.\d+)?\s*%\s*(of\s+)?(the\s+)?([\w/.-]+\s+){0,4}?(nic|nics|rail|line[- ]rate|link rate|port rate|ib|infiniband|efa|roce|"
    r"adapter|hca|network card)\b|\bof (the )?(nic|rail|line rate)( spec)?\b|\(k\s*-\s*1\)\s*/\s*\(n\s*-\s*1\)|\bon the wire\b",
    re.I)
"""Seed 003 "Transport detection": never 'X% of NIC / rail', never busbw x (k-1)/(n-1)."""


@rule(36, "nic_percent", "Transport detection / Inter-node", "multi-node busbw is never a fraction of the NIC, rail or line "
      "rate, nor scaled by (k-1)/(n-1), in the Network section or Findings")
def nic_percent(doc: Doc) -> list[Violation]:
    v = [Violation("nic_percent", b.line, f"busbw scored against the NIC: {m.group(0)!r}")
         for b, s in prose_sentences(doc) for m in [NIC_PERCENT.search(s)] if m]
    for s in benchmarks(doc):
        if s.title.startswith("Inter-node"):
            for b in s.blocks:
                if re.search(r"\d\s*%", b.prose):
                    v.append(Violation("nic_percent", b.line, "the inter-node section quotes a percentage: quote peak busbw, "
                                                              "the NCCL path and the 1-node figure at the same payload"))
    return v


@rule(37, "inter_node", "Network / Inter-node all-reduce benchmark", "the heading is 'Inter-node all-reduce benchmark' (ranks "
      "in the TOC); it gives transport and NIC inventory, the busbw table, the peak busbw, the NCCL path and the 1-node busbw "
      "at the same payload")
def inter_node(doc: Doc) -> list[Violation]:
    v = []
    net = doc.top.get("Network")
    for c in (net.children if net else []):
        if c.title.lower().startswith("inter-node") and "all-reduce" in c.title and c.title != "Inter-node all-reduce benchmark":
            v.append(Violation("inter_node", c.line, f"heading {c.title!r}: write 'Inter-node all-reduce benchmark'"))
    s = net.child("Inter-node all-reduce benchmark") if net else None
    if s is None:
        return v
    t = " ".join(b.text for b in s.blocks)
    gaps = net.child("Gaps") if net else None
    t_gaps = " ".join(b.text for b in (gaps.blocks if gaps else []))
    if not any(any("busbw" in h for h in tb.header) for tb in s.tables):
        v.append(Violation("inter_node", s.line, "no busbw table"))
    has_intra = any(c.title.startswith("Intra-node all-reduce") for c in net.children)
    # (what, in the section, or a Gaps item saying it could not be checked; None: required)
    for what, rx, gap_rx in (("the peak busbw", r"[Pp]eak busbw \d", None),
                             ("the NCCL path (IB or Socket, NVLS yes/no)", r"NCCL path", r"NCCL path"),
                             ("the transport and NIC inventory", r"\b(InfiniBand|RoCE|EFA|Ethernet|IB|NIC)\b|mlx5|rdmap|ionic",
                              r"adapters? .*not checked")):
        if not re.search(rx, t) and not (gap_rx and re.search(gap_rx, t_gaps)):
            v.append(Violation("inter_node", s.line, f"the inter-node section gives {what}"))
    if has_intra and not re.search(r"1-node|one node|intra-node", t):
        v.append(Violation("inter_node", s.line, "the inter-node section gives the 1-node busbw at the same payload"))
    return v


LAUNCHERS = re.compile(r"\b(deepspeed|torchrun|srun|pdsh|mpirun|mpiexec|torch\.distributed\.run)\b", re.I)


@rule(38, "no_launcher", "Network / Findings", "the launcher (DeepSpeed, torchrun, srun, pdsh) is never credited in the Network "
      "results or in Findings: the fabric is the subject")
def no_launcher(doc: Doc) -> list[Violation]:
    v = []
    blocks = [b for s in benchmarks(doc) for b in s.all_blocks()]
    f = doc.top.get("Findings")
    blocks += f.all_blocks() if f else []
    for b in blocks:
        if m := LAUNCHERS.search(b.prose):
            v.append(Violation("no_launcher", b.line, f"{m.group(0)!r}: the fabric is the subject, not the launcher"))
    return v
