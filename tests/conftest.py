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
