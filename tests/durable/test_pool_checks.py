"""The pools a process uses all the time skip SQLAlchemy's check before each use on PostgreSQL
(a round trip and a transaction each time: about half of an idle worker's cost to the
database), unless `DURABLE_SWARM_POOL_PRE_PING` turns it back on; a connection that died then
fails its next statement and is replaced (the heartbeat's retry is in
`tests/workers/test_registry.py`; the database cut for a minute in `tests/faults`)."""

from __future__ import annotations

from typing import Any

import pytest

from durable_swarm.durable._database import PRE_PING_ENV, checks_connections
from durable_swarm.durable._dbos import _config
from durable_swarm.testing import ScriptedClient, text

POSTGRES = "postgresql://postgres@127.0.0.1:5432/runs"


def test_dbos_pool_on_postgresql_does_not_check_each_connection_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PRE_PING_ENV, raising=False)
    assert checks_connections() is False
    assert _config(POSTGRES, None, 0.5)["db_engine_kwargs"] == {"pool_pre_ping": False}


@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_the_variable_gives_dbos_its_own_pool_settings_back(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(PRE_PING_ENV, value)
    assert checks_connections() is True
    assert "db_engine_kwargs" not in _config(POSTGRES, None, 0.5)


@pytest.mark.parametrize("value", ["", "0", "no", "off"])
def test_other_values_leave_the_check_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(PRE_PING_ENV, value)
    assert checks_connections() is False


def test_sqlite_keeps_dbos_pool_settings(tmp_path: object) -> None:
    assert "db_engine_kwargs" not in _config(f"sqlite:///{tmp_path}/runs.sqlite", None, 0.5)


def test_the_ownership_threads_dbos_client_is_on_the_heartbeats_engine(
    durable_swarm_factory: Any,
) -> None:
    # The looks at this process's own pending runs and the sweep of parked waits go through
    # the heartbeat's engine, so an idle process holds no connection of the shared engine (on
    # PostgreSQL DBOS renders the URL otherwise than it was given: the binding must not
    # depend on that rendering).
    from durable_swarm.durable import _dbos

    durable_swarm_factory(ScriptedClient(lambda messages, tools: text("hi"))).launch()
    ownership = _dbos._ownership
    assert ownership is not None
    assert _dbos._KEEPER.engine() is ownership.registry.engine
