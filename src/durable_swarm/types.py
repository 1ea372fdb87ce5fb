"""Swarm's data types: `Agent`, `Result`, `Response` (and the OpenAI types Swarm re-exports).

Every `Agent` registers itself by name when it is created (see `durable_swarm._registry`), so a
durable run recovered in a new process can find the agents it was using.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion_message_tool_call import (
    ChatCompletionMessageToolCall,
    Function,
)
from pydantic import BaseModel, ConfigDict

from . import _registry

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
    instructions: str | Callable[..., str] = "You are a helpful agent."
    functions: list[AgentFunction] = []
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True

    def model_post_init(self, __context: Any) -> None:
        _registry.register(self)


class Response(BaseModel):
    """What `run` returns: the new messages, the agent the run ended on, the updated context."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages: list[Any] = []
    agent: Any | None = None
    context_variables: dict[str, Any] = {}


class Result(BaseModel):
    """What an agent function may return.

    Attributes:
        value: the text the model reads as the tool's result.
        agent: an agent to hand the conversation over to, if any.
        context_variables: updates merged into the run's context variables.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    value: str = ""
    agent: Any | None = None
    context_variables: dict[str, Any] = {}
