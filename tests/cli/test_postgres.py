"""The command on PostgreSQL: list, show and send on runs made there, and a database that does
not exist on the server is reported, not created.

The server comes from DURABLE_SWARM_TEST_POSTGRES_URL; the tests skip without it (or with the
server down), unless DURABLE_SWARM_REQUIRE_POSTGRES=1, where they fail. Each test database has a
unique name and is dropped at the end.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from ._helpers import EXPECTED, cli_batch, runs_app

pytestmark = pytest.mark.postgres

URL_ENV, REQUIRE_ENV = "DURABLE_SWARM_TEST_POSTGRES_URL", "DURABLE_SWARM_REQUIRE_POSTGRES"


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"PostgreSQL is required ({REQUIRE_ENV}=1) but {reason}.", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


def _database(server: str, name: str) -> str:
    parts = urlsplit(server)
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="module")
def server():
    """The PostgreSQL server URL (skips or fails when unavailable)."""
    url = os.environ.get(URL_ENV)
    if not url:
        _unavailable(f"{URL_ENV} is not set")
    try:
        import psycopg

        psycopg.connect(url, connect_timeout=5).close()
    except Exception as e:
        _unavailable(f"the server at {url} cannot be reached ({type(e).__name__}: {e})")
    return url


@pytest.fixture(scope="module")
def pg_runs(server):
    """A new database on the server holding the test runs; dropped afterwards."""
    import psycopg

    name = f"ds_cli_{uuid.uuid4().hex[:12]}"
    url = _database(server, name)
    try:
        assert runs_app(url, "create") == EXPECTED
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_list_show_and_send_on_postgres(pg_runs, server, tmp_path):
    missing = _database(server, f"ds_cli_missing_{uuid.uuid4().hex[:8]}")
    listed, shown, sent, waiting, absent = cli_batch(
        tmp_path,
        pg_runs,
        ["runs", "list", "--json"],
        ["runs", "show", "run-ok"],
        ["runs", "send", "run-input", "Ada"],
        ["runs", "list", "--status", "waiting_for_approval", "--json"],
        ["runs", "list", "--database-url", missing],
    )
    assert {r["run_id"]: r["status"] for r in listed.json()["runs"]} == EXPECTED
    assert "password" not in listed.json()["database"]
    assert shown.status == 0, shown.stderr
    assert "Run run-ok  succeeded" in shown.stdout
    assert 'get_weather(city="Paris") = Sunny and 21°C in Paris' in shown.stdout
    assert sent.status == 0, sent.stderr
    assert [r["run_id"] for r in waiting.json()["runs"]] == ["run-approval"]
    assert absent.status == 1
    assert "has no database" in absent.stderr and "nothing was created" in absent.stderr

    import psycopg

    with psycopg.connect(server) as conn:
        names = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
    assert urlsplit(missing).path[1:] not in names
