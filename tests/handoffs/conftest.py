"""Fixtures for the handoff and human-in-the-loop tests.

In-memory tests need nothing from here. Durable tests follow `tests/durable/conftest.py`: the
module-scoped `backend` parameter ("sqlite" / "postgres") gives each test module one fresh
database per backend (tests use unique run ids); PostgreSQL comes from
`DURABLE_SWARM_TEST_POSTGRES_URL` (its databases get unique names and are dropped at the end) and
its tests skip without it, unless `DURABLE_SWARM_REQUIRE_POSTGRES=1`, where they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

os.environ.setdefault("DURABLE_SWARM_LOG_LEVEL", "ERROR")

from durable_swarm import DurableSwarm
from durable_swarm.durable import _dbos as dbos_setup
from durable_swarm.durable import resolve_database_url, shutdown

from ._agents import WORK_DIR_ENV

POSTGRES_URL_ENV = "DURABLE_SWARM_TEST_POSTGRES_URL"
REQUIRE_POSTGRES_ENV = "DURABLE_SWARM_REQUIRE_POSTGRES"


def _postgres_unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
        pytest.fail(
            f"PostgreSQL is required ({REQUIRE_POSTGRES_ENV}=1) but {reason}. Start PostgreSQL "
            f"and set {POSTGRES_URL_ENV}, e.g. postgresql://postgres@127.0.0.1:5432/postgres.",
            pytrace=False,
        )
    pytest.skip(f"PostgreSQL tests skipped: {reason} (set {POSTGRES_URL_ENV} to run them)")


@pytest.fixture(scope="session")
def postgres_base_url() -> str:
    """The PostgreSQL server to create test databases on (skips or fails when unavailable)."""
    url = os.environ.get(POSTGRES_URL_ENV)
    if not url:
        _postgres_unavailable(f"{POSTGRES_URL_ENV} is not set")
        raise AssertionError("unreachable")
    try:
        import psycopg

        psycopg.connect(url, connect_timeout=5).close()
    except Exception as e:
        _postgres_unavailable(f"the server at {url} cannot be reached ({type(e).__name__}: {e})")
    return url


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def backend(request: pytest.FixtureRequest) -> str:
    """The database kind this module's durable tests run on."""
    return str(request.param)


@pytest.fixture(scope="module")
def database_url(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A new, empty database of this backend for the module (dropped at the module's end)."""
    if backend == "sqlite":
        yield str(tmp_path_factory.mktemp("handoffs-db") / "runs.sqlite")
        shutdown()
        return
    base = request.getfixturevalue("postgres_base_url")
    name = f"dswarm_handoffs_{uuid.uuid4().hex[:10]}"
    parts = urlsplit(base)
    yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    shutdown()
    import psycopg

    with psycopg.connect(base, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def use_database(url: str) -> None:
    """Make the DBOS this library launched in this process run on `url` (launch it if need be)."""
    if dbos_setup._launched_url != resolve_database_url(url):
        shutdown()
    DurableSwarm(database_url=url).launch()


@pytest.fixture
def durable(database_url: str) -> Callable[..., DurableSwarm]:
    """`client -> DurableSwarm` on this module's database (DBOS launched on it here)."""
    use_database(database_url)

    def make(client: Any = None, **kwargs: Any) -> DurableSwarm:
        return DurableSwarm(client, database_url=database_url, **kwargs)

    return make


@pytest.fixture
def run_id(request: pytest.FixtureRequest) -> str:
    """A unique run id naming the test."""
    return f"{request.node.name[:50]}-{uuid.uuid4().hex[:8]}"


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
