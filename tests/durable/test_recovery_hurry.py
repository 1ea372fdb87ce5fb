"""The queue of a dead process's runs is looked at quickly only while runs wait on it (SQLite and
PostgreSQL).

Its polling interval is one value for the fleet, in DBOS's queue table: a takeover that puts runs
on it hurries it (every process then looks every `RECOVERY_HURRY_SECONDS`), and the taker's
heartbeat sets it back to `RECOVERY_POLL_SECONDS` once no run waits on it, looking again after
the set so that runs another taker queued in between keep it hurried.
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
    RECOVERY_POLL_SECONDS,
    RECOVERY_QUEUE,
)


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


def _interval(client: DBOSClient) -> float:
    queue = client.retrieve_queue(RECOVERY_QUEUE)
    assert queue is not None, f"{RECOVERY_QUEUE} is not registered"
    return queue.polling_interval_sec


def test_a_takeover_hurries_the_queue_for_the_fleet_and_an_empty_queue_settles_it(
    other_client: DBOSClient,
) -> None:
    keeper = _dbos._Keeper()  # a keeper of its own: the process's stays as it is
    keeper.settle()  # a process's first beat sets back what a dead taker may have left
    assert _interval(other_client) == RECOVERY_POLL_SECONDS

    keeper.hurry(keeper.client())
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS

    keeper.settle()  # nothing waits on the queue
    assert _interval(other_client) == RECOVERY_POLL_SECONDS


def test_runs_queued_by_another_taker_during_a_settle_keep_it_hurried(
    other_client: DBOSClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    keeper = _dbos._Keeper()
    keeper.hurry(keeper.client())
    looks = iter([False, True])  # empty at the first look; runs queued before the second
    monkeypatch.setattr(_dbos, "_recovery_queued", lambda client: next(looks))
    keeper.settle()
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS

    looks = iter([True])  # still waiting: nothing changes
    keeper.settle()
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS

    _dbos._set_recovery_poll(other_client, RECOVERY_POLL_SECONDS)  # a settle elsewhere
    looks = iter([True])  # runs still wait: hurried again
    keeper.settle()
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS

    looks = iter([False, False])
    keeper.settle()
    assert _interval(other_client) == RECOVERY_POLL_SECONDS
    looks = iter([])  # settled: the next beats look at nothing
    keeper.settle()


def test_a_takeover_watches_the_queue_a_dead_taker_may_have_left_hurried(
    other_client: DBOSClient,
) -> None:
    keeper = _dbos._Keeper()
    keeper.settle()
    _dbos._set_recovery_poll(other_client, RECOVERY_HURRY_SECONDS)  # a taker hurried, and died
    keeper.settle()  # this process took nothing over yet: it does not look
    assert _interval(other_client) == RECOVERY_HURRY_SECONDS
    assert keeper.recover("an-executor-with-no-runs") == 0  # the takeover of the dead taker
    keeper.settle()
    assert _interval(other_client) == RECOVERY_POLL_SECONDS
