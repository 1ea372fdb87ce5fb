"""Fixtures for the agent tests: the durable fixtures of `tests/durable` (SQLite and PostgreSQL,
one fresh database per module and backend), and a work directory for the tools' execution logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable.conftest import (  # noqa: F401  (fixtures, re-exported for this directory)
    backend,
    database_url,
    durable_swarm_factory,
    make_database_url,
    postgres_base_url,
    run_id,
)

from . import _fanout


@pytest.fixture
def work_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where tools run in this process record their executions."""
    directory = tmp_path / "work"
    directory.mkdir()
    monkeypatch.setenv(_fanout.WORK_DIR_ENV, str(directory))
    return directory
