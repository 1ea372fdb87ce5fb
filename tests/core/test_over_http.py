"""Swarm with the real `openai` client over real HTTP, against the project's fake server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from durable_swarm import Agent, ModelResponseError, Swarm
from durable_swarm.testing import FakeOpenAIServer, Fault, ToolCall, calls, text

USER = [{"role": "user", "content": "What's the weather in Paris? Then hand me to Bob."}]


def weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


BOB = Agent(name="Bob", instructions="You are Bob.")


def transfer_to_bob() -> Agent:
    """Hand the conversation to Bob."""
    return BOB


ALICE = Agent(name="Alice", functions=[weather, transfer_to_bob])


def script(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
    """Alice checks the weather and hands over in one message; Bob answers."""
    if messages[0]["content"] == "You are Bob.":
        return text("Bob here: it is sunny in Paris.")
    return calls(ToolCall("weather", {"city": "Paris"}), ToolCall("transfer_to_bob"))


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(script) as server:
        yield server


def test_plain_run_with_tool_calls_and_handoff_over_http(server: FakeOpenAIServer) -> None:
    response = Swarm(server.client(max_retries=0)).run(ALICE, USER)

    assert [m["role"] for m in response.messages] == ["assistant", "tool", "tool", "assistant"]
    assert response.messages[1]["content"] == "Sunny in Paris"
    assert json.loads(response.messages[2]["content"]) == {"assistant": "Bob"}
    assert response.messages[-1]["sender"] == "Bob"
    assert response.agent is BOB
    assert server.request_count == 2
    sent = server.requests[0]
    assert [t["function"]["name"] for t in sent["tools"]] == ["weather", "transfer_to_bob"]
    assert sent["parallel_tool_calls"] is True


def test_streamed_run_with_tool_calls_and_handoff_over_http(server: FakeOpenAIServer) -> None:
    events = list(Swarm(server.client(max_retries=0)).run(ALICE, USER, stream=True))

    assert [e for e in events if "delim" in e] == [{"delim": "start"}, {"delim": "end"}] * 2
    senders = [e["sender"] for e in events if e.get("sender")]
    assert senders == ["Alice", "Bob"]
    response = events[-1]["response"]
    first = response.messages[0]
    assert [c["function"]["name"] for c in first["tool_calls"]] == ["weather", "transfer_to_bob"]
    assert response.messages[-1]["content"] == "Bob here: it is sunny in Paris."
    assert response.agent is BOB


def test_429_then_success_is_retried_by_the_openai_client(server: FakeOpenAIServer) -> None:
    server.inject(Fault.status(429), times=1)

    response = Swarm(server.client(max_retries=2)).run(ALICE, USER)

    assert response.agent is BOB
    assert server.stats["faults"] == 1
    assert server.request_count == 3  # the 429, its retry, then Bob's turn


def test_malformed_response_gives_a_clear_error(server: FakeOpenAIServer) -> None:
    server.set_script([Fault.malformed('{"id": "x", "object": "chat.completion"}')])

    with pytest.raises(ModelResponseError) as caught:
        Swarm(server.client(max_retries=0)).run(ALICE, USER)

    message = str(caught.value)
    assert "Alice" in message and "OPENAI_BASE_URL" in message


def test_truncated_json_body_gives_a_clear_error(server: FakeOpenAIServer) -> None:
    server.set_script([Fault.malformed()])

    with pytest.raises(ModelResponseError) as caught:
        Swarm(server.client(max_retries=0)).run(ALICE, USER)

    assert "not valid JSON" in str(caught.value) and "Alice" in str(caught.value)


def test_truncated_json_in_a_stream_gives_a_clear_error(server: FakeOpenAIServer) -> None:
    server.set_script([Fault.malformed()])

    with pytest.raises(ModelResponseError):
        list(Swarm(server.client(max_retries=0)).run(ALICE, USER, stream=True))
