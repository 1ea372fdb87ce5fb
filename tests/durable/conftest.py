"""Fixtures for durable tests: every test runs on SQLite and on PostgreSQL.

The database fixtures (`backend`, `make_database_url`, `database_url`, `durable_swarm_factory`,
`run_id`, ...) are shared by all test directories: `tests/_support/db.py`, via `tests/conftest.py`.

* `backend` ("sqlite" / "postgres") is a module-scoped parameter, so each test module gets one
  fresh database per backend (tests use unique run ids) and DBOS is launched once per module and
  backend. PostgreSQL comes from `DURABLE_SWARM_TEST_POSTGRES_URL`; each database created here
  has a unique name and is dropped at the end. Without that variable (or with the server down)
  the PostgreSQL tests skip, unless `DURABLE_SWARM_REQUIRE_POSTGRES=1`, where they fail.
* DBOS is a singleton per process: `durable_swarm_factory` makes sure the DBOS this library
  launched runs on this module's database (shutting down one on another database first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from . import _scenarios
from ._harness import Zygote


@pytest.fixture(scope="module")
def children_database_url(make_database_url: Callable[[str], str]) -> str:
    """This module's database for runs made by child processes (this process never launches
    DBOS on it, so it never recovers or dequeues their runs)."""
    return make_database_url("children")


@pytest.fixture
def tool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the scenario's tools record their executions for runs in this process."""
    directory = tmp_path / "tools"
    directory.mkdir()
    monkeypatch.setenv(_scenarios.WORK_DIR_ENV, str(directory))
    monkeypatch.delenv(_scenarios.HANG_ENV, raising=False)
    return directory


@pytest.fixture(scope="session")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    """The fork server that starts child processes (crash tests) for the whole session."""
    server = Zygote(tmp_path_factory.mktemp("zygote") / "zygote.log")
    yield server
    server.close()
