"""Sub-agents: an agent used as a tool by another agent, and how the runtimes run one.

`agent.as_tool()` gives a tool `delegate_to_<agent>(task)`; calling it in a run runs `agent` on
the task as a run of its own and returns its final answer to the caller. In a `DurableSwarm` each
delegation is a child workflow with its own run id and history (`<parent>-sub<N>`): the
sub-agents a message asks for start together (fan-out) and are joined in call order, a crash
resumes parent and children independently, and cancelling the parent cancels its children.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._messages import final_answer, tool_message
from .tools import parse_arguments, tool_spec

__all__ = ["delegation_task", "final_answer", "is_delegation"]


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
