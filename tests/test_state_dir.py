"""The tests never write the default state directory ``~/.local/state/ai4s-graph``: the module-
and session-scoped fixtures run before the per-test fixture that sets ``AI4S_STATE_DIR``, and a run
in one of them (tests/test_report_budget.py, tests/test_report_headline.py) once put its
checkpoint and locks there; tests/conftest.py sets it for the whole session first."""

from __future__ import annotations

from pathlib import Path

import pytest

from ai4s_graph.graph import checkpoint


@pytest.fixture(scope="module")
def module_lock() -> Path:
    """The lock file a module-scoped fixture's run takes on the default checkpoint (real file)."""
    with checkpoint.thread_lock(None, "a module-scoped fixture's run") as path:
        pass
    return path


def test_a_module_fixture_writes_under_the_sessions_temporary_folder(module_lock, tmp_path_factory):
    base = tmp_path_factory.getbasetemp().resolve()
    assert module_lock.is_file() and module_lock.resolve().is_relative_to(base)
    assert not module_lock.resolve().is_relative_to(Path.home() / ".local" / "state" / "ai4s-graph")


def test_each_test_has_its_own_state_dir_and_the_default_is_under_home(tmp_path_factory, monkeypatch):
    mine = checkpoint.state_dir()
    assert mine.resolve().is_relative_to(tmp_path_factory.getbasetemp().resolve())
    assert mine.name.startswith("ai4s-state")  # the per-test one, not the session's
    monkeypatch.delenv("AI4S_STATE_DIR")
    assert checkpoint.state_dir() == Path.home() / ".local" / "state" / "ai4s-graph"
    assert checkpoint.default_db() == str(Path.home() / ".local" / "state" / "ai4s-graph" / "checkpoints.sqlite")
