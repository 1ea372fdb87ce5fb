"""Async tools, `arun` and async streaming: the same behaviour as `run`, from async code."""

from __future__ import annotations

import asyncio
import threading
from unittest.mock import AsyncMock, MagicMock

import pytest

from durable_swarm import Agent, Budget, Response, Swarm

from ._mock import calling, completion, mock_client, requests, text_stream, tool_call, tool_stream

USER = [{"role": "user", "content": "hi"}]


def test_async_tool_in_sync_run(make_swarm):
    async def fetch(city: str) -> str:
        await asyncio.sleep(0)
        return f"fetched {city}"

    client = mock_client(calling(tool_call("fetch", {"city": "Oslo"})), completion("done"))

    response = make_swarm(client).run(agent=Agent(functions=[fetch]), messages=USER)

    assert response.messages[1]["content"] == "fetched Oslo"


async def test_async_tool_in_sync_run_inside_event_loop(make_swarm):
    async def fetch() -> str:
        return "fetched"

    client = mock_client(calling(tool_call("fetch")), completion("done"))

    response = make_swarm(client).run(agent=Agent(functions=[fetch]), messages=USER)

    assert response.messages[1]["content"] == "fetched"


async def test_arun_returns_same_response_as_run(make_swarm):
    def lookup(city: str, context_variables) -> str:
        context_variables["looked_up"] = city
        return f"sunny in {city}"

    def script():
        return mock_client(calling(tool_call("lookup", {"city": "Rome"})), completion("Sunny."))

    agent = Agent(name="Weather", functions=[lookup])
    sync_client, async_client = script(), script()

    expected = make_swarm(sync_client).run(agent=agent, messages=USER, context_variables={"k": 1})
    response = await make_swarm(async_client).arun(
        agent=agent, messages=USER, context_variables={"k": 1}
    )

    assert isinstance(response, Response)
    assert response.messages == expected.messages
    assert response.context_variables == expected.context_variables == {"k": 1, "looked_up": "Rome"}
    assert response.agent is agent
    assert requests(async_client) == requests(sync_client)


async def test_arun_awaits_async_tools_on_the_running_loop(make_swarm):
    loops = []

    async def probe() -> str:
        loops.append(asyncio.get_running_loop())
        return "probed"

    client = mock_client(calling(tool_call("probe")), completion("done"))

    response = await make_swarm(client).arun(agent=Agent(functions=[probe]), messages=USER)

    assert loops == [asyncio.get_running_loop()]
    assert response.messages[1]["content"] == "probed"


async def test_arun_runs_sync_tools_off_the_event_loop_thread(make_swarm):
    threads = []

    def blocking() -> str:
        threads.append(threading.get_ident())
        return "done"

    client = mock_client(calling(tool_call("blocking")), completion("ok"))

    await make_swarm(client).arun(agent=Agent(functions=[blocking]), messages=USER)

    assert threads and threads[0] != threading.get_ident()


async def test_arun_handoff_and_errors(make_swarm):
    target = Agent(name="Target")

    async def transfer():
        return target

    async def broken():
        raise KeyError("missing")

    client = mock_client(
        calling(tool_call("broken", id="c1"), tool_call("transfer", id="c2")), completion("hi")
    )

    response = await make_swarm(client).arun(
        agent=Agent(functions=[broken, transfer]), messages=USER
    )

    assert response.messages[1]["content"].startswith("Error")
    assert "KeyError" in response.messages[1]["content"]
    assert response.agent is target
    assert response.messages[-1]["sender"] == "Target"


async def test_arun_max_turns_and_execute_tools(make_swarm):
    ran = []

    def tool():
        ran.append(1)
        return "x"

    zero = mock_client(completion("never"))
    assert (await make_swarm(zero).arun(agent=Agent(), messages=USER, max_turns=0)).messages == []
    assert zero.chat.completions.create.call_count == 0

    client = mock_client(calling(tool_call("tool")), completion("never"))
    response = await make_swarm(client).arun(
        agent=Agent(functions=[tool]), messages=USER, execute_tools=False
    )
    assert [m["role"] for m in response.messages] == ["assistant"]
    assert ran == []


async def test_arun_stream_yields_same_events_as_run_stream(make_swarm):
    def tool(n: int) -> str:
        return str(n)

    def script():
        return mock_client(tool_stream(tool_call("tool", {"n": 1})), text_stream("a", "b"))

    agent = Agent(functions=[tool])
    expected = list(make_swarm(script()).run(agent=agent, messages=USER, stream=True))

    stream = await make_swarm(script()).arun(agent=agent, messages=USER, stream=True)
    events = [event async for event in stream]

    assert events[:-1] == expected[:-1]
    assert events[-1]["response"].messages == expected[-1]["response"].messages
    assert events[-1]["response"].agent is agent


async def test_astream_iterates_without_await():
    client = mock_client(text_stream("he", "y"))

    events = [e async for e in Swarm(client=client).astream(agent=Agent(), messages=USER)]

    assert events[0] == {"delim": "start"}
    assert events[-1]["response"].messages[0]["content"] == "hey"
    assert requests(client)[0]["stream"] is True


def test_astream_refuses_the_durable_keywords_it_cannot_honour():
    client = mock_client(text_stream("hey"))

    for durable_only in ({"run_id": "r1"}, {"budget": Budget(max_model_calls=1)}):
        with pytest.raises(TypeError, match="use DurableSwarm"):
            Swarm(client=client).astream(Agent(), USER, **durable_only)
    assert requests(client) == []


def _async_client(*responses):
    """A client like `openai.AsyncOpenAI`: `chat.completions.create` is a coroutine function."""
    client = MagicMock()
    client.chat.completions.create = AsyncMock(side_effect=list(responses))
    return client


def test_async_client_with_sync_run(make_swarm):
    client = _async_client(completion("from async client"))

    response = make_swarm(client).run(agent=Agent(), messages=USER)

    assert response.messages[0]["content"] == "from async client"
    client.chat.completions.create.assert_awaited_once()


async def test_async_client_with_arun(make_swarm):
    client = _async_client(completion("from async client"))

    response = await make_swarm(client).arun(agent=Agent(), messages=USER)

    assert response.messages[0]["content"] == "from async client"
    client.chat.completions.create.assert_awaited_once()


async def test_async_client_streaming_with_arun(make_swarm):
    async def chunks():
        for c in text_stream("as", "ync"):
            yield c

    client = MagicMock()
    client.chat.completions.create = AsyncMock(return_value=chunks())

    stream = await make_swarm(client).arun(agent=Agent(), messages=USER, stream=True)
    events = [e async for e in stream]

    assert events[-1]["response"].messages[0]["content"] == "async"
