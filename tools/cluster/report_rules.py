"""Seed 003's report rules on structure, wording and numbers, each a function ``text -> [Violation]``
named by the rule it enforces (:data:`RULE_CHECKS`); :mod:`report_check` runs them with its own.

Every rule cites seed 003 (``/work/shared/seeds/003_*``): "Report template" (title, TOC,
Environment, Compute, Network, Storage, Findings), "Final pass before you show the report", the
Loop step 8, "Transport detection" and "Do not leak eval-process shorthand". docs/rules.md lists
them with their tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .mdparse import (Section, anchor_map, lines_outside_fences, sections, strip_links, table_line_numbers, tables, walk)


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``rule`` (a name of ``report_check.RULES``), 1-based ``line``, ``message``."""

    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.line}: [{self.rule}] {self.message}"


def _prose(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Lines that are prose: not tables, not headings, inline code and link targets removed."""
    tl = table_line_numbers(lines)
    return [(i, re.sub(r"`[^`]*`", "", strip_links(l))) for i, l in lines if i not in tl and not l.lstrip().startswith("#")]


def _top(text: str) -> tuple[Section, dict[str, Section]]:
    root = sections(text)
    h1 = root.children[0] if root.children and root.children[0].level == 1 else root
    return h1, {c.title: c for c in h1.children if c.level == 2}


# ---------------------------------------------------------------------------------------------
# file name, title, header
# ---------------------------------------------------------------------------------------------

FILE_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*-\d{4}-\d{2}-\d{2}-\d{4}Z\.md$")
"""Seed 003 "Report template": ``reports/<gpu>-<datetime>.md``, e.g. ``h200-2026-09-17-1938Z.md``."""
TITLE = re.compile(r"^# Cluster eval: (\d+) (node|nodes) of ((\d+)× \S.*|CPU-only)$")
"""Seed 003: ``# Cluster eval: <N> nodes of <G>× <GPU>`` (``4 nodes of 8× H200``, ``1 node of 8× B200``);
a node with no GPU visible says ``CPU-only`` in place of ``<G>× <GPU>``."""


def check_file_name(name: str) -> list[Violation]:
    """``file_name``: the report file is ``<gpu>-<YYYY-MM-DD>-<HHMM>Z.md``."""
    if FILE_NAME.match(name):
        return []
    return [Violation("file_name", 1, f"file name {name!r} is not <gpu>-<YYYY-MM-DD>-<HHMM>Z.md (e.g. h200-2026-09-17-1938Z.md)")]


def check_title(text: str) -> list[Violation]:
    """``title``: the title names node count and GPUs per node with singular/plural agreement;
    the header bullets Datetime (UTC) / Access / Nodes / GPUs and the relative raw-logs link follow."""
    lines = text.splitlines()
    first = next(((i, l) for i, l in enumerate(lines, 1) if l.startswith("# ")), None)
    if first is None:
        return []
    i, l = first
    m = TITLE.match(l)
    v = []
    if not m:
        v.append(Violation("title", i, f"title {l!r} is not '# Cluster eval: <N> nodes of <G>× <GPU>'"))
    elif (m.group(1) == "1") != (m.group(2) == "node"):
        v.append(Violation("title", i, f"'{m.group(1)} {m.group(2)}': singular/plural does not match the count"))
    head = "\n".join(lines[i:i + 12])
    for field in ("- Datetime (UTC):", "- Access:", "- Nodes / GPUs:"):
        if field not in head:
            v.append(Violation("title", i, f"header bullet {field!r} is missing under the title"))
    if not re.search(r"^Raw logs: \[`?raw-[^\]]*\]\((raw-[^)/]+/?)\)\.?\s*$", head, re.M):
        v.append(Violation("title", i, "no 'Raw logs: [`raw-<datetime>/`](raw-<datetime>/).' line with a relative link"))
    return v


# ---------------------------------------------------------------------------------------------
# table of contents
# ---------------------------------------------------------------------------------------------

_TOC_BANNED_LABELS = ("DCGM", "MAMF", "MSMF", "Lemon GEMM", "lemon GEMM")


def check_toc_ran(text: str) -> list[Violation]:
    """``toc_ran``: TOC entries only for what ran (plus inventory): no entry whose target section
    holds only Gaps; every TOC label equals its heading; Compute labels are purposes, not tool
    names; every benchmark heading of Compute/Network/Storage/Findings is in the TOC."""
    h1, top = _top(text)
    toc = top.get("Table of Contents")
    if toc is None:
        return [Violation("toc_ran", 1, "no '## Table of Contents'")]
    amap = anchor_map(text)
    v, linked = [], set()
    for i, l in toc.body:
        m = re.match(r"^\s*\d+\.\s+\[([^\]]+)\]\(#([^)\s]+)\)", l)
        if not m:
            continue
        label, anchor = m.group(1), m.group(2)
        linked.add(anchor)
        if anchor not in amap:
            continue  # toc_anchor reports it
        hl, lvl, title = amap[anchor]
        if label.replace("`", "") != title.replace("`", ""):
            v.append(Violation("toc_ran", i, f"TOC label {label!r} differs from its heading {title!r}"))
        if any(b in label for b in _TOC_BANNED_LABELS):
            v.append(Violation("toc_ran", i, f"TOC label {label!r} names a tool; label the purpose, put the tool after the dash"))
        sec = next((s for s in walk(h1) if s.line == hl), None)
        if sec is not None and sec.level == 2 and sec.title not in ("Environment", "Findings", "Storage"):
            real = [c for c in sec.children if c.title not in ("Gaps", "Introduction")]
            if not real:
                v.append(Violation("toc_ran", i, f"TOC entry {label!r}: that section holds no result (only Gaps), so it did not run"))
    for name in ("Compute", "Network", "Storage", "Findings"):
        sec = top.get(name)
        if sec is None:
            continue
        for c in sec.children:
            if c.title in ("Introduction", "Gaps"):
                continue
            a = next((k for k, (ln, _l, _t) in amap.items() if ln == c.line), None)
            if a and a not in linked:
                v.append(Violation("toc_ran", c.line, f"heading {c.title!r} ran but has no TOC entry"))
    return v


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------

ENV_TABLES = ("Host", "GPU", "Fabric", "Filesystems", "Software")
"""Seed 003 "Environment": five small tables Host / GPU / Fabric / Filesystems / Software."""


def check_environment(text: str) -> list[Violation]:
    """``environment``: ## Environment holds the five tables in order; Host's first row is the OS;
    HBM in GiB only; three SM clocks (boost, saturated, idle); no MAMF/MSMF, no venv path, no
    used/free capacity."""
    _h1, top = _top(text)
    env = top.get("Environment")
    if env is None:
        return [Violation("environment", 1, "no '## Environment' section")]
    v = []
    got = [c.title for c in env.children]
    if got != list(ENV_TABLES):
        v.append(Violation("environment", env.line, f"Environment subsections {got} are not {list(ENV_TABLES)}"))
    for c in env.children:
        t = tables(c.all_lines)
        if not t and not (c.title == "GPU" and "no GPU" in c.text()):
            v.append(Violation("environment", c.line, f"### {c.title} has no table"))
        if c.title == "Host" and t and t[0][3] and not re.match(r"(?i)^(os|operating system)$", t[0][3][0][1][0].strip()):
            v.append(Violation("environment", t[0][3][0][0], "the Host table's first row is not the OS"))
        if c.title == "GPU" and t:
            body = c.text()
            if re.search(r"\d\s*MiB", body):
                v.append(Violation("environment", c.line, "HBM in GiB only, never MiB"))
            if "clock" in body.lower() and not all(w in body.lower() for w in ("boost", "saturated", "idle")):
                v.append(Violation("environment", c.line, "SM clocks need boost, saturated and parked idle"))
    for i, l in env.all_lines:
        if re.search(r"\b(MAMF|MSMF)\b", l):
            v.append(Violation("environment", i, "MAMF/MSMF are not named in Environment (they start in Compute)"))
        if re.search(r"venv|virtualenv|/envs?/", l, re.I):
            v.append(Violation("environment", i, "the eval venv path is not a report field"))
    return v


def check_no_fullness(text: str) -> list[Violation]:
    """``no_fullness``: never how full a partition is (no Use%, % full, free, used)."""
    rx = re.compile(r"\bUse%|\d\s*%\s*full\b|\b\d[\d.,]*\s*[KMGTP]i?B?\s+(free|used|available)\b|\b(free|used) space\b", re.I)
    return [Violation("no_fullness", i, f"reports how full a partition is: {l.strip()[:60]!r}")
            for i, l in lines_outside_fences(text) if rx.search(l)]


# ---------------------------------------------------------------------------------------------
# Compute
# ---------------------------------------------------------------------------------------------

COMPUTE_HEADINGS = ("Introduction", "Hardware health", "GPU performance benchmarks", "Find underperforming GPUs", "Gaps")


def check_compute(text: str) -> list[Violation]:
    """``compute``: Compute headings are the seed's purposes (not DCGM/MAMF/Lemon); Hardware
    health is Pass or Fail; MAMF is never a per-GPU column; Find underperforming GPUs opens with
    a TLDR naming both outcomes or the `host(nodeN):gpuK` cards."""
    _h1, top = _top(text)
    comp = top.get("Compute")
    if comp is None:
        return []
    v = []
    for c in comp.children:
        if c.title not in COMPUTE_HEADINGS:
            v.append(Violation("compute", c.line, f"Compute heading {c.title!r} is not one of {list(COMPUTE_HEADINGS)}"))
    hh = comp.child("Hardware health")
    if hh is not None and not re.search(r"\*\*(Pass|Fail)\*\*", hh.text()):
        v.append(Violation("compute", hh.line, "Hardware health states neither **Pass** nor **Fail**"))
    for _i, head, _a, _b in tables(comp.all_lines):
        if any(h.lower() == "gpu" for h in head) and any("MAMF" in h for h in head):
            v.append(Violation("compute", _i, "MAMF exists for GPU0 only: never a per-GPU column"))
    fu = comp.child("Find underperforming GPUs")
    if fu is not None:
        first = next((l.strip() for _i, l in fu.body if l.strip()), "")
        ok = first == "**TLDR: no under-performing or dead GPUs**" or re.match(
            r"^\*\*TLDR: (under-performing|dead): `[^`]+\(node\d+\):gpu\d+`", first)
        if not ok:
            v.append(Violation("compute", fu.line, f"Find underperforming GPUs must open with the TLDR, got {first[:50]!r}"))
    return v


# ---------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------


def check_nic_percent(text: str) -> list[Violation]:
    """``nic_percent``: multi-node busbw never as a fraction of the NIC / rail spec, nor the
    ``(k-1)/(n-1)`` wire factor; the Inter-node all-reduce benchmark section quotes no %."""
    v = []
    rx = re.compile(r"%\s*(of\s+)?(the\s+)?(\w+\s+)?(nic|rail|ib|infiniband|efa|roce|line[- ]rate|adapter|hca)\b"
                    r"|\bof (the )?(nic|rail)( spec)?\b|\(k\s*-\s*1\)\s*/\s*\(n\s*-\s*1\)|on the wire", re.I)
    for i, l in lines_outside_fences(text):
        if rx.search(strip_links(l)):
            v.append(Violation("nic_percent", i, f"multi-node busbw scored against the NIC: {l.strip()[:60]!r}"))
    _h1, top = _top(text)
    net = top.get("Network")
    sec = net.child("Inter-node all-reduce benchmark") if net else None
    if sec is not None:
        for i, l in _prose(sec.all_lines):
            if "%" in l:
                v.append(Violation("nic_percent", i, "the inter-node section quotes a percentage; quote peak busbw and the NCCL path"))
    return v


def check_nccl_env(text: str) -> list[Violation]:
    """``nccl_env``: the NCCL environment is recorded with who set it — the Software table's NCCL
    environment row says ``set by``; with a Network benchmark, the Network Introduction records
    ``NCCL_NVLS_ENABLE`` as set by someone or unset, never "kept"."""
    _h1, top = _top(text)
    v = []
    env = top.get("Environment")
    sw = env.child("Software") if env else None
    for _i, _h, _a, body in tables(sw.all_lines if sw else []):
        for ln, c in body:
            if c and c[0].lower().startswith("nccl env") and "set by" not in " ".join(c[1:]):
                v.append(Violation("nccl_env", ln, "the NCCL environment row does not say who set it ('set by ...')"))
    net = top.get("Network")
    if net is not None and any(c.title not in ("Introduction", "Gaps") for c in net.children):
        intro = net.child("Introduction")
        body = intro.text() if intro else ""
        if "NCCL_NVLS_ENABLE" not in body or not re.search(r"set by \w|\bunset\b", body):
            v.append(Violation("nccl_env", (intro or net).line, "Network Introduction must record NCCL_NVLS_ENABLE and who set it"))
        if re.search(r"\bkept\b", body):
            v.append(Violation("nccl_env", (intro or net).line, "name who set the NCCL variables, not that they were 'kept'"))
    return v


def check_node_scope(text: str) -> list[Violation]:
    """``node_scope``: a 1-node report has no Inter-node heading, TOC line or "skipped" note (1
    node is not a gap); connectivity is labelled by the ranks it ran on."""
    m = re.search(r"^# Cluster eval: (\d+) node", text, re.M)
    if not m or m.group(1) != "1":
        return []
    v = []
    for i, l in lines_outside_fences(text):
        if re.search(r"inter-node (all-reduce|connectivity)|inter-node.*(skipped|1 node|one node|single node)", l, re.I):
            v.append(Violation("node_scope", i, "1 node: no Inter-node section, TOC line or skip note"))
    return v


def check_plots_inlined(text: str) -> list[Violation]:
    """``plots_inlined``: every plot is an inline image ``![...](raw-.../x.png)`` with a relative
    path, and each all-reduce / collective benchmark section shows its plot."""
    v = []
    for i, l in lines_outside_fences(text):
        for m in re.finditer(r"(!?)\[[^\]]*\]\(([^)\s]+\.(png|svg|jpe?g))\)", l, re.I):
            if not m.group(1):
                v.append(Violation("plots_inlined", i, f"plot {m.group(2)} is linked, not inlined (use ![alt](path))"))
            elif m.group(2).startswith(("/", "../", "http")):
                v.append(Violation("plots_inlined", i, f"plot path {m.group(2)} is not relative to the report"))
    _h1, top = _top(text)
    net = top.get("Network")
    for c in (net.children if net else []):
        if c.title.endswith("benchmark") and tables(c.all_lines) and "![" not in c.text():
            v.append(Violation("plots_inlined", c.line, f"### {c.title} has no inlined plot"))
    return v


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------

FIO_COLUMNS = ["size", "rw", "latency (msec)", "bw (MiBps)", "IOPS (M)"]
PARTITION_COLUMNS = ["mount", "size", "type", "device / server"]


def check_storage_layout(text: str) -> list[Violation]:
    """``storage_layout``: Storage opens with Existing Partitions (columns mount / size / type /
    device / server, first row ``/``), then Introduction; fio tables have the seed's columns, the
    shared ones with ``local/shared ×`` last; shared headings read "Shared ... IO benchmark"."""
    _h1, top = _top(text)
    st = top.get("Storage")
    if st is None:
        return []
    v = []
    titles = [c.title for c in st.children]
    if not titles or titles[0] != "Existing Partitions":
        v.append(Violation("storage_layout", st.line, "Storage must open with ### Existing Partitions"))
    if "Introduction" in titles and titles.index("Introduction") != 1:
        v.append(Violation("storage_layout", st.line, "### Introduction comes right after ### Existing Partitions"))
    ep = st.child("Existing Partitions")
    t = tables(ep.all_lines) if ep else []
    if ep and (not t or t[0][1] != PARTITION_COLUMNS):
        v.append(Violation("storage_layout", ep.line, f"Existing Partitions table columns must be {PARTITION_COLUMNS}"))
    elif ep and (not t[0][3] or t[0][3][0][1][0].strip("`") != "/"):
        v.append(Violation("storage_layout", ep.line, "the first Existing Partitions row is `/`"))
    for c in st.children:
        if c.title in ("Existing Partitions", "Introduction", "Gaps"):
            continue
        if c.title.startswith("Shared") and not re.match(r"^Shared .*IO benchmark$", c.title):
            v.append(Violation("storage_layout", c.line, f"heading {c.title!r}: write 'Shared <fs> IO benchmark'"))
        shared = c.title.startswith("Shared")
        for ln, head, _a, _b in tables(c.all_lines):
            want = FIO_COLUMNS + (["local/shared ×"] if shared and len(head) > 5 else [])
            if head != want:
                v.append(Violation("storage_layout", ln, f"fio table columns {head} are not {want}"))
    return v


def check_shared_grouping(text: str) -> list[Violation]:
    """``shared_grouping``: two shared-FS tables whose every bandwidth and IOPS cell differs by at
    most 5% (``abs(a-b)/min(a,b)``) are one group and share one table (seed 003 "Storage")."""
    _h1, top = _top(text)
    st = top.get("Storage")
    if st is None:
        return []
    vals = []
    for c in st.children:
        if c.title.startswith("Shared"):
            for _ln, head, _a, body in tables(c.all_lines):
                if "bw (MiBps)" in head and "IOPS (M)" in head:
                    bi, ii = head.index("bw (MiBps)"), head.index("IOPS (M)")
                    try:
                        vals.append((c, [(float(r[bi].replace("_", "")), float(r[ii])) for _l, r in body]))
                    except (ValueError, IndexError):
                        continue
    v = []
    for a in range(len(vals)):
        for b in range(a + 1, len(vals)):
            (ca, va), (cb, vb) = vals[a], vals[b]
            if len(va) == len(vb) and va and all(abs(x - y) / min(x, y) <= 0.05 for p, q in zip(va, vb) for x, y in zip(p, q) if min(x, y) > 0):
                v.append(Violation("shared_grouping", cb.line, f"{ca.title!r} and {cb.title!r} are within 5% in every cell: one table"))
    return v


# ---------------------------------------------------------------------------------------------
# Findings
# ---------------------------------------------------------------------------------------------

FINDINGS = ("Healthy subsystems", "Underperforming subsystems", "Needs operator input")
TARGET_WORDS = re.compile(r"official|spec|advertised|datasheet|median|vendor|provisioned", re.I)


def check_findings(text: str) -> list[Violation]:
    """``findings``: ## Findings is the last section; its headings are exactly the seed's three,
    in order, each with bullets, no Flags; bullets are not prefixed A./B./C.; no table; Needs
    operator input opens with the cannot-be-called sentence; an Underperforming bullet names its
    target (no verdict without a target)."""
    _h1, top = _top(text)
    fnd = top.get("Findings")
    if fnd is None:
        return [Violation("findings", 1, "no '## Findings' section")]
    v = []
    if list(top)[-1] != "Findings":
        v.append(Violation("findings", fnd.line, "## Findings must be the last section"))
    got = [c.title for c in fnd.children]
    if any(t not in FINDINGS for t in got) or got != [t for t in FINDINGS if t in got]:
        v.append(Violation("findings", fnd.line, f"Findings headings {got} must be among {list(FINDINGS)}, in that order"))
    for c in fnd.children:
        bullets = [(i, l) for i, l in c.body if re.match(r"^\s*[-*]\s", l)]
        if not bullets:
            v.append(Violation("findings", c.line, f"### {c.title} has no bullets: omit the heading"))
        for i, l in bullets:
            if re.match(r"^\s*[-*]\s+(\*\*)?[A-C]\.\s", l):
                v.append(Violation("findings", i, "Findings bullets are labelled by subsystem, never A./B./C."))
            if c.title == "Underperforming subsystems" and not TARGET_WORDS.search(l):
                v.append(Violation("findings", i, "an Underperforming bullet without a target (official, spec, advertised, median)"
                                                  " belongs in Needs operator input"))
        if c.title == "Needs operator input":
            lead = next((l for _i, l in c.body if l.strip()), "")
            if "cannot be called healthy or underperforming" not in lead:
                v.append(Violation("findings", c.line, "Needs operator input opens with: these cannot be called healthy or "
                                                       "underperforming until the figures arrive"))
    if tables(fnd.all_lines):
        v.append(Violation("findings", fnd.line, "Findings repeat a table; quote the numbers in the bullets"))
    return v


def check_gpu_naming(text: str) -> list[Violation]:
    """``gpu_naming``: in Findings every GPU is named `host(nodeN):gpuK`, and a slow one carries
    its three pass numbers (seed 003: "Every slow or dead GPU named as (node):gpu ... confirmed in
    three passes")."""
    _h1, top = _top(text)
    fnd = top.get("Findings")
    if fnd is None:
        return []
    v = []
    for i, l in fnd.all_lines:
        bare = re.sub(r"`[^`]*\(node\d+\):gpu\d+`", "", l)
        if re.search(r"\b(gpu|GPU)\s?#?\d+\b", bare):
            v.append(Violation("gpu_naming", i, "a GPU in Findings is named `host(nodeN):gpuK`"))
        if re.search(r"\(node\d+\):gpu\d+`\s+—\s+(?!dead)", l) and not re.search(r"\d+ / \d+ / \d+", l):
            v.append(Violation("gpu_naming", i, "a slow GPU needs its numbers from all three passes (a / b / c)"))
    return v


_UNIT = r"(MiB/s|MiBps|GB/s|GBps|TB/s|TFLOPS|msec|ms|µs|us|s|%|×|W|MHz|GHz|GiB|MiB|KiB|TiB|ranks?|jobs|passes|nodes?|GPUs?|SMs|CTAs|waves|calls|runs|shapes)"


def check_prose_numbers(text: str) -> list[Violation]:
    """``prose_numbers``: a prose ratio (``26.5×``), storage rate (``MiB/s``) or busbw figure is
    verbatim a cell of a table in the report; every decimal number in Findings carries its unit."""
    all_lines = lines_outside_fences(text)
    cellset = set()
    for _i, _h, _a, body in tables(all_lines):
        for _l, cs in body:
            cellset.update(c.strip("*` ").replace("_", "") for c in cs)
    v = []
    for i, l in _prose(all_lines):
        for m in re.finditer(r"(?<![\w.])(\d[\d_]*\.\d+)\s?(×|MiB/s|MiBps)", l):
            if m.group(1).replace("_", "") not in cellset:
                v.append(Violation("prose_numbers", i, f"{m.group(0)!r} is not a table cell verbatim"))
        for m in re.finditer(r"busbw\s+(\d[\d_]*\.\d+)\s?GB/s", l):
            if m.group(1).replace("_", "") not in cellset:
                v.append(Violation("prose_numbers", i, f"busbw {m.group(1)} GB/s is not a table cell verbatim"))
    _h1, top = _top(text)
    fnd = top.get("Findings")
    for i, l in _prose(fnd.all_lines if fnd else []):
        s = re.sub(r"\*\*", "", l)
        for m in re.finditer(r"(?<![\w.\-/(])(\d[\d_]*\.\d+)(?![\d.])\s*(\S*)", s):
            nxt = m.group(2)
            if not re.match(_UNIT + r"(?![A-Za-z])|/|–|-", nxt):
                v.append(Violation("prose_numbers", i, f"{m.group(1)} in Findings has no unit"))
    return v


_SINGULAR_TARGET = re.compile(
    r"the (figure|target|number|rate) (it|they|this|that) (is|are) supposed to hit"
    r"|(obtain|ask for|request|provide|supply|need) (the|its|their) (provisioned throughput|target|expected (value|figure|rate)|figure)\b(?!s)"
    r"|\bno published performance figure\b(?!s)", re.I)


def check_plural_targets(text: str) -> list[Violation]:
    """``plural_targets``: targets in the plural ("the figures they are supposed to hit"); the ask
    is never "the provisioned throughput" or one figure."""
    return [Violation("plural_targets", i, f"singular target: {l.strip()[:70]!r}")
            for i, l in _prose(lines_outside_fences(text)) if _SINGULAR_TARGET.search(l)]


def check_operator_ask(text: str) -> list[Violation]:
    """``operator_ask``: a storage bullet in Findings carries the full sweep (read and write at
    every measured size, each with MiB/s) and, under Needs operator input, asks for one value per
    measured cell with the conditions (client, jobs, 4 KiB blocks, ``O_DIRECT``)."""
    _h1, top = _top(text)
    fnd, st = top.get("Findings"), top.get("Storage")
    if fnd is None or st is None:
        return []
    sizes = set()
    for _ln, head, _a, body in tables(st.all_lines):
        if head[:2] == ["size", "rw"]:
            sizes.update(r[0] for _l, r in body)
    v = []
    for c in fnd.children:
        for i, l in c.body:
            if not re.match(r"^\s*[-*]\s", l) or "MiB/s" not in l:
                continue
            if len(re.findall(r"MiB/s", l)) < 2 * len(sizes) or any(s not in l for s in sizes):
                v.append(Violation("operator_ask", i, f"a storage bullet quotes the whole sweep: read / write at {sorted(sizes)}"))
            if c.title == "Needs operator input" and not all(w in l for w in ("client", "jobs", "4 KiB", "O_DIRECT", "read and write")):
                v.append(Violation("operator_ask", i, "the ask names one value per measured cell with its conditions "
                                                      "(read and write, client, jobs, 4 KiB blocks, O_DIRECT)"))
    return v


# ---------------------------------------------------------------------------------------------
# wording
# ---------------------------------------------------------------------------------------------

FILLER = ("collects the results into one table", "the results are shown below", "for reference", "as expected.", "as expected,",
          "it is worth noting", "this section covers", "as can be seen", "needless to say", "the table below shows",
          "results are summarized")
"""Seed 003 "Cut phrases that carry no information" and the Final pass's "No filler sentences"."""
SHORTHAND = re.compile(r"\bas configured\b|\bwe left it\b|\bplatform value\b|\bthe fix\b|\brerun\b|\bre-run\b|\bwe kept\b"
                       r"|\bkept (it|them|unchanged|as[- ]is)\b", re.I)
"""Seed 003 "Do not leak eval-process shorthand": kept, as configured, we left it, platform value, the fix, rerun."""
FEELINGS = re.compile(r"\b(feels?|suffers?|struggles?|punish(ed|es)?|painful|cares?)\b", re.I)
"""Seed 003: hardware and files do not feel, suffer, struggle, get punished or care."""
WORKLOAD = re.compile(r"\btraining (step|job|run)s?\b", re.I)
"""Seed 003: the eval does not know what the cluster is for: "sustained workload", not "training step"."""
BOOK = re.compile(r"\bthe book\b|\bMLE\b")


def check_wording(text: str) -> list[Violation]:
    """``filler``, ``shorthand``, ``feelings``, ``workload_assumed``, ``book_reference``: the
    seed's banned phrasings, one rule name each."""
    v = []
    for i, l in _prose(lines_outside_fences(text)):
        low = l.lower()
        for f in FILLER:
            if f in low:
                v.append(Violation("filler", i, f"filler phrase {f!r}"))
        if m := SHORTHAND.search(l):
            v.append(Violation("shorthand", i, f"eval-process shorthand {m.group(0)!r}: name the actor and the state"))
        if m := FEELINGS.search(l):
            v.append(Violation("feelings", i, f"{m.group(0)!r}: name the operation and its measured rate"))
        if m := WORKLOAD.search(l):
            v.append(Violation("workload_assumed", i, f"{m.group(0)!r}: write 'sustained workload'"))
        if m := BOOK.search(l):
            v.append(Violation("book_reference", i, f"{m.group(0)!r}: cite the GitHub URL"))
    return v


def check_intro_lists(text: str) -> list[Violation]:
    """``intro_lists``: every ### Introduction is a numbered list of the passes that ran."""
    v = []
    for s in walk(sections(text)):
        if s.title == "Introduction" and not any(re.match(r"^1\.\s", l) for _i, l in s.body):
            v.append(Violation("intro_lists", s.line, "### Introduction has no numbered list (1. 2. ...) of the passes that ran"))
    return v


_LAUNCHERS = re.compile(r"\b(deepspeed|torchrun|srun|pdsh|mpirun)\b", re.I)


def check_links(text: str) -> list[Violation]:
    """``links``: no ``../`` relative links (the report may be copied elsewhere); ml-engineering
    scripts and tables linked by absolute GitHub URL; the launcher is never credited in Network
    results or Findings."""
    v = []
    for i, l in lines_outside_fences(text):
        for m in re.finditer(r"\]\(([^)\s]+)\)", l):
            t = m.group(1)
            if t.startswith("../") or ("ml-engineering" in t and not t.startswith("https://github.com/stas00/ml-engineering/")):
                v.append(Violation("links", i, f"link {t!r}: absolute GitHub URLs, never ../"))
    _h1, top = _top(text)
    for name in ("Findings",):
        sec = top.get(name)
        for i, l in _prose(sec.all_lines if sec else []):
            if _LAUNCHERS.search(l):
                v.append(Violation("links", i, "Findings credit a launcher; the fabric is the subject"))
    net = top.get("Network")
    for c in (net.children if net else []):
        if c.title.endswith("benchmark"):
            for i, l in _prose(c.all_lines):
                if _LAUNCHERS.search(l):
                    v.append(Violation("links", i, "Network results do not name the launcher"))
    return v


RULE_CHECKS: dict[str, Callable[[str], list[Violation]]] = {
    "title": check_title, "toc_ran": check_toc_ran, "environment": check_environment, "no_fullness": check_no_fullness,
    "compute": check_compute, "nic_percent": check_nic_percent, "nccl_env": check_nccl_env, "node_scope": check_node_scope,
    "plots_inlined": check_plots_inlined, "storage_layout": check_storage_layout, "shared_grouping": check_shared_grouping,
    "findings": check_findings, "gpu_naming": check_gpu_naming, "prose_numbers": check_prose_numbers,
    "plural_targets": check_plural_targets, "operator_ask": check_operator_ask, "wording": check_wording,
    "intro_lists": check_intro_lists, "links": check_links,
}
"""Check function per group; ``wording`` reports as filler / shorthand / feelings /
workload_assumed / book_reference."""
RULE_NAMES = ("file_name", "title", "toc_ran", "environment", "no_fullness", "compute", "nic_percent", "nccl_env", "node_scope",
              "plots_inlined", "storage_layout", "shared_grouping", "findings", "gpu_naming", "prose_numbers",
              "plural_targets", "operator_ask", "filler", "shorthand", "feelings", "workload_assumed", "book_reference",
              "intro_lists", "links")
