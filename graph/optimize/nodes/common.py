"""What every loop node reads from the state: the request, the working catalog, the loop
directory, the executor (SLURM or local), the job spec of a run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ....state.loop import Catalog, LeverChange, LoopRequest
from ....tools.errors import InputError
from ....tools.levers import catalog as L
from ....tools.slurm.client import ClusterConfig, load_cluster_config
from ....tools.slurm.executors import Executor, make_executor

# the JobSpec fields a lever may set through ``sbatch_options`` (the template owns these lines)
_SPEC_FIELDS = {"nodes": "nodes", "gpus-per-node": "gpus_per_node", "ntasks-per-node": "ntasks_per_node",
                "cpus-per-task": "cpus_per_task", "time": "time_limit"}


def req_of(state: dict[str, Any]) -> LoopRequest:
    """The loop request of a state (``state["request"]``)."""
    return LoopRequest.model_validate(state["request"])


def catalog_of(state: dict[str, Any]) -> Catalog:
    """The working catalog copy of a state."""
    return Catalog.model_validate(state["catalog"])


def loop_dir(state: dict[str, Any]) -> Path:
    """``loop-<uuid>/`` of a state."""
    return Path(state["request"]["loop_dir"])


def cluster_of(req: LoopRequest) -> ClusterConfig:
    """The cluster config of the loop. The local executor needs none: its runs go under
    ``req.shared_dir`` (set by :func:`~ai4s_graph.graph.optimize.graph.new_loop`)."""
    if req.executor == "local" and not req.cluster_config:
        if not req.shared_dir:
            raise InputError("the local executor needs a shared directory for its runs")
        return ClusterConfig(shared_dir=req.shared_dir, python=os.environ.get("AI4S_PYTHON", "python3"))
    return load_cluster_config(req.cluster_config)


def executor_of(req: LoopRequest) -> Executor:
    """The loop's :class:`~ai4s_graph.tools.slurm.executors.Executor`."""
    return make_executor(req.executor, cluster_of(req))


def known_bad(d: Path) -> list[str]:
    """The loop's ``known_bad_nodes.txt``."""
    from ....tools.slurm.health import read_known_bad

    return read_known_bad(d / L.KNOWN_BAD)


def job_name(req: LoopRequest, it: int, attempt: int) -> str:
    """``ai4s-<loop>-i<iteration>-s<submission>``: unique per loop, iteration and submission, so a
    job SLURM already has under that name is this loop's own."""
    return f"ai4s-{req.loop_id[:8]}-i{it}-s{attempt}"


def build_spec(catalog: Catalog, change: LeverChange, *, job_name: str, exclude: list[str],
               extra_env: dict[str, Any] | None = None, nodelist: list[str] | None = None):
    """The :class:`~ai4s_graph.tools.slurm.jobscript.JobSpec` of one run: the catalog's baseline shape
    with ``change`` applied (``sbatch_options`` ``nodes``/``cpus-per-task``/... set the spec's own
    fields), ``exclude`` = the loop's known bad nodes, ``nodelist`` = the nodes to pin the run to
    (``#SBATCH --nodelist``; lessons 9, 10, 18). Raises :class:`InputError` for an unsafe value or
    an unknown template."""
    from pydantic import ValidationError

    from ....tools.slurm.jobscript import JobSpec

    b = catalog.baseline
    fields: dict[str, Any] = {
        "template": b.template, "job_name": job_name, "model": catalog.model, "nodes": b.nodes,
        "gpus_per_node": b.gpus_per_node, "ntasks_per_node": b.ntasks_per_node,
        "cpus_per_task": b.cpus_per_task, "time_limit": b.time_limit, "profile": b.profile,
    }
    opts: dict[str, str] = {}
    for k, v in L.sbatch_options_strings(change).items():
        if k in _SPEC_FIELDS:
            fields[_SPEC_FIELDS[k]] = v
        else:
            opts[k] = v
    if nodelist:
        opts["nodelist"] = ",".join(nodelist)
    try:
        return JobSpec(**fields, env=L.env_strings(change, extra_env), script_args=L.script_args_list(change),
                       sbatch_options=opts, exclude=list(exclude))
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(f"job spec: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    except ValueError as e:
        raise InputError(str(e)) from None


def fmt(v: Any, nd: int = 4) -> str:
    """A number for a report cell (``-`` for None)."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)
