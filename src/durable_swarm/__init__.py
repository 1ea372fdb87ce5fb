"""durable-swarm: OpenAI Swarm's API on durable DBOS workflows.

`Swarm` runs in memory exactly as OpenAI's Swarm does; `DurableSwarm` runs every conversation as a
durable workflow, so a killed process resumes from its last finished model or tool call.
"""

from ._errors import (
    AgentNotFoundError,
    DatabaseUnavailableError,
    DurableSwarmError,
    ModelResponseError,
    RunNotFoundError,
    ToolResultNotSerializableError,
)
from .durable import DurableSwarm, JsonSerializer, RunError, RunHandle, RunInfo
from .swarm import Swarm
from .types import Agent, Response, Result

__all__ = [
    "Agent",
    "AgentNotFoundError",
    "DatabaseUnavailableError",
    "DurableSwarm",
    "DurableSwarmError",
    "JsonSerializer",
    "ModelResponseError",
    "Response",
    "Result",
    "RunError",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "Swarm",
    "ToolResultNotSerializableError",
]
