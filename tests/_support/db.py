"""Database fixtures for the durable tests of every directory: SQLite and PostgreSQL.

* `backend` ("sqlite" / "postgres") is a module-scoped parameter, so each test module gets one
  fresh database per backend (tests use unique run ids) and DBOS is launched once per module and
  backend. PostgreSQL comes from `DURABLE_SWARM_TEST_POSTGRES_URL`; each database created here
  has a unique name and is dropped at the end. Without that variable (or with the server down)
  the PostgreSQL tests skip, unless `DURABLE_SWARM_REQUIRE_POSTGRES=1`, where they fail.
* DBOS is a singleton per process: `durable_swarm_factory` makes sure the DBOS this library
  launched runs on this module's database (shutting down one on another database first).

The root `tests/conftest.py` imports the fixtures, so every test directory has them; a directory
may override one (e.g. `tests/workers` has its own `make_database_url`).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

os.environ.setdefault("DURABLE_SWARM_LOG_LEVEL", "ERROR")

from durable_swarm import DurableSwarm
from durable_swarm.durable import _dbos as dbos_setup
from durable_swarm.durable import resolve_database_url, shutdown

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


def with_database(base_url: str, name: str) -> str:
    """`base_url` (a PostgreSQL server) with the database `name`."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def postgres_execute(base_url: str, sql: str) -> None:
    """Run `sql` on the server at `base_url`, outside any transaction (CREATE/DROP DATABASE)."""
    import psycopg

    with psycopg.connect(base_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def shutdown_settled(timeout: float = 15.0) -> None:
    """`shutdown()`, once the runs this process still executes but whose row is already final
    (a cancelled run noticing its cancel, then reading its outcome) have ended, for at most
    `timeout` seconds. Their thread reads the database until it ends; a database dropped under
    it makes DBOS retry the connection for good, and the interpreter waits for that thread at
    exit. Runs still pending (waiting for a person, say) are not waited for."""
    deadline = time.monotonic() + timeout
    while dbos_setup.instance() is not None and _any_run_ending(deadline - time.monotonic()):
        time.sleep(0.05)
    shutdown()


def _any_run_ending(timeout: float) -> bool:
    """Whether a run this process executes has a final row, read within `timeout` seconds (on a
    daemon thread: DBOS retries an unreachable database for good); False if not read in time."""
    found: list[bool] = []

    def look() -> None:
        try:
            statuses = (dbos_setup.run_status(run_id) for run_id in dbos_setup.running_runs())
            found.append(any(status not in ("PENDING", "ENQUEUED") for status in statuses))
        except Exception:  # no database to read: nothing to wait for
            found.append(False)

    reader = threading.Thread(target=look, name="test-settle", daemon=True)
    reader.start()
    reader.join(max(0.0, timeout))
    return bool(found and found[0])


def drop_database(base_url: str, name: str) -> None:
    postgres_execute(base_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def new_database_name(prefix: str, label: str) -> str:
    """A unique PostgreSQL database name."""
    return f"{prefix}_{label}_{uuid.uuid4().hex[:10]}".lower()


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def backend(request: pytest.FixtureRequest) -> str:
    """The database kind this module's durable tests run on."""
    return str(request.param)


@pytest.fixture(scope="module")
def make_database_url(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], str]]:
    """`label -> URL` of a new, empty database of this backend (dropped at the module's end)."""
    base = request.getfixturevalue("postgres_base_url") if backend == "postgres" else None
    created: list[str] = []
    folder = tmp_path_factory.mktemp("durable-db")

    def make(label: str) -> str:
        if base is None:
            return str(folder / f"{label}.sqlite")
        name = new_database_name("dswarm_test", label)
        created.append(name)
        return with_database(base, name)  # DBOS creates it at launch

    yield make
    shutdown_settled()
    for name in created:
        assert base is not None
        drop_database(base, name)


@pytest.fixture(scope="module")
def database_url(make_database_url: Callable[[str], str]) -> str:
    """This module's database for runs made in the test process."""
    return make_database_url("main")


def use_database(url: str) -> None:
    """Make the DBOS this library launched in this process run on `url` (launch it if need be)."""
    if dbos_setup._launched_url != resolve_database_url(url):
        shutdown()
    DurableSwarm(database_url=url).launch()


@pytest.fixture
def durable_swarm_factory(database_url: str) -> Callable[..., DurableSwarm]:
    """`client -> DurableSwarm` on this module's database (DBOS launched on it)."""
    use_database(database_url)

    def make(client: Any = None, **kwargs: Any) -> DurableSwarm:
        return DurableSwarm(client, database_url=database_url, **kwargs)

    return make


@pytest.fixture
def run_id(request: pytest.FixtureRequest) -> str:
    """A unique run id naming the test."""
    return f"{request.node.name[:50]}-{uuid.uuid4().hex[:8]}"
