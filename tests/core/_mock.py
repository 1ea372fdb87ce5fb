"""Test doubles built from real `openai` objects, in the style of Swarm's own tests.

A client is a `MagicMock` whose `chat.completions.create` returns scripted `ChatCompletion`
objects (or, for streamed calls, lists of `ChatCompletionChunk`), so every test can also inspect
the exact parameters each call received.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from unittest.mock import MagicMock

from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionMessageToolCall,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import (
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)
from openai.types.chat.chat_completion_message_tool_call import Function


def tool_call(
    name: str, args: dict[str, Any] | None = None, *, id: str = "call_1", raw: str | None = None
) -> ChatCompletionMessageToolCall:
    """A tool call of `name`; `raw` overrides the JSON arguments text (to send malformed ones)."""
    arguments = raw if raw is not None else json.dumps(args or {})
    return ChatCompletionMessageToolCall(
        id=id, type="function", function=Function(name=name, arguments=arguments)
    )


def completion(
    content: str | None = "", tool_calls: Iterable[ChatCompletionMessageToolCall] = ()
) -> ChatCompletion:
    """A chat completion whose only choice is an assistant message."""
    calls = list(tool_calls) or None
    return ChatCompletion(
        id="chatcmpl-mock",
        created=1234567890,
        model="gpt-4o",
        object="chat.completion",
        choices=[
            Choice(
                index=0,
                finish_reason="tool_calls" if calls else "stop",
                message=ChatCompletionMessage(role="assistant", content=content, tool_calls=calls),
            )
        ],
    )


def calling(*calls: ChatCompletionMessageToolCall, content: str | None = None) -> ChatCompletion:
    """A completion whose message calls tools."""
    return completion(content, calls)


def chunk(delta: ChoiceDelta, finish_reason: str | None = None) -> ChatCompletionChunk:
    """One stream chunk carrying `delta`."""
    return ChatCompletionChunk(
        id="chatcmpl-mock",
        created=1234567890,
        model="gpt-4o",
        object="chat.completion.chunk",
        choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish_reason)],
    )


def delta_call(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> ChoiceDeltaToolCall:
    """A piece of a streamed tool call."""
    return ChoiceDeltaToolCall(
        index=index,
        id=id,
        type="function" if id else None,
        function=ChoiceDeltaToolCallFunction(name=name, arguments=arguments),
    )


def text_stream(*pieces: str) -> list[ChatCompletionChunk]:
    """The chunks of a streamed assistant message made of `pieces`."""
    first = chunk(ChoiceDelta(role="assistant", content=""))
    rest = [chunk(ChoiceDelta(content=piece)) for piece in pieces]
    return [first, *rest, chunk(ChoiceDelta(), "stop")]


def tool_stream(*calls: ChatCompletionMessageToolCall) -> list[ChatCompletionChunk]:
    """The chunks of a streamed message calling `calls`: ids and names, then split arguments."""
    chunks = [chunk(ChoiceDelta(role="assistant", content=None))]
    for index, call in enumerate(calls):
        chunks.append(
            chunk(
                ChoiceDelta(
                    tool_calls=[
                        delta_call(index, id=call.id, name=call.function.name, arguments="")
                    ]
                )
            )
        )
        arguments = call.function.arguments
        middle = len(arguments) // 2
        for part in (arguments[:middle], arguments[middle:]):
            chunks.append(chunk(ChoiceDelta(tool_calls=[delta_call(index, arguments=part)])))
    return [*chunks, chunk(ChoiceDelta(), "tool_calls")]


def mock_client(*responses: Any) -> MagicMock:
    """A client whose `chat.completions.create` returns `responses` in order.

    A single response is returned for every call (`return_value`); several are returned one per
    call (`side_effect`), and a call past the end fails the test.
    """
    client = MagicMock()
    if len(responses) == 1:
        client.chat.completions.create.return_value = responses[0]
    else:
        client.chat.completions.create.side_effect = list(responses)
    return client


def requests(client: Any) -> list[dict[str, Any]]:
    """The keyword arguments of every `chat.completions.create` call made on a mock client."""
    return [call.kwargs for call in client.chat.completions.create.call_args_list]


def dumped(message: ChatCompletionMessage, sender: str) -> dict[str, Any]:
    """The plain dict a run appends for `message` spoken by `sender`."""
    return {**json.loads(message.model_dump_json()), "sender": sender}
