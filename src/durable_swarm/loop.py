"""The turn loop: one deterministic generator shared by every runtime.

The loop decides the next action from the run's state and *yields* each effect it needs
(`ModelCall`, `ToolCall`) to a driver, which performs it through a runtime and sends the result
back. The loop itself does no I/O, reads no clock and no randomness, so the in-memory runtime
(`Swarm`) and the durable one (`DurableSwarm`, where each effect is a DBOS step) cannot drift apart:
replaying the recorded step outputs through the same loop rebuilds the same state.
"""

from __future__ import annotations

import copy
import inspect
from collections import defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from .tools import ToolOutcome, model_tool_schema, tool_name
from .types import Response
from .util import debug_print


@dataclass
class ModelCall:
    """Effect: ask the model for the next assistant message (`request` is the create() params)."""

    agent: Any
    request: dict[str, Any]
    debug: bool = False


@dataclass
class ToolCall:
    """Effect: run one tool call of the assistant's message against the run's context."""

    agent: Any
    call: dict[str, Any]
    function: Callable[..., Any] | None
    context_variables: dict[str, Any] = field(default_factory=dict)
    debug: bool = False


Effect = ModelCall | ToolCall
Loop = Generator[Effect, Any, Response]


def _instructions(agent: Any, context_variables: dict[str, Any]) -> str:
    instructions = agent.instructions
    if not callable(instructions):
        return str(instructions)
    try:
        takes_context = bool(inspect.signature(instructions).parameters)
    except (TypeError, ValueError):
        takes_context = True
    if takes_context:
        return str(instructions(defaultdict(str, context_variables)))
    return str(instructions())


def build_request(
    agent: Any,
    history: list[dict[str, Any]],
    context_variables: dict[str, Any],
    model_override: str | None,
    stream: bool,
) -> dict[str, Any]:
    """The `chat.completions.create` parameters for `agent`'s next turn (as Swarm sends them)."""
    tools = [model_tool_schema(f) for f in agent.functions]
    request: dict[str, Any] = {
        "model": model_override or agent.model,
        "messages": [
            {"role": "system", "content": _instructions(agent, context_variables)},
            *history,
        ],
        "tools": tools or None,
        "tool_choice": agent.tool_choice,
        "stream": stream,
    }
    if tools:
        request["parallel_tool_calls"] = agent.parallel_tool_calls
    return request


def turn_loop(
    agent: Any,
    messages: list[dict[str, Any]],
    context_variables: dict[str, Any] | None = None,
    model_override: str | None = None,
    stream: bool = False,
    debug: bool = False,
    max_turns: float = float("inf"),
    execute_tools: bool = True,
) -> Loop:
    """Swarm's run loop as a generator of effects; returns the `Response`.

    `max_turns` counts the messages this run appends (Swarm's behaviour, which evals rely on).
    Several tool calls in one message run in order; the last handoff wins.
    """
    active = agent
    context = copy.deepcopy(context_variables or {})
    history = copy.deepcopy(list(messages))
    init_len = len(history)

    while len(history) - init_len < max_turns and active:
        request = build_request(active, history, context, model_override, stream)
        debug_print(debug, "Getting chat completion for...:", request["messages"])
        message: dict[str, Any] = yield ModelCall(active, request, debug)
        debug_print(debug, "Received completion:", message)
        history.append(message)
        if not message.get("tool_calls") or not execute_tools:
            debug_print(debug, "Ending turn.")
            break

        functions = {tool_name(f): f for f in active.functions}
        handoff = None
        for call in message["tool_calls"]:
            function = functions.get(call["function"]["name"])
            outcome: ToolOutcome = yield ToolCall(active, call, function, context, debug)
            history.append(outcome.message)
            context = outcome.context_variables
            handoff = outcome.agent or handoff
        if handoff is not None:
            active = handoff

    return Response(messages=history[init_len:], agent=active, context_variables=context)
