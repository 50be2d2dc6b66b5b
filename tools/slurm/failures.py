"""Classify a job that did not complete: infrastructure (a bad node, the fabric, the launcher, a
filesystem, a missing library) or the lever itself.

The signatures are data (``failure_signatures.yaml`` beside this file, each entry with its source
and an example line); this module only applies them. Seed 000 lesson 1 and the cluster
constraints: an infrastructure failure is re-run excluding the node BY NAME and never penalizes
the lever; lessons 19 and 26 name the fabric, launcher, filesystem and library cases.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import InputError

SIGNATURES_FILE = Path(__file__).with_name("failure_signatures.yaml")
FailureClass = Literal["infra", "lever"]
KINDS = ("bad-node", "fabric", "launcher", "filesystem", "missing-library", "lever")


@dataclass(frozen=True)
class Signature:
    """One entry of ``failure_signatures.yaml``: ``klass`` infra|lever, ``kind`` (one of
    :data:`KINDS`), and what matches it: ``exit_status`` (the job script's exit status),
    ``slurm_state`` (a terminal SLURM state) or ``pattern`` (a regex searched per log line)."""

    name: str
    klass: FailureClass
    kind: str
    source: str
    pattern: re.Pattern[str] | None = None
    exit_status: int | None = None
    slurm_state: str | None = None
    example: str = ""
    example_node: str | None = None


@dataclass
class Failure:
    """The classification of one failed job.

    ``klass``: ``infra`` or ``lever``; ``kind``: see :data:`KINDS`; ``signature``: the entry's name
    (None when nothing matched: a lever failure by default); ``line``: the log line that matched
    (or the state / exit status); ``nodes``: the node(s) to exclude by name (may be empty)."""

    klass: FailureClass
    kind: str
    signature: str | None
    line: str
    nodes: list[str] = field(default_factory=list)
    source: str = ""

    @property
    def is_infra(self) -> bool:
        return self.klass == "infra"

    def describe(self) -> str:
        """One line: ``infra/fabric (rdma_cqe_error) on node5: <line>``."""
        where = f" on {','.join(self.nodes)}" if self.nodes else ""
        sig = f" ({self.signature})" if self.signature else ""
        return f"{self.klass}/{self.kind}{sig}{where}: {self.line[:240]}"


class SignatureEntry(BaseModel):
    """One entry of ``failure_signatures.yaml`` as written (validated like the lever catalogs,
    :mod:`ai4s_graph.state.loop`): ``name``; ``class`` infra|lever; ``kind`` one of :data:`KINDS`;
    ``source`` (required: every rule cites where it comes from); at least one of ``pattern`` (a
    Python regex), ``exit_status``, ``slurm_state``; ``example`` / ``example_node`` for the tests.
    Unknown keys are refused (a misspelt ``patern`` would otherwise match nothing, silently)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1)
    klass: FailureClass = Field(alias="class")
    kind: str
    source: str | None = None
    pattern: str | None = None
    exit_status: int | None = None
    slurm_state: str | None = None
    example: str | None = ""
    example_node: str | None = None

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v:
            try:
                re.compile(v)
            except re.error as err:
                raise ValueError(f"bad pattern: {err}") from None
        return v or None

    @model_validator(mode="after")
    def _complete(self) -> "SignatureEntry":
        if self.kind not in KINDS:
            raise ValueError(f"class must be infra|lever and kind one of {KINDS}, not {self.kind!r}")
        if not self.source:
            raise ValueError("cites no source")
        if self.pattern is None and self.exit_status is None and not self.slurm_state:
            raise ValueError("matches nothing (no pattern, exit_status or slurm_state)")
        return self

    def compiled(self) -> Signature:
        """The runtime form, its pattern compiled."""
        return Signature(name=self.name, klass=self.klass, kind=self.kind, source=str(self.source),
                         pattern=re.compile(self.pattern) if self.pattern else None, exit_status=self.exit_status,
                         slurm_state=self.slurm_state, example=self.example or "", example_node=self.example_node)


class SignatureFile(BaseModel):
    """The document: ``signatures``, a list of :class:`SignatureEntry` with unique names."""

    model_config = ConfigDict(extra="forbid")

    signatures: list[SignatureEntry]

    @model_validator(mode="after")
    def _unique(self) -> "SignatureFile":
        twice = [n for n, k in Counter(e.name for e in self.signatures).items() if k > 1]
        if twice:
            raise ValueError(f"signature {twice[0]} appears twice")
        return self


def parse_signatures(data: object, source: str = "signatures") -> list[Signature]:
    """Validate the YAML document of signatures (:class:`SignatureFile`); raises
    :class:`InputError`, one line naming the bad entry by its name (or index) and field."""
    if not isinstance(data, dict) or not isinstance(data.get("signatures"), list):
        raise InputError(f"{source}: expected a mapping with a 'signatures' list")
    try:
        doc = SignatureFile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = list(err["loc"])
        where = "signatures"
        if len(loc) >= 2 and loc[0] == "signatures" and isinstance(loc[1], int):
            entry = data["signatures"][loc[1]]
            name = entry.get("name") if isinstance(entry, dict) else None
            where = f"signature {name}" if name else f"signature #{loc[1]}"
            loc = loc[2:]
        field = f" {'.'.join(str(x) for x in loc)}:" if loc else ":"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "missing" and loc == ["name"]:
            msg = "has no name"
        raise InputError(f"{source}: {where}{field} {msg}") from None
    return [e.compiled() for e in doc.signatures]


@lru_cache(maxsize=4)
def load_signatures(path: str | None = None) -> tuple[Signature, ...]:
    """The signatures of ``path`` (default :data:`SIGNATURES_FILE`)."""
    p = Path(path) if path else SIGNATURES_FILE
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"failure signatures {p}: {str(e).splitlines()[0]}") from None
    return tuple(parse_signatures(data, str(p)))


def _nodes_on_line(line: str, nodes: Iterable[str]) -> list[str]:
    return [n for n in nodes if re.search(rf"(?<![A-Za-z0-9_-]){re.escape(n)}(?![A-Za-z0-9_-])", line)]


def classify(*, state: str, exit_status: int, log_text: str, nodes_list: list[str],
             probe_bad_nodes: list[str] | None = None,
             signatures: Iterable[Signature] | None = None) -> Failure:
    """Classify a job that did not end COMPLETED with exit 0.

    ``state``: SLURM's base state (FAILED, NODE_FAIL, ...); ``exit_status``: the job script's exit
    status; ``log_text``: the job's output (``slurm-<id>.out`` and/or ``train.log``);
    ``nodes_list``: the job's nodes; ``probe_bad_nodes``: the nodes the mount-health probe named
    (for exit 42). Rules: state/exit-status signatures first, then the earliest log line matching
    any pattern; no match is a lever failure (signature None)."""
    sigs = list(signatures) if signatures is not None else list(load_signatures())
    only = list(nodes_list) if len(nodes_list) == 1 else []
    for s in sigs:
        if s.slurm_state and state == s.slurm_state:
            return Failure(s.klass, s.kind, s.name, f"SLURM state {state}", list(nodes_list), s.source)
        if s.exit_status is not None and exit_status == s.exit_status:
            bad = list(probe_bad_nodes or [])
            return Failure(s.klass, s.kind, s.name, f"exit status {exit_status}", bad, s.source)
    pats = [s for s in sigs if s.pattern is not None]
    for line in log_text.splitlines():
        for s in pats:
            m = s.pattern.search(line)
            if not m:
                continue
            named = m.groupdict().get("node") if m.re.groupindex else None
            nodes = [named] if named else (_nodes_on_line(line, nodes_list) or only)
            if s.klass == "lever":
                nodes = []
            return Failure(s.klass, s.kind, s.name, line.strip(), nodes, s.source)
    return Failure("lever", "lever", None, _last_error_line(log_text), [], "no infrastructure signature matched")


_LAUNCHER_PREFIXES = ("srun:", "slurmstepd:", "ai4s:", "sbatch:")
_ERROR_WORDS = ("Error", "error", "Exception", "Traceback", "fault", "Killed", "NaN")


def _last_error_line(text: str) -> str:
    """The most telling line of a log: the last line naming an error written by the workload
    itself (srun/slurmstepd/wrapper lines only when nothing else names one), else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    own = [ln for ln in lines if not ln.startswith(_LAUNCHER_PREFIXES)]
    for pool in (own, lines):
        for ln in reversed(pool):
            if any(w in ln for w in _ERROR_WORDS):
                return ln
    return lines[-1] if lines else ""


error_line = _last_error_line
