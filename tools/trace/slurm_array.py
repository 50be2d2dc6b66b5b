"""Per-rank trace analysis as a SLURM job array: one task per rank trace, on the cluster itself.

:func:`render_slurm_array` writes the array's manifest and sbatch script (template
``sbatch/trace-rank-array.sbatch.j2``); each task runs :func:`run_rank_task` (the same
:func:`~ai4s_graph.tools.trace.rank_analysis.analyze_rank` as the local worker processes);
:func:`gather_rank_results` reads the results back.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..files import package_dir
from ...state.publish import publish
from .collectives import aggregate_ranks
from .rank_analysis import analyze_rank

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:+-]*$")


def render_slurm_array(rank_traces: dict[int, str | os.PathLike] | list[tuple[int, str, str]], work_dir: str | os.PathLike, *,
                       cache_dir: str | None = None, python: str | None = None, partition: str | None = None,
                       account: str | None = None, time_limit: str = "01:00:00", mem: str | None = "8G",
                       max_parallel: int | None = None, job_name: str = "ai4s-rank-trace",
                       pythonpath: str | None = None) -> Path:
    """Write ``<work_dir>/ranks.json`` (array index -> rank, label, trace) and the sbatch script
    ``<work_dir>/analyze-ranks.sbatch`` (template ``sbatch/trace-rank-array.sbatch.j2``): a job
    array with one task per rank trace, each running :func:`run_rank_task` into
    ``<work_dir>/results/rank-<r>.json``. Collect with :func:`gather_rank_results`.

    Returns the script path. Raises InputError for no traces or an unsafe partition / account /
    time / mem / job name (shell metacharacters)."""
    import jinja2
    import shlex

    if not rank_traces:
        raise InputError("no rank traces for the SLURM array")
    for label, v in (("partition", partition), ("account", account), ("time_limit", time_limit), ("mem", mem),
                     ("job_name", job_name)):
        if v is not None and not _SAFE_VALUE.match(str(v)):
            raise InputError(f"{label}={v!r} has characters not allowed in an sbatch option")
    wd = Path(work_dir).resolve()
    (wd / "results").mkdir(parents=True, exist_ok=True)
    (wd / "logs").mkdir(parents=True, exist_ok=True)
    items = ([(int(r), str(p), str(r)) for r, p in sorted(rank_traces.items())] if isinstance(rank_traces, dict)
             else [(int(r), str(p), str(lab)) for r, p, lab in rank_traces])
    entries = [{"rank": r, "label": lab, "trace": str(Path(p).resolve())} for r, p, lab in items]
    manifest = wd / "ranks.json"
    publish(manifest, json.dumps(entries, indent=1))
    sbatch_dir = package_dir("sbatch")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(sbatch_dir)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["q"] = lambda v: shlex.quote(str(v))
    text = env.get_template("trace-rank-array.sbatch.j2").render(
        job_name=job_name, n_tasks=len(entries), max_parallel=max_parallel, time_limit=time_limit, mem=mem,
        partition=partition, account=account, log_dir=str(wd / "logs"), python=python or sys.executable,
        manifest=str(manifest), results_dir=str(wd / "results"), cache_dir=cache_dir, pythonpath=pythonpath)
    script = wd / "analyze-ranks.sbatch"
    publish(script, text)
    return script


def run_rank_task(manifest: str | os.PathLike, index: int, out_dir: str | os.PathLike,
                  cache_dir: str | None = None) -> Path:
    """One array task: analyse entry ``index`` of ``ranks.json`` and write ``rank-<r>.json``
    (``rank-<label>.json``) atomically into ``out_dir``. Raises InputError for an index outside the manifest."""
    entries = json.loads(Path(manifest).read_text())
    if not 0 <= index < len(entries):
        raise InputError(f"array index {index} outside 0..{len(entries) - 1} of {manifest}")
    e = entries[index]
    label = str(e.get("label", e["rank"]))
    res = analyze_rank(e["trace"], int(e["rank"]), cache_dir, label=label)
    return publish(Path(out_dir) / f"rank-{label}.json", json.dumps(res))  # atomic; refuses a link


def gather_rank_results(work_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Read ``results/rank-*.json`` of a finished array. Raises InputError naming missing ranks."""
    wd = Path(work_dir)
    entries = json.loads((wd / "ranks.json").read_text())
    out, missing = [], []
    for e in entries:
        label = str(e.get("label", e["rank"]))
        p = wd / "results" / f"rank-{label}.json"
        if not p.is_file():
            missing.append(int(e["rank"]) if label == str(e["rank"]) else label)
            continue
        out.append(json.loads(p.read_text()))
    if missing:
        raise InputError(f"SLURM array results missing for ranks {missing[:20]}"
                         f"{' ...' if len(missing) > 20 else ''} (see {wd / 'logs'})")
    return out


def _main(argv: list[str] | None = None) -> int:
    """``python -m ai4s_graph.tools.trace.slurm_array rank-task --manifest M --index I --out-dir D``."""
    import typer

    app = typer.Typer(add_completion=False)

    @app.command("rank-task")
    def rank_task(manifest: str = typer.Option(...), index: int = typer.Option(...),
                  out_dir: str = typer.Option(...), cache_dir: str = typer.Option(None)) -> None:
        """Analyse one rank trace of a SLURM array into <out-dir>/rank-<r>.json."""
        try:
            out = run_rank_task(manifest, index, out_dir, cache_dir)
        except InputError as err:
            print(f"STATUS=fail; reason={err}")
            raise typer.Exit(2)
        print(f"STATUS=ok; reason=wrote {out}")

    @app.command("report")
    def report(work_dir: str) -> None:
        """Aggregate the gathered results of an array into one JSON report on stdout."""
        print(json.dumps(aggregate_ranks(gather_rank_results(work_dir)), indent=1))

    app(argv, standalone_mode=False)
    return 0


if __name__ == "__main__":
    sys.exit(_main())


def submitted_jobid(work_dir: str | os.PathLike) -> str | None:
    """The array job id recorded by :func:`record_submission` in ``<work_dir>/submitted.json``
    (a resumed run waits for it instead of submitting another), or None."""
    marker = Path(work_dir) / "submitted.json"
    return json.loads(marker.read_text())["jobid"] if marker.exists() else None


def record_submission(work_dir: str | os.PathLike, jobid: str, script: str | os.PathLike,
                      root: str | os.PathLike | None = None) -> None:
    """Record the array job id and its script as soon as sbatch answers (``submitted.json``,
    atomically, refusing links at it and at every folder from ``root`` down:
    :func:`ai4s_graph.state.publish.publish`)."""
    publish(Path(work_dir) / "submitted.json", json.dumps({"jobid": jobid, "script": str(script)}), root=root)
