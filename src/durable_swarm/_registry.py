"""The agent registry: every agent by name, with a fingerprint of its definition.

A live run uses the agent objects it meets. A run recovered in a new process only has names in
its log; the registry turns a name (and the fingerprint recorded with it) back into an agent.
Apps and tests define agents with the same name more than once: the fingerprint picks the right
one, and a definition that changed since the run was logged is used with a warning. Where a name
alone must pick an agent, two different definitions are an error that names both: among the
agents of one run (`unique_by_name`), and in the registry when no definition matches the run's
fingerprint (`resolve`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import warnings
from collections.abc import Iterable
from typing import Any

from .errors import AgentNotFoundError, DuplicateAgentError

_lock = threading.Lock()
_agents: dict[str, list[Any]] = {}
# Functions a run's log may name (a swarm-level after-work that chooses the next agent, a handoff
# rule's target): only those this process met itself, never imported from a name in the log.
_functions: dict[str, Any] = {}


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
    return _hash(
        agent.name,
        agent.model,
        _describe(agent.instructions),
        tuple(getattr(f, "__name__", repr(f)) for f in agent.functions),
        tuple(getattr(s, "name", repr(s)) for s in getattr(agent, "skills", None) or []),
    )


@functools.lru_cache(maxsize=1024)
def _hash(
    name: Any, model: Any, instructions: str, functions: tuple[str, ...], skills: tuple[str, ...]
) -> str:
    """The fingerprint of one definition (computed once per definition: every model call of a
    durable run names its agent by it)."""
    definition = {
        "name": name,
        "model": model,
        "instructions": instructions,
        "functions": list(functions),
        "skills": list(skills),
    }
    raw = json.dumps(definition, sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def describe(agent: Any) -> str:
    """One definition of an agent, for an error: its fingerprint, model, tools and instructions."""
    functions = [getattr(f, "__name__", repr(f)) for f in agent.functions]
    return (
        f"fingerprint {fingerprint(agent)} (model {agent.model!r}, functions {functions}, "
        f"instructions {_describe(agent.instructions)[:60]!r})"
    )


def _clash(name: str, first: Any, second: Any, where: str) -> DuplicateAgentError:
    return DuplicateAgentError(
        f"Two different agents are named {name!r} {where}: {describe(first)} and "
        f"{describe(second)}. A name must pick one agent: rename one of them."
    )


def unique_by_name(agents: Iterable[Any], where: str) -> dict[str, Any]:
    """`agents` by name; two different definitions under one name raise `DuplicateAgentError`
    naming both (the same definition twice is one agent)."""
    found: dict[str, Any] = {}
    for agent in agents:
        known = found.setdefault(agent.name, agent)
        if known is not agent and fingerprint(known) != fingerprint(agent):
            raise _clash(agent.name, known, agent, where)
    return found


def function_name(func: Any) -> str | None:
    """How the log names a module-level function (`module:qualname`); None for anything else."""
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
    if callable(func) and module and qualname and "<" not in qualname:
        return f"{module}:{qualname}"
    return None


def register_function(func: Any) -> str | None:
    """Remember a module-level function under `function_name(func)` (returned), so a run's log can
    name it; None (nothing remembered) for a lambda, a nested function or another callable."""
    name = function_name(func)
    if name is not None:
        with _lock:
            _functions[name] = func
    return name


def resolve_function(name: str, *, run_id: str | None = None) -> Any:
    """The function registered as `name`. Nothing is imported: a name this process never
    registered raises `AgentNotFoundError` (the run waits) with a message naming it."""
    with _lock:
        func = _functions.get(name)
    if func is None:
        where = f" by run {run_id!r}" if run_id else ""
        raise AgentNotFoundError(
            name,
            run_id=run_id,
            message=f"The function {name!r} is needed{where} but this process has not registered "
            "it, and names from a run's log are never imported. Define the agent whose handoff "
            "rule uses it, or start a run with after_work= set to it, in this process; the run "
            "waits and loses nothing until then.",
        )
    return func


def register(agent: Any) -> None:
    """Remember `agent` under its name, replacing an earlier agent with the same definition, and
    the functions its handoff rules name (see `register_function`)."""
    for rule in getattr(agent, "handoffs", None) or []:
        target = getattr(rule, "agent", None) or getattr(rule, "target", None)
        if callable(target):
            register_function(target)
    with _lock:
        mine = fingerprint(agent)
        others = [a for a in _agents.get(agent.name, []) if fingerprint(a) != mine]
        _agents[agent.name] = [*others, agent]


def resolve(name: str, fingerprint_: str | None = None, *, run_id: str | None = None) -> Any:
    """Return the agent registered as `name`, preferring one whose fingerprint matches.

    Raises `AgentNotFoundError` (naming the agent and the run) when no agent of that name was
    ever created in this process, and `DuplicateAgentError` (naming both) when several different
    definitions carry the name and none has the fingerprint asked for.
    """
    with _lock:
        candidates = list(_agents.get(name, []))
    if not candidates:
        raise AgentNotFoundError(name, run_id=run_id)
    if fingerprint_ is not None:
        for agent in reversed(candidates):
            if fingerprint(agent) == fingerprint_:
                return agent
    if len(candidates) > 1:
        where = f"in this process (needed by run {run_id!r})" if run_id else "in this process"
        raise _clash(name, candidates[-2], candidates[-1], where)
    if fingerprint_ is not None:
        warnings.warn(
            f"Agent {name!r} changed since run {run_id or '?'} was logged (fingerprint "
            f"{fingerprint_} is now {fingerprint(candidates[-1])}); continuing with its current "
            "definition.",
            stacklevel=2,
        )
    return candidates[-1]
