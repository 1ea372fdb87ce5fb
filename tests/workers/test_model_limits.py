"""Model limits shared by a fleet of worker processes (`ModelLimits`, `worker --limit`).

Real worker processes (`run_worker`, as `durable-swarm worker` runs it) take runs from one queue
and call the test's FakeOpenAIServer, which here acts as a rate-limited provider: past its limit
it answers 429 with `Retry-After`. Their shared limit keeps the whole fleet within the server's
limit (no 429 at all), a 429 pauses the model in every process for as long as it says without
using up the step's retries (the app's swarm allows 3; a call here waits out more 429s than
that), and a run waiting for its turn gives its worker slot back: with one slot, a run of
another model finishes meanwhile. `runs show`'s source (`get_run(...).rate_limit`) and the
shared figures behind /metrics say who waits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from durable_swarm.durable import DurableClient
from durable_swarm.durable._limits import limiter_for
from durable_swarm.testing import FakeOpenAIServer, Fault

from .conftest import TIMEOUT, WorkerProcess, wait_for

QUEUE = "limits"
QUEUES = ("limits-a", "limits-b")  # one per worker: each serves runs for sure
WINDOW = 2.0  # seconds: the server's window, and the fleet's
PER_WINDOW = 3  # requests the server lets through per window


def user(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


@pytest.fixture
def provider(server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    """The module's fake server, reset, and with no limit or fault left at the end."""
    server.reset()
    yield server
    server.set_rate_limit(None)
    server.reset()


def fleet(
    start_worker: Callable[..., WorkerProcess],
    url: str,
    limits: str,
    queues: tuple[str, ...] = QUEUES,
    **more: Any,
) -> list[WorkerProcess]:
    """A worker per queue of `queues`, all with `limits` (`--limit`), ready."""
    settings = {"database_url": url, "limits": limits, **more}
    workers = [
        start_worker(f"limits-{queue}-{url[-12:]}", queue=queue, **settings) for queue in queues
    ]
    return [w.wait_ready() for w in workers]


def start(client: DurableClient, text: str, number: int) -> Any:
    """Start a run of `text` on the queue of worker `number % 2`."""
    return client.start("Helper", user(text), queue=QUEUES[number % 2])


def ran_here(worker: WorkerProcess) -> int:
    """How many runs the worker began (its run lines)."""
    return worker.output().count(", running here")


def test_the_fleet_keeps_to_a_shared_limit_and_no_run_fails(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    provider: FakeOpenAIServer,
) -> None:
    provider.set_rate_limit(PER_WINDOW, WINDOW)
    url = make_database_url("fleet")
    rpm = PER_WINDOW * 60 / WINDOW
    workers = fleet(start_worker, url, f"*:rpm={rpm:g},window={WINDOW:g}", concurrency=4)
    with DurableClient(url) as client:
        handles = [start(client, f"echo f{i}", i) for i in range(10)]
        answers = [h.result(timeout=TIMEOUT).messages[-1]["content"] for h in handles]
    assert answers == [f"echo: f{i}" for i in range(10)]
    # The server never had to refuse: across both processes, never more than its limit.
    assert provider.stats["rate_limited"] == 0
    assert provider.most_in_window(WINDOW, refused=True) <= PER_WINDOW
    assert provider.stats["requests"] == 10  # one request per model call: nothing retried
    assert all(ran_here(w) > 0 for w in workers), "both workers served runs"


def test_a_429_pauses_every_process_and_uses_no_retries(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    provider: FakeOpenAIServer,
) -> None:
    url = make_database_url("pause")
    pause = 2.0
    workers = fleet(start_worker, url, "*:concurrent=8", concurrency=3)
    # Six 429s in a row: more than the app's model_retries (3) for any one call.
    provider.inject(Fault.status(429, retry_after=pause), times=6)
    with DurableClient(url) as client:
        handles = [start(client, f"echo p{i}", i) for i in range(6)]
        answers = [h.result(timeout=TIMEOUT).messages[-1]["content"] for h in handles]
    assert answers == [f"echo: p{i}" for i in range(6)]
    assert all(ran_here(w) > 0 for w in workers), "both workers served runs"
    stats = provider.stats
    assert stats["faults"] == 6 and stats["answered"] == 6
    # After the first 429 no process sent anything for the pause it asked for (a request
    # admitted just before the pause was written may still arrive in its first moments).
    arrivals = provider.arrivals
    first = arrivals[0]
    quiet = [at - first for at in arrivals if first + 0.5 < at < first + pause - 0.05]
    assert quiet == [], f"requests during the pause, seconds after the first 429: {quiet}"


def test_a_run_waiting_for_its_turn_holds_no_slot_and_says_what_it_waits_for(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    provider: FakeOpenAIServer,
) -> None:
    url = make_database_url("slot")
    # One worker, one slot; the limited model is paused for a while by the test itself.
    (worker,) = fleet(start_worker, url, "limited-model:concurrent=2", (QUEUE,), concurrency=1)
    limiter = limiter_for(url)
    limiter.pause("limited-model", 8.0, "429 from the test")
    with DurableClient(url) as client:
        waiting = client.start(
            "Helper", user("echo w1"), queue=QUEUE, model_override="limited-model"
        )
        info = wait_for(
            lambda: (i := client.get_run(waiting.run_id)).rate_limit and i,
            "the run to wait for its model's limit",
            workers=(worker,),
        )
        assert info.status == "pending"
        assert info.rate_limit["key"] == "limited-model"
        assert info.rate_limit["agent"] == "Helper"
        assert info.rate_limit["paused_because"] == "429 from the test"
        (row,) = [r for r in limiter.snapshot() if r["key"] == "limited-model"]
        assert row["waiting"] == 1 and row["paused_seconds"] > 0
        assert row["limits"]["concurrent"] == 2
        # Meanwhile the worker's one slot serves a run of another model.
        other = client.start("Helper", user("echo w2"), queue=QUEUE)
        assert other.result(timeout=TIMEOUT).messages[-1]["content"] == "echo: w2"
        assert client.get_run(waiting.run_id).status == "pending"
        assert waiting.result(timeout=TIMEOUT).messages[-1]["content"] == "echo: w1"
        assert client.get_run(waiting.run_id).rate_limit is None
    (row,) = [r for r in limiter.snapshot() if r["key"] == "limited-model"]
    assert row["waiting"] == 0 and row["in_flight"] == 0 and row["requests_last_minute"] == 1


def test_a_worker_killed_during_a_limited_call_leaves_no_lease_behind(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    provider: FakeOpenAIServer,
) -> None:
    """One call at once: the call in flight when its worker is SIGKILLed is made again by the
    worker that takes the run over, which ends the dead execution's lease (same run and step)
    instead of waiting for it to go stale; the next run's call goes after it."""
    url = make_database_url("crash")
    timing = {"heartbeat_interval": 0.2, "dead_after": 1.5, "limits": "*:concurrent=1"}
    settings = {"database_url": url, "queue": QUEUE, **timing}
    first = start_worker(f"limits-first-{url[-12:]}", **settings).wait_ready()
    provider.set_latency(120.0)  # the first request hangs until its worker is gone
    try:
        with DurableClient(url) as client:
            held = client.start("Helper", user("echo c1"), queue=QUEUE)
            wait_for(lambda: provider.stats["in_flight"] == 1, "the call to be in flight")
            first.kill()
            provider.set_latency(0.0)
            second = start_worker(f"limits-second-{url[-12:]}", **settings).wait_ready()
            later = client.start("Helper", user("echo c2"), queue=QUEUE)
            assert held.result(timeout=TIMEOUT).messages[-1]["content"] == "echo: c1"
            assert later.result(timeout=TIMEOUT).messages[-1]["content"] == "echo: c2"
            assert ran_here(second) == 2
    finally:
        provider.set_latency(0.0)
    # The request cut short by the kill, then one per call: no finished call made twice.
    assert provider.stats["requests"] == 3 and provider.stats["answered"] >= 2
    (row,) = [r for r in limiter_for(url).snapshot() if r["key"] == "*"]
    assert row["in_flight"] == 0 and row["waiting"] == 0
