"""Seed 003 rules 39-50: the Storage section.

Sources (seed 003 "## Storage"): Existing Partitions first, then Introduction; the inventory
table (``mount | size | type | device / server``, ``/`` first, one row per backing volume, type
is the backing filesystem, never ``overlay``); the Introduction's first item says what
``fio-scan`` literally does; report what was done, never what was not; IEC units; the fio table
columns and units; numeric columns right-aligned; ``local/shared ×`` (times, never percent);
"Shared … IO benchmark"; the 5% grouping rule (``abs(a-b) / min(a,b)``); "Leave the filesystems
as you found them" (scratch cleared and said so).
"""

from __future__ import annotations

import re

from ..mdparse import Doc, cell_number, is_num
from .base import Violation, house, prose_sentences, rule

PARTITION_COLUMNS = ["mount", "size", "type", "device / server"]
FIO_COLUMNS = ["size", "rw", "latency (msec)", "bw (MiBps)", "IOPS (M)"]
RATIO_COLUMN = "local/shared ×"
GROUP_PCT = 5.0
"""Seed 003: two mounts are equivalent only if every bandwidth and IOPS cell differs by <= 5%."""
CONTAINER_FS = ("overlay", "overlayfs", "aufs", "fuse-overlayfs")


def io_sections(doc: Doc):
    st = doc.top.get("Storage")
    return [c for c in (st.children if st else []) if c.title.endswith("IO benchmark")]


@rule(39, "storage_order", "Storage", "Storage opens with ### Existing Partitions, then ### Introduction (siblings); it never "
      "opens with a fio table")
def storage_order(doc: Doc) -> list[Violation]:
    st = doc.top.get("Storage")
    if st is None:
        return []
    v = []
    titles = [c.title for c in st.children]
    if st.tables:
        v.append(Violation("storage_order", st.tables[0].line, "Storage opens with ### Existing Partitions, not a table"))
    if not titles or titles[0] != "Existing Partitions":
        v.append(Violation("storage_order", st.line, "Storage opens with ### Existing Partitions"))
    if io_sections(doc) and ("Introduction" not in titles or titles.index("Introduction") != 1):
        v.append(Violation("storage_order", st.line, "### Introduction comes right after ### Existing Partitions"))
    return v


_BENCH_TALK = re.compile(r"\b(fio|fio-scan|scanned|benchmark\w*|ceiling|poked|measured|we wrote)\b", re.I)


@rule(40, "partitions_table", "Storage / Existing Partitions", "Existing Partitions is one table 'mount | size | type | device / "
      "server', `/` first, one row per backing volume (a bind mount or /tmp on / is not a second row), and says nothing about "
      "what the eval did")
def partitions_table(doc: Doc) -> list[Violation]:
    ep = doc.sec("Storage", "Existing Partitions")
    if ep is None:
        return []
    if not ep.tables or ep.tables[0].header != PARTITION_COLUMNS:
        return [Violation("partitions_table", ep.line, f"Existing Partitions is a table with columns {PARTITION_COLUMNS}")]
    t = ep.tables[0]
    v = []
    if not t.rows or t.rows[0][0].strip("`") != "/":
        v.append(Violation("partitions_table", t.line, "the first Existing Partitions row is `/`"))
    seen: dict[str, int] = {}
    for r, ln in zip(t.rows, t.row_lines):
        dev = r[3].strip("` ") if len(r) > 3 else ""
        if dev and dev in seen:
            v.append(Violation("partitions_table", ln, f"{r[0]} is on {dev} like line {seen[dev]}: one row per backing volume"))
        seen.setdefault(dev, ln)
    for b in ep.blocks:
        if m := _BENCH_TALK.search(b.prose):
            v.append(Violation("partitions_table", b.line, f"{m.group(0)!r}: the inventory says nothing about what the eval did"))
    return v


@rule(41, "partition_type", "Storage / Existing Partitions", "the type column is the backing filesystem (xfs, ext4, lustre, "
      "nfs...), never the container layer 'overlay'")
def partition_type(doc: Doc) -> list[Violation]:
    ep = doc.sec("Storage", "Existing Partitions")
    t = ep.tables[0] if ep is not None and ep.tables and "type" in ep.tables[0].header else None
    if t is None:
        return []
    i = t.header.index("type")
    return [Violation("partition_type", ln, f"type {r[i]!r} is the container layer: report the backing filesystem")
            for r, ln in zip(t.rows, t.row_lines) if i < len(r) and r[i].strip("` ").lower() in CONTAINER_FS]


@rule(42, "storage_intro", "Storage / Introduction", "the first Storage Introduction item names the tool (fio-scan linked) and "
      "says what it literally does: six runs, 16 KiB / 1 MiB / 1 GiB, read and write, 16 jobs, 4 KiB blocks, libaio, O_DIRECT "
      "and what it buys (no page cache), the timed runtime")
def storage_intro(doc: Doc) -> list[Violation]:
    if not io_sections(doc):
        return []
    intro = doc.sec("Storage", "Introduction")
    if intro is None:
        return []
    first = next((b for b in intro.blocks if b.kind == "ordered"), None)
    if first is None:
        return []
    t = first.text
    sizes = sorted({r[0] for s in io_sections(doc) for tb in s.tables for r in tb.rows if r})
    v = []
    checks = [("the number of runs", r"\b(\d+|six) runs\b"), ("read and write", r"read and write"),
              ("the parallel jobs", r"\b\d+ (parallel )?jobs\b"), ("the 4 KiB blocks", r"\b4 KiB blocks\b"),
              ("the IO engine", r"libaio|io_uring|psync"), ("O_DIRECT", r"O_DIRECT"),
              ("what O_DIRECT buys", r"page cache"), ("the timed runtime", r"\b\d+ (s|min|seconds|minutes) of timed IO\b")]
    for what, rx in checks:
        if not re.search(rx, t):
            v.append(Violation("storage_intro", first.line, f"the first Storage Introduction item says what the tool does: "
                                                            f"{what} is missing"))
    for s in sizes:
        if s not in t:
            v.append(Violation("storage_intro", first.line, f"the file sizes: {s} is missing"))
    return v


_NOT_DONE = re.compile(r"\bnot (fio-scanned|fio-scan|benchmarked|tested|measured|scanned|probed|poked)\b|\bwas(n't| not) "
                       r"(run|measured|scanned|benchmarked)\b|\bwere(n't| not) (run|measured|scanned|benchmarked)\b", re.I)


@rule(43, "report_done_only", "Storage / Introduction", "report what was done, never what was not ('not fio-scanned', "
      "'not benchmarked', 'not tested'); a phase that could not run has its reason in ### Gaps and nowhere else")
def report_done_only(doc: Doc) -> list[Violation]:
    return [Violation("report_done_only", b.line, f"{m.group(0)!r}: report what was done (a phase that could not run goes in "
                                                  "Gaps)") for b, s in prose_sentences(doc) if b.section.title != "Gaps"
            for m in [_NOT_DONE.search(s)] if m]


_FIO_SHORT = re.compile(r"(?<![\w.\-/])\d+\s?[kmgKMG](?![\w/])")
_DEC_SIZE = re.compile(r"(?<![\w.])\d[\d_,.]*\s?(KB|kB|MB|GB|TB|PB)(?!/s|ps|\w)")
_DEC_BW = re.compile(r"\b(KB/s|kB/s|MB/s|MBps|KBps)\b")


def _unit_problems(text: str) -> list[str]:
    out = []
    if m := _FIO_SHORT.search(text):
        out.append(f"{m.group(0)!r} is fio's shorthand: write 16 KiB / 1 MiB / 1 GiB")
    if m := _DEC_SIZE.search(text):
        out.append(f"decimal size {m.group(0)!r}: sizes are IEC (KiB, MiB, GiB, TiB)")
    if m := _DEC_BW.search(text):
        out.append(f"{m.group(0)!r}: storage bandwidth is MiB/s (MiBps)")
    return out


@rule(44, "iec_units", "Storage / Introduction; Final pass", "sizes are IEC (16 KiB, 1 MiB, 1 GiB) in tables and sentences, "
      "never fio's 16k / 1m / 1g (or 16K) and never decimal KB/MB/GB; storage bandwidth is MiB/s")
def iec_units(doc: Doc) -> list[Violation]:
    v = [Violation("iec_units", b.line, msg) for b in doc.blocks for msg in _unit_problems(b.prose)]
    for t in doc.tables:
        for r, ln in zip(t.rows, t.row_lines):
            for c in r:
                v += [Violation("iec_units", ln, msg) for msg in _unit_problems(re.sub(r"`[^`]*`", "", c))]
    return v


@rule(45, "fio_columns", "Storage / fio tables", "every fio table has the columns size | rw | latency (msec) | bw (MiBps) | "
      "IOPS (M) (shared tables add local/shared × last); units live in the header, cells are plain numbers, IOPS in millions in "
      "every table, the local table groups thousands with _")
def fio_columns(doc: Doc) -> list[Violation]:
    v = []
    for s in io_sections(doc):
        shared = s.title.startswith("Shared")
        for t in s.tables:
            want = FIO_COLUMNS + ([RATIO_COLUMN] if shared and len(t.header) > 5 else [])
            if t.header != want:
                v.append(Violation("fio_columns", t.line, f"fio table columns {t.header} are not {want}"))
                continue
            for r, ln in zip(t.rows, t.row_lines):
                for c, h in zip(r[2:], t.header[2:]):
                    if not re.fullmatch(r"\d[\d_]*(\.\d+)?", c.strip()):
                        v.append(Violation("fio_columns", ln, f"{h} cell {c!r}: a plain number (units in the header, IOPS in M)"))
                bw = r[3].strip()
                if not shared and re.fullmatch(r"\d{4,}(\.\d+)?", bw):
                    v.append(Violation("fio_columns", ln, f"bw {bw!r}: the local table groups thousands with _ (12_029.1)"))
    return v


@rule(46, "numeric_align", "Storage / fio tables; Final pass", "every table column whose cells are numbers is right-aligned "
      "(---:), size included; rw is left-aligned")
def numeric_align(doc: Doc) -> list[Violation]:
    v = []
    for t in doc.tables:
        for col, name in enumerate(t.header):
            vals = [r[col] for r in t.rows if col < len(r) and r[col] not in ("", "…", "...")]
            a = t.align[col] if col < len(t.align) else ""
            if vals and all(is_num(x) for x in vals) and a != "right":
                v.append(Violation("numeric_align", t.line, f"numeric column {name!r} is not right-aligned (use ---:)"))
            if name == "size" and "IOPS (M)" in t.header and a != "right":
                v.append(Violation("numeric_align", t.line, "the size column is right-aligned (---:)"))
            if name == "rw" and a == "right":
                v.append(Violation("numeric_align", t.line, "rw is the one left-aligned column"))
    return v


_PCT_LOCAL = re.compile(r"%\s?local\b|\bpercent of (the )?local\b|\d+(\.\d+)?\s*%\s*(of (the )?local|slower|faster|below (the )?"
                        r"local|less than (the )?local)", re.I)


@rule(47, "local_shared", "Storage / Shared IO benchmark", "local/shared × is the last column of shared tables only, a ratio "
      "in times (never %), explained in a sentence (what it divides, what 1 means); prose says how many times slower, never a "
      "percentage or %local")
def local_shared(doc: Doc) -> list[Violation]:
    v = []
    for t in doc.tables:
        for i, h in enumerate(t.header):
            if "local/shared" in h.lower() or "%local" in h.lower().replace(" ", ""):
                if "×" not in h or "%" in h:
                    v.append(Violation("local_shared", t.line, f"column {h!r}: the ratio is times slower (×), not percent"))
                if i != len(t.header) - 1:
                    v.append(Violation("local_shared", t.line, f"{h!r} goes last, after the five core columns"))
                if not t.section.title.startswith("Shared"):
                    v.append(Violation("local_shared", t.line, f"{h!r} belongs on shared tables only"))
                for r, ln in zip(t.rows, t.row_lines):
                    if i < len(r) and "%" in r[i]:
                        v.append(Violation("local_shared", ln, f"local/shared cell {r[i]!r} is a percentage"))
                sec_txt = " ".join(b.text for b in t.section.blocks)
                if not (re.search(r"divides|÷", sec_txt) and re.search(r"\b1\b", sec_txt)):
                    v.append(Violation("local_shared", t.line, "explain local/shared × in a sentence: what it divides and what "
                                                               "1 would mean"))
    for b, s in prose_sentences(doc):
        if m := _PCT_LOCAL.search(s):
            v.append(Violation("local_shared", b.line, f"{m.group(0)!r}: say how many times slower (×), not a percentage"))
    return v


@rule(48, "shared_heading", "Storage / Shared IO benchmark", "a shared-filesystem heading is 'Shared <fs> IO benchmark' (e.g. "
      "Shared Lustre IO benchmark), never a bare 'Shared'")
def shared_heading(doc: Doc) -> list[Violation]:
    st = doc.top.get("Storage")
    return [Violation("shared_heading", c.line, f"heading {c.title!r}: write 'Shared <fs> IO benchmark'")
            for c in (st.children if st else []) if c.title.lower().startswith("shared")
            and not re.match(r"^Shared (\S.* )?IO benchmark$", c.title)]


def _shared_values(doc: Doc):
    out = []
    for s in io_sections(doc):
        if not s.title.startswith("Shared"):
            continue
        for t in s.tables:
            if "bw (MiBps)" in t.header and "IOPS (M)" in t.header:
                bi, ii = t.header.index("bw (MiBps)"), t.header.index("IOPS (M)")
                vals = [(cell_number(r[bi]), cell_number(r[ii])) for r in t.rows]
                if all(a is not None and b is not None for a, b in vals):
                    out.append((s, vals))
    return out


@rule(49, "shared_grouping", "Storage / Shared IO benchmark", "two shared mounts share one table only if every bandwidth and "
      "IOPS cell is within 5% (abs(a-b)/min(a,b)); tables within 5% in every cell are one group")
def shared_grouping(doc: Doc) -> list[Violation]:
    vals = _shared_values(doc)
    v = []
    for a in range(len(vals)):
        for b in range(a + 1, len(vals)):
            (ca, va), (cb, vb) = vals[a], vals[b]
            if len(va) == len(vb) and va and all(abs(x - y) / min(x, y) * 100 <= GROUP_PCT for p, q in zip(va, vb)
                                                 for x, y in zip(p, q) if min(x, y) > 0):
                v.append(Violation("shared_grouping", cb.line, f"{ca.title!r} and {cb.title!r} are within 5% in every cell: "
                                                               "one table"))
    return v


@rule(50, "scratch_cleared", "Leave the filesystems as you found them; Final pass", "scratch the eval moved instead of "
      "deleting (to a trash directory on the same mount) is named with its path and size, so the user can purge it in one "
      "command", grade="partly: clearing the scratch is an action on the cluster; the report can only say what was done")
def scratch_cleared(doc: Doc) -> list[Violation]:
    v = []
    for b in doc.blocks:
        t = b.text
        if re.search(r"\bmoved\b", t) and re.search(r"scratch|trash|fio-test", t, re.I):
            if not (re.search(r"`?/[\w./-]+", t) and re.search(r"\d+(\.\d+)?\s?(bytes|B|KiB|MiB|GiB|TiB)\b", t)):
                v.append(Violation("scratch_cleared", b.line, "moved scratch: name the path it went to and its size"))
    return v


@house("house_scratch_stated", "with a fio table, the report itself says the scratch fio wrote was cleared or where it was "
       "moved (the seed asks for it in the summary to the user)")
def house_scratch_stated(doc: Doc) -> list[Violation]:
    if not any(s.tables for s in io_sections(doc)):
        return []
    st = doc.top.get("Storage")
    txt = " ".join(b.text for b in st.all_blocks()) if st else ""
    if re.search(r"\b(removed|deleted|cleared|moved)\b", txt) and re.search(r"scratch|own files|--unlink|fio-test|trash", txt):
        return []
    return [Violation("house_scratch_stated", st.line if st else 1, "say that the scratch fio wrote was cleared (or where it "
                                                                    "was moved)", "warning")]
