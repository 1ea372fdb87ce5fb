"""The run database: URL resolution order, display with the password hidden, clear errors."""

from __future__ import annotations

import pytest

from _support.db import use_database
from durable_swarm import Agent, DatabaseUnavailableError, DurableSwarm
from durable_swarm.durable import DurableClient, resolve_database_url, shutdown
from durable_swarm.durable._database import display_url, sqlite_path
from durable_swarm.errors import DurableSwarmError
from durable_swarm.testing import ScriptedClient, text

ENV = ("DURABLE_SWARM_DATABASE_URL", "DBOS_SYSTEM_DATABASE_URL")


@pytest.fixture
def no_database_env(monkeypatch, tmp_path):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_resolution_order_argument_then_ours_then_dbos_then_local_file(
    no_database_env, monkeypatch
):
    here = no_database_env.resolve()
    assert resolve_database_url() == f"sqlite:///{here / 'durable_swarm.sqlite'}"
    monkeypatch.setenv("DBOS_SYSTEM_DATABASE_URL", "postgres://h/dbos_db")
    assert resolve_database_url() == "postgresql://h/dbos_db"
    monkeypatch.setenv("DURABLE_SWARM_DATABASE_URL", "ours.sqlite")
    assert resolve_database_url() == f"sqlite:///{here / 'ours.sqlite'}"
    assert resolve_database_url("postgresql://h/arg") == "postgresql://h/arg"
    assert resolve_database_url("sqlite:///rel/x.db") == f"sqlite:///{here / 'rel' / 'x.db'}"


def test_unsupported_scheme_is_refused_without_showing_the_password(no_database_env):
    with pytest.raises(DurableSwarmError, match="Unsupported database URL") as caught:
        resolve_database_url("mysql://root:hunter2@db/runs")
    assert "hunter2" not in str(caught.value)
    assert "mysql://root:***@db/runs" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://alice:s3cret@db:5432/runs", "postgresql://alice:***@db:5432/runs"),
        ("postgresql://alice@db/runs", "postgresql://alice@db/runs"),
        ("postgresql://db/runs?user=a&password=s3cret", "postgresql://db/runs?user=a&password=***"),
        ("postgresql://al:s3cret@db:notaport/runs", "postgresql://al:***@db:notaport/runs"),
        ("sqlite:////tmp/runs.sqlite", "/tmp/runs.sqlite"),
    ],
)
def test_display_url_hides_the_password(url, shown):
    assert display_url(url) == shown
    assert "s3cret" not in display_url(url)


def test_sqlite_path():
    assert str(sqlite_path("sqlite:////tmp/a.sqlite")) == "/tmp/a.sqlite"
    assert sqlite_path("postgresql://h/db") is None


SECRET_URL = "postgresql://alice:s3cret-pw@127.0.0.1:1/dswarm_nowhere"


def test_unreachable_database_errors_never_show_the_password(database_url):
    with pytest.raises(DatabaseUnavailableError) as from_client:
        DurableClient(SECRET_URL)
    shutdown()  # DBOS is one per process: leave this module's database for the bad one
    try:
        swarm = DurableSwarm(ScriptedClient([text("never")]), database_url=SECRET_URL)
        with pytest.raises(DatabaseUnavailableError) as from_swarm:
            swarm.run(Agent(name="Hidden"), [{"role": "user", "content": "hi"}])
    finally:
        use_database(database_url)
    for error in (from_client.value, from_swarm.value):
        assert "s3cret-pw" not in str(error) and "s3cret-pw" not in repr(error.args)
        assert "alice:***@127.0.0.1:1/dswarm_nowhere" in str(error)
