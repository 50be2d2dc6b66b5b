"""The per-node mount-health probe file, ``node_health_probe.txt``.

Seed 000 (cluster constraints, lessons 1 and 18): a single compute node can land an allocation with
a broken per-user mount of ``/home/$USER`` or ``$AI4S_SHARED_DIR`` while its siblings are fine, and
the job then hangs until the wall. So every job starts with a one-task-per-node probe; a node that
fails is named, the job exits 42, and the launcher re-submits once with ``--exclude=<that node>``
-- never a node class.

File format (shared by the sbatch templates, the launcher and ``ai4s-graph probe``)::

    # ai4s-graph node health probe v1: node<TAB>check<TAB>ok|fail<TAB>detail
    node1	home	ok	/root
    node1	shared_dir	fail	/shared/x: no such file or directory
    node2	home	ok	/root
    BAD_NODES=node1

``BAD_NODES=`` is the comma list of nodes with at least one ``fail`` row (empty when all passed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ...state.publish import append

from ..errors import InputError

BAD_NODE_EXIT_CODE = 42
"""Exit code of a job whose mount-health probe failed on a node (seed 000, lesson 1 of the
perf-optimizer-loop pilot: "per-job mount-health probe ... exit code 42")."""

PROBE_FILE = "node_health_probe.txt"
HEADER = "# ai4s-graph node health probe v1: node\tcheck\tok|fail\tdetail"


@dataclass(frozen=True)
class ProbeRow:
    """One check on one node: ``ok`` True when it passed; ``detail`` is the path or the error."""

    node: str
    check: str
    ok: bool
    detail: str = ""


@dataclass
class ProbeResult:
    """All rows of a probe file and the bad nodes (from ``BAD_NODES=``, or derived from the
    fail rows when that line is missing, e.g. a job killed mid-write)."""

    rows: list[ProbeRow] = field(default_factory=list)
    bad_nodes: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        """Nodes that reported, in first-seen order."""
        seen: dict[str, None] = {}
        for r in self.rows:
            seen.setdefault(r.node, None)
        return list(seen)

    @property
    def ok(self) -> bool:
        return not self.bad_nodes


def format_rows(rows: Iterable[ProbeRow]) -> str:
    """The file text for ``rows``: header, one tab-separated line per row, then ``BAD_NODES=``."""
    rows = list(rows)
    bad = _bad_from_rows(rows)
    lines = [HEADER]
    for r in rows:
        detail = " ".join(str(r.detail).split())
        lines.append(f"{r.node}\t{r.check}\t{'ok' if r.ok else 'fail'}\t{detail}")
    lines.append("BAD_NODES=" + ",".join(bad))
    return "\n".join(lines) + "\n"


def _bad_from_rows(rows: Iterable[ProbeRow]) -> list[str]:
    bad: dict[str, None] = {}
    for r in rows:
        if not r.ok:
            bad.setdefault(r.node, None)
    return list(bad)


def parse_probe_text(text: str, source: str = "probe") -> ProbeResult:
    """Parse probe-file text. Raises :class:`InputError` naming the line for a malformed row."""
    rows: list[ProbeRow] = []
    bad: list[str] | None = None
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("BAD_NODES="):
            bad = [n for n in line.split("=", 1)[1].strip().split(",") if n]
            continue
        cols = line.split("\t")
        if len(cols) < 3 or cols[2] not in ("ok", "fail"):
            raise InputError(f"{source}:{i}: not a probe row (node<TAB>check<TAB>ok|fail<TAB>detail): {line[:80]!r}")
        rows.append(ProbeRow(cols[0], cols[1], cols[2] == "ok", cols[3] if len(cols) > 3 else ""))
    derived = _bad_from_rows(rows)
    if bad is None:
        bad = derived
    else:
        bad = bad + [n for n in derived if n not in bad]
    return ProbeResult(rows=rows, bad_nodes=bad)


def parse_probe_file(path: str | Path) -> ProbeResult:
    """Read ``node_health_probe.txt``. Raises :class:`InputError` when it is missing or malformed."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"no node health probe file at {p}")
    return parse_probe_text(p.read_text(errors="replace"), str(p))


def append_known_bad(path: str | Path, nodes: Iterable[str], *, jobid: str | None = None) -> list[str]:
    """Append node names to ``known_bad_nodes.txt`` (one name a line, ``# job <id>`` comment),
    skipping names already listed; returns the whole list after the append (seed 000 lesson 1
    of the optimizer-loop pilot)."""
    p = Path(path)
    known = read_known_bad(p)
    new = [n for n in nodes if n and n not in known]
    if new:
        append(p, "".join(n + (f"\t# job {jobid}" if jobid else "") + "\n" for n in new))  # refuses a link
    return known + new


def read_known_bad(path: str | Path) -> list[str]:
    """Node names listed in a ``known_bad_nodes.txt`` ([] when it does not exist)."""
    p = Path(path)
    if not p.is_file():
        return []
    out: list[str] = []
    for line in p.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name and name not in out:
            out.append(name)
    return out
