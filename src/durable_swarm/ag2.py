"""AG2's swarm spellings: code written for AG2's swarm (`autogen.agentchat.contrib.swarm_agent`)
runs here with its imports pointed at this module.

* `SwarmAgent(name, system_message=...)`: an `Agent` whose `system_message` is its instructions.
* `SwarmResult(values=...)`: a `Result` that spells its text `values`.
* `ON_CONDITION`, `AFTER_WORK`: AG2's old names of `OnCondition` and `AfterWork`.

The handoff rules, `initiate_swarm_chat` and `ChatResult` are this package's own features; they
are importable from `durable_swarm` and, for convenience, from here as well.
"""

from __future__ import annotations

from typing import Any

from .chat import ChatResult, initiate_swarm_chat
from .handoffs import (
    AfterWork,
    AfterWorkOption,
    ContextExpression,
    OnCondition,
    OnContextCondition,
    UpdateSystemMessage,
)
from .types import Agent, Result

__all__ = [
    "AFTER_WORK",
    "ON_CONDITION",
    "AfterWork",
    "AfterWorkOption",
    "ChatResult",
    "ContextExpression",
    "OnCondition",
    "OnContextCondition",
    "SwarmAgent",
    "SwarmResult",
    "UpdateSystemMessage",
    "initiate_swarm_chat",
]

ON_CONDITION = OnCondition
AFTER_WORK = AfterWork


class SwarmAgent(Agent):
    """AG2's name for an agent: `system_message` is the instructions; other AG2 options that
    have no meaning here (such as `llm_config`) are ignored."""

    def __init__(self, name: str = "Agent", system_message: Any = None, **data: Any) -> None:
        if system_message is not None:
            data.setdefault("instructions", system_message)
        super().__init__(name=name, **data)


class SwarmResult(Result):
    """AG2's name for a `Result`; it spells the text `values`."""

    def __init__(self, values: str = "", **data: Any) -> None:
        data.setdefault("value", values)
        super().__init__(**data)
