"""The cluster-evaluation report as a structure, for the report checker: sections (the heading
tree, with GitHub anchors), tables (header, alignment, cells), prose blocks (paragraphs and list
items, with their links, images and code spans), the sentences of each block and the numbers in
each sentence with their units.

The Markdown is parsed by ``markdown-it-py`` (CommonMark plus GitHub pipe tables), never by
regexes over lines: a table row, a code fence or a list item is what the parser says it is.
Every element carries its 1-based source line. :func:`parse` is the entry point; the rule
modules (:mod:`ai4s_graph.tools.cluster.rules`) are functions of the :class:`Doc` it returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator

from markdown_it import MarkdownIt

_MD = MarkdownIt("commonmark").enable("table")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading text: markdown stripped (links to their text, backticks and
    ``*`` removed), lowercase, punctuation other than ``-``/``_`` removed, spaces to ``-``.
    Duplicates get ``-1``, ``-2``... (:attr:`Doc.anchors`)."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    t = t.replace("`", "").replace("*", "")
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


# ---------------------------------------------------------------------------------------------
# inline content
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A link or an image in a block: its text (image: alt text), target, and which it is."""

    text: str
    href: str
    image: bool = False


@dataclass
class Inline:
    """One inline run (a heading, a paragraph, a list item's first paragraph, a table cell).

    ``text``: the plain text, code spans kept in backticks, emphasis markers and link targets
    dropped; ``prose``: the same with every code span replaced by ``⟦⟧`` (what a reader reads as
    words: rules on wording look here, so ```NCCL_P2P_DISABLE=1``` or a path is never a word);
    ``raw``: the Markdown source; ``links``, ``code``, ``strong``: the links/images, code spans
    and bold runs, in order."""

    text: str = ""
    prose: str = ""
    raw: str = ""
    links: list[Link] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    strong: list[str] = field(default_factory=list)


CODE_MARK = "⟦⟧"


def _inline(tok) -> Inline:
    out = Inline(raw=tok.content)
    text, prose = [], []
    link: list[str] | None = None
    href = ""
    strong: list[str] | None = None
    for c in tok.children or []:
        if c.type == "text":
            text.append(c.content)
            prose.append(c.content)
            if link is not None:
                link.append(c.content)
            if strong is not None:
                strong.append(c.content)
        elif c.type == "code_inline":
            text.append(f"`{c.content}`")
            prose.append(CODE_MARK)
            out.code.append(c.content)
            if link is not None:
                link.append(f"`{c.content}`")
            if strong is not None:
                strong.append(f"`{c.content}`")
        elif c.type in ("softbreak", "hardbreak"):
            text.append(" ")
            prose.append(" ")
        elif c.type == "link_open":
            link, href = [], c.attrs.get("href", "")
        elif c.type == "link_close":
            out.links.append(Link("".join(link or []), str(href)))
            link = None
        elif c.type == "image":
            out.links.append(Link(c.content, str(c.attrs.get("src", "")), image=True))
            text.append(c.content)
            prose.append(c.content)
        elif c.type == "strong_open":
            strong = []
        elif c.type == "strong_close":
            out.strong.append("".join(strong or []))
            strong = None
        elif c.type == "html_inline":
            text.append(c.content)
    out.text = "".join(text).strip()
    out.prose = "".join(prose).strip()
    return out


# ---------------------------------------------------------------------------------------------
# numbers and sentences
# ---------------------------------------------------------------------------------------------

UNITS = ("MiB/s", "MiBps", "GiB/s", "GB/s", "GBps", "TB/s", "TBps", "Gb/s", "Gbps", "Gb/sec", "TFLOPS", "GFLOPS", "TFLOP/s",
         "msec", "ms", "µs", "us", "ns", "s", "%", "×", "W", "MHz", "GHz", "GiB", "MiB", "KiB", "TiB", "GB", "MB", "KB", "kB",
         "TB", "B", "°C", "min", "h")
"""Units a number in the report may carry, longest match first (seed 003 "Every number outside a
table carries its unit": MiB/s, GBps, TFLOPS, msec, ×)."""
_UNIT_RX = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
NUMBER = re.compile(
    r"(?<![\w.\-/⟦])(?P<num>\d[\d_,]*(?:\.\d+)?)(?![\d.]*\d)(?:\s?(?P<unit>" + _UNIT_RX + r")(?![A-Za-z/]))?")
"""A number as written (``1_646.1``, ``26.5``, ``16384``) and the unit right after it, if any."""


@dataclass(frozen=True)
class Number:
    """A number in a sentence: ``text`` as written, ``value``, its ``unit`` (None when bare),
    ``start``/``end`` offsets in the sentence, and ``decimals`` (digits after the point)."""

    text: str
    value: float
    unit: str | None
    start: int
    end: int

    @property
    def decimals(self) -> int:
        return len(self.text.split(".", 1)[1]) if "." in self.text else 0


def numbers(text: str) -> list[Number]:
    """Every number of ``text`` (a sentence's prose: code spans already replaced) with its unit."""
    out = []
    for m in NUMBER.finditer(text):
        raw = m.group("num")
        try:
            v = float(raw.replace("_", "").replace(",", ""))
        except ValueError:
            continue
        out.append(Number(raw, v, m.group("unit"), m.start(), m.end()))
    return out


_SENT_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z(`*\"⟦\d])")


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (and semicolon clauses) at ``.``/``!``/``?``/``;`` followed by
    a space and a capital, digit, bracket or code span; decimal points and ``e.g.`` stay inside."""
    parts = [p.strip() for p in _SENT_END.split(text.replace("e.g. ", "e.g.\u00a0").replace("i.e. ", "i.e.\u00a0"))]
    return [p.replace("\u00a0", " ") for p in parts if p]


# ---------------------------------------------------------------------------------------------
# blocks, tables, sections
# ---------------------------------------------------------------------------------------------


@dataclass
class Block:
    """A prose block: a paragraph (``kind='paragraph'``) or the first paragraph of a list item
    (``'bullet'`` / ``'ordered'`` with its ``number`` and nesting ``depth``, 0 = top level)."""

    kind: str
    line: int
    inline: Inline
    section: "Section"
    number: int | None = None
    depth: int = 0

    @property
    def text(self) -> str:
        return self.inline.text

    @property
    def prose(self) -> str:
        return self.inline.prose

    @cached_property
    def sentences(self) -> list[str]:
        return sentences(self.inline.prose)

    @property
    def is_item(self) -> bool:
        return self.kind in ("bullet", "ordered")


@dataclass
class Table:
    """A pipe table: ``header`` cells, ``align`` per column (``left``/``right``/``center``/``''``),
    ``rows`` of plain-text cells (``row_lines`` their source lines), ``cells`` the same as
    :class:`Inline` (for bold and code inside cells)."""

    line: int
    header: list[str]
    align: list[str]
    rows: list[list[str]]
    row_lines: list[int]
    cells: list[list[Inline]]
    section: "Section"

    def column(self, name: str) -> list[str]:
        """The cells of the column whose header is ``name`` ([] when there is none)."""
        if name not in self.header:
            return []
        i = self.header.index(name)
        return [r[i] if i < len(r) else "" for r in self.rows]

    def values(self) -> Iterator[str]:
        for r in self.rows:
            yield from r


@dataclass
class Section:
    """A heading and what follows it up to the next heading of the same or a higher level.
    ``title``: the heading's plain text (code spans in backticks); ``blocks``/``tables``/
    ``codes``: its own content before the first sub-heading; ``children``: its sub-sections."""

    level: int
    title: str
    line: int
    anchor: str = ""
    parent: "Section | None" = None
    children: list["Section"] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    codes: list[tuple[int, str]] = field(default_factory=list)
    inline: Inline | None = None

    @property
    def plain_title(self) -> str:
        return self.title.replace("`", "")

    def child(self, title: str) -> "Section | None":
        return next((c for c in self.children if c.title == title), None)

    def walk(self) -> Iterator["Section"]:
        """This section's sub-sections, depth first (itself excluded)."""
        for c in self.children:
            yield c
            yield from c.walk()

    def all_blocks(self) -> list[Block]:
        return self.blocks + [b for c in self.walk() for b in c.blocks]

    def all_tables(self) -> list[Table]:
        return self.tables + [t for c in self.walk() for t in c.tables]

    def path(self) -> list[str]:
        out, s = [], self
        while s is not None and s.level > 0:
            out.append(s.title)
            s = s.parent
        return out[::-1]

    def top(self) -> "Section | None":
        """The ``##`` section this one is in (itself when it is one)."""
        s = self
        while s is not None and s.level > 2:
            s = s.parent
        return s if s is not None and s.level == 2 else None

    def has_result(self) -> bool:
        """Whether the section holds a measurement: a table or a sub-section that is neither
        Introduction nor Gaps holding one."""
        return bool(self.tables) or any(c.title not in ("Gaps", "Introduction") and c.has_result() for c in self.children)


@dataclass
class Doc:
    """The parsed report. ``root`` is a level-0 section; ``title`` the ``#`` heading (or None);
    ``top`` maps each ``##`` title under it to its section; ``sections``/``blocks``/``tables``
    are in document order; ``anchors`` maps each heading anchor to its section."""

    text: str
    root: Section
    sections: list[Section]
    blocks: list[Block]
    tables: list[Table]
    codes: list[tuple[int, str]]
    anchors: dict[str, Section]
    filename: str | None = None

    @property
    def title(self) -> Section | None:
        return next((s for s in self.root.children if s.level == 1), None)

    @cached_property
    def top(self) -> dict[str, Section]:
        h1 = self.title
        parent = h1 if h1 is not None else self.root
        return {c.title: c for c in parent.children if c.level == 2}

    def sec(self, *path: str) -> Section | None:
        """The section at ``path`` of titles below the title (``sec("Network", "Introduction")``)."""
        s = self.top.get(path[0]) if path else None
        for t in path[1:]:
            s = s.child(t) if s is not None else None
        return s

    @cached_property
    def n_nodes(self) -> int | None:
        """The node count the title states (``# Cluster eval: 2 nodes of ...``), or None."""
        h = self.title
        m = re.match(r"Cluster eval: (\d+) nodes?\b", h.title) if h is not None else None
        return int(m.group(1)) if m else None

    @cached_property
    def gpus_per_node(self) -> int | None:
        h = self.title
        m = re.search(r" of (\d+)× ", h.title) if h is not None else None
        return int(m.group(1)) if m else None

    def prose_blocks(self) -> list[Block]:
        """Every paragraph and list item outside the title header, in order."""
        return self.blocks


def _align(attrs: dict) -> str:
    st = str(attrs.get("style", ""))
    m = re.search(r"text-align:(\w+)", st)
    return m.group(1) if m else ""


def parse(text: str, filename: str | None = None) -> Doc:
    """The :class:`Doc` of a Markdown report (any text; an empty one gives an empty document);
    ``filename`` is the report's base name (for the file-name rule)."""
    toks = _MD.parse(text)
    root = Section(0, "", 0)
    stack = [root]
    sections: list[Section] = []
    blocks: list[Block] = []
    tables: list[Table] = []
    codes: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    anchors: dict[str, Section] = {}
    lists: list[tuple[str, int]] = []  # (kind, next number) per open list
    item_open: list[bool] = []  # whether the current list item's first paragraph was taken
    item_num: list[int | None] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        cur = stack[-1]
        if t.type == "heading_open":
            lvl = int(t.tag[1])
            inl = _inline(toks[i + 1])
            while stack[-1].level >= lvl:
                stack.pop()
            s = Section(lvl, inl.text, t.map[0] + 1, parent=stack[-1], inline=inl)
            a = slug(inl.text)
            if a in seen:
                seen[a] += 1
                a = f"{a}-{seen[a]}"
            else:
                seen[a] = 0
            s.anchor = a
            anchors[a] = s
            stack[-1].children.append(s)
            stack.append(s)
            sections.append(s)
            i += 3
            continue
        if t.type in ("bullet_list_open", "ordered_list_open"):
            start = int(t.attrs.get("start", 1)) if t.type == "ordered_list_open" else 0
            lists.append(("ordered" if t.type == "ordered_list_open" else "bullet", start))
        elif t.type in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
        elif t.type == "list_item_open":
            kind, n = lists[-1]
            item_num.append(n if kind == "ordered" else None)
            if kind == "ordered":
                lists[-1] = (kind, n + 1)
            item_open.append(True)
        elif t.type == "list_item_close":
            item_open.pop()
            item_num.pop()
        elif t.type == "paragraph_open":
            inl = _inline(toks[i + 1])
            if item_open and item_open[-1]:
                kind = lists[-1][0]
                b = Block(kind, t.map[0] + 1, inl, cur, number=item_num[-1], depth=len(lists) - 1)
                item_open[-1] = False
            else:
                b = Block("paragraph", t.map[0] + 1, inl, cur, depth=max(0, len(lists) - 1) if lists else 0)
            cur.blocks.append(b)
            blocks.append(b)
            i += 3
            continue
        elif t.type in ("fence", "code_block"):
            codes.append((t.map[0] + 1, t.content))
            cur.codes.append((t.map[0] + 1, t.content))
        elif t.type == "table_open":
            j = i + 1
            header: list[str] = []
            align: list[str] = []
            rows: list[list[str]] = []
            cells: list[list[Inline]] = []
            row_lines: list[int] = []
            in_head = False
            row: list[Inline] | None = None
            while toks[j].type != "table_close":
                x = toks[j]
                if x.type == "thead_open":
                    in_head = True
                elif x.type == "thead_close":
                    in_head = False
                elif x.type == "tr_open":
                    row = []
                    if not in_head:
                        row_lines.append(x.map[0] + 1)
                elif x.type in ("th_open", "td_open"):
                    if in_head:
                        align.append(_align(x.attrs))
                    row.append(_inline(toks[j + 1]))  # type: ignore[union-attr]
                    j += 1
                elif x.type == "tr_close":
                    if in_head:
                        header = [c.text for c in row or []]
                    else:
                        cells.append(row or [])
                        rows.append([c.text for c in row or []])
                j += 1
            tb = Table(t.map[0] + 1, header, align, rows, row_lines, cells, cur)
            cur.tables.append(tb)
            tables.append(tb)
            i = j + 1
            continue
        i += 1
    return Doc(text, root, sections, blocks, tables, codes, anchors, filename)


def cell_number(cell: str) -> float | None:
    """The number a table cell holds (``12_029.1``, ``**698**``, ``70.6%``, ``26.5``), or None
    when the cell is not one number with an optional unit."""
    c = cell.strip().strip("*").strip("`").strip()
    m = re.fullmatch(r"([-+]?\d[\d_,]*(?:\.\d+)?)\s*(?:" + _UNIT_RX + r")?", c)
    if not m:
        return None
    try:
        return float(m.group(1).replace("_", "").replace(",", ""))
    except ValueError:
        return None


def is_num(cell: str) -> bool:
    """A table cell that is one number, optionally with a unit and ``_`` grouping."""
    return cell_number(cell) is not None


def anchors(text: str) -> set[str]:
    """Every anchor the headings of ``text`` define (duplicates suffixed ``-1``, ``-2``...)."""
    return set(parse(text).anchors)
