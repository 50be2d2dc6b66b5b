"""Typed state of the two health graphs: ``ai4s-graph probe`` (:mod:`.probe_graph`) and
``ai4s-graph eval-cluster`` (:mod:`.eval_graph`). Each request is a frozen model, read by the
nodes and never rewritten; the measurements stay the JSON-shaped records that
:mod:`ai4s_graph.tools.cluster` writes to disk."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from ..runtime import merge_dicts


class ProbeRequest(BaseModel):
    """``ai4s-graph probe``: ``out_dir`` (parts and node_health_probe.txt), this ``node``'s name,
    ``mounts`` as (label, path) pairs, ``gpu`` checks on/off, ``gather_only`` (``--gather``),
    STREAM array length ``stream_elems`` (float64 elements) and repetitions ``stream_ntimes``,
    start time ``t0`` (unix s) and ``started_utc``; ``baseline``: a previous healthy probe's
    ``node_health_probe.json``, the reference when no other node is probed with this one."""

    model_config = ConfigDict(frozen=True)

    out_dir: str
    node: str
    mounts: list[tuple[str, str]] = Field(default_factory=list)
    gpu: bool = True
    gather_only: bool = False
    stream_elems: int = 1 << 25
    stream_ntimes: int = 6
    t0: float
    started_utc: str | None = None
    baseline: str | None = None


class ProbeState(TypedDict, total=False):
    """``part``: this node's measurements (merged per key). ``skipped``: checks that could not run,
    with the reason. ``rows``/``bad_nodes``/``exit_code``/``txt``: gather's result."""

    request: ProbeRequest
    part: Annotated[dict[str, Any], merge_dicts]
    skipped: Annotated[list[str], operator.add]
    statuses: Annotated[dict[str, str], merge_dicts]
    missing: Annotated[list[str], operator.add]
    rows: list[dict[str, Any]]
    bad_nodes: list[str]
    not_checked: list[str]
    exit_code: int
    txt: str


class EvalRequest(BaseModel):
    """``ai4s-graph eval-cluster``: the ``nodes`` in hostfile order, or ``from_json`` result files;
    ``reports_dir`` (also ``out_dir``, for the node journal), the report ``date``, ``access`` (how
    commands reached the nodes), ``extra_gaps``, ``nccl_env_source``, and ``bench_args`` for
    :func:`ai4s_graph.tools.cluster.evalcluster.eval_args`."""

    model_config = ConfigDict(frozen=True)

    out_dir: str
    reports_dir: str
    nodes: list[str] = Field(default_factory=list)
    from_json: list[str] = Field(default_factory=list)
    date: str
    access: str
    extra_gaps: list[str] = Field(default_factory=list)
    nccl_env_source: str = "the environment the benchmarks ran in"
    bench_args: dict[str, Any] = Field(default_factory=dict)


class EvalState(TypedDict, total=False):
    """``results``: per-node eval dicts in node order. ``inter``: inter-node all-reduce rows.
    ``report_path``/``violations``: the report."""

    request: EvalRequest
    results: list[dict[str, Any]]
    inter: dict[str, Any] | None
    report_path: str
    violations: list[str]
    statuses: Annotated[dict[str, str], merge_dicts]
    missing: Annotated[list[str], operator.add]
