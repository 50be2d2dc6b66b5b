"""Small markdown reader for the report checker: lines outside code fences, ATX headings with
GitHub anchors, the section tree, pipe tables."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FENCE = re.compile(r"^(```|~~~)")
_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def lines_outside_fences(text: str) -> list[tuple[int, str]]:
    """(1-based line number, line) for every line outside ``` / ~~~ fences."""
    out, inside = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            inside = not inside
            continue
        if not inside:
            out.append((i, line))
    return out


def strip_links(line: str) -> str:
    """Drop link targets ``](...)`` (URLs and anchors are not prose)."""
    return re.sub(r"\]\([^)]*\)", "]()", line)


def slug(heading: str) -> str:
    """GitHub's heading anchor: markdown stripped, lowercase, punctuation except ``-``/``_``
    removed, spaces to ``-``."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    t = t.replace("`", "").replace("*", "")
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line, level, title) of every ATX heading outside code fences."""
    out = []
    for i, line in lines_outside_fences(text):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            out.append((i, len(m.group(1)), m.group(2)))
    return out


def anchors(text: str) -> set[str]:
    """All anchors the headings of ``text`` define (duplicates get ``-1``, ``-2``...)."""
    return set(anchor_map(text))


def anchor_map(text: str) -> dict[str, tuple[int, int, str]]:
    """anchor -> (line, level, title) for every heading (duplicates suffixed ``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    out: dict[str, tuple[int, int, str]] = {}
    for i, lvl, title in headings(text):
        s = slug(title)
        if s in seen:
            seen[s] += 1
            out[f"{s}-{seen[s]}"] = (i, lvl, title)
        else:
            seen[s] = 0
            out[s] = (i, lvl, title)
    return out


@dataclass
class Section:
    """A heading and the lines under it up to the next heading of the same or a higher level.
    ``body``: (line, text) of its own lines before its first sub-heading; ``children``: its
    sub-sections; ``all_lines``: every line of the section including sub-sections."""

    level: int
    title: str
    line: int
    body: list[tuple[int, str]] = field(default_factory=list)
    children: list["Section"] = field(default_factory=list)
    all_lines: list[tuple[int, str]] = field(default_factory=list)

    def child(self, title: str) -> "Section | None":
        return next((c for c in self.children if c.title == title), None)

    def text(self) -> str:
        return "\n".join(t for _i, t in self.all_lines)


def sections(text: str) -> Section:
    """The section tree: a level-0 root whose children are the ``#`` / ``##`` sections."""
    root = Section(0, "", 0)
    stack = [root]
    for i, line in lines_outside_fences(text):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            lvl = len(m.group(1))
            while stack[-1].level >= lvl:
                stack.pop()
            s = Section(lvl, m.group(2), i)
            stack[-1].children.append(s)
            stack.append(s)
            for anc in stack[:-1]:
                anc.all_lines.append((i, line))
            continue
        top = stack[-1]
        top.body.append((i, line))
        for anc in stack:
            anc.all_lines.append((i, line))
    return root


def walk(sec: Section):
    """Every section under ``sec`` (depth first, ``sec`` excluded)."""
    for c in sec.children:
        yield c
        yield from walk(c)


def cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return [c.strip() for c in s.split("|")]


def tables(lines: list[tuple[int, str]]) -> list[tuple[int, list[str], list[str], list[tuple[int, list[str]]]]]:
    """(line of header, header cells, alignment cells, [(line, body cells)]) per pipe table in
    ``lines`` ((line, text) pairs, e.g. :func:`lines_outside_fences` or a section's lines)."""
    out = []
    k = 0
    while k < len(lines) - 1:
        i, l = lines[k]
        _j, sep = lines[k + 1]
        if l.strip().startswith("|") and _SEP.match(sep):
            head, align, body = cells(l), cells(sep), []
            k += 2
            while k < len(lines) and lines[k][1].strip().startswith("|"):
                body.append((lines[k][0], cells(lines[k][1])))
                k += 1
            out.append((i, head, align, body))
        else:
            k += 1
    return out


def table_line_numbers(lines: list[tuple[int, str]]) -> set[int]:
    """Line numbers that belong to a pipe table."""
    out = set()
    for i, _h, _a, body in tables(lines):
        out.add(i)
        out.add(i + 1)
        out.update(ln for ln, _c in body)
    return out


_NUM_CELL = re.compile(
    r"^[-+]?(\d[\d_,]*(\.\d+)?|\.\d+)\s*(KiB|MiB|GiB|TiB|B|%|×|x|µs|us|ms|msec|s|W|MHz|GHz|TFLOPS|GB/s|GBps|MiB/s|MiBps|TB/s)?$")


def is_num(cell: str) -> bool:
    """A table cell that is one number, optionally with a unit and ``_`` grouping."""
    c = cell.strip().strip("*").strip("`")
    return bool(_NUM_CELL.match(c))
