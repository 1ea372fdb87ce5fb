"""The queue of a dead process's runs is registered only while runs wait on it (SQLite and
PostgreSQL).

A takeover that puts runs on it registers it in DBOS's queue table (every process then looks at
it every `RECOVERY_HURRY_SECONDS`, each taking at most the fleet's smallest recovery slots at a
time), and the taker's heartbeat deletes the registration once no run waits on it, looking again
after the delete so that runs another taker queued in between keep it registered. An idle fleet
has no queue thread looking at it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dbos import DBOSClient

from _support.wait import wait_for
from durable_swarm.durable import _dbos
from durable_swarm.durable._dbos import (
    RECOVERY_HURRY_SECONDS,
    RECOVERY_QUEUE,
)
from durable_swarm.durable._ownership import ProcessRegistry


@pytest.fixture
def other_client(durable_swarm_factory: Any) -> Iterator[DBOSClient]:
    """A `DBOSClient` of its own on this module's database (DBOS launched here): what another
    process of the fleet reads."""
    durable_swarm_factory()
    # This process's own heartbeat settles the queue at its first beat: let it, so that it
    # does not set back what a test hurried.
    wait_for(lambda: not _dbos._KEEPER._hurrying, "the first heartbeat's settle")
    url = _dbos.run_database_url()
    assert url is not None
    client = DBOSClient(system_database_url=url, application_name=_dbos.APP_NAME)
    yield client
    client.destroy()


def _interval(client: DBOSClient) -> float | None:
    """The queue's polling interval, None while it is not registered."""
    queue = client.retrieve_queue(RECOVERY_QUEUE)
    return None if queue is None else queue.polling_interval_sec


def test_a_takeover_registers_the_queue_for_the_fleet_and_an_empty_queue_is_deleted(
    other_client: DBOSClient,
) -> None:
    keeper = _dbos._Keeper()  # a keeper of its own: the process's stays as it is
    keeper.settle()  # a process's first beat deletes what a dead taker may have left
    assert _interval(other_client) is None

    keeper.hurry(keeper.client())
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS

    keeper.settle()  # nothing waits on the queue
    assert _interval(other_client) is None


def test_runs_queued_by_another_taker_during_a_settle_keep_it_registered(
    other_client: DBOSClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    keeper = _dbos._Keeper()
    keeper.hurry(keeper.client())
    looks = iter([False, True])  # empty at the first look; runs queued before the second
    monkeypatch.setattr(_dbos, "_recovery_queued", lambda *args: next(looks))
    keeper.settle()
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS

    looks = iter([True])  # still waiting: nothing changes
    keeper.settle()
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS

    _dbos._close_recovery_queue(other_client)  # a settle elsewhere
    looks = iter([True])  # runs still wait: registered again
    keeper.settle()
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS

    looks = iter([False, False])
    keeper.settle()
    assert _interval(other_client) is None
    looks = iter([])  # settled: the next beats look at nothing
    keeper.settle()


def test_a_takeover_watches_the_queue_a_dead_taker_may_have_left_registered(
    other_client: DBOSClient,
) -> None:
    keeper = _dbos._Keeper()
    keeper.settle()
    _dbos._open_recovery_queue(other_client, 5)  # a taker opened it, and died
    keeper.settle()  # this process took nothing over yet: it does not look
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS
    assert keeper.recover("an-executor-with-no-runs") == 0  # the takeover of the dead taker
    keeper.settle()
    assert _interval(other_client) is None


def test_the_queue_takes_the_smallest_recovery_slots_of_the_live_processes(
    other_client: DBOSClient,
) -> None:
    # Each process's recovery slots (a worker's concurrency) are in its row of the process
    # table; a takeover opens the queue with the smallest of the live ones, so no worker takes
    # more runs of a dead process at a time than its concurrency. A queue another taker opened
    # with a larger limit is lowered; a smaller one stays.
    url = _dbos.run_database_url()
    assert url is not None
    small = ProcessRegistry(url, "small-worker", "q", dead_after=60.0, slots=3)
    small.register(lambda seconds: False)
    keeper = _dbos._Keeper()
    registry = ProcessRegistry(url, "the-taker", None, dead_after=60.0, slots=100)
    registry.register(lambda seconds: False)
    keeper.bind(url, registry)
    try:
        assert keeper.limit() == 3
        _dbos._open_recovery_queue(other_client, 50)  # opened elsewhere, with a larger limit
        keeper.hurry(keeper.client())
        queue = other_client.retrieve_queue(RECOVERY_QUEUE)
        assert queue is not None and queue.worker_concurrency == 3
        _dbos._open_recovery_queue(other_client, 10)  # a larger one never raises it again
        queue = other_client.retrieve_queue(RECOVERY_QUEUE)
        assert queue is not None and queue.worker_concurrency == 3
        small.stop()  # a stopped process's slots no longer count
        assert keeper.limit() == 100
    finally:
        _dbos._close_recovery_queue(other_client)
        for each in (small, registry):
            each.close()


def test_recovery_slots_come_from_the_environment_else_the_worker_and_a_bad_value_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from durable_swarm.errors import DurableSwarmError

    monkeypatch.delenv(_dbos.RECOVERY_SLOTS_ENV, raising=False)
    assert _dbos.recovery_slots() == (_dbos.DEFAULT_RECOVERY_SLOTS, False)
    assert _dbos.recovery_slots(7) == (7, False)  # a worker's concurrency
    monkeypatch.setenv(_dbos.RECOVERY_SLOTS_ENV, "4")
    assert _dbos.recovery_slots(7) == (4, True)  # the fleet's, strict
    monkeypatch.setenv(_dbos.RECOVERY_SLOTS_ENV, "none")
    with pytest.raises(DurableSwarmError, match="DURABLE_SWARM_RECOVERY_SLOTS='none'"):
        _dbos.recovery_slots(7)
