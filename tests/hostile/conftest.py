"""Fixtures of the hostile-input catalog (helpers: ``hostile_harness.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture
def record_mode(request) -> str:
    """pytest-recording's ``--record-mode`` (``none`` in CI: replay only)."""
    return request.config.getoption("--record-mode", default="none") or "none"
