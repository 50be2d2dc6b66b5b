"""Seed 003 rules 12-22: the table of contents and the Environment.

Sources (seed 003 "Report template"): "## Table of Contents" (numbered list before Environment,
GitHub anchors, labels equal headings, purposes for Compute, only what ran, "benchmark" kept,
ranks in the annotation, the path after "on"), "## Environment" (five tables, Host / GPU / Fabric /
Filesystems / Software, OS first, HBM in GiB, three SM clocks, no MAMF/MSMF, PCIe on Host,
Local / Shared network FS, capacity only, no venv path), the Training wheels' Environment lesson.
"""

from __future__ import annotations

import re

from ..mdparse import Block, Doc, Section
from .base import Violation, house, rule

_TOC_ITEM = re.compile(r"^\[(?P<label>[^\]]+)\]\(#(?P<anchor>[^)\s]+)\)(?:\s+—\s+(?P<note>.*))?$")
TOOL_LABELS = ("DCGM", "MAMF", "MSMF", "Lemon GEMM", "lemon GEMM", "dcgmi", "mamf-finder")
"""Seed 003: 'Do not use DCGM / MAMF / Lemon GEMM as the TOC link text'."""
RESULT_PARENTS = ("Compute", "Network", "Storage", "Findings")


def toc_items(doc: Doc) -> list[tuple[Block, str, str, str]]:
    """(block, label, anchor, annotation) of every linked item of the Table of Contents."""
    toc = doc.top.get("Table of Contents")
    out = []
    for b in (toc.blocks if toc else []):
        if b.kind != "ordered":
            continue
        raw = b.inline.raw.strip()
        m = re.match(r"^\[([^\]]+)\]\(#([^)\s]+)\)\s*(?:—\s*(.*))?$", raw)
        if m:
            out.append((b, m.group(1).replace("`", ""), m.group(2), (m.group(3) or "").strip()))
    return out


def _has_result(s: Section) -> bool:
    """A table, an image, a bold Pass/Fail verdict or (Findings) bullets: something measured."""
    if s.all_tables() or any(ln.image for b in s.all_blocks() for ln in b.inline.links):
        return True
    if any(re.search(r"\b(Pass|Fail)\b", x) for b in s.blocks for x in b.inline.strong):
        return True
    return s.top() is not None and s.top().title == "Findings" and any(b.kind == "bullet" for b in s.blocks)


@rule(12, "toc", "Report template / Table of Contents", "a numbered '## Table of Contents' comes before Environment, and every "
      "#anchor in the report resolves to a heading (GitHub slugs, -1/-2 for repeated titles)")
def toc(doc: Doc) -> list[Violation]:
    v = []
    top = list(doc.top)
    t = doc.top.get("Table of Contents")
    if t is None:
        v.append(Violation("toc", 1, "no '## Table of Contents'"))
    else:
        if "Environment" in top and top.index("Table of Contents") > top.index("Environment"):
            v.append(Violation("toc", t.line, "the Table of Contents comes before Environment"))
        if not any(b.kind == "ordered" for b in t.blocks):
            v.append(Violation("toc", t.line, "the Table of Contents is a numbered list"))
    for b in doc.blocks:
        for ln in b.inline.links:
            if ln.href.startswith("#") and ln.href[1:] not in doc.anchors:
                v.append(Violation("toc", b.line, f"link {ln.href} matches no heading"))
    return v


@rule(13, "toc_labels", "Report template / Table of Contents", "every TOC label equals its heading; Compute labels are "
      "purposes, not DCGM / MAMF / Lemon GEMM; every result heading of Compute, Network, Storage and Findings is in the TOC")
def toc_labels(doc: Doc) -> list[Violation]:
    v = []
    linked = set()
    for b, label, anchor, _note in toc_items(doc):
        linked.add(anchor)
        s = doc.anchors.get(anchor)
        if s is None:
            continue
        conn = anchor.startswith("introduction") and re.fullmatch(r"(Inter|Intra)-node connectivity", label)
        if label != s.plain_title and not conn:
            v.append(Violation("toc_labels", b.line, f"TOC label {label!r} differs from its heading {s.plain_title!r}"))
        if any(x in label for x in TOOL_LABELS):
            v.append(Violation("toc_labels", b.line, f"TOC label {label!r} names a tool: label the purpose, the tool goes "
                                                     "after the dash"))
    for name in RESULT_PARENTS:
        sec = doc.top.get(name)
        for c in (sec.children if sec else []):
            if c.title in ("Introduction", "Gaps"):
                continue
            if c.anchor not in linked:
                v.append(Violation("toc_labels", c.line, f"heading {c.title!r} has no TOC entry"))
    return v


_PLACEHOLDER = re.compile(r"\b(not run|did not run|skipped|missing|not available|n/a|omitted|pending|tbd)\b", re.I)


@rule(14, "toc_ran", "Report template / Table of Contents", "the TOC lists only what ran (plus inventory): a benchmark entry "
      "whose section holds no result, or a placeholder line saying a phase is missing, is not there")
def toc_ran(doc: Doc) -> list[Violation]:
    v = []
    for b, label, anchor, note in toc_items(doc):
        if _PLACEHOLDER.search(note) or _PLACEHOLDER.search(label):
            v.append(Violation("toc_ran", b.line, f"TOC line {label!r} is a placeholder for something that did not run"))
        s = doc.anchors.get(anchor)
        if s is None or s.level != 3 or s.title in ("Introduction",):
            continue
        if not _has_result(s):
            v.append(Violation("toc_ran", b.line, f"TOC entry {label!r}: its section holds no result, so it did not run"))
    return v


@house("house_toc_gaps_only", "a top-level TOC entry whose section holds only Gaps is left out (the seed omits TOC lines for "
       "tests that did not run; a ## section with its Gaps is allowed)")
def house_toc_gaps_only(doc: Doc) -> list[Violation]:
    v = []
    for b, label, anchor, _n in toc_items(doc):
        s = doc.anchors.get(anchor)
        if s is not None and s.level == 2 and s.title in ("Compute", "Network") and s.children and all(
                c.title in ("Gaps",) for c in s.children):
            v.append(Violation("house_toc_gaps_only", b.line, f"TOC entry {label!r}: that section holds only Gaps", "warning"))
    return v


_RANKS = re.compile(r"\b\d+ (ranks?|GPUs|nodes?)\b|\b\d+-node\b|\(\d+\)")


@rule(15, "toc_annotations", "Report template / Table of Contents", "Network labels keep the word 'benchmark'; rank and node "
      "counts go in the TOC annotation, never in a heading; fio lines say '— `tool` on `<path>`' with the path after 'on', "
      "never inside the link; connectivity is 'Inter-node' only when it spanned every node")
def toc_annotations(doc: Doc) -> list[Violation]:
    v = []
    for b, label, anchor, note in toc_items(doc):
        s = doc.anchors.get(anchor)
        top = s.top().title if s is not None and s.top() is not None else ""
        if top == "Network" and re.search(r"all-reduce|all-gather|reduce-scatter", label) and not label.endswith("benchmark"):
            v.append(Violation("toc_annotations", b.line, f"TOC label {label!r}: keep the word 'benchmark'"))
        if top == "Storage" and "IO benchmark" in label:
            if "/" in label:
                v.append(Violation("toc_annotations", b.line, f"TOC label {label!r}: the path goes after 'on', not in the link"))
            if not re.search(r"\bon `[^`]+`", note):
                v.append(Violation("toc_annotations", b.line, f"TOC line {label!r}: the annotation is '`tool` on `<path>`'"))
        if re.fullmatch(r"Inter-node connectivity", label) and (doc.n_nodes or 0) < 2:
            v.append(Violation("toc_annotations", b.line, "connectivity on one node is 'Intra-node connectivity'"))
    for s in doc.sections:
        if s.level == 3 and s.top() is not None and s.top().title in ("Compute", "Network") and _RANKS.search(s.title):
            v.append(Violation("toc_annotations", s.line, f"heading {s.title!r}: rank and node counts go in the TOC annotation"))
    return v


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------

ENV_TABLES = ("Host", "GPU", "Fabric", "Filesystems", "Software")
"""Seed 003 "Environment": five small tables Host / GPU / Fabric / Filesystems / Software."""


def _env_table(doc: Doc, name: str):
    s = doc.sec("Environment", name)
    return s.tables[0] if s is not None and s.tables else None


@rule(16, "env_tables", "Environment", "## Environment holds five tables in this order: Host / GPU / Fabric / Filesystems / "
      "Software (never one mega-table, never 'Network' / 'Storage')")
def env_tables(doc: Doc) -> list[Violation]:
    env = doc.top.get("Environment")
    if env is None:
        return [Violation("env_tables", 1, "no '## Environment' section")]
    v = []
    got = [c.title for c in env.children]
    if got != list(ENV_TABLES):
        v.append(Violation("env_tables", env.line, f"Environment subsections {got} are not {list(ENV_TABLES)}"))
    if env.tables:
        v.append(Violation("env_tables", env.tables[0].line, "one table under ## Environment: split it into the five"))
    for c in env.children:
        if not c.tables and not (c.title == "GPU" and any("no GPU" in b.text for b in c.blocks)):
            v.append(Violation("env_tables", c.line, f"### {c.title} has no table"))
    return v


@rule(17, "env_host", "Environment / Host", "the Host table's first row is the OS; it has hostname, kernel, CPU cores / NUMA, "
      "host RAM and (with GPUs) PCIe, and no Python; PCIe is a Host row, never a GPU row")
def env_host(doc: Doc) -> list[Violation]:
    t = _env_table(doc, "Host")
    v = []
    if t is not None and t.rows:
        if not re.match(r"(?i)^(os|operating system)$", t.rows[0][0].strip()):
            v.append(Violation("env_host", t.row_lines[0], "the Host table's first row is the OS"))
        keys = " | ".join(r[0].lower() for r in t.rows)
        for want in ("hostname", "kernel", "cpu", "ram"):
            if want not in keys:
                v.append(Violation("env_host", t.line, f"the Host table has no {want} row"))
        if "python" in keys:
            v.append(Violation("env_host", t.line, "Python belongs in Software, not Host"))
        if doc.gpus_per_node and "pcie" not in keys:
            v.append(Violation("env_host", t.line, "PCIe gen × width is a Host row"))
    g = _env_table(doc, "GPU")
    if g is not None and any("pcie" in r[0].lower() for r in g.rows):
        v.append(Violation("env_host", g.line, "PCIe is the board/host path: a Host row, not a GPU row"))
    return v


@rule(18, "env_gpu", "Environment / GPU", "the GPU table gives HBM in GiB only (never MiB) and three SM clocks: boost, "
      "saturated and parked idle (never 'loaded')")
def env_gpu(doc: Doc) -> list[Violation]:
    g = _env_table(doc, "GPU")
    if g is None:
        return []
    v = []
    for r, ln in zip(g.rows, g.row_lines):
        key, val = r[0].lower(), " ".join(r[1:])
        if ("hbm" in key or "memory" in key) and re.search(r"\d\s*MiB\b|\d\s*MB\b", val):
            v.append(Violation("env_gpu", ln, "HBM in GiB only, never MiB"))
        if "clock" in key:
            low = val.lower()
            missing = [w for w in ("boost", "saturated", "idle") if w not in low]
            if missing:
                v.append(Violation("env_gpu", ln, f"SM clocks need boost, saturated and parked idle (missing {missing})"))
            if "loaded" in low:
                v.append(Violation("env_gpu", ln, "a dense GEMM is not at boost: never label a clock 'loaded'"))
    return v


@rule(19, "env_no_mamf", "Environment", "Environment never names MAMF or MSMF (those terms start in Compute)")
def env_no_mamf(doc: Doc) -> list[Violation]:
    env = doc.top.get("Environment")
    if env is None:
        return []
    v = []
    for t in env.all_tables():
        for r, ln in zip(t.rows, t.row_lines):
            if any(re.search(r"\b(MAMF|MSMF)\b", c) for c in r):
                v.append(Violation("env_no_mamf", ln, "MAMF/MSMF are not named in Environment"))
    for b in env.all_blocks():
        if re.search(r"\b(MAMF|MSMF)\b", b.text):
            v.append(Violation("env_no_mamf", b.line, "MAMF/MSMF are not named in Environment"))
    return v


@rule(20, "env_filesystems", "Environment / Filesystems", "the Filesystems table's left column is Local / Shared network FS; "
      "the Local value does not repeat 'local' or 'ceiling'; a Linux md device is written 'mdN RAID'")
def env_filesystems(doc: Doc) -> list[Violation]:
    t = _env_table(doc, "Filesystems")
    v = []
    for r, ln in zip(t.rows if t else [], t.row_lines if t else []):
        if r[0] not in ("Local", "Shared network FS"):
            v.append(Violation("env_filesystems", ln, f"left column {r[0]!r}: write Local or Shared network FS"))
        if r[0] == "Local" and re.search(r"\b(local|ceiling)\b", " ".join(r[1:]), re.I):
            v.append(Violation("env_filesystems", ln, "the Local value repeats 'local' / 'ceiling'"))
    tables = ([t] if t else []) + ([doc.sec("Storage", "Existing Partitions").tables[0]]
                                   if doc.sec("Storage", "Existing Partitions") and doc.sec("Storage", "Existing Partitions").tables else [])
    for tb in tables:
        for r, ln in zip(tb.rows, tb.row_lines):
            for c in r:
                if re.search(r"\bmd\d+\b(?!\s*RAID)", c.replace("`", "")):
                    v.append(Violation("env_filesystems", ln, f"{c!r}: write a Linux md device as 'mdN RAID'"))
    return v


_FULL = re.compile(r"\bUse%|\b\d+(\.\d+)?\s*%\s*(full|used|in use|free|occupied|available|utili[sz]ed|capacity)\b"
                   r"|\b\d[\d.,_]*\s*[KMGTP]i?B?\s+(free|used|available|left|remaining|in use)\b"
                   r"|\b(free|used|available|remaining) (space|capacity|disk)\b|\b(almost|nearly|half) full\b", re.I)


@rule(21, "no_fullness", "Storage / Existing Partitions", "never how full a partition is (no Use%, '% full', '41% used', "
      "'N T free') anywhere in the report: capacity only")
def no_fullness(doc: Doc) -> list[Violation]:
    v = []
    for b in doc.blocks:
        if m := _FULL.search(b.prose):
            v.append(Violation("no_fullness", b.line, f"reports how full a partition is: {m.group(0)!r}"))
    for t in doc.tables:
        for h in t.header:
            if re.search(r"(?i)^(use%|used|free|avail(able)?|use)$", h.strip()):
                v.append(Violation("no_fullness", t.line, f"column {h!r} reports how full a partition is"))
        for r, ln in zip(t.rows, t.row_lines):
            for c in r:
                if m := _FULL.search(c):
                    v.append(Violation("no_fullness", ln, f"reports how full a partition is: {m.group(0)!r}"))
    return v


_VENV = re.compile(r"venv|virtualenv|/envs?/|conda|site-packages", re.I)


@rule(22, "env_software", "Environment / Software", "Software gives Python, torch and (with GPUs) NCCL; no OS (it is Host row "
      "1) and never the eval venv path")
def env_software(doc: Doc) -> list[Violation]:
    t = _env_table(doc, "Software")
    v = []
    if t is not None:
        keys = [r[0].lower() for r in t.rows]
        for want in ("python", "torch") + (("nccl",) if doc.gpus_per_node and doc.gpus_per_node > 0 else ()):
            if not any(k.startswith(want) for k in keys):
                v.append(Violation("env_software", t.line, f"the Software table has no {want} row"))
        if any(re.match(r"^(os|operating system|ubuntu)", k) for k in keys):
            v.append(Violation("env_software", t.line, "the OS is Host row 1, not Software"))
    env = doc.top.get("Environment")
    for tb in (env.all_tables() if env else []):
        for r, ln in zip(tb.rows, tb.row_lines):
            if any(_VENV.search(c) for c in r):
                v.append(Violation("env_software", ln, "the eval venv path is not a report field"))
    return v
