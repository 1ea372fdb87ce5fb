"""`Response`, what a run returns (re-exported by `durable_swarm.types`, Swarm's module for it).

It lives below the turn loop, which builds it, so the loop and the runtimes do not import
`types` (whose `Agent.as_tool` runs the loop: the two would import each other).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from .usage import Usage

__all__ = ["Response"]


class Response(BaseModel):
    """What `run` returns: the new messages, the agent the run ended on, the updated context.

    Beyond Swarm's fields: `usage`, the run's token usage and cost (`durable_swarm.usage.Usage`,
    sub-agents included), `usage_by_agent`, the same per agent name, and `output`, the typed
    final answer when the agent the run ended on has an `output_type` (None otherwise; the
    stored JSON value when read back where that agent is not defined, e.g. a thin client).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages: list[Any] = []
    agent: Any | None = None
    context_variables: dict[str, Any] = {}
    usage: Usage | None = None
    usage_by_agent: dict[str, Usage] = {}
    output: Any = None
