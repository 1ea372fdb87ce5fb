"""durable-swarm: OpenAI Swarm's API on durable DBOS workflows.

`Swarm` runs in memory exactly as OpenAI's Swarm does; `DurableSwarm` runs every conversation as a
durable workflow, so a killed process resumes from its last finished model or tool call.

The names below are imported when first used (PEP 562): `import durable_swarm` loads nothing
else, and in-memory use (`Swarm`, `Agent`) never loads DBOS or SQLAlchemy.
"""

import importlib as _importlib
import sys as _sys
import typing as _typing

from ._lazy import attribute_loader as _attribute_loader
from ._lazy import warn_moved as _warn_moved

if _typing.TYPE_CHECKING:
    from .chat import ChatResult, initiate_swarm_chat
    from .durable import DurableClient, DurableSwarm, RunHandle, RunInfo
    from .errors import (
        AgentNotFoundError,
        BudgetExceededError,
        ContextExpressionError,
        DatabaseUnavailableError,
        DecisionConflictError,
        DuplicateAgentError,
        DurableSwarmError,
        GuardrailTripped,
        MCPServerUnavailableError,
        ModelCallError,
        ModelResponseError,
        NonJsonValueError,
        OutputValidationError,
        RunCancelledError,
        RunError,
        RunNotFoundError,
        SessionBusyError,
        SessionNotFoundError,
        ToolResultNotSerializableError,
        ToolUnavailableError,
    )
    from .guardrails import Guardrail, GuardrailResult, guardrail
    from .handoffs import (
        AfterWork,
        AfterWorkOption,
        ContextExpression,
        OnCondition,
        OnContextCondition,
        UpdateSystemMessage,
    )
    from .human import AskUser, ask_user
    from .limits import ModelLimits
    from .planning import TodoItem, create_durable_agent
    from .sessions import SessionInfo
    from .swarm import Swarm
    from .toolkit import FileTools, MCPTools, ShellTool, Skill, skill, tool
    from .types import Agent, Response, Result
    from .usage import Budget, Usage

__all__ = [
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
    "DecisionConflictError",
    "DuplicateAgentError",
    "DurableClient",
    "DurableSwarm",
    "DurableSwarmError",
    "FileTools",
    "Guardrail",
    "GuardrailResult",
    "GuardrailTripped",
    "MCPServerUnavailableError",
    "MCPTools",
    "ModelCallError",
    "ModelLimits",
    "ModelResponseError",
    "NonJsonValueError",
    "OnCondition",
    "OnContextCondition",
    "OutputValidationError",
    "Response",
    "Result",
    "RunCancelledError",
    "RunError",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "SessionBusyError",
    "SessionInfo",
    "SessionNotFoundError",
    "ShellTool",
    "Skill",
    "Swarm",
    "TodoItem",
    "ToolResultNotSerializableError",
    "ToolUnavailableError",
    "UpdateSystemMessage",
    "Usage",
    "ask_user",
    "create_durable_agent",
    "guardrail",
    "initiate_swarm_chat",
    "skill",
    "tool",
]

# The module that defines each public name (the same as the imports above, for mypy).
_HOMES: dict[str, tuple[str, ...]] = {
    ".chat": ("ChatResult", "initiate_swarm_chat"),
    ".durable": ("DurableClient", "DurableSwarm", "RunHandle", "RunInfo"),
    ".errors": (
        "AgentNotFoundError",
        "BudgetExceededError",
        "ContextExpressionError",
        "DatabaseUnavailableError",
        "DecisionConflictError",
        "DuplicateAgentError",
        "DurableSwarmError",
        "GuardrailTripped",
        "MCPServerUnavailableError",
        "ModelCallError",
        "ModelResponseError",
        "NonJsonValueError",
        "OutputValidationError",
        "RunCancelledError",
        "RunError",
        "RunNotFoundError",
        "SessionBusyError",
        "SessionNotFoundError",
        "ToolResultNotSerializableError",
        "ToolUnavailableError",
    ),
    ".guardrails": ("Guardrail", "GuardrailResult", "guardrail"),
    ".handoffs": (
        "AfterWork",
        "AfterWorkOption",
        "ContextExpression",
        "OnCondition",
        "OnContextCondition",
        "UpdateSystemMessage",
    ),
    ".human": ("AskUser", "ask_user"),
    ".limits": ("ModelLimits",),
    ".planning": ("TodoItem", "create_durable_agent"),
    ".sessions": ("SessionInfo",),
    ".swarm": ("Swarm",),
    ".toolkit": ("FileTools", "MCPTools", "ShellTool", "Skill", "skill", "tool"),
    ".types": ("Agent", "Response", "Result"),
    ".usage": ("Budget", "Usage"),
}
_load = _attribute_loader(__name__, _HOMES)

# Names that left the top level; importing them warns and names the new place.
_MOVED = {
    "AFTER_WORK": "durable_swarm.ag2",
    "ON_CONDITION": "durable_swarm.ag2",
    "SwarmAgent": "durable_swarm.ag2",
    "SwarmResult": "durable_swarm.ag2",
    "JsonSerializer": "durable_swarm.durable",
}


def __getattr__(name: str) -> _typing.Any:
    """Import a public name's module on first use; warn about a name that moved."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            globals()[name] = version("durable-swarm")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            globals()[name] = "0+unknown"
        return globals()[name]
    new_module = _MOVED.get(name)
    if new_module is not None:
        # `from durable_swarm import X` asks twice (import's own `hasattr`, then the import):
        # the warning goes with the second, which points at the importing line.
        if "importlib" not in _sys._getframe(1).f_code.co_filename:
            _warn_moved(__name__, name, new_module)
        return getattr(_importlib.import_module(new_module), name)
    return _load(name)


def __dir__() -> list[str]:
    """The public names (`__all__`), as `dir(durable_swarm)` shows them."""
    return sorted({*__all__, "__version__"})
