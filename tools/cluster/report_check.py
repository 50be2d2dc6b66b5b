"""Checker for the mechanical rules of a cluster-evaluation report (seed 003, "Report template"
and "Final pass before you show the report").

Rules (``Violation.rule``):

- ``acronym``: every acronym in :data:`ACRONYMS` is expanded at its first use (the expansion
  within :data:`ACRONYM_WINDOW` characters before or after it);
- ``iec_units``: sizes in IEC units (``16 KiB``, ``1 GiB``), never fio's ``16k``/``1m``/``1g``
  and never decimal ``KB``/``MB``/``GB``/``TB`` for a size; storage bandwidth in ``MiB/s`` /
  ``MiBps``, never ``MB/s``. Decimal ``GB/s``/``GBps``/``TB/s`` stay legal: fabric and memory
  bandwidth are quoted in decimal units throughout seed 003 (busbw, NVLink GBps);
- ``numeric_align``: a markdown-table column whose cells are all numbers (units and ``_``
  grouping allowed) is right-aligned (``---:``);
- ``times_not_percent``: the ``local/shared ×`` column is a ratio in times (a ``×`` header, no
  ``%`` in its cells), and nothing says ``%local`` / ``% of local``;
- ``asserted_absence``: no "No Fail", "Skip reasons: none", "none found", "nothing was
  skipped", ``N/A`` cells, a ``Gaps`` section whose body is "None", "not benchmarked"...;
- ``toc_anchor``: every ``(#anchor)`` link resolves to a heading (GitHub slugs, ``-1``/``-2``
  for repeated titles);
- the rules of :mod:`ai4s_graph.tools.cluster.report_rules` (file name, title, TOC of what ran,
  Environment tables, Compute, NIC percentages, NCCL environment, node scope, inlined plots,
  Storage layout and grouping, Findings headings and GPU naming, prose numbers, plural targets,
  the operator ask, filler/shorthand/feelings/workload wording, Introduction lists, links).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .report_rules import RULE_CHECKS, RULE_NAMES, Violation, check_file_name
from .mdparse import anchor_map, anchors, cells, headings, is_num, lines_outside_fences, slug, strip_links, tables  # noqa: F401

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

RULES = ("structure", "acronym", "iec_units", "numeric_align", "times_not_percent", "asserted_absence", "toc_anchor") + RULE_NAMES
"""Every rule name a :class:`Violation` can carry; docs/rules.md maps each to its seed text and test."""


_lines_outside_fences = lines_outside_fences
_strip_links = strip_links
_tables = lambda text: tables(lines_outside_fences(text))  # noqa: E731
_cells = cells
_is_num = is_num


def _check_acronyms(text: str) -> list[Violation]:
    v = []
    body = "\n".join(_strip_links(l) for _i, l in _lines_outside_fences(text))
    # map offsets back to line numbers of the original text
    kept = [i for i, _l in _lines_outside_fences(text)]
    starts = []
    pos = 0
    for line in body.split("\n"):
        starts.append(pos)
        pos += len(line) + 1
    low = body.lower()
    for acr, expansions in ACRONYMS.items():
        m = re.search(rf"(?<![\w-]){re.escape(acr)}(?![\w-])", body)
        if not m:
            continue
        lo, hi = max(0, m.start() - ACRONYM_WINDOW), m.end() + ACRONYM_WINDOW
        if not any(e in low[lo:hi] for e in expansions):
            idx = max(j for j, s in enumerate(starts) if s <= m.start())
            v.append(Violation("acronym", kept[idx], f"{acr} is not expanded at its first use (expected '{expansions[0]}')"))
    return v


_DEC_SIZE = re.compile(r"(?<![\w.])\d[\d_,.]*\s?(KB|kB|MB|GB|TB)(?!/s|ps|\w)")
_FIO_SHORT = re.compile(r"(?<![\w.\-/])\d+[kmg](?![\w])")
_DEC_STORAGE_BW = re.compile(r"\b(KB/s|kB/s|MB/s|MBps|KBps)\b")


def _check_units(text: str) -> list[Violation]:
    v = []
    for i, line in _lines_outside_fences(text):
        prose = re.sub(r"`[^`]*`", "", _strip_links(line))
        if m := _DEC_SIZE.search(prose):
            v.append(Violation("iec_units", i, f"decimal size {m.group(0)!r}: use KiB/MiB/GiB/TiB"))
        if m := _FIO_SHORT.search(prose):
            v.append(Violation("iec_units", i, f"fio shorthand {m.group(0)!r}: write 16 KiB / 1 MiB / 1 GiB"))
        if m := _DEC_STORAGE_BW.search(prose):
            v.append(Violation("iec_units", i, f"{m.group(0)!r}: storage bandwidth is MiB/s (MiBps)"))
    return v


def _check_tables(text: str) -> list[Violation]:
    v = []
    for line, head, align, body in _tables(text):
        for col, name in enumerate(head):
            vals = [cells[col] for _l, cells in body if col < len(cells) and cells[col] not in ("", "…", "...")]
            a = align[col] if col < len(align) else ""
            if vals and all(_is_num(x) for x in vals) and not a.endswith(":"):
                v.append(Violation("numeric_align", line, f"numeric column {name!r} is not right-aligned (use ---:)"))
            if "local/shared" in name.lower():
                if "×" not in name or "%" in name:
                    v.append(Violation("times_not_percent", line, f"column {name!r}: the ratio is times slower (×), not percent"))
                for ln, cells in body:
                    if col < len(cells) and "%" in cells[col]:
                        v.append(Violation("times_not_percent", ln, f"local/shared cell {cells[col]!r} is a percentage"))
    for i, l in _lines_outside_fences(text):
        if re.search(r"%\s?local|% of (the )?local|percent of (the )?local", l, re.I):
            v.append(Violation("times_not_percent", i, "local-vs-shared comparison as a percentage; write how many times slower (×)"))
    return v


_ABSENCE = [
    (re.compile(r"\bno fail\b", re.I), "'No Fail' next to Pass is a redundant verdict"),
    (re.compile(r"skip(ped)? reasons?\s*:\s*(none|n/?a|-)", re.I), "'Skip reasons: none' asserts an absence"),
    (re.compile(r"\bnone (found|detected|observed|seen)\b", re.I), "'none found' asserts an absence"),
    (re.compile(r"\bnothing (was )?(skipped|missing|failed)\b", re.I), "asserts that nothing was skipped"),
    (re.compile(r"\b(not (fio-scanned|benchmarked|tested|measured|scanned))\b", re.I), "reports what was not done"),
    (re.compile(r"\bunderperforming subsystems\s*:\s*none\b", re.I), "asserts an absence"),
    (re.compile(r"(^|\|)\s*N/?A\s*(\||$)"), "N/A cell asserts an absence"),
    (re.compile(r"^\s*[-*]?\s*(none|n/a|nothing)\.?\s*$", re.I), "a bare 'None' line asserts an absence"),
]


def _check_absence(text: str) -> list[Violation]:
    v = []
    for i, l in _lines_outside_fences(text):
        for rx, why in _ABSENCE:
            if rx.search(l):
                v.append(Violation("asserted_absence", i, f"{why}: {l.strip()[:60]!r}"))
                break
    return v


def _check_toc(text: str) -> list[Violation]:
    have = anchors(text)
    v = []
    for i, l in _lines_outside_fences(text):
        for m in re.finditer(r"\]\(#([^)\s]+)\)", l):
            if m.group(1) not in have:
                v.append(Violation("toc_anchor", i, f"link #{m.group(1)} matches no heading"))
    return v


def _check_structure(text: str) -> list[Violation]:
    """A report has a title (``# ...``) and at least one section (``## ...``)."""
    lines = text.splitlines()
    if not any(ln.startswith("# ") for ln in lines):
        return [Violation("structure", 1, "no '# ' title: not a report")]
    if not any(ln.startswith("## ") for ln in lines):
        return [Violation("structure", 1, "no '## ' section: not a report")]
    return []


def check_report(text: str, filename: str | None = None) -> list[Violation]:
    """Every rule violation in report ``text`` (markdown), in line order; ``filename`` (the
    report's base name) adds the file-name rule. An empty list means the report passes. A text
    with no title or no section is reported as ``structure`` only."""
    v = _check_structure(text)
    if v:
        return v
    v += _check_acronyms(text) + _check_units(text) + _check_tables(text) + _check_absence(text) + _check_toc(text)
    for fn in RULE_CHECKS.values():
        v += fn(text)
    if filename is not None:
        v += check_file_name(filename)
    return sorted(v, key=lambda x: (x.line, x.rule))


def check_file(path: str | Path) -> list[Violation]:
    """:func:`check_report` on a file. Raises FileNotFoundError when it does not exist and
    :class:`~ai4s_graph.tools.errors.InputError` when it is not UTF-8 text."""
    try:
        return check_report(Path(path).read_text(encoding="utf-8"), filename=Path(path).name)
    except UnicodeDecodeError:
        from ..errors import InputError

        raise InputError(f"{path}: not UTF-8 text: not a markdown report") from None


if __name__ == "__main__":  # pragma: no cover
    bad = check_file(sys.argv[1])
    for x in bad:
        print(x)
    sys.exit(1 if bad else 0)
