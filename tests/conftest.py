"""Shared fixtures. Real inputs live in ``../shared/data`` beside the repository (or wherever
``AI4S_TEST_DATA`` points); tests that need them skip with a clear reason when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("AI4S_TEST_DATA", REPO.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``: perf-runs/9100{1,2,3}, traces/tracelens-h100, traces/hta."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real inputs not found at {SHARED_DATA} (set AI4S_TEST_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


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
