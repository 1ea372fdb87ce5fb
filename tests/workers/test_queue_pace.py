"""A worker queue's pace (`durable._pace`): looked at every `poll_interval` while idle, every
`busy_poll_interval` while runs wait for slots, and idle again once none waits.

The polling interval is the queue's own setting in DBOS (shared by the queue's workers), read
here through DBOS's public `DBOSClient.retrieve_queue`, as an operator would. Real worker
processes, the fake model over HTTP; SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from dbos import DBOSClient

from durable_swarm import DurableSwarmError
from durable_swarm.durable import DurableClient, Worker
from durable_swarm.durable._pace import hurried_interval

from .conftest import TIMEOUT, Model, WorkerProcess, wait_for

QUEUE = "paced"
IDLE = 1.0
BUSY = 0.05


@pytest.fixture(scope="module")
def database_url(make_database_url: Callable[..., str]) -> str:
    return make_database_url("pace")


@pytest.fixture(scope="module")
def worker(start_worker: Callable[..., WorkerProcess], database_url: str) -> WorkerProcess:
    return start_worker(
        "paced",
        database_url=database_url,
        queue=QUEUE,
        concurrency=2,
        heartbeat_interval=0.3,
        dead_after=2.0,
        poll_interval=IDLE,
        busy_poll_interval=BUSY,
    ).wait_ready()


@pytest.fixture(scope="module")
def dbos_client(worker: WorkerProcess, database_url: str) -> Iterator[DBOSClient]:
    client = DBOSClient(system_database_url=database_url)
    yield client
    client.destroy()


def interval(client: DBOSClient) -> float:
    queue = client.retrieve_queue(QUEUE)
    assert queue is not None, f"queue {QUEUE!r} is not registered"
    return queue.polling_interval_sec


def test_the_startup_line_says_both_paces(worker: WorkerProcess) -> None:
    line = next(x for x in worker.output().splitlines() if "serving queue" in x)
    assert f"polling every {IDLE:g} s when idle, as often as every {BUSY:g} s while runs" in line


def test_a_full_worker_hurries_its_queue_until_no_run_waits(
    worker: WorkerProcess, dbos_client: DBOSClient, database_url: str, model: Model
) -> None:
    assert interval(dbos_client) == IDLE
    model.slow_seconds = 0.4
    seen: list[float] = []
    with DurableClient(database_url) as client:
        handles = [
            client.start("Helper", [{"role": "user", "content": f"slow p{i}"}], queue=QUEUE)
            for i in range(8)
        ]
        # 8 runs on 2 slots: the worker fills and the rest wait, so the queue is hurried.
        wait_for(lambda: seen.append(interval(dbos_client)) or seen[-1] == BUSY,
                 "the queue to be hurried", workers=(worker,))  # fmt: skip
        texts = [h.result(timeout=TIMEOUT).messages[-1]["content"] for h in handles]
    assert texts == [f"slow p{i}" for i in range(8)]
    # Once no run waits, the worker that hurried it sets it back (a heartbeat or two).
    wait_for(lambda: interval(dbos_client) == IDLE, "the queue to be idle again",
             workers=(worker,))  # fmt: skip
    assert all(model.arrivals("slow", f"p{i}", 0) == 1 for i in range(8))


def test_a_hurry_left_behind_is_undone_by_a_worker_of_the_queue(
    worker: WorkerProcess, dbos_client: DBOSClient
) -> None:
    """A worker killed while it hurried the queue leaves it hurried: a worker of the queue
    sets it back within `dead_after` when no run waits."""
    queue = dbos_client.retrieve_queue(QUEUE)
    assert queue is not None
    queue.set_polling_interval_sec(BUSY)  # what a worker killed while busy leaves
    assert interval(dbos_client) == BUSY
    wait_for(lambda: interval(dbos_client) == IDLE, "the left hurry to be undone",
             workers=(worker,))  # fmt: skip


@pytest.mark.parametrize("value", [0, -1.0, "fast", True])
def test_a_bad_busy_poll_interval_is_refused_by_name(value: object) -> None:
    with pytest.raises(DurableSwarmError, match="busy_poll_interval must be a number of seconds"):
        Worker("_app:swarm", busy_poll_interval=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        (0.25, 0.05),  # short runs (the benchmark's): the shortest interval
        (1.0, 0.05),  # 1 s / 20 = 0.05
        (2.5, 0.1),  # 0.125, down to 0.05 x 2
        (8.0, 0.4),  # 0.4 exactly
        (9.9, 0.4),  # 0.495, down to 0.05 x 8
        (10.0, 0.5),  # 20 idle intervals: idle
        (12.0, 0.5),  # 0.6: idle, not rounded down below it
        (20.0, 0.5),  # past the idle interval: idle
        (600.0, 0.5),  # long model calls: idle, no hurry
    ],
)
def test_the_hurried_interval_is_a_twentieth_of_a_run_within_bounds(
    span: float, expected: float
) -> None:
    assert hurried_interval(span, 0.05, 0.5) == pytest.approx(expected)


def test_a_hurry_set_back_while_runs_wait_is_made_again(
    worker: WorkerProcess, dbos_client: DBOSClient, database_url: str, model: Model
) -> None:
    """Runs still wait, and someone sets the queue back to its idle pace (a worker that starts
    registers the queue with its own settings): the full worker hurries it again at its next
    look instead of trusting what it set."""
    assert interval(dbos_client) == IDLE
    model.slow_seconds = 0.5
    with DurableClient(database_url) as client:
        handles = [
            client.start("Helper", [{"role": "user", "content": f"slow q{i}"}], queue=QUEUE)
            for i in range(16)
        ]
        wait_for(lambda: interval(dbos_client) == BUSY, "the queue to be hurried",
                 workers=(worker,))  # fmt: skip
        queue = dbos_client.retrieve_queue(QUEUE)
        assert queue is not None
        queue.set_polling_interval_sec(IDLE)
        wait_for(lambda: interval(dbos_client) == BUSY, "the queue to be hurried again",
                 workers=(worker,))  # fmt: skip
        texts = [h.result(timeout=TIMEOUT).messages[-1]["content"] for h in handles]
    assert texts == [f"slow q{i}" for i in range(16)]
    wait_for(lambda: interval(dbos_client) == IDLE, "the queue to be idle again",
             workers=(worker,))  # fmt: skip


def test_a_run_of_another_release_left_queued_does_not_keep_the_queue_hurried(
    worker: WorkerProcess, dbos_client: DBOSClient, database_url: str, model: Model
) -> None:
    """A run queued by another application version (an earlier release's, left after an
    upgrade) is never taken by this worker: it does not count as waiting, so the queue goes
    back to its idle pace once this worker's own runs are done."""
    from dbos import EnqueueOptions

    options: EnqueueOptions = {
        "queue_name": QUEUE,
        "workflow_name": "an_earlier_release_run",
        "app_version": "an-earlier-release",
    }
    old = dbos_client.enqueue(options)
    try:
        model.slow_seconds = 0.4
        with DurableClient(database_url) as client:
            handles = [
                client.start("Helper", [{"role": "user", "content": f"slow r{i}"}], queue=QUEUE)
                for i in range(8)
            ]
            wait_for(lambda: interval(dbos_client) == BUSY, "the queue to be hurried",
                     workers=(worker,))  # fmt: skip
            for h in handles:
                h.result(timeout=TIMEOUT)
        wait_for(lambda: interval(dbos_client) == IDLE, "the queue to be idle again",
                 workers=(worker,))  # fmt: skip
        assert old.get_status().status == "ENQUEUED"
    finally:
        dbos_client.cancel_workflow(old.workflow_id)
