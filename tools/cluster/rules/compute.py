"""Seed 003 rules 23-32: the Compute section.

Sources (seed 003): "## Compute" (Introduction opens with the GPUs; three passes; headings are
purposes), "### Hardware health" (Pass or Fail, never Pass and No Fail), "### GPU performance
benchmarks" (explain before any number, the shapes tried, MAMF and MSMF against the official peak
with W/MHz, the per-GPU table, node MSMF / median / spread, three passes for a slow GPU), "### Find
underperforming GPUs" (TLDR naming both outcomes, not MAMF, every GPU's score, min / max, SM
coverage from this GPU's SM count: 8192 CTAs at 128×256 tiles).
"""

from __future__ import annotations

import re
import statistics

from ..mdparse import Doc, cell_number, numbers
from .base import Violation, prose_sentences, rule

COMPUTE_HEADINGS = ("Introduction", "Hardware health", "GPU performance benchmarks", "Find underperforming GPUs", "Gaps")
TFLOPS_TABLE = "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md#tflops-comparison-table"
LEMON_DIM = 16384
TILE = (128, 256)
"""Seed 003: 'At 128×256 output tiles that is 8192 CTAs (16384/128 × 16384/256)'."""
SLOW_PCT = 2.0
"""Seed 003: a GPU is under-performing only if it is >2% below its node median in all three passes."""


def _env_sms(doc: Doc) -> int | None:
    g = doc.sec("Environment", "GPU")
    for r in (g.tables[0].rows if g is not None and g.tables else []):
        if "sm" in r[0].lower() and "count" in r[0].lower():
            m = re.findall(r"\d+", r[1].split("/")[-1])
            return int(m[0]) if m else None
    return None


@rule(23, "compute_intro", "Compute / Introduction", "Compute opens with the GPUs that are here: name × count, SM count, HBM "
      "GiB, TDP and the official BF16 TFLOPS with the TFLOPS comparison table link; never with DCGM or a FLOPS table")
def compute_intro(doc: Doc) -> list[Violation]:
    comp = doc.top.get("Compute")
    if comp is None or not doc.gpus_per_node:
        return []
    intro = comp.child("Introduction")
    results = [c for c in comp.children if c.title not in ("Gaps", "Introduction")]
    if intro is None:
        return [Violation("compute_intro", comp.line, "Compute has no ### Introduction naming the GPUs")] if results else []
    v = []
    if comp.children[0] is not intro:
        v.append(Violation("compute_intro", comp.line, "Compute opens with its ### Introduction"))
    first = next((b for b in intro.blocks if b.kind == "paragraph"), None)
    txt = first.text if first else ""
    for what, rx in (("GPU name × count", r"\d+× \S"), ("SM count", r"\d+ SMs?\b"), ("HBM in GiB", r"GiB\b.*HBM|HBM.*GiB"),
                     ("TDP", r"\bTDP\b"), ("official BF16 TFLOPS", r"(?i)official.*bf16.*TFLOPS|bf16.*official.*TFLOPS")):
        if not re.search(rx, txt):
            v.append(Violation("compute_intro", first.line if first else intro.line, f"the Compute Introduction opens with the "
                                                                                    f"GPUs: {what} is missing"))
    if first is not None and re.search(r"official", txt, re.I) and not any(ln.href == TFLOPS_TABLE for ln in first.inline.links):
        v.append(Violation("compute_intro", first.line, "the official TFLOPS link to the TFLOPS comparison table is missing"))
    if first is not None and re.search(r"\bDCGM\b|\bdcgmi\b", txt.split(".")[0]):
        v.append(Violation("compute_intro", first.line, "Compute opens with the GPUs, not with DCGM"))
    return v


@rule(24, "compute_headings", "Compute", "Compute's headings are Hardware health, GPU performance benchmarks and Find "
      "underperforming GPUs (plus Introduction and Gaps), never tool nicknames and never prefixed with a node count")
def compute_headings(doc: Doc) -> list[Violation]:
    comp = doc.top.get("Compute")
    return [Violation("compute_headings", c.line, f"Compute heading {c.title!r} is not one of {list(COMPUTE_HEADINGS)}")
            for c in (comp.children if comp else []) if c.title not in COMPUTE_HEADINGS]


_REDUNDANT = re.compile(r"\bpass\w*\b[^.;]*\b(no|zero|0|without)\s+(fail\w*|errors?)\b|\bno fail\w*\b[^.;]*\bpass\w*\b", re.I)


@rule(25, "hw_health", "Compute / Hardware health", "Hardware health says **Pass** or **Fail** (naming plugins or GPUs); a "
      "verdict is never doubled ('Pass — No Fail', 'Pass, no failures')")
def hw_health(doc: Doc) -> list[Violation]:
    v = []
    hh = doc.sec("Compute", "Hardware health")
    if hh is not None and not any(re.fullmatch(r"(Pass|Fail)", x.strip()) for b in hh.blocks for x in b.inline.strong):
        v.append(Violation("hw_health", hh.line, "Hardware health states neither **Pass** nor **Fail**"))
    for b, s in prose_sentences(doc):
        if m := _REDUNDANT.search(s):
            v.append(Violation("hw_health", b.line, f"redundant verdict {m.group(0)!r}: write Pass, not Pass and No Fail"))
    return v


def _perf(doc: Doc):
    return doc.sec("Compute", "GPU performance benchmarks")


@rule(26, "shapes_tried", "Compute / GPU performance benchmarks", "GPU performance benchmarks explains the measurement "
      "(matmul timing, the matmul shape M×N×K, the search) before any number, and states how many matmul shapes GPU0 timed")
def shapes_tried(doc: Doc) -> list[Violation]:
    p = _perf(doc)
    if p is None:
        return []
    v = []
    sents = [(b, s) for b in p.blocks for s in b.sentences]
    first_num = next((i for i, (_b, s) in enumerate(sents) if any(n.unit for n in numbers(s))
                      or re.search(r"\b\d+ matmul shapes\b", s)), None)
    explain = next((i for i, (_b, s) in enumerate(sents) if re.search(r"matmul shape", s) and re.search(r"M×N×K", s)), None)
    if explain is None or (first_num is not None and first_num < explain):
        v.append(Violation("shapes_tried", p.line, "explain the measurement (matmul timing, the M×N×K matmul shape, the search) "
                                                  "before the first number"))
    if not any(re.search(r"\b\d[\d_,]* matmul shapes\b", s) for _b, s in sents):
        v.append(Violation("shapes_tried", p.line, "state how many matmul shapes GPU0's search timed"))
    return v


@rule(27, "mamf_msmf_spec", "Compute / GPU performance benchmarks", "'Two numbers vs official BF16 TFLOPS on <GPU>', then a "
      "MAMF and an MSMF bullet, each with TFLOPS, the W / MHz the script printed and % of spec; MAMF is GPU0's only, never per GPU")
def mamf_msmf_spec(doc: Doc) -> list[Violation]:
    p = _perf(doc)
    if p is None:
        return []
    v = []
    lead = next((b for b in p.blocks if b.text.startswith("Two numbers vs official BF16 TFLOPS on ")), None)
    if lead is None or not re.match(r"Two numbers vs official BF16 TFLOPS on \S", lead.text):
        v.append(Violation("mamf_msmf_spec", p.line, "no 'Two numbers vs official BF16 TFLOPS on <GPU>:' line"))
    for name in ("MAMF", "MSMF"):
        b = next((x for x in p.blocks if x.kind == "bullet" and x.text.startswith(f"**{name}**") or
                  (x.kind == "bullet" and x.inline.strong and x.inline.strong[0] == name)), None)
        if b is None:
            v.append(Violation("mamf_msmf_spec", p.line, f"no **{name}** bullet"))
            continue
        t = b.text
        if not re.search(r"\d+ TFLOPS", t):
            v.append(Violation("mamf_msmf_spec", b.line, f"the {name} bullet has no TFLOPS figure"))
        if not re.search(r"\d+ W / \d+ MHz", t):
            v.append(Violation("mamf_msmf_spec", b.line, f"the {name} bullet has no measured W / MHz"))
        if not re.search(r"\d+(\.\d+)?% of spec", t):
            v.append(Violation("mamf_msmf_spec", b.line, f"the {name} bullet has no % of spec"))
    for t in doc.tables:
        if any(h.lower() == "gpu" for h in t.header) and any("MAMF" in h for h in t.header):
            v.append(Violation("mamf_msmf_spec", t.line, "MAMF exists for GPU0 only: never a per-GPU column"))
    return v


def msmf_table_of(doc: Doc):
    p = _perf(doc)
    return next((t for t in (p.tables if p else []) if any(h.startswith("MSMF") for h in t.header)), None)


def official_peak(doc: Doc) -> float | None:
    """The official BF16 TFLOPS the report states ('Two numbers vs official BF16 TFLOPS on H200 (989 TFLOPS)')."""
    p = _perf(doc)
    for b in (p.blocks if p else []):
        m = re.match(r"Two numbers vs official BF16 TFLOPS on .*\((\d+(?:\.\d+)?) TFLOPS\)", b.text)
        if m:
            return float(m.group(1))
    return None


@rule(28, "msmf_table", "Compute / GPU performance benchmarks", "the per-GPU table has GPU, MSMF, MSMF shape, W / MHz and "
      "MSMF % spec columns; TFLOPS are integers and % spec is computed from the integer; below it the node MSMF (slowest GPU), "
      "median and spread, or that it is the only GPU")
def msmf_table(doc: Doc) -> list[Violation]:
    p = _perf(doc)
    if p is None or not re.search(r"MSMF", " ".join(b.text for b in p.blocks)):
        return []
    t = msmf_table_of(doc)
    if t is None:
        return [Violation("msmf_table", p.line, "no per-GPU MSMF table")]
    v = []
    need = ("GPU", "MSMF", "shape", "W / MHz", "% spec")
    for n in need:
        if not any(n in h for h in t.header):
            v.append(Violation("msmf_table", t.line, f"the MSMF table has no {n!r} column"))
    ti = next((i for i, h in enumerate(t.header) if h.startswith("MSMF") and "TFLOPS" in h or h == "MSMF"), None)
    si = next((i for i, h in enumerate(t.header) if "% spec" in h), None)
    peak = official_peak(doc)
    for r, ln in zip(t.rows, t.row_lines):
        if ti is not None and ti < len(r) and not re.fullmatch(r"\d+", r[ti].strip("* ")):
            v.append(Violation("msmf_table", ln, f"MSMF {r[ti]!r}: TFLOPS are integers, as the script prints them"))
        elif ti is not None and si is not None and peak and si < len(r):
            pct = cell_number(r[si])
            want = round(100 * int(r[ti].strip("* ")) / peak, 1)
            if pct is None or abs(pct - want) > 0.05:
                v.append(Violation("msmf_table", ln, f"% spec {r[si]!r} is not {want}% (= {r[ti]} / {peak:g})"))
    after = " ".join(s for b in p.blocks if b.line > t.line for s in [b.text])
    if len(t.rows) > 1 and not all(w in after.lower() for w in ("median", "spread")):
        v.append(Violation("msmf_table", t.line, "below the table: the node MSMF (slowest GPU), the median and the spread"))
    if len(t.rows) == 1 and not re.search(r"only GPU", " ".join(b.text for b in p.blocks)):
        v.append(Violation("msmf_table", t.line, "a one-GPU node: say it is the only GPU (no median, no spread)"))
    return v


def lemon_table_of(doc: Doc):
    f = doc.sec("Compute", "Find underperforming GPUs")
    return next((t for t in (f.tables if f else []) if any(re.match(r"gpu\d+", h) for h in t.header)), None)


def lemon_passes(doc: Doc) -> dict[str, list[list[float | None]]]:
    """``{node: [[TFLOPS per GPU] per pass]}`` from the Find underperforming GPUs table."""
    t = lemon_table_of(doc)
    out: dict[str, list[list[float | None]]] = {}
    if t is None:
        return out
    gi = [i for i, h in enumerate(t.header) if re.match(r"gpu\d+", h)]
    ni = t.header.index("node") if "node" in t.header else None
    for r in t.rows:
        node = r[ni].strip("` ") if ni is not None else ""
        out.setdefault(node, []).append([cell_number(r[i]) if i < len(r) else None for i in gi])
    return out


def gpu_labels(text: str) -> list[tuple[str, int, int]]:
    """(host, node index, gpu index) of every ```host(nodeN):gpuK``` label in ``text``."""
    return [(m.group(1), int(m.group(2)), int(m.group(3))) for m in re.finditer(r"`([^`(]+)\(node(\d+)\):gpu(\d+)`", text)]


@rule(29, "three_passes", "Compute / GPU performance benchmarks", "one pass cannot call a GPU slow: a GPU named "
      "under-performing is >2% below its node median in all three passes; a dip that did not repeat is said in one sentence "
      "with its three numbers")
def three_passes(doc: Doc) -> list[Violation]:
    f = doc.sec("Compute", "Find underperforming GPUs")
    passes = lemon_passes(doc)
    if f is None or not passes:
        return []
    v = []
    hosts = list(passes)
    slow = set()
    for node, rows in passes.items():
        meds = [statistics.median([x for x in r if x is not None]) if any(x is not None for x in r) else None for r in rows]
        for g in range(len(rows[0])):
            dips = [p for p, r in enumerate(rows) if r[g] is not None and meds[p] and r[g] < (1 - SLOW_PCT / 100) * meds[p]]
            if len(rows) >= 3 and dips and len(dips) == len(rows):
                slow.add((node, g))
            elif dips:
                label_hit = any(f"{node}(node" in b.text and f":gpu{g}`" in b.text and len(re.findall(r"\d+", b.text)) >= 3
                                for b in f.blocks)
                if not label_hit:
                    v.append(Violation("three_passes", f.line, f"{node} gpu{g} dipped >2% below the node median in "
                                                               f"{len(dips)} of {len(rows)} passes: say it did not repeat, with "
                                                               "the three numbers"))
    named = {(h, g) for b in doc.blocks for h, _i, g in gpu_labels(b.text)
             if re.search(r"under-?performing", b.text, re.I) or (b.section.title == "Underperforming subsystems")}
    for h, g in named:
        if h in hosts and (h, g) not in slow and not any("dead" in b.text and f"{h}(node" in b.text for b in doc.blocks):
            v.append(Violation("three_passes", f.line, f"`{h}`:gpu{g} is called under-performing without being >2% below its "
                                                       "node median in all three passes"))
    return v


@rule(30, "lemon_tldr", "Compute / Find underperforming GPUs", "Find underperforming GPUs opens with 'TLDR: no "
      "under-performing or dead GPUs' or names the cards ('under-performing: `host(nodeN):gpuK`'), defines an under-performing "
      "and a dead GPU, and says the pass is not MAMF")
def lemon_tldr(doc: Doc) -> list[Violation]:
    f = doc.sec("Compute", "Find underperforming GPUs")
    if f is None:
        return []
    v = []
    first = f.blocks[0].inline.raw.strip() if f.blocks else ""
    ok = first == "**TLDR: no under-performing or dead GPUs**" or re.match(
        r"^\*\*TLDR: (under-performing|dead): `[^`]+\(node\d+\):gpu\d+`", first)
    if not ok:
        v.append(Violation("lemon_tldr", f.line, f"Find underperforming GPUs opens with the TLDR, got {first[:50]!r}"))
    body = " ".join(b.text for b in f.blocks[1:])
    if not (re.search(r"under-performing GPU is", body) and re.search(r"\bdead\b", body)):
        v.append(Violation("lemon_tldr", f.line, "define an under-performing GPU (slow or throttled) and a dead one"))
    if not re.search(r"\bnot MAMF\b|\bis not MAMF\b", body):
        v.append(Violation("lemon_tldr", f.line, "say the pass is not MAMF (no shape search, no burst/sustained split)"))
    return v


@rule(31, "lemon_table", "Compute / Find underperforming GPUs", "the table shows every GPU's TFLOPS (one column per GPU of "
      "the node) for every node, then min (gpu) and max; min is the slowest score and names its GPU")
def lemon_table(doc: Doc) -> list[Violation]:
    f = doc.sec("Compute", "Find underperforming GPUs")
    if f is None:
        return []
    t = lemon_table_of(doc)
    if t is None:
        return [Violation("lemon_table", f.line, "no table of every GPU's TFLOPS")]
    v = []
    gi = [i for i, h in enumerate(t.header) if re.match(r"gpu\d+", h)]
    if doc.gpus_per_node and len(gi) != doc.gpus_per_node:
        v.append(Violation("lemon_table", t.line, f"{len(gi)} GPU column(s) for {doc.gpus_per_node} GPUs per node: show every GPU"))
    if "min (gpu)" not in t.header or not any(h.startswith("max") for h in t.header):
        v.append(Violation("lemon_table", t.line, "columns 'min (gpu)' and 'max' are missing"))
        return v
    mi = t.header.index("min (gpu)")
    xi = next(i for i, h in enumerate(t.header) if h.startswith("max"))
    for r, ln in zip(t.rows, t.row_lines):
        vals = [(cell_number(r[i]), int(re.match(r"gpu(\d+)", t.header[i]).group(1))) for i in gi if i < len(r)]
        vals = [(x, g) for x, g in vals if x is not None]
        if not vals:
            continue
        lo = min(vals)
        m = re.match(r"(\d+(?:\.\d+)?) \(gpu(\d+)\)", r[mi])
        if not m or float(m.group(1)) != lo[0] or int(m.group(2)) not in [g for x, g in vals if x == lo[0]]:
            v.append(Violation("lemon_table", ln, f"min (gpu) {r[mi]!r} is not the slowest score and its GPU"))
        if cell_number(r[xi]) != max(x for x, _g in vals):
            v.append(Violation("lemon_table", ln, f"max {r[xi]!r} is not the fastest score"))
    nodes = re.findall(r"`([^`]+)` \(node\d+\)", " ".join(b.text for b in (doc.title.blocks if doc.title else [])))
    have = {n for n in lemon_passes(doc)}
    for n in nodes:
        if n not in have:
            v.append(Violation("lemon_table", t.line, f"node `{n}` has no row: one set of rows per node"))
    return v


@rule(32, "sm_coverage", "Compute / Find underperforming GPUs", "SM coverage of the 16384³ matmul comes from this GPU's SM "
      "count: 8192 CTAs at 128×256 tiles, full waves = 8192 // SMs, tail = 8192 % SMs, wave efficiency = 1 - tail/8192")
def sm_coverage(doc: Doc) -> list[Violation]:
    f = doc.sec("Compute", "Find underperforming GPUs")
    if f is None or lemon_table_of(doc) is None:
        return []
    sms = _env_sms(doc)
    b = next((x for x in f.blocks if re.search(r"\bCTAs?\b", x.text) and "wave" in x.text), None)
    if b is None:
        return [Violation("sm_coverage", f.line, "no SM coverage of the 16384³ matmul (CTAs, full waves, tail, wave efficiency)")]
    t = b.text
    m = re.search(r"has (\d+) SMs", t)
    got_sms = int(m.group(1)) if m else None
    v = []
    if sms is not None and got_sms != sms:
        v.append(Violation("sm_coverage", b.line, f"SM coverage uses {got_sms} SMs, but this GPU has {sms} (Environment)"))
    n = got_sms or sms
    if n:
        ctas = (LEMON_DIM // TILE[0]) * (LEMON_DIM // TILE[1])
        waves, tail = divmod(ctas, n)
        eff = round(100 * (1 - tail / ctas), 1)
        for what, want in ((rf"\b{ctas} CTAs", "the CTA count"), (rf"\b{waves} full waves", "the full waves"),
                           (rf"tail of {tail} CTAs", "the tail"), (rf"\b{eff}% wave efficiency", "the wave efficiency")):
            if not re.search(what, t):
                v.append(Violation("sm_coverage", b.line, f"{want} is wrong for {n} SMs: 8192 CTAs, {waves} full waves, "
                                                          f"tail {tail}, {eff}%"))
    return v
