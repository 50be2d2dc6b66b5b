"""The perf-optimizer loop's nodes (seed 000: the perf-optimizer-loop recipe and lessons 1, 5, 9,
10, 13, 16, 17, 18, 23, 31), one module per concern:

- ``common``: the request, catalog, loop directory, executor and job spec of a state;
- ``pick``: ``init`` and ``pick`` (baseline first; then a lever of the verified class);
- ``run``: ``submit`` -> ``wait`` -> ``extract`` through the shared job lifecycle
  (:mod:`ai4s_graph.tools.slurm.jobs`) on SLURM or locally;
- ``judge``: ``guard`` (integrity, placement) and ``decide`` (noise band, replicate);
- ``analysis``: ``analyse`` (the verified bottleneck of the best run, re-run after each accepted
  lever) and the report's predicted savings;
- ``record``: ``record``, ``report`` and ``loop_report.md``.

Each body returns ``(update, StatusLine)`` and is wrapped by
:func:`ai4s_graph.graph.runtime.node`; the graph checkpoints after each node, so a killed loop
resumes at the node it was in: a submitted job is waited for, never submitted again.
"""

from .analysis import analyse_body, read_report, run_analysis, split_by_class
from .common import build_spec, catalog_of, executor_of, job_name, loop_dir, req_of
from .judge import decide_body, guard_body
from .pick import init_body, make_pick_body
from .record import record_body, report_body, write_best_config, write_loop_report
from .run import extract_body, pin_for, run_fom, submit_body, wait_body

__all__ = [
    "analyse_body", "build_spec", "catalog_of", "decide_body", "executor_of", "extract_body", "guard_body",
    "init_body", "job_name", "loop_dir", "make_pick_body", "pin_for", "read_report", "record_body", "report_body",
    "req_of", "run_analysis", "run_fom", "split_by_class", "submit_body", "wait_body", "write_best_config",
    "write_loop_report",
]
