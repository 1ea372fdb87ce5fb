"""Fixtures for the handoff and human-in-the-loop tests.

In-memory tests need nothing from here. Durable tests use the shared database fixtures
(`tests/_support/db.py`, via `tests/conftest.py`): the module-scoped `backend` parameter
("sqlite" / "postgres") gives each test module one fresh database per backend (tests use unique
run ids); PostgreSQL comes from `DURABLE_SWARM_TEST_POSTGRES_URL` (its databases get unique names
and are dropped at the end) and its tests skip without it, unless
`DURABLE_SWARM_REQUIRE_POSTGRES=1`, where they fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_swarm import DurableSwarm

from ._agents import WORK_DIR_ENV


@pytest.fixture
def durable(durable_swarm_factory: Callable[..., DurableSwarm]) -> Callable[..., DurableSwarm]:
    """`client -> DurableSwarm` on this module's database (DBOS launched on it here)."""
    return durable_swarm_factory


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where `_agents`' tools record their executions (for runs in this process too)."""
    directory = tmp_path / "work"
    directory.mkdir()
    monkeypatch.setenv(WORK_DIR_ENV, str(directory))
    return directory


@pytest.fixture(scope="session")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The fork server that starts the restart tests' child processes (one per session)."""
    from ._procs import Zygote

    server = Zygote(tmp_path_factory.mktemp("handoffs-zygote") / "zygote.log")
    yield server
    server.close()
