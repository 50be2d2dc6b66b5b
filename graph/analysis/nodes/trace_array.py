"""The ``trace_array`` node: every rank trace analysed as a SLURM job array (one task per rank,
on the cluster itself, :mod:`ai4s_graph.tools.trace.slurm_array`), then gathered back for the trace
analyst. Chosen by :func:`.trace_analyst.use_slurm_array` (``--slurm-array``, or a large world with
a cluster config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .trace_analyst import as_rank_result, provisional_files
from ..schema import AnalysisState
from ...runtime import journal, node
from ....state import Outcome, StatusLine
from ....tools.errors import Ai4sError
from ....tools.slurm import client as slurm
from ....tools.trace import slurm_array


@node("trace_array")
def trace_array(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Analyse every rank trace as a SLURM job array (one task per rank, on the cluster itself),
    then gather the per-rank results. The array job id is recorded in
    ``<out>/.ai4s-graph/rank-array/submitted.json`` as soon as sbatch answers, so a resumed run
    waits for the same array instead of submitting another."""
    req = state["request"]
    work = Path(req.out_dir) / ".ai4s-graph" / "rank-array"
    jobid = slurm_array.submitted_jobid(work)
    if jobid is None:
        cfg = slurm.load_cluster_config(req.cluster_config) if req.cluster_config else None
        script = slurm_array.render_slurm_array(
            [(f.rank, str(f.path), f.label) for f in provisional_files(state)], work, mem=None,
            partition=cfg.partition if cfg else None, account=cfg.account if cfg else None,
            cache_dir=str(Path(req.out_dir) / ".ai4s-graph" / "trace-cache"))
        jobid = slurm.sbatch(script)
        slurm_array.record_submission(work, jobid, script, root=req.out_dir)
    journal(req.out_dir, "trace_array", "submitted", jobid=jobid)
    try:
        tasks = slurm.wait_for_array(jobid, timeout_s=req.wait_timeout_s)
    except slurm.WaitTimeout as e:
        return ({"missing": [f"trace_array: {e}"]}, StatusLine.make(Outcome.fail, str(e)))
    try:
        results = [as_rank_result(r, req.out_dir) for r in slurm_array.gather_rank_results(work)]
    except Ai4sError as e:
        states = ",".join(sorted({t.base_state for t in tasks}))
        return ({"missing": [f"trace_array: array job {jobid} ({states}): {e}"]},
                StatusLine.make(Outcome.fail, f"array job {jobid} ({states}): {e}"))
    nodes = sorted({n for t in tasks for n in t.nodelist})
    return ({"rank_results": results},
            StatusLine.make(Outcome.ok, f"array job {jobid}: {len(results)} rank traces analysed on "
                                        f"{','.join(nodes) or '?'}"))
