"""Where a durable run's work happens: sync tools and sync model clients each in one thread (a
sync DBOS step): model clients and slow or new tools on the library's own pools, quick tools on
DBOS's executor; `openai.AsyncOpenAI` on the event loop; a DBOS executor sized from the
machine."""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

import httpx
import openai
import pytest

from durable_swarm import Agent
from durable_swarm._aio import is_async_callable
from durable_swarm.durable import _dbos
from durable_swarm.durable._dbos import executor_threads
from durable_swarm.errors import DurableSwarmError
from durable_swarm.testing import FakeOpenAIServer, ScriptedClient, ToolCall, calls, text

SEEN: dict[str, list[Any]] = {"model": [], "tool": []}


def record_lookup(topic: str, idempotency_key: str) -> str:
    """A sync tool that notes which thread ran it and the key it was given."""
    SEEN["tool"].append((threading.current_thread().name, idempotency_key))
    return f"found {topic}"


def reply(messages: list[dict[str, Any]], tools: Any) -> Any:
    SEEN["model"].append(threading.current_thread().name)
    if any(m.get("role") == "tool" for m in messages):
        return text("done")
    return calls(ToolCall("record_lookup", {"topic": "tea"}))


AGENT = Agent(name="threads-agent", instructions="Look it up.", functions=[record_lookup])


@pytest.fixture
def fresh_tool_times(monkeypatch):
    """No sync tool has run in this process yet, as far as step placement knows."""
    monkeypatch.setattr(_dbos, "_quick_tools", weakref.WeakKeyDictionary())


def test_sync_tool_and_sync_client_run_as_one_thread_steps_on_their_own_pools(
    durable_swarm_factory, run_id, fresh_tool_times
):
    SEEN["model"].clear()
    SEEN["tool"].clear()
    swarm = durable_swarm_factory(ScriptedClient(reply))

    response = swarm.run(AGENT, [{"role": "user", "content": "tea?"}], run_id=run_id)

    assert response.messages[-1]["content"] == "done"
    assert len(SEEN["model"]) == 2 and len(SEEN["tool"]) == 1
    assert all(name.startswith("durable-swarm-blocking") for name in SEEN["model"]), SEEN
    assert SEEN["tool"][0][0].startswith("durable-swarm-tool"), SEEN
    # still one checkpoint each, and the key names the tool's own step
    steps = [s for s in swarm.get_run(run_id).steps if s.kind in ("model", "tool")]
    assert [(s.kind, s.name) for s in steps] == [
        ("model", "threads-agent"),
        ("tool", "record_lookup"),
        ("model", "threads-agent"),
    ]
    assert steps[1].output["message"]["content"] == "found tea"
    assert SEEN["tool"][0][1] == f"{run_id}:{steps[1].step}"


def slow_lookup(topic: str) -> str:
    """A sync tool that blocks (as a network call would) and notes its thread."""
    time.sleep(10 * _dbos.QUICK_TOOL_SECONDS)
    SEEN["tool"].append((threading.current_thread().name, topic))
    return f"found {topic}"


@pytest.mark.parametrize(
    ("tool", "second_pool"),
    [(record_lookup, "dbos-executor"), (slow_lookup, "durable-swarm-tool")],
    ids=["quick", "slow"],
)
def test_a_quick_sync_tool_moves_to_dbos_executor_a_slow_one_stays_on_the_tool_pool(
    durable_swarm_factory, run_id, fresh_tool_times, tool, second_pool
):
    agent = Agent(name="threads-agent", instructions="Look it up.", functions=[tool])

    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        if any(m.get("role") == "tool" for m in messages):
            return text("done")
        return calls(ToolCall(tool.__name__, {"topic": "tea"}))

    swarm = durable_swarm_factory(ScriptedClient(script))
    SEEN["tool"].clear()
    for n in range(2):
        response = swarm.run(agent, [{"role": "user", "content": "tea?"}], run_id=f"{run_id}-{n}")
        assert response.messages[-1]["content"] == "done"

    first, second = (name for name, _ in SEEN["tool"])
    assert first.startswith("durable-swarm-tool"), SEEN  # not called here before: the pool
    assert second.startswith(second_pool), SEEN
    # wherever it ran, it is one checkpoint, found in the log like any other
    steps = [s for s in swarm.get_run(f"{run_id}-1").steps if s.kind == "tool"]
    stored = [(s.name, s.output["message"]["content"]) for s in steps]
    assert stored == [(tool.__name__, "found tea")]


async def test_async_openai_client_is_awaited_on_the_event_loop(durable_swarm_factory, run_id):
    request_threads: list[str] = []

    async def on_request(request: httpx.Request) -> None:
        request_threads.append(threading.current_thread().name)

    script = [calls(ToolCall("record_lookup", {"topic": "tea"})), text("done")]
    with FakeOpenAIServer(script) as server:
        http = httpx.AsyncClient(event_hooks={"request": [on_request]})
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="fake", http_client=http)
        swarm = durable_swarm_factory(client)
        response = await swarm.arun(AGENT, [{"role": "user", "content": "tea?"}], run_id=run_id)
        await client.close()

    assert response.messages[-1]["content"] == "done"
    # `arun` runs the workflow on this test's loop: both model calls were made from it
    assert request_threads == [threading.current_thread().name] * 2


def test_is_async_callable_sees_through_openai_decorators():
    async_client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9", api_key="fake")
    sync_client = openai.OpenAI(base_url="http://127.0.0.1:9", api_key="fake")
    assert is_async_callable(async_client.chat.completions.create)
    assert not is_async_callable(sync_client.chat.completions.create)


def test_executor_threads_from_the_machine_or_the_environment(monkeypatch):
    monkeypatch.delenv("DURABLE_SWARM_EXECUTOR_THREADS", raising=False)
    assert 4 <= executor_threads() <= 20
    monkeypatch.setenv("DURABLE_SWARM_EXECUTOR_THREADS", "3")
    assert executor_threads() == 3


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_executor_threads_rejects_a_bad_setting(monkeypatch, value):
    monkeypatch.setenv("DURABLE_SWARM_EXECUTOR_THREADS", value)
    with pytest.raises(DurableSwarmError, match="DURABLE_SWARM_EXECUTOR_THREADS"):
        executor_threads()


class _Lookups:
    def find(self, topic: str) -> str:
        return topic


class _SlottedLookup:
    """A callable tool object that cannot be weakly referenced (no `__weakref__` slot)."""

    __slots__ = ()

    def __call__(self, topic: str) -> str:
        return topic


def test_tool_placement_remembers_a_method_by_its_function_and_skips_what_it_cannot_remember(
    fresh_tool_times,
):
    pool = _dbos.tool_executor()
    one, other = _Lookups(), _Lookups()
    assert _dbos.executor_for_tool(one.find) is pool  # not called yet
    _dbos.note_tool_time(one.find, 0.0)
    assert _dbos.executor_for_tool(other.find) is None  # same function, another instance
    _dbos.note_tool_time(other.find, 1.0)
    assert _dbos.executor_for_tool(one.find) is pool  # slow last time: back on the pool
    # an object that cannot be weakly referenced: never remembered, always the pool, no error
    slotted = _SlottedLookup()
    _dbos.note_tool_time(slotted, 0.0)
    assert _dbos.executor_for_tool(slotted) is pool
