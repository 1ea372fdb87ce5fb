"""Runtimes perform the loop's effects; drivers feed their results back into the loop.

A runtime has one narrow interface: `call_model`, `call_tool`, `wait_for_input`, `record`,
`list_tools` (and `chunks` for streamed model calls), each with an async twin prefixed `a`.
`InMemoryRuntime` is what `Swarm` uses; the durable runtime (`durable_swarm.durable`) makes each
a DBOS step or a durable wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from . import model
from .human import Decision
from .loop import ListTools, Loop, ModelCall, ToolCall, Transition, WaitForInput, turn_loop
from .subagents import delegation_task, final_answer, is_delegation
from .tools import (
    ToolOutcome,
    execute_tool,
    execute_tool_async,
    tool_message,
    tool_spec,
    unknown_tool,
)
from .types import Response
from .util import debug_print


def ask_terminal(prompt: str) -> str:
    """The default way to ask the person in memory: the terminal's `input()`."""
    return input(f"{prompt}\n> " if prompt else "> ")


class InMemoryRuntime:
    """Performs effects directly: the model through `client`, tools in this process, questions
    through `input_fn` (the terminal by default), approvals through `approve_fn` (by default a
    y/n question through `input_fn`). Transitions are kept in `transitions`."""

    def __init__(
        self,
        client: Any,
        input_fn: Callable[[str], str] | None = None,
        approve_fn: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.client = client
        self.input_fn = input_fn or ask_terminal
        self.approve_fn = approve_fn
        self.transitions: list[dict[str, Any]] = []

    def wait_for_input(self, effect: WaitForInput) -> Any:
        """Ask the person; an approval is a `Decision` as JSON."""
        if effect.kind != "approval" or effect.call is None:
            return self.input_fn(effect.prompt)
        if self.approve_fn is not None:
            verdict = self.approve_fn(effect.call)
            return (
                verdict.to_json()
                if isinstance(verdict, Decision)
                else Decision(bool(verdict)).to_json()
            )
        function = effect.call["function"]
        answer = self.input_fn(f"Approve {function['name']}({function['arguments']})? [y/N]")
        return Decision(answer.strip().lower() in ("y", "yes")).to_json()

    async def await_input(self, effect: WaitForInput) -> Any:
        """`wait_for_input` for async code (runs in a thread)."""
        return await asyncio.to_thread(self.wait_for_input, effect)

    def record(self, effect: Transition) -> None:
        """Keep a transition."""
        self.transitions.append(effect.to_json())

    async def arecord(self, effect: Transition) -> None:
        """`record` for async code."""
        self.record(effect)

    def list_tools(self, effect: ListTools) -> list[dict[str, Any]]:
        """The tool list of an MCP server (any `ToolSource`), asked now."""
        return effect.source.list_tools()

    async def alist_tools(self, effect: ListTools) -> list[dict[str, Any]]:
        """`list_tools` for async code."""
        return await effect.source.alist_tools()

    def call_model(self, effect: ModelCall) -> dict[str, Any]:
        """One model call; returns the assistant message dict."""
        sender = effect.agent.name
        completion = model.create(self.client, effect.request, sender=sender)
        return model.completion_message(completion, sender)

    async def acall_model(self, effect: ModelCall) -> dict[str, Any]:
        """`call_model` for async code."""
        sender = effect.agent.name
        completion = await model.acreate(self.client, effect.request, sender=sender)
        return model.completion_message(completion, sender)

    def chunks(self, effect: ModelCall) -> Iterator[Any]:
        """The chunks of a streamed model call."""
        return model.stream_chunks(self.client, effect.request, sender=effect.agent.name)

    def achunks(self, effect: ModelCall) -> AsyncIterator[Any]:
        """`chunks` for async code."""
        return model.astream_chunks(self.client, effect.request, sender=effect.agent.name)

    def call_tool(self, effect: ToolCall) -> ToolOutcome:
        """One tool call; model mistakes come back as an error message, never an exception."""
        _debug_tool(effect)
        if effect.function is None:
            return unknown_tool(effect.call, effect.context_variables)
        if is_delegation(effect.function):
            return self._delegate(effect, effect.function)
        return execute_tool(effect.function, effect.call, effect.context_variables)

    async def acall_tool(self, effect: ToolCall) -> ToolOutcome:
        """`call_tool` for async code."""
        _debug_tool(effect)
        if effect.function is None:
            return unknown_tool(effect.call, effect.context_variables)
        if is_delegation(effect.function):
            return await asyncio.to_thread(self._delegate, effect, effect.function)
        return await execute_tool_async(effect.function, effect.call, effect.context_variables)

    def _delegate(self, effect: ToolCall, function: Callable[..., Any]) -> ToolOutcome:
        """Run a sub-agent on its task with this runtime's client, in memory."""
        task, error = delegation_task(function, effect.call)
        if error is not None or task is None:
            return ToolOutcome(error or {}, effect.context_variables)
        child = InMemoryRuntime(self.client, self.input_fn, self.approve_fn)
        loop = turn_loop(tool_spec(function).delegate, [{"role": "user", "content": task}])
        answer = final_answer(drive(loop, child).messages)
        return ToolOutcome(tool_message(effect.call, answer), effect.context_variables)


def _debug_tool(effect: ToolCall) -> None:
    name = effect.call["function"]["name"]
    if effect.function is None:
        debug_print(effect.debug, f"Tool {name} not found in function map.")
    else:
        args = effect.call["function"].get("arguments")
        debug_print(effect.debug, f"Processing tool call: {name} with arguments {args}")


_SYNC = {
    ModelCall: "call_model",
    ToolCall: "call_tool",
    WaitForInput: "wait_for_input",
    Transition: "record",
    ListTools: "list_tools",
}
_ASYNC = {
    ModelCall: "acall_model",
    ToolCall: "acall_tool",
    WaitForInput: "await_input",
    Transition: "arecord",
    ListTools: "alist_tools",
}


def drive(loop: Loop, runtime: Any) -> Response:
    """Run `loop` to the end, performing each effect with `runtime`."""
    result: Any = None
    while True:
        try:
            effect = loop.send(result)
        except StopIteration as stop:
            return stop.value
        result = getattr(runtime, _SYNC[type(effect)])(effect)


async def adrive(loop: Loop, runtime: Any) -> Response:
    """`drive` for async code."""
    result: Any = None
    while True:
        try:
            effect = loop.send(result)
        except StopIteration as stop:
            return stop.value
        result = await getattr(runtime, _ASYNC[type(effect)])(effect)


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
            result = getattr(runtime, _SYNC[type(effect)])(effect)


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
            result = await getattr(runtime, _ASYNC[type(effect)])(effect)
