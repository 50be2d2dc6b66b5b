"""The run request of ``ai4s-graph run`` (what the user asked for) and what the launcher resolved.

The request is read-only: it enters the graph once (``{"request": RunRequest(...)}``), is frozen,
and no node writes the ``request`` key again. What the launcher works out -- the perf-run directory
it adopted or the job it submitted, the job id -- goes to its own key, ``run``
(:class:`ResolvedRun`). Nodes read both through :func:`run_dir` / :func:`llm_request`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RunRequest(BaseModel):
    """What the user asked for with ``ai4s-graph run`` (frozen: never rewritten by a node).

    ``perf_run`` is the directory holding the job's artifacts; ``out_dir`` is where the report,
    manifest (when the run directory is read-only) and plots go; ``compare`` is a second run of the
    same model at another precision (the precision discriminator, seed 000 lesson 13)."""

    model_config = ConfigDict(frozen=True)

    jobid: str | None = None
    perf_run: str | None = None
    out_dir: str
    compare: str | None = None
    tsdb_url: str | None = None
    llm: str = "none"  # "none" | "anthropic"
    llm_model: str | None = None
    max_tokens_total: int | None = None
    submit: bool = False
    submit_params: dict[str, Any] = Field(default_factory=dict)
    cluster_config: str | None = None
    wait_timeout_s: float = 3600.0
    workers: int = Field(0, ge=0)  # rank-trace worker processes (0 = automatic)
    slurm_array: bool = False  # analyse the rank traces as a SLURM job array
    baseline: str | None = None  # eval-cluster report or raw JSON: measured all-reduce busbw (issue 13)
    probe: bool = False  # the verifiers may run one srun -N1 --time=00:05:00 node probe (tools/slurm/probe.py)
    # optional cross-checks of each rank's timeline (--cross-check hta|tracelens; none by default):
    # tool names of tools/trace/backends.py CROSS_CHECK_TOOLS ("tracelens" brings "tracelens-csv")
    cross_check: tuple[str, ...] = ()

    @field_validator("cross_check")
    @classmethod
    def _cross_check(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        out: list[str] = []
        for t in v:
            if t not in ("hta", "tracelens", "tracelens-csv"):
                raise ValueError(f"--cross-check must be hta or tracelens, not {t!r}")
            out += ["tracelens", "tracelens-csv"] if t == "tracelens" else [t]
        return tuple(dict.fromkeys(out))
    force: bool = False  # --force: replace a report of another job in out_dir (tools/report/write.py)

    @field_validator("tsdb_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        u = urlparse(v)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"--tsdb-url must be an http(s)://host:port URL, not {v!r}")
        return v.rstrip("/")


class ResolvedRun(BaseModel):
    """What the launcher resolved from the request: the perf-run directory the analysts read
    (``--perf-run``, the shared default ``<shared>/models/<model>/perf-runs/<jobid>/``, or the
    submitted job's directory) and the job id (``None`` when only ``--perf-run`` was given)."""

    model_config = ConfigDict(frozen=True)

    perf_run: str
    jobid: str | None = None


def run_dir(state: Mapping[str, Any]) -> Path:
    """The perf-run directory the analysts read: the launcher's ``run.perf_run``, else the
    request's ``--perf-run``, else ``.`` (nothing resolved: the readers then report what is missing)."""
    run: ResolvedRun | None = state.get("run")
    if run is not None:
        return Path(run.perf_run)
    req: RunRequest = state["request"]
    return Path(req.perf_run or ".")


def trace_cache_dir(req: RunRequest) -> str:
    """The content-hash cache folder of the run's per-rank analyses: ``$AI4S_TRACE_CACHE``, else
    ``<out>/.ai4s-graph/trace-cache``."""
    import os

    return os.environ.get("AI4S_TRACE_CACHE") or str(Path(req.out_dir) / ".ai4s-graph" / "trace-cache")


def trace_paths(state: Mapping[str, Any]) -> list[Path]:
    """The rank traces the manifest lists (``artifacts.traces``) under :func:`run_dir`, in its order."""
    manifest = state.get("manifest")
    base = run_dir(state)
    return [base / p for p in (manifest.artifacts.traces if manifest is not None else [])]


def llm_request(state: Mapping[str, Any]) -> dict[str, Any]:
    """The request as the LLM agents read it (a JSON-able dict, :mod:`ai4s_graph.graph.agents.llm`):
    the user's request with the launcher's resolved ``perf_run`` and ``jobid`` in place."""
    req: RunRequest = state["request"]
    d = req.model_dump()
    run: ResolvedRun | None = state.get("run")
    if run is not None:
        d["perf_run"] = run.perf_run
        if run.jobid is not None:
            d["jobid"] = run.jobid
    return d


def llm_manifest(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The manifest as the LLM agents read it (``manifest.json``'s JSON shape, without the
    artifacts' adoption fingerprints: sizes and modification times say nothing of the job and
    change with every copy of the run), or None."""
    m = state.get("manifest")
    if m is None:
        return None
    d = m.model_dump(mode="json", by_alias=True)
    (d.get("artifacts") or {}).pop("fingerprints", None)
    return d
