"""Swarm's data types: `Agent`, `Result`, `Response` (and the OpenAI types Swarm re-exports).

`AgentFunction` is the type of an agent's functions: any callable returning a string, an
`Agent`, a `Result` or a dict.

Every `Agent` registers itself by name when it is created (see `durable_swarm._registry`), so a
durable run recovered in a new process can find the agents it was using.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from . import _registry
from ._lazy import warn_moved
from ._response import Response
from .tools import TOOL_SPEC_ATTR, ToolSource, ToolSpec

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessage
    from openai.types.chat.chat_completion_message_tool_call import (
        ChatCompletionMessageToolCall,
        Function,
    )

__all__ = [
    "Agent",
    "AgentFunction",
    "ChatCompletionMessage",
    "ChatCompletionMessageToolCall",
    "Function",
    "Response",
    "Result",
]

AgentFunction = Callable[..., Union[str, "Agent", dict, Any]]


class Agent(BaseModel):
    """An agent: a name, a model, instructions and the functions it may call.

    `instructions` is a string, or a callable that receives the run's `context_variables`
    (missing keys read as `""`) or takes no argument. A function that returns another `Agent`
    hands the conversation over to it. Agents are mutable (append to `functions` freely);
    unknown keyword arguments are ignored, as in Swarm.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="ignore")

    name: str = "Agent"
    model: str = "gpt-4o"
    instructions: str | Callable[..., str] | Any = "You are a helpful agent."
    functions: list[AgentFunction | ToolSource] = []
    """Tool functions, and tool sources such as `toolkit.MCPTools` (an MCP server's tools)."""
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    handoffs: list[Any] = []
    """Handoff rules: `OnCondition`, `OnContextCondition` and at most one `AfterWork`."""
    skills: list[Any] = []
    """Skills (`durable_swarm.toolkit.Skill`): instruction fragments bundled with tools."""
    update_agent_state_before_reply: list[Any] = []
    """AG2's hook list; an `UpdateSystemMessage` here re-renders the instructions every turn."""
    input_guardrails: list[Any] = []
    """Checks of the user's input when a run starts with this agent (see
    `durable_swarm.guardrails`): functions, agents or `Guardrail`s; one that trips ends the run
    with `GuardrailTripped`."""
    output_guardrails: list[Any] = []
    """Checks of the final answer when this agent gives it; one that trips ends the run with
    `GuardrailTripped`."""
    tool_guardrails: list[Any] = []
    """Checks of each of this agent's tool calls, before the tool runs (its arguments) or after
    (its result, `@guardrail(when="after")`); one that trips answers the model with a rejection
    and the run goes on."""

    @field_validator("input_guardrails", "output_guardrails", "tool_guardrails", mode="before")
    @classmethod
    def _check_guardrails(cls, value: Any) -> list[Any]:
        from .guardrails import as_guardrail

        items = list(value) if isinstance(value, (list, tuple)) else [value]
        return [as_guardrail(item) for item in items]

    output_type: Any = None
    """The type of the agent's final answer (a pydantic model, a dataclass, a `TypedDict`, or a
    type such as `int` or `list[str]`): the model is asked for it, the answer is validated and
    `Response.output` holds the typed value (see `durable_swarm.output`). None: a text answer,
    as in Swarm."""
    output_mode: Literal["tool", "json_schema"] = "tool"
    """How `output_type` is asked for: a `final_answer` tool (any server that calls tools), or
    the server's `response_format` JSON schema (servers with OpenAI's structured outputs)."""
    output_retries: int = Field(default=2, ge=0)
    """How many times an answer that does not validate is sent back to the model, with what did
    not validate, before the run fails with `OutputValidationError`."""

    @field_validator("handoffs", mode="before")
    @classmethod
    def _check_handoffs(cls, value: Any) -> list[Any]:
        from .handoffs import split_handoffs

        items = list(value) if isinstance(value, (list, tuple)) else [value]
        split_handoffs(items)
        return items

    def model_post_init(self, __context: Any) -> None:
        if self.output_type is not None:  # a type pydantic cannot validate fails here
            from .output import shape_of

            shape_of(self.output_type, self.name)
        if self.skills:
            from .toolkit import skill_tools

            functions = [f for f in self.functions if not isinstance(f, ToolSource)]
            skill_tools(self.skills, functions)  # tool-name clashes fail here, not mid-run
        _registry.register(self)

    def register_hand_off(self, hand_to: Any) -> None:
        """Add handoff rules (AG2's spelling): one rule or a list of `OnCondition`,
        `OnContextCondition` and `AfterWork` (a new `AfterWork` replaces the old one)."""
        from .handoffs import AfterWork, split_handoffs

        conditions, after_work = split_handoffs(hand_to)
        kept = [h for h in self.handoffs if not (after_work and isinstance(h, AfterWork))]
        self.handoffs = [*kept, *conditions, *([after_work] if after_work else [])]
        _registry.register(self)  # the functions the new rules name

    def as_tool(self, name: str | None = None, description: str | None = None) -> Any:
        """This agent as a tool for another agent: `delegate_to_<name>(task)` runs it on the
        task as a sub-agent and returns its answer.

        In a run, the runtime runs the sub-agent itself (with the run's client; in durable runs
        as a child workflow, see `durable_swarm.subagents`); called directly, the tool runs the
        agent on a new `Swarm()`.
        """
        agent = self

        def delegate(task: str) -> str:
            from .subagents import final_answer
            from .swarm import Swarm

            response = Swarm().run(agent, [{"role": "user", "content": task}])
            return final_answer(response.messages)

        slug = re.sub(r"[^A-Za-z0-9_-]", "_", self.name).lower()
        delegate.__name__ = delegate.__qualname__ = name or f"delegate_to_{slug}"
        delegate.__doc__ = description or (
            f"Delegate a task to the sub-agent {self.name}, which works on it on its own and "
            "returns its answer.\n\nArgs:\n    task: what the sub-agent must do, with every "
            "detail it needs (it does not see this conversation)."
        )
        setattr(delegate, TOOL_SPEC_ATTR, ToolSpec(name=delegate.__name__, delegate=self))
        return delegate


class Result(BaseModel):
    """What an agent function may return.

    Attributes:
        value: the text the model reads as the tool's result.
        agent: where the conversation goes next, if anywhere: an agent, an agent's name, or an
            `AfterWorkOption` (`TERMINATE` ends the run, `REVERT_TO_USER` waits for the person).
        context_variables: updates merged into the run's context variables.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    value: str = ""
    agent: Any | None = None
    context_variables: dict[str, Any] = {}


# Swarm's re-exports of OpenAI's message types, imported on first use: `openai` takes longer to
# import than the rest of the package, and a run may never need it (a scripted client).
_OPENAI_TYPES = {
    "ChatCompletionMessage": "openai.types.chat",
    "ChatCompletionMessageToolCall": "openai.types.chat.chat_completion_message_tool_call",
    "Function": "openai.types.chat.chat_completion_message_tool_call",
}


def __getattr__(name: str) -> Any:
    """OpenAI's message types (imported on first use); AG2's `SwarmAgent` and `SwarmResult`,
    moved to `durable_swarm.ag2` (with a warning)."""
    if name in _OPENAI_TYPES:
        value = getattr(importlib.import_module(_OPENAI_TYPES[name]), name)
        globals()[name] = value
        return value
    if name in ("SwarmAgent", "SwarmResult"):
        # By name, as the top level does for moved names: `ag2` builds on this module, so
        # this module does not import it (no import cycle).
        warn_moved(__name__, name, "durable_swarm.ag2")
        return getattr(importlib.import_module("durable_swarm.ag2"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
