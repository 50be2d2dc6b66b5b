"""The job manifest: what ran, where, and where its artifacts are (``manifest.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import hostlist
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .publish import publish

# SLURM job states that end a job (``sacct -X`` State column). PREEMPTED and REQUEUED are not
# terminal: the job comes back. TIMEOUT_WAITING is ours: the launcher gave up waiting.
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}
)
Precision = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "unknown"]


class Artifacts(BaseModel):
    """Paths of a run's artifacts, relative to the perf-run directory where possible."""

    model_config = ConfigDict(extra="allow")

    train_log: str | None = "train.log"
    traces: list[str] = Field(default_factory=list, description="rank trace files (*.json / *.json.gz)")
    telemetry: list[str] = Field(default_factory=list, description="VictoriaMetrics JSON-lines exports")
    node_health_probe: str | None = None
    foms: str | None = None
    fingerprints: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="size and sha256 of each artifact when it was adopted, by relative path")


def int64_problem(data: Any, where: str = "") -> str | None:
    """The first integer in ``data`` (declared fields and extra ones alike, e.g. ``peak_rss_bytes``,
    at any depth) that does not fit a signed 64-bit integer, as one line naming its field; None when
    all fit. The graph's checkpoint (msgpack) holds nothing wider, and no count or byte size of a job
    comes near 2^63 (the adversarial trial: a 2^64 ``peak_rss_bytes`` crashed every resume with
    ``TypeError: not msgpack serializable``)."""
    if isinstance(data, bool):
        return None
    if isinstance(data, int) and not -(2**63) <= data < 2**63:
        text = str(data)
        return (f"{where or 'value'}: {text[:24]}{'...' if len(text) > 24 else ''} does not fit a 64-bit integer "
                "(no job count or byte size comes near 2^63)")
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    for k, x in items:
        found = int64_problem(x, f"{where}.{k}" if where and isinstance(k, str) else
                              f"{where}[{k}]" if where else str(k))
        if found:
            return found
    return None


class Manifest(BaseModel):
    """One profiled job.

    ``nodes_list`` comes first in the JSON after the job id and state, as the seed asks (lesson 18:
    always read the node list before drawing any node-class conclusion). ``start``/``end`` are unix
    seconds (float). ``hbm_reserved_bytes`` is the peak reserved device memory of rank 0 in bytes.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    jobid: str
    state: str = "UNKNOWN"
    nodes_list: list[str] = Field(default_factory=list)
    model: str = "unknown"
    start: float | None = Field(default=None, alias="start_unix")
    end: float | None = Field(default=None, alias="end_unix")
    global_batch_size: int | None = None
    precision: Precision | str = "unknown"
    num_nodes: int | None = None
    gpus_per_node: int | None = None
    gpu: str | None = None
    num_workers: int | None = None
    hbm_reserved_bytes: int | None = None
    exit_code: str | None = None
    artifacts: Artifacts = Field(default_factory=Artifacts)

    @model_validator(mode="before")
    @classmethod
    def _int64(cls, data: Any) -> Any:
        """Every integer in the manifest fits a signed 64-bit integer (:func:`int64_problem`);
        raises ValueError naming the field."""
        problem = int64_problem(data)
        if problem:
            raise ValueError(problem)
        return data

    @field_validator("jobid", mode="before")
    @classmethod
    def _jobid_str(cls, v: Any) -> str:
        s = str(v).strip()
        if not s:
            raise ValueError("empty job id")
        return s

    @field_validator("global_batch_size", mode="before")
    @classmethod
    def _batch(cls, v: Any) -> int | None:
        """Samples per optimizer step over all ranks: a positive integer or null (a zero or negative
        batch makes every throughput zero or negative; a bool or a fraction is no count)."""
        if v is None:
            return None
        if isinstance(v, str) and v.strip().isdigit():  # "16", as pydantic's int took it before
            v = int(v.strip())
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()) \
                or v < 1:  # is_integer: False for inf and nan
            raise ValueError(f"got {v!r}, not a positive integer (samples per optimizer step)")
        return int(v)

    @field_validator("nodes_list", mode="before")
    @classmethod
    def _nodes(cls, v: Any) -> list[str]:
        """SLURM's compressed hostlists (``gpu[01-03,07]``, as a string or list items) expanded to
        single names with ``python-hostlist`` (SLURM's syntax, no SLURM needed)."""
        if v is not None and not isinstance(v, (str, list, tuple)):
            raise ValueError(f"nodes_list must be a list of node names or a hostlist, not {type(v).__name__}")
        items = [v] if isinstance(v, str) else list(v or [])
        out: list[str] = []
        for item in items:
            text = str(item).strip()
            if not text or text.lower().startswith("none"):
                continue
            try:
                names = hostlist.expand_hostlist(text.replace(" ", ","), sort=False)
            except hostlist.BadHostlist as e:
                raise ValueError(f"nodes_list: not a SLURM hostlist: {text[:80]!r} ({e})") from None
            out += [n for n in names if n not in out]
        return out

    @property
    def is_terminal(self) -> bool:
        """True when ``state`` is a final SLURM state (or our TIMEOUT_WAITING)."""
        return self.state.split()[0] in TERMINAL_STATES or self.state == "TIMEOUT_WAITING"

    @property
    def duration_s(self) -> float | None:
        """Job wall time in seconds, or None when start or end is unknown."""
        if self.start is None or self.end is None:
            return None
        return self.end - self.start

    def to_json(self) -> str:
        """JSON text with jobid, state and nodes_list first (field order), unix times as
        ``start_unix``/``end_unix`` like the shared runs."""
        return json.dumps(self.model_dump(by_alias=True, exclude_none=False), indent=1)

    def write(self, path: Path) -> Path:
        """Write ``manifest.json`` atomically and return its path (:func:`.publish.publish`: a
        link at ``path`` is refused with :class:`~.publish.UnsafePathError`)."""
        path = Path(path)
        publish(path, self.to_json() + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> "Manifest":
        """Read a manifest. Raises ``ValueError`` with a one-line message when the file is
        not JSON, lacks a job id or holds an integer wider than 64 bits (:func:`int64_problem`),
        ``FileNotFoundError`` when it is missing."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        except RecursionError:
            raise ValueError(f"{path}: JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object")
        problem = int64_problem(data)
        if problem:
            raise ValueError(f"{path}: {problem}")
        return cls.model_validate(data)
