"""ScriptedClient / AsyncScriptedClient and the script machinery they share with the server."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage

from durable_swarm.testing import (
    AsyncScriptedClient,
    Fault,
    Reply,
    ScriptedClient,
    ScriptError,
    ScriptExhaustedError,
    ToolCall,
    calls,
    echo,
    text,
)

from ._helpers import assemble, most_tool_call_deltas

USER = [{"role": "user", "content": "What is the weather in Paris and in Rome?"}]
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
THREE_CALLS = calls(
    ToolCall("weather", {"city": "Paris"}),
    ToolCall("weather", '{"city": "Rome"'),  # malformed JSON is sent verbatim
    ToolCall("transfer_to_agent", id="call_explicit"),
)


def test_text_reply_is_a_real_chat_completion() -> None:
    client = ScriptedClient([text("Hello there, traveller."), "plain strings are text too"])
    messages = [dict(m) for m in USER]

    first = client.chat.completions.create(model="gpt-test", messages=messages)
    messages.append({"role": "assistant", "content": "mutated after the call"})
    second = client.chat.completions.create(model="gpt-test", messages=messages)

    assert isinstance(first, ChatCompletion)
    assert first.model == "gpt-test"
    assert first.id.startswith("chatcmpl-")
    choice = first.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Hello there, traveller."
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert first.usage is not None
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    assert isinstance(second, ChatCompletion)
    assert second.choices[0].message.content == "plain strings are text too"
    assert client.call_count == 2
    assert client.requests[0] == {"model": "gpt-test", "messages": USER}  # deep-copied


def test_tool_call_reply() -> None:
    client = ScriptedClient([THREE_CALLS])
    completion = client.chat.completions.create(model="m", messages=USER, tools=TOOLS)

    assert isinstance(completion, ChatCompletion)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    tool_calls = [c.model_dump() for c in choice.message.tool_calls or []]
    assert [(c["type"], c["function"]["name"]) for c in tool_calls] == [
        ("function", "weather"),
        ("function", "weather"),
        ("function", "transfer_to_agent"),
    ]
    arguments = [c["function"]["arguments"] for c in tool_calls]
    assert arguments == ['{"city": "Paris"}', '{"city": "Rome"', "{}"]
    assert tool_calls[0]["id"].startswith("call_") and tool_calls[1]["id"].startswith("call_")
    assert tool_calls[0]["id"] != tool_calls[1]["id"]
    assert tool_calls[2]["id"] == "call_explicit"


def test_ids_are_derived_from_the_request() -> None:
    def ids(messages: list[dict[str, Any]]) -> list[str]:
        completion = ScriptedClient([THREE_CALLS]).chat.completions.create(
            model="m", messages=messages
        )
        assert isinstance(completion, ChatCompletion)
        return [completion.id] + [c.id for c in completion.choices[0].message.tool_calls or []]

    assert ids(USER) == ids(json.loads(json.dumps(USER)))  # a retried request: same ids
    assert ids(USER) != ids([*USER, {"role": "user", "content": "and Oslo?"}])


def test_usage_can_be_overridden() -> None:
    client = ScriptedClient(
        [Reply(content="x", usage={"prompt_tokens": 7, "completion_tokens": 3})]
    )
    completion = client.chat.completions.create(model="m", messages=USER)
    assert isinstance(completion, ChatCompletion)
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.total_tokens) == (7, 10)


def test_stream_sends_openai_style_chunks() -> None:
    reply = calls(*THREE_CALLS.tool_calls, content="Let me check the weather for you.")
    client = ScriptedClient([reply])
    stream = client.chat.completions.create(
        model="m", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    assert not isinstance(stream, ChatCompletion)
    with stream:
        chunks = list(stream)

    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 3
    assert most_tool_call_deltas(chunks) >= 2  # the Swarm merge bug would lose calls here
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    message = assemble(chunks)
    assert message["content"] == "Let me check the weather for you."
    assert [(c["name"], c["arguments"]) for c in message["tool_calls"]] == [
        ("weather", '{"city": "Paris"}'),
        ("weather", '{"city": "Rome"'),
        ("transfer_to_agent", "{}"),
    ]
    assert message["tool_calls"][2]["id"] == "call_explicit"

    blocking = ScriptedClient([reply]).chat.completions.create(model="m", messages=USER)
    assert isinstance(blocking, ChatCompletion)
    tool_calls = blocking.choices[0].message.tool_calls or []
    assert [c["id"] for c in message["tool_calls"]] == [c.id for c in tool_calls]


def test_stream_without_usage_option_has_no_usage_chunk() -> None:
    stream = ScriptedClient(["one two three"]).chat.completions.create(
        model="m", messages=USER, stream=True
    )
    assert not isinstance(stream, ChatCompletion)
    chunks = list(stream)
    assert all(chunk.usage is None and chunk.choices for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert assemble(chunks)["content"] == "one two three"


async def test_async_client() -> None:
    client = AsyncScriptedClient([text("async hello"), THREE_CALLS])
    completion = await client.chat.completions.create(model="m", messages=USER)
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].message.content == "async hello"

    stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
    assert not isinstance(stream, ChatCompletion)
    async with stream:
        chunks = [chunk async for chunk in stream]
    assert [c["name"] for c in assemble(chunks)["tool_calls"]] == [
        "weather",
        "weather",
        "transfer_to_agent",
    ]
    assert client.call_count == 2


def test_function_script_decides_from_the_request() -> None:
    seen: list[tuple[list[dict[str, Any]], Any]] = []

    def script(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
        seen.append((messages, tools))
        if messages[-1]["role"] == "tool":
            return text(f"The tool said {messages[-1]['content']}")
        return calls(ToolCall("weather", {"city": "Paris"}))

    client = ScriptedClient(script)
    first = client.chat.completions.create(
        model="m", messages=USER, tools=TOOLS, parallel_tool_calls=openai.NOT_GIVEN
    )
    again = client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    assert isinstance(first, ChatCompletion) and isinstance(again, ChatCompletion)
    assert first.choices[0].message == again.choices[0].message  # same request, same answer
    assistant = first.choices[0].message
    assert isinstance(assistant, ChatCompletionMessage)
    tool_calls = assistant.tool_calls or []
    history = [
        *USER,
        assistant,  # pydantic objects in messages are accepted, as by the real client
        {"role": "tool", "tool_call_id": tool_calls[0].id, "content": "sunny"},
    ]
    final = client.chat.completions.create(model="m", messages=history, tools=TOOLS)
    assert isinstance(final, ChatCompletion)
    assert final.choices[0].message.content == "The tool said sunny"
    assert seen[0] == (USER, TOOLS)
    assert seen[2][0][1]["tool_calls"][0]["id"] == tool_calls[0].id
    assert "parallel_tool_calls" not in client.requests[0]  # NOT_GIVEN is dropped


def test_exhausted_script_says_so() -> None:
    client = ScriptedClient(["a", "b"])
    client.chat.completions.create(model="m", messages=USER)
    client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(ScriptExhaustedError, match=r"exhausted: it has 2 entries.*request #3"):
        client.chat.completions.create(model="m", messages=USER)
    assert client.call_count == 3


def test_faults_need_the_server_but_delays_work() -> None:
    with pytest.raises(ScriptError, match="need FakeOpenAIServer"):
        ScriptedClient([Fault.status(429)]).chat.completions.create(model="m", messages=USER)

    client = ScriptedClient([Fault.delay(0.05), "after a pause"])
    started = time.monotonic()
    completion = client.chat.completions.create(model="m", messages=USER)
    assert time.monotonic() - started >= 0.05
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].message.content == "after a pause"


def test_bad_scripts_are_rejected() -> None:
    with pytest.raises(TypeError):
        ScriptedClient("not a script")
    with pytest.raises(ScriptError, match="Reply, str or Fault"):
        ScriptedClient([42])
    with pytest.raises(ScriptError, match="raised"):
        ScriptedClient(lambda m, t: 1 / 0).chat.completions.create(model="m", messages=USER)


def test_echo_script() -> None:
    reply = echo([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], None)
    assert reply == Reply(content="You said: hi")
