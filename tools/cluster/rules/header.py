"""Seed 003 rules 1-11: file name, title and header, links and plots, tools and Introductions,
eval-process shorthand, node scope, the torch version and the NCCL environment.

Sources (seed 003): "Report template" (file name, title, header bullets, raw-logs line, Gaps),
"Scripts (fetch, do not invent)" (absolute GitHub links, inlined plots, every GitHub tool linked
in its Introduction, no "the book"/"MLE", the Introduction list, shorthand), the opening
"One node" paragraph and Loop steps 4/6 (node scope), "Isolated install" (newest torch), "Ask
now" / "Network" (the final NCCL environment).
"""

from __future__ import annotations

import re

from ..mdparse import Doc
from .base import Violation, house, prose_sentences, rule, sentences_of

FILE_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*-\d{4}-\d{2}-\d{2}-\d{4}Z\.md$")
"""``reports/<gpu>-<datetime>.md``, e.g. ``h200-2026-09-17-1938Z.md`` (seed 003 "Report template")."""
TITLE = re.compile(r"^Cluster eval: (\d+) (node|nodes) of ((\d+)× \S.*|CPU-only)$")
"""``# Cluster eval: <N> nodes of <G>× <GPU>`` (``4 nodes of 8× H200``, ``1 node of 8× B200``);
a node with no GPU says ``CPU-only`` in place of ``<G>× <GPU>``."""
ML_ENG = "https://github.com/stas00/ml-engineering/blob/master/"
GITHUB_TOOLS = ("mamf-finder-all-gpus.py", "mamf-finder.py", "all_reduce_bench.py", "torch-distributed-gpu-test.py",
                "fio-json-extract.py", "fio-scan")
"""The GitHub-hosted tools of seed 003's fetch list."""


@rule(1, "file_name", "Report template", "the file is reports/<gpu>-<YYYY-MM-DD>-<HHMM>Z.md (h200-2026-09-17-1938Z.md)")
def file_name(doc: Doc) -> list[Violation]:
    if doc.filename is None or FILE_NAME.match(doc.filename):
        return []
    return [Violation("file_name", 1, f"file name {doc.filename!r} is not <gpu>-<YYYY-MM-DD>-<HHMM>Z.md (e.g. h200-2026-09-17-1938Z.md)")]


@rule(2, "title", "Report template", "the title is '# Cluster eval: <N> nodes of <G>× <GPU>': node count and GPUs per node, "
      "singular/plural agreeing")
def title(doc: Doc) -> list[Violation]:
    h = doc.title
    if h is None:
        return [Violation("title", 1, "no '# Cluster eval: ...' title")]
    m = TITLE.match(h.title)
    if not m:
        return [Violation("title", h.line, f"title {h.title!r} is not 'Cluster eval: <N> nodes of <G>× <GPU>'")]
    if (m.group(1) == "1") != (m.group(2) == "node"):
        return [Violation("title", h.line, f"'{m.group(1)} {m.group(2)}': singular/plural does not match the count")]
    return []


@rule(3, "header_bullets", "Report template", "under the title: bullets Datetime (UTC) / Access / Nodes / GPUs, then "
      "'Raw logs: [`raw-<datetime>/`](raw-<datetime>/).' with a relative link")
def header_bullets(doc: Doc) -> list[Violation]:
    h = doc.title
    if h is None:
        return []
    items = [b.text for b in h.blocks if b.kind == "bullet"]
    v = []
    for f in ("Datetime (UTC):", "Access:", "Nodes / GPUs:"):
        if not any(t.startswith(f) and t[len(f):].strip() for t in items):
            v.append(Violation("header_bullets", h.line, f"header bullet '{f} ...' is missing or empty under the title"))
    raw = [b for b in h.blocks if b.kind == "paragraph" and b.text.startswith("Raw logs:")]
    ok = raw and any(l.href.startswith("raw-") and not l.image for l in raw[0].inline.links)
    if not ok:
        v.append(Violation("header_bullets", h.line, "no 'Raw logs: [`raw-<datetime>/`](raw-<datetime>/).' line with a relative link"))
    return v


def _all_links(doc: Doc):
    for b in doc.blocks:
        for ln in b.inline.links:
            yield b.line, ln
    for t in doc.tables:
        for row, line in zip(t.cells, t.row_lines):
            for c in row:
                for ln in c.links:
                    yield line, ln


_BOOK = re.compile(r"\bthe book\b|\bMLE\b")


@rule(4, "links", "Scripts (fetch, do not invent)", "links to the scripts and tables are absolute GitHub URLs "
      "(https://github.com/stas00/ml-engineering/blob/master/...), never ../; raw-<datetime>/ stays relative; "
      "the source is the URL, never 'the book' or 'MLE'")
def links(doc: Doc) -> list[Violation]:
    v = []
    for line, ln in _all_links(doc):
        t = ln.href
        if ln.image:
            continue  # plots: plots_inlined
        if t.startswith("../") or "/../" in t:
            v.append(Violation("links", line, f"link {t!r}: the report may be copied elsewhere; absolute GitHub URLs, never ../"))
        elif "ml-engineering" in t and not t.startswith(ML_ENG):
            v.append(Violation("links", line, f"link {t!r}: ml-engineering scripts and tables are linked as {ML_ENG}..."))
        elif re.search(r"(^|/)raw-[^/]*/", t) and (t.startswith(("/", "file:", "http")) and "github.com" not in t):
            v.append(Violation("links", line, f"link {t!r}: the raw-<datetime>/ directory beside the report is linked relatively"))
    for b, s in prose_sentences(doc):
        if m := _BOOK.search(s):
            v.append(Violation("links", b.line, f"{m.group(0)!r}: cite the GitHub URL, not the book"))
    return v


_PLOT = re.compile(r"\.(png|svg|jpe?g|gif)$", re.I)


@rule(5, "plots_inlined", "Scripts (fetch, do not invent); Network", "every plot is inlined (![alt](raw-<datetime>/file.png), "
      "relative), never link-only; every Network benchmark section with a table shows its plot")
def plots_inlined(doc: Doc) -> list[Violation]:
    v = []
    for line, ln in _all_links(doc):
        if not _PLOT.search(ln.href):
            continue
        if not ln.image:
            v.append(Violation("plots_inlined", line, f"plot {ln.href} is linked, not inlined (use ![alt](path))"))
        elif ln.href.startswith(("/", "../", "http", "file:")):
            v.append(Violation("plots_inlined", line, f"plot path {ln.href} is not relative to the report"))
    net = doc.top.get("Network")
    for c in (net.children if net else []):
        if c.title.endswith("benchmark") and c.all_tables() and not any(ln.image for b in c.all_blocks() for ln in b.inline.links):
            v.append(Violation("plots_inlined", c.line, f"### {c.title} has a table but no inlined plot"))
    return v


@rule(6, "tools_linked", "Scripts (fetch, do not invent)", "every GitHub-hosted tool the run used is linked at its first "
      "mention, in its section's ### Introduction; later mentions are bare code")
def tools_linked(doc: Doc) -> list[Violation]:
    v = []
    events = []  # (line, order, tool, linked, section title)
    k = 0
    for b in doc.blocks:
        linked = {tool for ln in b.inline.links for tool in GITHUB_TOOLS if tool in ln.text and ln.href.startswith(ML_ENG)}
        for tool in GITHUB_TOOLS:
            if re.search(rf"(?<![\w-]){re.escape(tool)}(?![\w-])", b.text):
                if tool == "mamf-finder.py" and "mamf-finder-all-gpus.py" in b.text and "mamf-finder.py" not in b.text.replace(
                        "mamf-finder-all-gpus.py", ""):
                    continue
                if tool == "fio-scan" and tool not in b.text.replace("fio-scan-", ""):
                    continue
                events.append((b.line, k, tool, tool in linked, b.section.title))
                k += 1
    seen: set[str] = set()
    for line, _k, tool, linked, sec in sorted(events):
        if tool in seen:
            continue
        seen.add(tool)
        if not linked:
            v.append(Violation("tools_linked", line, f"`{tool}` is a GitHub tool: link it ({ML_ENG}...) at its first mention"))
        elif sec != "Introduction":
            v.append(Violation("tools_linked", line, f"`{tool}` is first introduced outside a ### Introduction (in ### {sec})"))
    return v


@rule(7, "intro_lists", "Scripts (fetch, do not invent)", "every ### Introduction is a numbered list (1. 2. ...) of the "
      "passes that ran, 'tool — what it does'; dcgmi diag is named as NVIDIA's and the lemon GEMM as an inline script")
def intro_lists(doc: Doc) -> list[Violation]:
    v = []
    for s in doc.sections:
        if s.title != "Introduction":
            continue
        items = [b for b in s.blocks if b.kind == "ordered" and b.depth == 0]
        if not items or items[0].number != 1:
            v.append(Violation("intro_lists", s.line, "### Introduction has no numbered list (1. 2. ...) of the passes that ran"))
            continue
        for b in items:
            if "—" not in b.text and " - " not in b.text:
                v.append(Violation("intro_lists", b.line, "an Introduction item is 'tool — what it does / where'"))
            low = b.text.lower()
            if "dcgmi" in low and "nvidia" not in low:
                v.append(Violation("intro_lists", b.line, "`dcgmi diag` is not in the fetch list: say it is NVIDIA's"))
            if "lemon" in low and "inline" not in low:
                v.append(Violation("intro_lists", b.line, "the lemon GEMM is not a published script: say it is an inline script"))
    return v


SHORTHAND = re.compile(r"\b(kept|reran|re-ran|rerun|re-run|reruns|rerunning|re-running)\b|\bas configured\b|\bwe left it\b"
                       r"|\bleft (it|them) (as[- ]is|unchanged|alone|in place)\b|\bplatform value\b|\bthe fix\b", re.I)
"""Seed 003 "Do not leak eval-process shorthand": kept, as configured, we left it, platform value,
the fix, rerun (and its past tense, reran)."""


@rule(8, "shorthand", "Scripts (fetch, do not invent)", "no eval-process shorthand ('kept', 'as configured', 'we left it', "
      "'platform value', 'the fix', 'rerun'/'reran'): name the actor and the state")
def shorthand(doc: Doc) -> list[Violation]:
    return [Violation("shorthand", b.line, f"eval-process shorthand {m.group(0)!r}: name the actor and the state")
            for b, s in prose_sentences(doc) for m in [SHORTHAND.search(s)] if m]


_MULTI = re.compile(r"\b(inter-node|internode|multi-node|multinode|cross-node|across (the )?nodes|between nodes|two-node|2-node)\b",
                    re.I)
_SKIP = re.compile(r"\b(skip\w*|not run|did not run|didn't run|omitted|n/a|not applicable|only (one|1) node|single node|"
                   r"no second node|needs (at least )?(two|2) nodes|requires (at least )?(two|2) nodes|not measured|none)\b", re.I)
_NET_WORD = re.compile(r"all-reduce|allreduce|connectivity|benchmark|collective|busbw|fabric|network|nccl", re.I)


@rule(9, "node_scope", "One node / Loop steps 4 and 6", "one node: no Inter-node section, TOC line or 'skipped' note (1 node "
      "is not a gap); two or more nodes: an Inter-node all-reduce benchmark, or its reason in Network ### Gaps")
def node_scope(doc: Doc) -> list[Violation]:
    n = doc.n_nodes
    v = []
    if n == 1:
        for s in doc.sections:
            if _MULTI.search(s.title):
                v.append(Violation("node_scope", s.line, f"1 node: no {s.title!r} section"))
        for b, s in prose_sentences(doc):
            if _MULTI.search(s) and (_SKIP.search(s) or b.section.title == "Table of Contents") and _NET_WORD.search(s):
                v.append(Violation("node_scope", b.line, f"1 node: no inter-node line or skip note ({s[:60]!r})"))
    elif n and n > 1:
        net = doc.top.get("Network")
        has = net is not None and net.child("Inter-node all-reduce benchmark") is not None
        gap = net is not None and net.child("Gaps") is not None and any(
            _MULTI.search(b.prose) for b in net.child("Gaps").blocks)  # type: ignore[union-attr]
        if not has and not gap:
            v.append(Violation("node_scope", (net or doc.title).line if (net or doc.title) else 1,
                               f"{n} nodes: no Inter-node all-reduce benchmark and no Network Gaps item saying why"))
    return v


def _software(doc: Doc):
    sw = doc.sec("Environment", "Software")
    return sw.tables[0] if sw is not None and sw.tables else None


@rule(10, "newest_torch", "Isolated install; Environment / Software", "the installed torch version is recorded and noted as "
      "the newest release at eval time, or a Gaps item names the version settled for and why")
def newest_torch(doc: Doc) -> list[Violation]:
    t = _software(doc)
    if t is None:
        return []
    row = next((r for r in t.rows if r and r[0].strip().lower().startswith("torch")), None)
    if row is None:
        return [Violation("newest_torch", t.line, "the Software table has no torch row")]
    ver = re.sub(r"[`*]", "", row[1] if len(row) > 1 else "").split()[0] if len(row) > 1 and row[1].strip() else ""
    if re.search(r"\b(newest|latest)\b", " ".join(row[1:]), re.I):
        return []
    for b, s in prose_sentences(doc):
        low = s.lower()
        if ("torch" in low and re.search(r"\b(newest|latest|newer)\b", low)
                and (ver and (ver in b.text or ver.split("+")[0] in b.text) or b.section.title == "Gaps")):
            return []
    return [Violation("newest_torch", t.line, f"torch {ver or '?'}: say it was the newest release at eval time, or put the "
                                              "version settled for, and why, in Gaps")]


@rule(11, "nccl_env", "Ask now, not later; Network", "the final NCCL environment (NCCL_*, FI_*, AWS_OFI*) is recorded in the "
      "Environment's Software table (the values, or that none was set)")
def nccl_env(doc: Doc) -> list[Violation]:
    t = _software(doc)
    if t is None:
        return []
    row = next((r for r in t.rows if r and r[0].strip().lower().startswith("nccl env")), None)
    uses_nccl = any(r and r[0].strip().upper().startswith("NCCL") for r in t.rows) or any(
        c.title.endswith("benchmark") for c in (doc.top["Network"].children if "Network" in doc.top else []))
    if row is None and uses_nccl:
        return [Violation("nccl_env", t.line, "the Software table records no NCCL environment row")]
    if row is None:
        return []
    val = " ".join(row[1:])
    if not re.search(r"\b(NCCL|FI|AWS_OFI)_\w+=", val) and not re.search(r"\b(unset|none set|no NCCL)\b", val, re.I):
        return [Violation("nccl_env", t.row_lines[t.rows.index(row)], "the NCCL environment row lists no VAR=value")]
    return []


@house("house_nccl_set_by", "the Software table's NCCL environment row names who set it ('set by ...'); the seed asks for "
       "the actor in the Network Introduction only")
def house_nccl_set_by(doc: Doc) -> list[Violation]:
    t = _software(doc)
    row = next((r for r in (t.rows if t else []) if r and r[0].strip().lower().startswith("nccl env")), None)
    if t is not None and row is not None and "set by" not in " ".join(row[1:]):
        return [Violation("house_nccl_set_by", t.row_lines[t.rows.index(row)], "the NCCL environment row does not say who set "
                                                                              "it ('set by ...')", "warning")]
    return []


def gaps_items(doc: Doc) -> list[tuple[int, str]]:
    """(line, text) of every Gaps bullet of the report."""
    return [(b.line, b.text) for s in doc.sections if s.title == "Gaps" for b in s.blocks]


__all__ = ["FILE_NAME", "TITLE", "GITHUB_TOOLS", "ML_ENG", "SHORTHAND", "gaps_items", "sentences_of"]
