"""FakeOpenAIServer driven by the real openai client over real HTTP."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from durable_swarm.testing import FakeOpenAIServer, Fault, Reply, ToolCall, calls, text

from ._helpers import assemble, most_tool_call_deltas

USER = [{"role": "user", "content": "hello"}]
THREE_CALLS = calls(
    ToolCall("weather", {"city": "Paris"}),
    ToolCall("weather", {"city": "Rome"}),
    ToolCall("transfer_to_agent"),
)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def ask(server: FakeOpenAIServer, max_retries: int = 0, **params: Any) -> Any:
    client = server.client(max_retries=max_retries)
    return client.chat.completions.create(**{"model": "gpt-test", "messages": USER, **params})


def test_plain_completion_echoes_by_default(server: FakeOpenAIServer) -> None:
    completion = ask(server)
    assert completion.choices[0].message.content == "You said: hello"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "gpt-test"
    assert completion.usage.total_tokens > 0
    assert server.requests == [{"model": "gpt-test", "messages": USER}]
    assert server.request_count == 1
    assert server.stats["answered"] == 1


def test_tool_calls(server: FakeOpenAIServer) -> None:
    server.set_script([THREE_CALLS])
    completion = ask(server)
    assert completion.choices[0].finish_reason == "tool_calls"
    tool_calls = [c.model_dump() for c in completion.choices[0].message.tool_calls]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in tool_calls] == [
        ("weather", '{"city": "Paris"}'),
        ("weather", '{"city": "Rome"}'),
        ("transfer_to_agent", "{}"),
    ]
    assert len({c["id"] for c in tool_calls}) == 3


def test_stream_with_several_tool_calls(server: FakeOpenAIServer) -> None:
    server.set_script([calls(*THREE_CALLS.tool_calls, content="Checking two cities now.")])
    stream = ask(server, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)

    assert chunks[0].choices[0].delta.role == "assistant"
    assert most_tool_call_deltas(chunks) >= 2
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    message = assemble(chunks)
    assert message["finish_reason"] == "tool_calls"
    assert message["content"] == "Checking two cities now."
    assert [(c["name"], c["arguments"]) for c in message["tool_calls"]] == [
        ("weather", '{"city": "Paris"}'),
        ("weather", '{"city": "Rome"}'),
        ("transfer_to_agent", "{}"),
    ]
    assert all(c["id"].startswith("call_") for c in message["tool_calls"])


def test_rate_limit_then_success_is_retried(server: FakeOpenAIServer) -> None:
    server.inject(Fault.status(429))
    completion = ask(server, max_retries=2)
    assert completion.choices[0].message.content == "You said: hello"
    assert server.request_count == 2
    assert server.stats["faults"] == 1 and server.stats["answered"] == 1


def test_rate_limit_error_shape(server: FakeOpenAIServer) -> None:
    server.inject(Fault.status(429, "slow down", retry_after=2))
    with pytest.raises(openai.RateLimitError) as caught:
        ask(server)
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "2"
    assert caught.value.response.headers["retry-after-ms"] == "2000"
    body = caught.value.response.json()["error"]
    assert body["message"] == "slow down"
    assert body["type"] == body["code"] == "rate_limit_exceeded"


def test_server_error_then_recovery(server: FakeOpenAIServer) -> None:
    server.inject(Fault.status(500))
    with pytest.raises(openai.InternalServerError):
        ask(server)
    assert ask(server).choices[0].message.content == "You said: hello"


def test_dropped_connection(server: FakeOpenAIServer) -> None:
    server.inject(Fault.drop())
    with pytest.raises(openai.APIConnectionError):
        ask(server)
    assert server.stats["faults"] == 1
    assert ask(server).choices[0].message.content == "You said: hello"


def test_malformed_bodies(server: FakeOpenAIServer) -> None:
    server.inject(Fault.malformed(), times=2)
    with pytest.raises(ValueError):  # the client cannot decode the JSON
        ask(server)
    with pytest.raises(ValueError):
        list(ask(server, stream=True))
    server.inject(Fault.malformed('{"object": "not a completion"}'))
    assert ask(server).choices is None
    assert server.stats["faults"] == 3


def test_faults_as_script_entries_and_retry_determinism(server: FakeOpenAIServer) -> None:
    def script(messages: list[dict[str, Any]], tools: Any) -> Reply:
        return THREE_CALLS

    server.set_script([Fault.drop(), THREE_CALLS, Fault.status(503), THREE_CALLS])
    first = ask(server, max_retries=1)  # dropped, retried
    second = ask(server, max_retries=1)  # 503, retried
    stats = server.stats
    assert (stats["requests"], stats["faults"], stats["answered"]) == (4, 2, 2)
    server.set_script(script)
    third = ask(server)
    ids = [[c.id for c in r.choices[0].message.tool_calls] for r in (first, second, third)]
    assert ids[0] == ids[1] == ids[2]  # the same request always gets the same ids


def test_latency(server: FakeOpenAIServer) -> None:
    server.set_latency(0.15)
    started = time.monotonic()
    ask(server)
    assert time.monotonic() - started >= 0.15

    started = time.monotonic()
    first_chunk = next(iter(ask(server, stream=True)))
    assert first_chunk.choices[0].delta.role == "assistant"
    assert time.monotonic() - started >= 0.15

    server.set_latency(0.0)
    server.inject(Fault.delay(0.1))
    started = time.monotonic()
    assert ask(server).choices[0].message.content == "You said: hello"
    assert time.monotonic() - started >= 0.1
    assert server.stats["faults"] == 0 and server.stats["answered"] == 3


async def test_200_concurrent_requests() -> None:
    with FakeOpenAIServer(latency=0.1) as server:
        async with server.async_client(max_retries=0) as client:

            async def one(n: int) -> str | None:
                messages = [{"role": "user", "content": f"number {n}"}]
                completion = await client.chat.completions.create(model="m", messages=messages)
                return completion.choices[0].message.content

            answers = await asyncio.gather(*(one(n) for n in range(200)))
        assert answers == [f"You said: number {n}" for n in range(200)]
        assert server.request_count == 200
        assert server.stats["max_in_flight"] > 1


def test_control_endpoints_and_keep_alive(server: FakeOpenAIServer) -> None:
    client = server.client(max_retries=0)
    for _ in range(3):
        client.chat.completions.create(model="m", messages=USER)
    assert server.stats["connections"] == 1  # one kept-alive connection

    assert [m.id for m in client.models.list()] == ["fake-model"]
    stats = httpx.get(f"{server.url}/_fake/stats").json()
    assert stats["requests"] == stats["answered"] == 3
    assert len(httpx.get(f"{server.url}/_fake/requests").json()["requests"]) == 3

    missing = httpx.get(f"{server.url}/v1/nope")
    assert missing.status_code == 404
    assert set(missing.json()["error"]) >= {"message", "type", "code"}
    bad = httpx.post(f"{server.base_url}/chat/completions", content=b"{not json")
    assert bad.status_code == 400 and "Invalid request body" in bad.json()["error"]["message"]

    assert httpx.post(f"{server.url}/_fake/reset").json()["requests"] == 0
    assert server.requests == []


def test_exhausted_script(server: FakeOpenAIServer) -> None:
    server.set_script([text("only one")])
    ask(server)
    with pytest.raises(openai.BadRequestError, match="exhausted: it has 1 entries"):
        ask(server)
    assert server.stats["errors"] == 1


def test_stop_closes_pending_requests() -> None:
    server = FakeOpenAIServer(latency=30).start()
    failures: list[BaseException] = []

    def call() -> None:
        try:
            ask(server)
        except openai.APIConnectionError as exc:
            failures.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 10
    while server.stats["in_flight"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    caller.join(10)
    assert time.monotonic() - started < 5
    assert len(failures) == 1
    server.stop()  # idempotent
