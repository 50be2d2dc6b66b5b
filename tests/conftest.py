"""Shared fixtures. The real inputs the tests read live in the repository: the project's own
profiled runs on an NVIDIA H200 (``examples/perf-runs/9200x``, ``9300x``: traces, telemetry, logs)
and TraceLens's perf reports of those traces (``tests/data/tracelens-ref``, made by
``tests/data/make_tracelens_refs.py``), so a fresh clone runs its whole suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PERF_RUNS = REPO / "examples" / "perf-runs"
TRACELENS_REFS = REPO / "tests" / "data" / "tracelens-ref"


@pytest.fixture(scope="session")
def perf_runs() -> Path:
    """``examples/perf-runs``: 92001 (gnn fp32, dispatch-bound), 92002 (vit, data-loader-bound),
    92003 (vit bf16, compute-bound), 92004 (92001 in fp64), 93001-93005 (2 ranks, NCCL); each
    directory's character is in ``examples/perf-runs/README.md``."""
    return PERF_RUNS


@pytest.fixture(scope="session")
def tracelens_refs() -> Path:
    """``tests/data/tracelens-ref/<job>_rank<r>_perf_report_csvs/``: TraceLens's own CSVs
    (gpu_timeline, kernel_summary, ops_summary, ops_summary_by_category, short_kernels_summary,
    ops_unique_args) for ``examples/perf-runs/<job>/traces/trace_rank<r>.json.gz``."""
    return TRACELENS_REFS


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session", autouse=True)
def _session_state(tmp_path_factory):
    """A state directory for the whole session, set before any other fixture: the module- and
    session-scoped fixtures run before the per-test one below (a ``run`` in one of them, such as
    tests/test_report_budget.py's ``two_ranks``, wrote its checkpoint into the default
    ``~/.local/state/ai4s-graph``). A test of the default itself deletes the variable with its own
    ``monkeypatch``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AI4S_STATE_DIR", str(tmp_path_factory.mktemp("ai4s-session-state")))
        yield


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """Every test gets its own checkpoint/state directory."""
    monkeypatch.setenv("AI4S_STATE_DIR", str(tmp_path_factory.mktemp("ai4s-state")))


@pytest.fixture(scope="session")
def vm_server(tmp_path_factory):
    """One real VictoriaMetrics (Debian's ``victoria-metrics``) on loopback for the whole test
    session, with temporary storage; skips with the install hint when the binary is missing.
    Imports are idempotent (``-dedup.minScrapeInterval``), so tests may import the same export."""
    from ai4s_graph.tools.errors import ToolUnavailableError
    from ai4s_graph.tools.telemetry.victoria import VictoriaMetrics, find_binary

    try:
        find_binary()
    except ToolUnavailableError as e:
        pytest.skip(str(e))
    with VictoriaMetrics(tmp_path_factory.mktemp("vm") / "data") as vm:
        yield vm


def _cluster_up(script: Path) -> bool:
    import subprocess

    return subprocess.run(["bash", str(script), "status"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def local_cluster():
    """The real local 2-node SLURM cluster (node1, node2) + VictoriaMetrics on 127.0.0.1:18428,
    started through ``scripts/local-cluster.sh start`` (idempotent). Skips only when SLURM is not
    installed (``sbatch`` missing) or the session is not root. A cluster this fixture started is
    stopped at the end; one that was already up is left running."""
    import shutil
    import subprocess

    if shutil.which("sbatch") is None or shutil.which("slurmctld") is None:
        pytest.skip("SLURM is not installed (run scripts/local-cluster.sh install)")
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (it starts munged, mariadbd and slurm daemons)")
    script = REPO / "scripts" / "local-cluster.sh"
    was_up = _cluster_up(script)
    if not was_up:
        cp = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, timeout=300)
        if cp.returncode != 0:
            raise RuntimeError(f"local-cluster.sh start failed: {(cp.stderr or cp.stdout)[-800:]}")
    yield {"vm_url": "http://127.0.0.1:18428", "script": script}
    if not was_up:
        subprocess.run(["bash", str(script), "stop"], capture_output=True, timeout=300)
