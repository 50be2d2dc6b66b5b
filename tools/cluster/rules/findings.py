"""Seed 003 rules 51-56: Findings.

Sources (seed 003 "## Findings"): the three headings in order, with the noun, only those with
bullets, no Flags, no A./B./C.; every slow or dead GPU its own bullet as ```host(nodeN):gpuK```
with the pass and its numbers against the node median, never "two slow GPUs"; no verdict without
a target (a measurement without one goes under Needs operator input, which opens with the
cannot-be-called sentence; targets in the plural); quote the whole measurement compactly and ask
for one value per measured cell with the conditions, scoped to the mount and its size; when
vendor figures are missing: unknown + why + the ask, no search narrative; literal terms, no
feelings.
"""

from __future__ import annotations

import re

from ..mdparse import Doc
from .base import Violation, prose_sentences, rule
from .compute import gpu_labels

FINDINGS = ("Healthy subsystems", "Underperforming subsystems", "Needs operator input")
TARGET_WORDS = re.compile(r"\b(official|spec|specification|advertised|datasheet|median|vendor|provisioned|published|rated)\b", re.I)
OPENING = "cannot be called healthy or underperforming until"


def _bullets(s):
    return [b for b in s.blocks if b.kind == "bullet" and b.depth == 0]


@rule(51, "findings_headings", "Findings", "## Findings is the last section; its headings are Healthy subsystems, "
      "Underperforming subsystems, Needs operator input (the noun required), in that order, only those with bullets; no Flags, "
      "no A./B./C. labels, no tables")
def findings_headings(doc: Doc) -> list[Violation]:
    f = doc.top.get("Findings")
    if f is None:
        return [Violation("findings_headings", 1, "no '## Findings' section")]
    v = []
    if list(doc.top)[-1] != "Findings":
        v.append(Violation("findings_headings", f.line, "## Findings is the last section"))
    got = [c.title for c in f.children]
    if any(t not in FINDINGS for t in got) or got != [t for t in FINDINGS if t in got]:
        v.append(Violation("findings_headings", f.line, f"Findings headings {got} must be among {list(FINDINGS)}, in that order"))
    for c in f.children:
        bl = _bullets(c)
        if not bl:
            v.append(Violation("findings_headings", c.line, f"### {c.title} has no bullets: omit the heading"))
        for b in bl:
            if re.match(r"^(\*\*)?[A-C]\.\s", b.text):
                v.append(Violation("findings_headings", b.line, "Findings bullets are labelled by subsystem, never A./B./C."))
    for t in f.all_tables():
        v.append(Violation("findings_headings", t.line, "Findings repeat a table: quote the numbers in the bullets"))
    return v


_COUNTED = re.compile(r"\b(one|two|three|four|five|six|seven|eight|several|some|a few|\d+) (slow|dead|under-?performing|throttled|"
                      r"bad|faulty|weak|lagging|laggard|outlier) (gpus?|cards?|devices?|boards?)\b", re.I)
_BARE_GPU = re.compile(r"\b(gpu|GPU|card)\s?#?\d+\b")


@rule(52, "gpu_naming", "Findings / Underperforming subsystems", "every slow or dead GPU has its own bullet named "
      "`host(nodeN):gpuK` (host from the Environment, node its 0-based hostfile position), with the pass and its numbers "
      "against the node median (three passes for a slow one); never counted ('two slow GPUs') or bare ('GPU7')")
def gpu_naming(doc: Doc) -> list[Violation]:
    f = doc.top.get("Findings")
    if f is None:
        return []
    v = []
    hosts = re.findall(r"`([^`]+)` \(node(\d+)\)", " ".join(b.text for b in (doc.title.blocks if doc.title else [])))
    order = {h: int(i) for h, i in hosts}
    for b in f.all_blocks():
        if m := _COUNTED.search(b.prose):
            v.append(Violation("gpu_naming", b.line, f"{m.group(0)!r}: name every GPU as `host(nodeN):gpuK`, one bullet each"))
        bare = re.sub(r"`[^`]*`", "", b.text)
        if m := _BARE_GPU.search(bare):
            v.append(Violation("gpu_naming", b.line, f"{m.group(0)!r}: a GPU in Findings is named `host(nodeN):gpuK`"))
        labels = gpu_labels(b.text)
        if len({(h, g) for h, _i, g in labels}) > 1 and b.kind == "bullet":
            v.append(Violation("gpu_naming", b.line, "one bullet per GPU"))
        for h, i, _g in labels:
            if order and (h not in order or order[h] != i):
                v.append(Violation("gpu_naming", b.line, f"`{h}(node{i})`: the host and its hostfile position come from the "
                                                         "header's Nodes line"))
        if labels and b.kind == "bullet" and "dead" not in b.text:
            if not re.search(r"\d+ / \d+ / \d+", b.text) or "median" not in b.text:
                v.append(Violation("gpu_naming", b.line, "a slow GPU's bullet gives the pass, its three numbers (a / b / c) "
                                                         "and how far below the node median"))
    return v


_SINGULAR = re.compile(
    r"\bthe (figure|target|number|rate|value) (it|they|this|that|the \w+) (is|are) (supposed|meant|expected) to (hit|reach|meet)\b"
    r"|\b(obtain|ask for|request|provide|supply|need|get) (the|its|their) (provisioned throughput|target|expected (value|figure|"
    r"rate)|figure|spec figure|advertised (rate|figure))\b(?!s)"
    r"|\bno published performance figure\b(?!s)|\bonce the (figure|target) arrives\b|\bthe figure (it|they) (is|are) supposed\b",
    re.I)


@rule(53, "verdict_target", "Findings / Needs operator input", "no verdict without a target: an Underperforming bullet names "
      "what it misses (official, spec, advertised, median); Needs operator input opens with 'cannot be called healthy or "
      "underperforming until ... arrive'; targets are plural ('the figures they are supposed to hit')")
def verdict_target(doc: Doc) -> list[Violation]:
    f = doc.top.get("Findings")
    v = []
    u = f.child("Underperforming subsystems") if f else None
    for b in (_bullets(u) if u else []):
        if not TARGET_WORDS.search(b.text):
            v.append(Violation("verdict_target", b.line, "an Underperforming bullet without a target (official, spec, advertised, "
                                                         "median) belongs in Needs operator input"))
    n = f.child("Needs operator input") if f else None
    if n is not None:
        lead = next((b for b in n.blocks if b.kind == "paragraph"), None)
        if lead is None or lead.line > min((b.line for b in _bullets(n)), default=10**9) or OPENING not in lead.text:
            v.append(Violation("verdict_target", n.line, "Needs operator input opens with one sentence: these cannot be called "
                                                         "healthy or underperforming until the figures arrive"))
    for b, s in prose_sentences(doc):
        if m := _SINGULAR.search(s):
            v.append(Violation("verdict_target", b.line, f"singular target {m.group(0)!r}: a filesystem never has one figure"))
    return v


def storage_sizes(doc: Doc) -> dict[str, list[str]]:
    """``{section title: [sizes]}`` of every fio table (in table order)."""
    st = doc.top.get("Storage")
    out = {}
    for c in (st.children if st else []):
        for t in c.tables:
            if t.header[:2] == ["size", "rw"]:
                out[c.title] = list(dict.fromkeys(r[0] for r in t.rows))
    return out


@rule(54, "operator_ask", "Findings / Needs operator input", "a storage bullet quotes the whole sweep compactly (read / write "
      "at every measured size, each with MiB/s), names the mount and its size, and under Needs operator input asks for one "
      "value per measured cell with the conditions (read and write, one client, jobs, 4 KiB blocks, O_DIRECT)")
def operator_ask(doc: Doc) -> list[Violation]:
    f = doc.top.get("Findings")
    sizes = storage_sizes(doc)
    if f is None or not sizes:
        return []
    allsizes = sorted({s for x in sizes.values() for s in x})
    v = []
    for c in f.children:
        for b in _bullets(c):
            if "MiB/s" not in b.text:
                continue
            missing = [s for s in allsizes if s not in b.text]
            if missing or len(re.findall(r"MiB/s", b.text)) < 2 * len(allsizes):
                v.append(Violation("operator_ask", b.line, f"a storage bullet quotes the whole sweep: read / write at {allsizes}"))
            if not re.search(r"`/[^`]*`", b.text) or not re.search(r"\d+(\.\d+)? (TiB|GiB|MiB)\b", b.text):
                v.append(Violation("operator_ask", b.line, "scope the figures to the mount they came from, with its size"))
            if c.title == "Needs operator input":
                low = b.text
                for w, what in (("read and write", "read and write"), ("client", "one client"), ("jobs", "the jobs"),
                                ("4 KiB", "4 KiB blocks"), ("O_DIRECT", "O_DIRECT")):
                    if w not in low:
                        v.append(Violation("operator_ask", b.line, f"the ask names one value per measured cell with its "
                                                                   f"conditions: {what} is missing"))
                        break
    return v


_NARRATIVE = re.compile(
    r"\b(we|I) (looked|searched|checked|tried to find|could not find|found no|did not find)\b|\bsearch(ed|ing)? (for|the)\b"
    r"|\b(df|the mount table|mount table|the mounts?|findmnt|lsblk|/proc/mounts)\b[^.;]*\b(shows?|showed|only|do(es)? not|did not|"
    r"contains?|lists?)\b|\bno (spec ?sheet|datasheet|published figures?) (was|were|could be) (found|located)\b", re.I)


@rule(55, "vendor_unknown", "Findings / Needs operator input", "when vendor figures are missing: say the targets are unknown, "
      "why none are published (a parallel or network FS's throughput is a property of the deployment) and ask for the tier and "
      "stripe layout; never narrate the search ('the mounts show only the server address')")
def vendor_unknown(doc: Doc) -> list[Violation]:
    f = doc.top.get("Findings")
    v = []
    n = f.child("Needs operator input") if f else None
    for b in (_bullets(n) if n else []):
        if b.text.lower().startswith("shared network fs"):
            low = b.text.lower()
            if "unknown" not in low:
                v.append(Violation("vendor_unknown", b.line, "say plainly that the provisioned figures are unknown"))
            if not re.search(r"publish\w* no performance figures|property of the deployment", low):
                v.append(Violation("vendor_unknown", b.line, "say why none are published (throughput is a property of the "
                                                             "deployment)"))
            if not ("tier" in low and "stripe" in low):
                v.append(Violation("vendor_unknown", b.line, "ask for the service tier and the default stripe layout"))
    for b in (f.all_blocks() if f else []):
        if m := _NARRATIVE.search(b.prose):
            v.append(Violation("vendor_unknown", b.line, f"{m.group(0)!r}: do not narrate the search"))
    return v


FEELINGS = re.compile(r"\b(feels?|felt|suffers?|suffered|suffering|struggles?|struggled|struggling|punish(ed|es|ing)?|painful|"
                      r"pain|cares?|hurts?|hurting|happy|unhappy|enjoys?|hates?|loves?|chokes?|choking|starves?|starving|"
                      r"crawls?|crawling|screams?|sluggish|crippled|cripples?|tortured?)\b", re.I)
"""Seed 003: hardware and files do not feel, suffer, struggle, get punished or care; a filesystem
is not painful. The other words are the same kind (a metaphor in place of an operation and a rate)."""


@rule(56, "literal_terms", "Findings", "say who is slowed and by how much, literally: nothing inanimate feels, suffers, "
      "struggles, gets punished, hurts or cares; name the operation and its measured rate",
      grade="partly: a new metaphor outside the word list needs a reader")
def literal_terms(doc: Doc) -> list[Violation]:
    return [Violation("literal_terms", b.line, f"{m.group(0)!r}: name the operation and its measured rate")
            for b, s in prose_sentences(doc) for m in [FEELINGS.search(s)] if m]
