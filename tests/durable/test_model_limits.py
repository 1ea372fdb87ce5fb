"""Model limits in one process (the fleet's are in `tests/workers/test_model_limits.py`): calls
at once, a 429 of a model without limits waiting what it asks before the step's retry, a run
cancelled while it waits for its turn, and `runs show` saying what a run waits for."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from _support.wait import wait_for
from durable_swarm import Agent, DurableSwarm, ModelLimits
from durable_swarm._cli._render import summary_lines
from durable_swarm._cli._style import Style
from durable_swarm.durable._dbos import launched_url
from durable_swarm.durable._limits import limiter_for
from durable_swarm.errors import DurableSwarmError
from durable_swarm.testing import FakeOpenAIServer, Fault


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_calls_at_once_stay_within_the_limit(
    durable_swarm_factory: Callable[..., DurableSwarm], server: FakeOpenAIServer, run_id: str
) -> None:
    server.set_latency(0.3)
    swarm = durable_swarm_factory(
        server.client(max_retries=0), limits={"*": ModelLimits(concurrent=2)}
    )
    agent = Agent(name="AtOnce")
    handles = [swarm.start(agent, user(f"hi {i}"), run_id=f"{run_id}-{i}") for i in range(6)]
    assert [h.result().messages[-1]["content"] for h in handles] == [
        f"You said: hi {i}" for i in range(6)
    ]
    assert server.stats["max_in_flight"] == 2
    assert server.stats["requests"] == 6


def test_a_429_of_a_model_without_limits_waits_what_it_asks_before_the_retry(
    durable_swarm_factory: Callable[..., DurableSwarm], server: FakeOpenAIServer, run_id: str
) -> None:
    swarm = durable_swarm_factory(server.client(max_retries=0), model_retries=1, limits={})
    server.inject(Fault.status(429, retry_after=1.5))
    response = swarm.run(Agent(name="Patient"), user("hi"), run_id=run_id)
    assert response.messages[-1]["content"] == "You said: hi"
    first, second = server.arrivals
    assert second - first >= 1.5  # DBOS's own backoff (1 s) alone would be shorter
    # Without limits a 429 still uses a retry: with none left, the run fails as before.
    server.inject(Fault.status(429, retry_after=0.01), times=2)
    with pytest.raises(DurableSwarmError, match="429"):
        swarm.run(Agent(name="Patient"), user("again"), run_id=f"{run_id}-b")


def test_a_run_cancelled_while_it_waits_for_its_turn_stops_waiting(
    durable_swarm_factory: Callable[..., DurableSwarm], server: FakeOpenAIServer, run_id: str
) -> None:
    key = f"paused-{run_id}"
    swarm = durable_swarm_factory(
        server.client(max_retries=0), limits={key: ModelLimits(concurrent=4)}
    )
    url = launched_url()
    assert url is not None
    limiter = limiter_for(url)
    limiter.pause(key, 60.0, "429 from the test")
    handle = swarm.start(Agent(name="Waiting", model=key), user("hi"), run_id=run_id)
    info = wait_for(
        lambda: (i := swarm.get_run(run_id)).rate_limit and i, "the run to wait for its turn"
    )
    assert info.rate_limit["key"] == key
    shown = "\n".join(summary_lines(info, Style(False)))
    assert f"for the rate limit of {key}" in shown and "holding no worker slot" in shown
    assert "paused by a 429 from the test" in shown
    swarm.cancel(run_id)
    wait_for(lambda: swarm.get_run(run_id).status == "cancelled", "the run to be cancelled")
    wait_for(
        lambda: all(r["waiting"] == 0 for r in limiter.snapshot() if r["key"] == key),
        "the waiting call to leave the table",
    )
    assert server.request_count == 0
    assert handle.run_id == run_id


def test_a_streamed_call_of_an_async_client_waits_its_turn_too(
    durable_swarm_factory: Callable[..., DurableSwarm], server: FakeOpenAIServer, run_id: str
) -> None:
    server.set_rate_limit(1, 1.0)
    limits = {"*": ModelLimits(requests_per_minute=60, window_seconds=1)}
    swarm = durable_swarm_factory(server.async_client(max_retries=0), limits=limits)
    agent = Agent(name="Streamer")
    for i in range(3):
        events = list(swarm.run(agent, user(f"hi {i}"), stream=True, run_id=f"{run_id}-{i}"))
        assert events[-1]["response"].messages[-1]["content"] == f"You said: hi {i}"
    assert server.stats["rate_limited"] == 0 and server.stats["answered"] == 3
    assert server.most_in_window(1.0, refused=True) == 1
    url = launched_url()
    assert url is not None
    (row,) = [r for r in limiter_for(url).snapshot() if r["key"] == "*"]
    assert row["tokens_last_minute"] > 0  # the usage the server reported at the stream's end
