"""Runtimes perform the loop's effects; drivers feed their results back into the loop.

A runtime has one narrow interface: `call_model`, `call_tool` (and `chunks` for streamed model
calls), each with an async twin. `InMemoryRuntime` is what `Swarm` uses; the durable runtime
(`durable_swarm.durable`) wraps the same calls in DBOS steps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from . import model
from .loop import Loop, ModelCall, ToolCall
from .tools import ToolOutcome, execute_tool, execute_tool_async, unknown_tool
from .types import Response
from .util import debug_print


class InMemoryRuntime:
    """Performs effects directly: the model through `client`, tools in this process."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def call_model(self, effect: ModelCall) -> dict[str, Any]:
        """One model call; returns the assistant message dict."""
        completion = model.create(self.client, effect.request)
        return model.completion_message(completion, effect.agent.name)

    async def acall_model(self, effect: ModelCall) -> dict[str, Any]:
        """`call_model` for async code."""
        completion = await model.acreate(self.client, effect.request)
        return model.completion_message(completion, effect.agent.name)

    def chunks(self, effect: ModelCall) -> Iterator[Any]:
        """The chunks of a streamed model call."""
        return model.stream_chunks(self.client, effect.request)

    def achunks(self, effect: ModelCall) -> AsyncIterator[Any]:
        """`chunks` for async code."""
        return model.astream_chunks(self.client, effect.request)

    def call_tool(self, effect: ToolCall) -> ToolOutcome:
        """One tool call; model mistakes come back as an error message, never an exception."""
        _debug_tool(effect)
        if effect.function is None:
            return unknown_tool(effect.call, effect.context_variables)
        return execute_tool(effect.function, effect.call, effect.context_variables)

    async def acall_tool(self, effect: ToolCall) -> ToolOutcome:
        """`call_tool` for async code."""
        _debug_tool(effect)
        if effect.function is None:
            return unknown_tool(effect.call, effect.context_variables)
        return await execute_tool_async(effect.function, effect.call, effect.context_variables)


def _debug_tool(effect: ToolCall) -> None:
    name = effect.call["function"]["name"]
    if effect.function is None:
        debug_print(effect.debug, f"Tool {name} not found in function map.")
    else:
        args = effect.call["function"].get("arguments")
        debug_print(effect.debug, f"Processing tool call: {name} with arguments {args}")


def drive(loop: Loop, runtime: Any) -> Response:
    """Run `loop` to the end, performing each effect with `runtime`."""
    result: Any = None
    while True:
        try:
            effect = loop.send(result)
        except StopIteration as stop:
            return stop.value
        if isinstance(effect, ModelCall):
            result = runtime.call_model(effect)
        else:
            result = runtime.call_tool(effect)


async def adrive(loop: Loop, runtime: Any) -> Response:
    """`drive` for async code."""
    result: Any = None
    while True:
        try:
            effect = loop.send(result)
        except StopIteration as stop:
            return stop.value
        if isinstance(effect, ModelCall):
            result = await runtime.acall_model(effect)
        else:
            result = await runtime.acall_tool(effect)


def drive_stream(loop: Loop, runtime: Any) -> Iterator[dict[str, Any]]:
    """Run `loop`, yielding Swarm's stream events; the last one is `{"response": Response}`."""
    result: Any = None
    while True:
        try:
            effect = loop.send(result)
        except StopIteration as stop:
            yield {"response": stop.value}
            return
        if isinstance(effect, ModelCall):
            assembler = model.StreamAssembler(effect.agent.name)
            yield {"delim": "start"}
            for chunk in runtime.chunks(effect):
                if (event := assembler.feed(chunk)) is not None:
                    yield event
            yield {"delim": "end"}
            result = assembler.message()
        else:
            result = runtime.call_tool(effect)


async def adrive_stream(loop: Loop, runtime: Any) -> AsyncIterator[dict[str, Any]]:
    """`drive_stream` for async code."""
    result: Any = None
    while True:
        try:
            effect = loop.send(result)
        except StopIteration as stop:
            yield {"response": stop.value}
            return
        if isinstance(effect, ModelCall):
            assembler = model.StreamAssembler(effect.agent.name)
            yield {"delim": "start"}
            async for chunk in runtime.achunks(effect):
                if (event := assembler.feed(chunk)) is not None:
                    yield event
            yield {"delim": "end"}
            result = assembler.message()
        else:
            result = await runtime.acall_tool(effect)
