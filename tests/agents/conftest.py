"""Fixtures for the agent tests: a work directory for the tools' execution logs. The durable
fixtures (SQLite and PostgreSQL, one fresh database per module and backend) are the shared ones of
`tests/_support/db.py` (via `tests/conftest.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import _fanout


@pytest.fixture
def work_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where tools run in this process record their executions."""
    directory = tmp_path / "work"
    directory.mkdir()
    monkeypatch.setenv(_fanout.WORK_DIR_ENV, str(directory))
    return directory
