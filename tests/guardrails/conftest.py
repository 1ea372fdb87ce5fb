"""Fixtures for the guardrail tests: a work directory for the execution logs of guardrails and
tools. The durable fixtures (SQLite and PostgreSQL) are the shared ones of `tests/_support/db.py`
(via `tests/conftest.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import _refunds


@pytest.fixture
def work_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where guardrails and tools run in this process record their executions."""
    directory = tmp_path / "work"
    directory.mkdir()
    monkeypatch.setenv(_refunds.WORK_DIR_ENV, str(directory))
    return directory
