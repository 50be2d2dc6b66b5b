"""Seed 003 rules 57-62: how the report is written.

Sources (seed 003 "Report template" and "Final pass before you show the report"): expand every
acronym at its first use; no term before its definition ("any shape", ``local/shared ×``,
``O_DIRECT``); cut phrases that carry no information; never assert an absence; the eval does not
know what the cluster is for; prose numbers identical to the table cell they cite, and every
number outside a table carries its unit.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

from ..mdparse import Doc, Table, cell_number, numbers
from .base import Violation, prose_sentences, rule

ACRONYMS: dict[str, tuple[str, ...]] = {
    "MAMF": ("maximum achievable matmul flops",),
    "MSMF": ("maximum sustainable matmul flops",),
    "DCGM": ("data center gpu manager",),
    "NVLS": ("nvlink sharp",),
    "GEMM": ("general matrix multiply", "general matrix multiplication"),
    "busbw": ("bus bandwidth",),
    "algbw": ("algorithm bandwidth",),
    "MFU": ("model flops utilization", "model flops utilisation"),
    "NVML": ("nvidia management library",),
    "HBM": ("high-bandwidth memory", "high bandwidth memory"),
    "TDP": ("thermal design power",),
    "CTA": ("cooperative thread array",),
    "NCCL": ("nvidia collective communications library",),
    "SM": ("streaming multiprocessor",),
    "NUMA": ("non-uniform memory access",),
    "IOPS": ("input/output operations per second", "i/o operations per second"),
}
"""Seed 003: expand every acronym at first use (MAMF, MSMF, DCGM, NVLS, GEMM, busbw, algbw, MFU),
plus the other abbreviations the eval report uses."""
ACRONYM_WINDOW = 160
"""How far (characters) from an acronym's first use its expansion may stand: the same clause or
the next one ("MAMF (Maximum Achievable Matmul FLOPS)", "8192 CTAs (cooperative thread arrays)")."""


def _texts(doc: Doc) -> list[tuple[int, str]]:
    """(line, prose) of every block and table cell outside the Table of Contents, in source order."""
    out = [(b.line, b.prose) for b in doc.blocks if b.section.title != "Table of Contents"]
    for t in doc.tables:
        for row, ln in zip(t.cells, t.row_lines):
            out += [(ln, c.prose) for c in row]
    return sorted(out, key=lambda x: x[0])


@rule(57, "acronyms", "Report template; Final pass", "every acronym is expanded at its first use (MAMF, MSMF, DCGM, NVLS, GEMM, "
      "busbw, algbw, MFU, and the report's others: HBM, TDP, SM, CTA, NCCL, NUMA, NVML, IOPS)")
def acronyms(doc: Doc) -> list[Violation]:
    v = []
    texts = _texts(doc)
    for acr, exps in ACRONYMS.items():
        rx = re.compile(rf"(?<![\w-]){re.escape(acr)}s?(?![\w-])")
        for line, t in texts:
            m = rx.search(t)
            if not m:
                continue
            win = t[max(0, m.start() - ACRONYM_WINDOW):m.end() + ACRONYM_WINDOW].lower()
            if not any(e in win for e in exps):
                v.append(Violation("acronyms", line, f"{acr} is not expanded at its first use (expected '{exps[0]}')"))
            break
    return v


TERMS = (("matmul shape", re.compile(r"\bshapes?\b"), re.compile(r"matmul shapes?\W+\(M×N×K|M×N×K")),
         ("local/shared ×", re.compile(r"local/shared ×"), re.compile(r"divides|÷|how many times slower")),
         ("O_DIRECT", re.compile(r"O_DIRECT"), re.compile(r"page cache")))
"""Seed 003's named terms and what defines each at first use: 'any shape' needs the matmul shape
(M×N×K); `local/shared ×` needs what it divides; `O_DIRECT` needs what it buys (no page cache)."""


@rule(58, "terms_defined", "Report template; Final pass", "no term is used before it is defined, in a sentence at its first use: "
      "the matmul shape (M×N×K), local/shared ×, O_DIRECT", grade="partly: the seed's named terms; a new term needs a reader")
def terms_defined(doc: Doc) -> list[Violation]:
    v = []
    raw = [(b.line, b.text, b) for b in doc.blocks if b.section.title != "Table of Contents"]
    for t in doc.tables:
        for row, ln in zip(t.cells, t.row_lines):
            raw += [(ln, c.text, None) for c in row]
    raw.sort(key=lambda x: x[0])
    for name, use, define in TERMS:
        hit = next(((ln, txt) for ln, txt, _b in raw if use.search(txt)), None)
        if hit is not None and not define.search(hit[1]):
            v.append(Violation("terms_defined", hit[0], f"{name!r} is used before it is defined: define it where it is first used"))
    return v


FILLER = re.compile(
    r"\bcollects? the results( into one table)?\b|\b(the )?(results|numbers|figures|measurements|values|data) (are|is) "
    r"(shown|listed|given|presented|summari[sz]ed|collected|tabulated|reported) (below|above|here|in the (table|following))\b"
    r"|\bthe (table|chart|plot|figure) below (shows|lists|gives|presents|summari[sz]es)\b|\bsee the (table|plot) below\b"
    r"|\bas (expected|anticipated)(?=\s*[.,;:)]|\s*$)|\bfor (reference|completeness)\b|\bit is worth (noting|mentioning)\b|\bneedless to say\b"
    r"|\bthis section (covers|describes|presents|shows|lists|summari[sz]es)\b|\bas can be seen\b|\bhere are the results\b"
    r"|\bthe following table\b", re.I)
"""Seed 003 "Cut phrases that carry no information" and its rewordings."""


@rule(59, "filler", "Report template; Final pass", "no sentence that carries no information ('collects the results into one "
      "table', 'the results are shown/listed below', 'for reference', 'as expected', 'it is worth noting', 'this section covers')")
def filler(doc: Doc) -> list[Violation]:
    return [Violation("filler", b.line, f"filler {m.group(0)!r}: every sentence adds a fact, a definition or a consequence")
            for b, s in prose_sentences(doc) for m in [FILLER.search(s)] if m]


ABSENCE = re.compile(
    r"skip(ped)? reasons?\s*:\s*(none|n/?a|-)|\bnone (found|detected|observed|seen|reported|missing|skipped)\b"
    r"|\bnothing (was |is )?(skipped|missing|failed|to report|to flag|found|notable|unusual|left out)\b"
    r"|\bno (gaps|issues|problems|failures|errors|anomalies|warnings)( (were|was))? (found|detected|seen|observed|reported|"
    r"to report|noted)\b|\bthere (are|were) no gaps\b|\b(gaps|underperforming subsystems|flags)\s*:\s*(none|n/?a|-)\b", re.I)
"""Seed 003 "Never assert an absence": no 'Skip reasons: none', '### Gaps / None', 'N/A', 'nothing
was skipped' (nor 'nothing to report', 'no issues found')."""


@rule(60, "asserted_absence", "Storage / Introduction; Report template (Gaps)", "never assert an absence: no 'Skip reasons: none', "
      "no '### Gaps' holding 'None', no N/A cells, no 'nothing to report'; a Gaps section exists only with a real item")
def asserted_absence(doc: Doc) -> list[Violation]:
    v = [Violation("asserted_absence", b.line, f"asserts an absence: {m.group(0)!r}")
         for b in doc.blocks for m in [ABSENCE.search(b.prose)] if m]
    for b in doc.blocks:
        if re.fullmatch(r"(?i)(none|n/a|nothing|-|—)\.?", b.prose.strip()):
            v.append(Violation("asserted_absence", b.line, f"a bare {b.prose.strip()!r} asserts an absence"))
    for t in doc.tables:
        for r, ln in zip(t.rows, t.row_lines):
            if any(re.fullmatch(r"(?i)n/?a|none|-", c.strip()) for c in r):
                v.append(Violation("asserted_absence", ln, "an N/A or None cell asserts an absence: leave the row out"))
    for s in doc.sections:
        if s.title == "Gaps" and not [b for b in s.blocks if b.kind == "bullet" and len(b.prose) > 12]:
            v.append(Violation("asserted_absence", s.line, "### Gaps without a real missing item: omit the subsection"))
    return v


WORKLOAD = re.compile(r"\b(training|fine-tuning|pre-?training)\b(?! or inference)(?<!inference or training)|\bepochs?\b"
                      r"|\bthe model('s)? (trains|training)\b", re.I)
"""Seed 003: 'The eval does not know what the cluster is for': 'sustained workload', not
'training step'; 'training or inference' when an example is needed."""


@rule(61, "workload_assumed", "Compute / GPU performance benchmarks", "no workload assumed: 'sustained workload', never "
      "'training step' (say 'training or inference' when an example is needed)")
def workload_assumed(doc: Doc) -> list[Violation]:
    v = []
    for b, s in prose_sentences(doc):
        for m in WORKLOAD.finditer(s):
            pre = s[max(0, m.start() - 13):m.start()].lower()
            if "inference or " in pre:
                continue
            v.append(Violation("workload_assumed", b.line, f"{m.group(0)!r}: the eval does not know what the cluster is for; "
                                                          "write 'sustained workload'"))
            break
    return v


# ---------------------------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------------------------

_COL_UNIT = (("TFLOPS", "TFLOPS"), ("GB/s", "GB/s"), ("GBps", "GB/s"), ("MiBps", "MiB/s"), ("MiB/s", "MiB/s"),
             ("msec", "msec"), ("µs", "µs"), ("×", "×"), ("%", "%"))
_SAME = {"GBps": "GB/s", "MiBps": "MiB/s"}


def _col_unit(header: str) -> str | None:
    for k, u in _COL_UNIT:
        if k in header:
            return u
    return None


def measured_cells(doc: Doc) -> dict[str, list[str]]:
    """``{unit: [cell texts]}`` of every numeric table cell whose column (or the cell itself) has a unit."""
    out: dict[str, list[str]] = {}
    for t in doc.tables:
        for i, h in enumerate(t.header):
            hu = _col_unit(h)
            for r in t.rows:
                if i >= len(r):
                    continue
                c = r[i].strip().strip("*`")
                m = re.match(r"(\d[\d_,]*(?:\.\d+)?)\s*(%|×|TFLOPS|GB/s|MiB/s|msec)?", c)
                if not m or cell_number(c.split(" (")[0]) is None and "(gpu" not in c:
                    continue
                u = m.group(2) or hu
                if u:
                    out.setdefault(u, []).append(m.group(1).replace("_", "").replace(",", ""))
    return out


def _round_to(x: float, decimals: int) -> Decimal:
    return Decimal(str(x)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


_APPROX = re.compile(r"\b(about|around|roughly|approximately|approx\.?|nearly|almost|circa|some|close to)\s+(\d[\d_,]*(?:\.\d+)?)"
                     r"|[~≈]\s?(\d[\d_,]*(?:\.\d+)?)", re.I)
_VERSIONISH = re.compile(r"(torch|nccl|cuda|python|ubuntu|fio|driver|kernel|version|rocm|gen|nvlink|pcie|capability|v)\s*$", re.I)


def _table_with_rows(doc: Doc, header_has: str) -> list[Table]:
    return [t for t in doc.tables if any(header_has in h for h in t.header)]


def _quote_checks(doc: Doc, b) -> list[str]:
    """Problems of the quotes in block ``b``: storage pairs, peak busbw, lemon range, MSMF, against their cells."""
    out = []
    txt = b.text
    fio = [t for t in doc.tables if t.header[:2] == ["size", "rw"] and "bw (MiBps)" in t.header]
    for m in re.finditer(r"(\d+ (?:KiB|MiB|GiB)) \*\*([\d_.]+) MiB/s / ([\d_.]+) MiB/s\*\*", b.inline.raw):
        size, rd, wr = m.group(1), m.group(2).replace("_", ""), m.group(3).replace("_", "")
        ok = False
        for t in fio:
            bi = t.header.index("bw (MiBps)")
            cells = {(r[0], r[1]): r[bi].replace("_", "") for r in t.rows if len(r) > bi}
            if cells.get((size, "read")) == rd and cells.get((size, "write")) == wr:
                ok = True
        if not ok:
            out.append(f"{size} {m.group(2)} / {m.group(3)} MiB/s is not the {size} read / write cells of a fio table")
    for m in re.finditer(r"peak busbw (\d[\d.]*) GB/s at (\d+ (?:KiB|MiB|GiB))", txt):
        val, pay = m.group(1), m.group(2)
        tabs = [t for t in (b.section.tables or _table_with_rows(doc, "busbw")) if any("busbw" in h for h in t.header)]
        if b.section.top() is not None and b.section.top().title == "Findings":
            tabs = _table_with_rows(doc, "busbw")
        hit = False
        for t in tabs:
            for i, h in enumerate(t.header):
                if "busbw" not in h:
                    continue
                col = [(r[0], r[i]) for r in t.rows if len(r) > i]
                if (pay, val) in col and max(cell_number(c) or 0 for _p, c in col) == float(val):
                    hit = True
        if tabs and not hit:
            out.append(f"peak busbw {val} GB/s at {pay} is not the peak cell of its busbw table")
    if b.section.top() is not None and b.section.top().title == "Findings":
        from .compute import lemon_passes, msmf_table_of

        lem = [x for rows in lemon_passes(doc).values() for r in rows for x in r if x is not None]
        m = re.search(r"lemon GEMM (\d+)–(\d+) TFLOPS", txt)
        if m and lem and (float(m.group(1)) != min(lem) or float(m.group(2)) != max(lem)):
            out.append(f"lemon GEMM {m.group(1)}–{m.group(2)} TFLOPS is not the table's {min(lem):g}–{max(lem):g}")
        t = msmf_table_of(doc)
        m = re.search(r"\bMSMF (\d+) TFLOPS", txt)
        if m and t is not None:
            ti = next((i for i, h in enumerate(t.header) if h.startswith("MSMF (")), None)
            vals = [cell_number(r[ti]) for r in t.rows] if ti is not None else []
            vals = [x for x in vals if x is not None]
            if vals and float(m.group(1)) != min(vals):
                out.append(f"MSMF {m.group(1)} TFLOPS is not the table's node MSMF (slowest GPU) {min(vals):g}")
    return out


@rule(62, "prose_numbers", "Final pass; Shared IO benchmark; Findings", "a number in prose is identical to the table cell it "
      "quotes (26.5 → 26.5×, never 27× or 'about 680'), and every number outside a table carries its unit (1_646.1 MiB/s / "
      "1_658.3 MiB/s, not a lead-in 'MiB/s:' then bare numbers)")
def prose_numbers(doc: Doc) -> list[Violation]:
    v = []
    cells = measured_cells(doc)
    allcells = [float(c) for cs in cells.values() for c in cs]
    for b in doc.blocks:
        if b.section.title == "Table of Contents":
            continue
        v += [Violation("prose_numbers", b.line, msg) for msg in _quote_checks(doc, b)]
        for s in b.sentences:
            for m in _APPROX.finditer(s):
                x = float((m.group(2) or m.group(3)).replace("_", "").replace(",", ""))
                after = numbers(s[m.start(2) if m.group(2) else m.start(3):])
                u = _SAME.get(after[0].unit or "", after[0].unit) if after else None
                pool = [float(c) for c in cells.get(u, [])] if u else allcells
                if any(c and abs(x - c) / c <= 0.05 for c in pool):
                    v.append(Violation("prose_numbers", b.line, f"{m.group(0)!r}: quote the table cell verbatim, not an "
                                                                "approximation"))
            nums = numbers(s)
            for k, n in enumerate(nums):
                u = _SAME.get(n.unit or "", n.unit)
                pre = s[max(0, n.start - 14):n.start]
                if u in cells and str(n.text).replace("_", "") not in cells[u]:
                    for c in cells[u]:
                        cd = len(c.split(".")[1]) if "." in c else 0
                        if cd > n.decimals and _round_to(float(c), n.decimals) == Decimal(n.text.replace("_", "")):
                            v.append(Violation("prose_numbers", b.line, f"{n.text}{n.unit or ''} rounds the table's {c}: "
                                                                        "quote it verbatim"))
                            break
                if n.unit is None and ("." in n.text or "_" in n.text) and not _VERSIONISH.search(pre) \
                        and not s[n.end:n.end + 1] in ("+", "-", "x", "×") and not re.search(r"[A-Za-z]-?$", pre):
                    nxt = s[n.end:n.end + 3]
                    series_unit = any(x.unit for x in nums[k + 1:k + 4] if x.start - n.end < 12) and nxt.startswith(" / ") \
                        and "." not in n.text
                    if not series_unit:
                        v.append(Violation("prose_numbers", b.line, f"{n.text} has no unit: every number outside a table "
                                                                    "carries its own"))
    return v
