"""The agent registry: every agent by name, with a fingerprint of its definition.

A live run uses the agent objects it meets. A run recovered in a new process only has names in
its log; the registry turns a name (and the fingerprint recorded with it) back into an agent.
Apps and tests define agents with the same name more than once: the fingerprint picks the right
one, and a definition that changed since the run was logged is used with a warning.
"""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from typing import Any

from .errors import AgentNotFoundError

_lock = threading.Lock()
_agents: dict[str, list[Any]] = {}


def _callable_name(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    return f"{module}.{qualname}" if qualname else repr(obj)


def _describe(instructions: Any) -> str:
    """Instructions as text that is the same in every process (never a memory address)."""
    if isinstance(instructions, str):
        return instructions
    content = getattr(instructions, "content", None)  # UpdateSystemMessage
    if content is not None:
        return _describe(content)
    return _callable_name(instructions)


def fingerprint(agent: Any) -> str:
    """A short, stable hash of an agent's definition: instructions, function names, model."""
    definition = {
        "name": agent.name,
        "model": agent.model,
        "instructions": _describe(agent.instructions),
        "functions": [getattr(f, "__name__", repr(f)) for f in agent.functions],
        "skills": [getattr(s, "name", repr(s)) for s in getattr(agent, "skills", None) or []],
    }
    raw = json.dumps(definition, sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def register(agent: Any) -> None:
    """Remember `agent` under its name, replacing an earlier agent with the same definition."""
    with _lock:
        mine = fingerprint(agent)
        others = [a for a in _agents.get(agent.name, []) if fingerprint(a) != mine]
        _agents[agent.name] = [*others, agent]


def resolve(name: str, fingerprint_: str | None = None, *, run_id: str | None = None) -> Any:
    """Return the agent registered as `name`, preferring one whose fingerprint matches.

    Raises `AgentNotFoundError` (naming the agent and the run) when no agent of that name was
    ever created in this process.
    """
    with _lock:
        candidates = list(_agents.get(name, []))
    if not candidates:
        raise AgentNotFoundError(name, run_id=run_id)
    if fingerprint_ is not None:
        for agent in reversed(candidates):
            if fingerprint(agent) == fingerprint_:
                return agent
        warnings.warn(
            f"Agent {name!r} changed since run {run_id or '?'} was logged (fingerprint "
            f"{fingerprint_} is now {fingerprint(candidates[-1])}); continuing with its current "
            "definition.",
            stacklevel=2,
        )
    return candidates[-1]
