"""durable-swarm: OpenAI Swarm's API on durable DBOS workflows.

`Swarm` runs in memory exactly as OpenAI's Swarm does; `DurableSwarm` runs every conversation as a
durable workflow, so a killed process resumes from its last finished model or tool call.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from .chat import ChatResult, initiate_swarm_chat
from .durable import DurableSwarm, JsonSerializer, RunHandle, RunInfo
from .errors import (
    AgentNotFoundError,
    BudgetExceededError,
    DatabaseUnavailableError,
    DuplicateAgentError,
    DurableSwarmError,
    MCPServerUnavailableError,
    ModelCallError,
    ModelResponseError,
    NonJsonValueError,
    RunError,
    RunNotFoundError,
    ToolResultNotSerializableError,
    ToolUnavailableError,
)
from .handoffs import (
    AFTER_WORK,
    ON_CONDITION,
    AfterWork,
    AfterWorkOption,
    ContextExpression,
    ContextExpressionError,
    OnCondition,
    OnContextCondition,
    UpdateSystemMessage,
)
from .human import AskUser, ask_user
from .planning import TodoItem, create_durable_agent
from .swarm import Swarm
from .toolkit import FileTools, MCPTools, ShellTool, Skill, skill, tool
from .types import Agent, Response, Result, SwarmAgent, SwarmResult
from .usage import Budget, Usage

try:
    __version__: str = _version("durable-swarm")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AFTER_WORK",
    "ON_CONDITION",
    "AfterWork",
    "AfterWorkOption",
    "Agent",
    "AgentNotFoundError",
    "AskUser",
    "Budget",
    "BudgetExceededError",
    "ChatResult",
    "ContextExpression",
    "ContextExpressionError",
    "DatabaseUnavailableError",
    "DuplicateAgentError",
    "DurableSwarm",
    "DurableSwarmError",
    "FileTools",
    "JsonSerializer",
    "MCPServerUnavailableError",
    "MCPTools",
    "ModelCallError",
    "ModelResponseError",
    "NonJsonValueError",
    "OnCondition",
    "OnContextCondition",
    "Response",
    "Result",
    "RunError",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "ShellTool",
    "Skill",
    "Swarm",
    "SwarmAgent",
    "SwarmResult",
    "TodoItem",
    "ToolResultNotSerializableError",
    "ToolUnavailableError",
    "UpdateSystemMessage",
    "Usage",
    "ask_user",
    "create_durable_agent",
    "initiate_swarm_chat",
    "skill",
    "tool",
]
