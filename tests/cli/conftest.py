"""Fixtures for the `durable-swarm` command's tests (helpers: _helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._helpers import EXPECTED, copy_db, runs_app


@pytest.fixture(scope="session")
def base_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite run database holding run-ok, run-failed, run-input and run-approval."""
    path = tmp_path_factory.mktemp("runs") / "runs.sqlite"
    assert runs_app(path, "create") == EXPECTED
    return path


@pytest.fixture
def db(base_db: Path, tmp_path: Path) -> Path:
    """A private copy of `base_db` for a test that changes runs."""
    return copy_db(base_db, tmp_path / "runs.sqlite")
