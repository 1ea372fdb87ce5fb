"""Sub-agents: an agent used as a tool by another agent.

`agent.as_tool()` gives a tool `delegate_to_<agent>(task)`; calling it runs `agent` on the task
as a run of its own and returns its final answer to the caller. In a `DurableSwarm` each
delegation is a child workflow with its own run id and history (`<parent>-sub<N>`): the
sub-agents a message asks for start together (fan-out) and are joined in call order, a crash
resumes parent and children independently, and cancelling the parent cancels its children.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .tools import TOOL_SPEC_ATTR, ToolSpec, parse_arguments, tool_message, tool_spec

__all__ = ["delegation", "delegation_task", "final_answer", "is_delegation"]


def delegation(agent: Any, name: str | None = None, description: str | None = None) -> Any:
    """The tool that delegates a task to `agent` (what `Agent.as_tool` returns)."""

    def delegate(task: str) -> str:
        from .swarm import Swarm

        response = Swarm().run(agent, [{"role": "user", "content": task}])
        return final_answer(response.messages)

    slug = re.sub(r"[^A-Za-z0-9_-]", "_", agent.name).lower()
    delegate.__name__ = delegate.__qualname__ = name or f"delegate_to_{slug}"
    delegate.__doc__ = description or (
        f"Delegate a task to the sub-agent {agent.name}, which works on it on its own and "
        "returns its answer.\n\nArgs:\n    task: what the sub-agent must do, with every detail "
        "it needs (it does not see this conversation)."
    )
    setattr(delegate, TOOL_SPEC_ATTR, ToolSpec(name=delegate.__name__, delegate=agent))
    return delegate


def is_delegation(function: Callable[..., Any] | None) -> bool:
    """Whether `function` hands its task to a sub-agent."""
    return function is not None and tool_spec(function).delegate is not None


def delegation_task(
    function: Callable[..., Any], call: dict[str, Any]
) -> tuple[str | None, dict[str, Any] | None]:
    """The task of a delegation call, or (None, the error tool message for the model)."""
    try:
        args = parse_arguments(function, call["function"].get("arguments") or "")
    except ValueError as e:
        name = call["function"]["name"]
        text = f"Error: invalid arguments for tool {name}: {e}. Call it again with valid arguments."
        return None, tool_message(call, text)
    return str(args.get("task", "")), None


def final_answer(messages: list[dict[str, Any]]) -> str:
    """A sub-agent's answer: the content of its last assistant message."""
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return ""
