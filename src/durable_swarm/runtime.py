"""Runtimes perform the loop's effects; drivers feed their results back into the loop.

A runtime has one narrow interface, one method per effect: `call_model`, `call_tool`,
`wait_for_input`, `record`, `list_tools`, `check_guardrail` and `summarize` for `drive`, and
their async twins `acall_model`, `acall_tool`, `await_input`, `arecord`, `alist_tools`,
`acheck_guardrail` and `asummarize` (plus `aparallel`, for input guardrails asked with the first
model call) for `adrive` (the protocols `Runtime` and `AsyncRuntime`; `perform` and `aperform`
dispatch an effect to its method; in sync code `perform` runs a `Parallel` effect's parts in
threads);
the streaming drivers read model calls from `chunks` / `achunks` instead. `InMemoryRuntime` is
what `Swarm` uses and has them all; the durable runtime (`durable_swarm.durable`) has the async
methods only (its workflow runs on an event loop) and makes each effect a DBOS step or a durable
wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

from . import guardrails, model, tracing
from ._response import Response
from .compaction import Summarize
from .errors import DurableSwarmError
from .guardrails import CheckGuardrail, Parallel
from .human import Decision
from .loop import (
    Effect,
    ListTools,
    Loop,
    ModelCall,
    RunRequest,
    ToolInvocation,
    Transition,
    WaitForInput,
    turn_loop,
)
from .subagents import delegation_task, final_answer, is_delegation
from .tools import (
    ToolOutcome,
    execute_tool,
    execute_tool_async,
    tool_message,
    tool_spec,
    unknown_tool,
)
from .usage import Prices, Tally, Usage, call_cost
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
        prices: Prices | None = None,
    ) -> None:
        self.client = client
        self.input_fn = input_fn or ask_terminal
        self.approve_fn = approve_fn
        self.prices = prices
        self.transitions: list[dict[str, Any]] = []
        self.tally = Tally()
        self.trace: tracing.Run | None = None  # the run's span, when tracing is on
        self.compactor: Callable[[list[dict[str, Any]]], str] | None = None
        self.compaction: tuple[int, str] | None = None  # the latest: (cut, summary)

    def count(self, effect: ModelCall, reported: dict[str, Any] | None) -> float | None:
        """Count a model call's reported usage (and its price) against this run; returns the
        call's price in USD (None if unknown)."""
        model_name = effect.request.get("model")
        cost = call_cost(model_name, reported, self.prices)
        self.tally.add(effect.agent.name, Usage.of_call(reported, cost))
        return cost

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
        """Keep a transition (an event on the run's span when traced)."""
        self.transitions.append(effect.to_json())
        if self.trace is not None:
            self.trace.handoff(effect.to_json())

    async def arecord(self, effect: Transition) -> None:
        """`record` for async code."""
        self.record(effect)

    def list_tools(self, effect: ListTools) -> list[dict[str, Any]]:
        """The tool list of an MCP server (any `ToolSource`), asked now."""
        return effect.source.list_tools()

    async def alist_tools(self, effect: ListTools) -> list[dict[str, Any]]:
        """`list_tools` for async code."""
        return await effect.source.alist_tools()

    def summarize(self, effect: Summarize) -> str:
        """A summary of the older messages: the `compactor` function's, else the model's."""
        if self.compactor is not None:
            summary = str(self.compactor(effect.messages))
        else:
            call = ModelCall(effect.agent, effect.request)
            summary = str(self.call_model(call).get("content") or "")
        self.compaction = (effect.upto, summary)
        return summary

    async def asummarize(self, effect: Summarize) -> str:
        """`summarize` for async code."""
        if self.compactor is not None:
            summary = str(await asyncio.to_thread(self.compactor, effect.messages))
        else:
            call = ModelCall(effect.agent, effect.request)
            summary = str((await self.acall_model(call)).get("content") or "")
        self.compaction = (effect.upto, summary)
        return summary

    def call_model(self, effect: ModelCall) -> dict[str, Any]:
        """One model call; returns the assistant message dict."""
        sender = effect.agent.name
        with tracing.chat(self.trace, effect.request) as span:
            completion = model.create(self.client, effect.request, sender=sender)
            return self._answer(effect, completion, span)

    def _answer(self, effect: ModelCall, completion: Any, span: Any) -> dict[str, Any]:
        message = model.completion_message(completion, effect.agent.name)
        usage = model.usage_of(completion)
        cost = self.count(effect, usage)
        tracing.record_completion(span, completion, usage, cost, message)
        return message

    async def acall_model(self, effect: ModelCall) -> dict[str, Any]:
        """`call_model` for async code."""
        sender = effect.agent.name
        with tracing.chat(self.trace, effect.request) as span:
            completion = await model.acreate(self.client, effect.request, sender=sender)
            return self._answer(effect, completion, span)

    def chunks(self, effect: ModelCall) -> Iterator[Any]:
        """The chunks of a streamed model call."""
        return model.stream_chunks(self.client, effect.request, sender=effect.agent.name)

    def achunks(self, effect: ModelCall) -> AsyncIterator[Any]:
        """`chunks` for async code."""
        return model.astream_chunks(self.client, effect.request, sender=effect.agent.name)

    def call_tool(self, effect: ToolInvocation) -> ToolOutcome:
        """One tool call; model mistakes come back as an error message, never an exception."""
        _debug_tool(effect)
        if effect.function is not None and is_delegation(effect.function):
            return self._delegate(effect, effect.function)
        with tracing.tool(self.trace, effect.call) as span:
            if effect.function is None:
                outcome = unknown_tool(effect.call, effect.context_variables)
            else:
                outcome = execute_tool(effect.function, effect.call, effect.context_variables)
            tracing.tool_result(span, outcome.message)
        return outcome

    async def acall_tool(self, effect: ToolInvocation) -> ToolOutcome:
        """`call_tool` for async code."""
        _debug_tool(effect)
        function = effect.function
        if function is not None and is_delegation(function):
            return await asyncio.to_thread(self._delegate, effect, function)
        with tracing.tool(self.trace, effect.call) as span:
            if function is None:
                outcome = unknown_tool(effect.call, effect.context_variables)
            else:
                outcome = await execute_tool_async(function, effect.call, effect.context_variables)
            tracing.tool_result(span, outcome.message)
        return outcome

    def check_guardrail(self, effect: CheckGuardrail) -> dict[str, Any]:
        """A guardrail's verdict, asked now (a guardrail agent runs with this client)."""
        return guardrails.check(effect, self._ask_agent)

    async def acheck_guardrail(self, effect: CheckGuardrail) -> dict[str, Any]:
        """`check_guardrail` for async code."""

        async def ask(agent: Any, messages: list[dict[str, Any]]) -> str:
            return await asyncio.to_thread(self._ask_agent, agent, messages)

        return await guardrails.acheck(effect, ask)

    async def aparallel(self, effect: Parallel) -> list[Any]:
        """Perform `effect`'s parts at the same time; every part finishes before this returns."""
        results = await asyncio.gather(
            *(aperform(self, e) for e in effect.effects), return_exceptions=True
        )
        return _unless_failed(results)

    def _ask_agent(self, agent: Any, messages: list[dict[str, Any]]) -> str:
        """Run a guardrail agent on `messages` with this runtime's client; its final answer."""
        child = InMemoryRuntime(self.client, _no_person(agent), prices=self.prices)
        response = drive(turn_loop(RunRequest(agent, messages)), child)
        self.tally.merge(child.tally)
        return final_answer(response.messages)

    def _delegate(self, effect: ToolInvocation, function: Callable[..., Any]) -> ToolOutcome:
        """Run a sub-agent on its task with this runtime's client, in memory."""
        task, error = delegation_task(function, effect.call)
        if error is not None or task is None:
            return ToolOutcome(error or {}, effect.context_variables)
        child = InMemoryRuntime(self.client, self.input_fn, self.approve_fn, self.prices)
        delegate = tool_spec(function).delegate
        if self.trace is not None:  # the sub-agent's run span is a child of this run's
            child.trace = tracing.start_run(delegate.name, traceparent=self.trace.traceparent)
        loop = turn_loop(RunRequest(delegate, [{"role": "user", "content": task}]))
        answer = final_answer(drive(loop, child).messages)
        self.tally.merge(child.tally)
        return ToolOutcome(tool_message(effect.call, answer), effect.context_variables)


def _no_person(agent: Any) -> Callable[[str], str]:
    """The `input_fn` of a guardrail agent's run: nobody answers it."""

    def refuse(prompt: str) -> str:
        raise DurableSwarmError(
            f"Guardrail agent {agent.name!r} asked the person ({prompt!r:.80}); a guardrail "
            "agent must answer with its verdict on its own. Remove tools that ask or need "
            "approval from it."
        )

    return refuse


def _unless_failed(results: list[Any]) -> list[Any]:
    """`results` of effects performed together, or the first exception one of them raised."""
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _perform_parallel(runtime: Runtime, effect: Parallel) -> list[Any]:
    """A `Parallel` effect in sync code: the first part here, the others in threads."""
    first, *others = effect.effects
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(others)) as pool:
        futures = [pool.submit(perform, runtime, e) for e in others]
        try:
            head: Any = perform(runtime, first)
        except BaseException as e:
            head = e
        rest = [f.exception() or f.result() for f in futures]
    return _unless_failed([head, *rest])


def _debug_tool(effect: ToolInvocation) -> None:
    name = effect.call["function"]["name"]
    if effect.function is None:
        debug_print(effect.debug, f"Tool {name} not found in function map.")
    else:
        args = effect.call["function"].get("arguments")
        debug_print(effect.debug, f"Processing tool call: {name} with arguments {args}")


class Runtime(Protocol):
    """What `drive` and `drive_stream` need: one method per effect of the loop (sync)."""

    def call_model(self, effect: ModelCall) -> dict[str, Any]: ...
    def call_tool(self, effect: ToolInvocation) -> ToolOutcome: ...
    def wait_for_input(self, effect: WaitForInput) -> Any: ...
    def record(self, effect: Transition) -> None: ...
    def list_tools(self, effect: ListTools) -> list[dict[str, Any]]: ...
    def summarize(self, effect: Summarize) -> str: ...
    def check_guardrail(self, effect: CheckGuardrail) -> dict[str, Any]: ...


class AsyncRuntime(Protocol):
    """What `adrive` and `adrive_stream` need: `Runtime`'s methods, async."""

    async def acall_model(self, effect: ModelCall) -> dict[str, Any]: ...
    async def acall_tool(self, effect: ToolInvocation) -> ToolOutcome: ...
    async def await_input(self, effect: WaitForInput) -> Any: ...
    async def arecord(self, effect: Transition) -> None: ...
    async def alist_tools(self, effect: ListTools) -> list[dict[str, Any]]: ...
    async def asummarize(self, effect: Summarize) -> str: ...
    async def acheck_guardrail(self, effect: CheckGuardrail) -> dict[str, Any]: ...
    async def aparallel(self, effect: Parallel) -> list[Any]: ...


def perform(runtime: Runtime, effect: Effect) -> Any:
    """Perform one effect of the loop with `runtime`; its result goes back into the loop."""
    if isinstance(effect, ModelCall):
        return runtime.call_model(effect)
    if isinstance(effect, ToolInvocation):
        return runtime.call_tool(effect)
    if isinstance(effect, WaitForInput):
        return runtime.wait_for_input(effect)
    if isinstance(effect, Transition):
        return runtime.record(effect)
    if isinstance(effect, Summarize):
        return runtime.summarize(effect)
    if isinstance(effect, CheckGuardrail):
        return runtime.check_guardrail(effect)
    if isinstance(effect, Parallel):
        return _perform_parallel(runtime, effect)
    return runtime.list_tools(effect)


async def aperform(runtime: AsyncRuntime, effect: Effect) -> Any:
    """`perform` for async code."""
    if isinstance(effect, ModelCall):
        return await runtime.acall_model(effect)
    if isinstance(effect, ToolInvocation):
        return await runtime.acall_tool(effect)
    if isinstance(effect, WaitForInput):
        return await runtime.await_input(effect)
    if isinstance(effect, Transition):
        return await runtime.arecord(effect)
    if isinstance(effect, Summarize):
        return await runtime.asummarize(effect)
    if isinstance(effect, CheckGuardrail):
        return await runtime.acheck_guardrail(effect)
    if isinstance(effect, Parallel):
        return await runtime.aparallel(effect)
    return await runtime.alist_tools(effect)


@contextlib.contextmanager
def _run_span(runtime: Any) -> Iterator[None]:
    """End the runtime's run span (if traced) when the run ends, with its error if it fails."""
    trace: tracing.Run | None = getattr(runtime, "trace", None)
    if trace is None:
        yield
        return
    try:
        yield
    except GeneratorExit:  # a stream's reader stopped early: the run just ends
        trace.end()
        raise
    except BaseException as e:
        trace.end(e)
        raise
    trace.end()


def _finish(response: Response, runtime: Any) -> Response:
    """The loop's response with the run's usage, when the runtime counted it."""
    tally = getattr(runtime, "tally", None)
    if isinstance(tally, Tally):
        response.usage, response.usage_by_agent = tally.total, dict(tally.by_agent)
    return response


def drive(loop: Loop, runtime: Runtime) -> Response:
    """Run `loop` to the end, performing each effect with `runtime`."""
    result: Any = None
    with _run_span(runtime):
        while True:
            try:
                effect = loop.send(result)
            except StopIteration as stop:
                return _finish(stop.value, runtime)
            result = perform(runtime, effect)


async def adrive(loop: Loop, runtime: AsyncRuntime) -> Response:
    """`drive` for async code."""
    result: Any = None
    with _run_span(runtime):
        while True:
            try:
                effect = loop.send(result)
            except StopIteration as stop:
                return _finish(stop.value, runtime)
            result = await aperform(runtime, effect)


def _streamed_answer(
    runtime: Any, effect: ModelCall, assembler: model.StreamAssembler, span: Any
) -> dict[str, Any]:
    message = assembler.message()
    cost = runtime.count(effect, assembler.usage)
    tracing.record_completion(span, assembler.last_chunk, assembler.usage, cost, message)
    return message


def drive_stream(loop: Loop, runtime: Any) -> Iterator[dict[str, Any]]:
    """Run `loop`, yielding Swarm's stream events; the last one is `{"response": Response}`."""
    result: Any = None
    with _run_span(runtime):
        while True:
            try:
                effect = loop.send(result)
            except StopIteration as stop:
                yield {"response": _finish(stop.value, runtime)}
                return
            if not isinstance(effect, ModelCall):
                result = perform(runtime, effect)
                continue
            assembler = model.StreamAssembler(effect.agent.name)
            with tracing.chat(runtime.trace, effect.request) as span:
                yield {"delim": "start"}
                for chunk in runtime.chunks(effect):
                    if (event := assembler.feed(chunk)) is not None:
                        yield event
                yield {"delim": "end"}
                result = _streamed_answer(runtime, effect, assembler, span)


async def adrive_stream(loop: Loop, runtime: Any) -> AsyncIterator[dict[str, Any]]:
    """`drive_stream` for async code."""
    result: Any = None
    with _run_span(runtime):
        while True:
            try:
                effect = loop.send(result)
            except StopIteration as stop:
                yield {"response": _finish(stop.value, runtime)}
                return
            if not isinstance(effect, ModelCall):
                result = await aperform(runtime, effect)
                continue
            assembler = model.StreamAssembler(effect.agent.name)
            with tracing.chat(runtime.trace, effect.request) as span:
                yield {"delim": "start"}
                async for chunk in runtime.achunks(effect):
                    if (event := assembler.feed(chunk)) is not None:
                        yield event
                yield {"delim": "end"}
                result = _streamed_answer(runtime, effect, assembler, span)
