"""The `@tool` decorator: options for one tool function, checked when the function is defined."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

from ..guardrails import as_guardrail
from ..tools import TOOL_SPEC_ATTR, ToolSpec, tool_name

__all__ = ["tool"]

F = TypeVar("F", bound=Callable[..., Any])

# What the OpenAI API accepts as a function name.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def describe_callable(func: Any) -> str:
    """`module.qualname` of a callable, for error messages."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if qualname is None:
        return repr(func)
    return f"{module}.{qualname}" if module else str(qualname)


def check_tool_name(name: str, func: Any) -> None:
    """Raise `ValueError` unless `name` is a function name the OpenAI API accepts."""
    if not _TOOL_NAME.fullmatch(name):
        raise ValueError(
            f"Tool name {name!r} of {describe_callable(func)} is not valid: a tool name is 1 to 64 "
            "letters, digits, '_' or '-'. Give the tool a valid name with @tool(name=...)."
        )


def _check_options(
    name: str | None,
    description: str | None,
    timeout: float | None,
    retries: int,
    needs_approval: bool,
) -> None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"@tool(name=...) must be a string, got {type(name).__name__}")
    if description is not None and not isinstance(description, str):
        raise TypeError(
            f"@tool(description=...) must be a string, got {type(description).__name__}"
        )
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(
                f"@tool(timeout=...) must be a number of seconds or None, got {timeout!r}"
            )
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(
                f"@tool(timeout=...) must be a positive number of seconds, got {timeout!r}; "
                "use None for no time limit"
            )
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise TypeError(f"@tool(retries=...) must be an integer, got {retries!r}")
    if retries < 0:
        raise ValueError(f"@tool(retries=...) must be 0 or more, got {retries}")
    if not isinstance(needs_approval, bool):
        raise TypeError(f"@tool(needs_approval=...) must be True or False, got {needs_approval!r}")


def _attach(func: F, spec: ToolSpec) -> F:
    if isinstance(func, (staticmethod, classmethod)):
        raise TypeError(
            f"@tool must be applied to the function itself: put @{type(func).__name__} above "
            "@tool, not below it."
        )
    if not callable(func):
        hint = " (to name the tool, write @tool(name=...))" if isinstance(func, str) else ""
        raise TypeError(f"@tool decorates a function, got {type(func).__name__} {func!r}{hint}")
    try:
        setattr(func, TOOL_SPEC_ATTR, spec)
    except (AttributeError, TypeError) as e:
        raise TypeError(
            f"@tool cannot attach options to {describe_callable(func)} "
            f"({type(func).__name__} objects take no attributes): wrap it in a def and decorate "
            "that."
        ) from e
    try:
        check_tool_name(tool_name(func), func)
    except ValueError:
        delattr(func, TOOL_SPEC_ATTR)
        raise
    return func


@overload
def tool(func: F, /) -> F: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retries: int = 0,
    needs_approval: bool = False,
    guardrails: Sequence[Any] = (),
) -> Callable[[F], F]: ...


def tool(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retries: int = 0,
    needs_approval: bool = False,
    guardrails: Sequence[Any] = (),
) -> F | Callable[[F], F]:
    """Mark a function as a tool, with options; usable bare (`@tool`) or called (`@tool(...)`).

    The function itself is returned, unchanged and still callable as before (sync or `async def`);
    only a `durable_swarm.tools.ToolSpec` is attached to it, which `Agent(functions=[...])` and
    the tool executor read. The schema the model sees comes from the signature's type hints and
    the docstring (Google-style `Args:` or `:param x:` lines describe the parameters).

    Args:
        name: the name offered to the model (default: the function's `__name__`).
        description: the description offered to the model (default: the docstring).
        timeout: seconds one attempt may take before the model gets an error message instead
            (not retried); the call itself is not stopped (see `ToolSpec.timeout`).
        retries: how many more times a call that raised is tried before it becomes an error.
        needs_approval: the run pauses before each call until a person approves or rejects it.
        guardrails: guardrails of this tool (functions, agents or `guardrails.Guardrail`s),
            checked with the agent's `tool_guardrails`: on the arguments before the tool runs,
            or on its result (`@guardrail(when="after")`); see `durable_swarm.guardrails`.

    Options are checked here, so a mistake fails when the module is imported, not mid-run.
    Applying `@tool` again to the same function replaces its options.
    """
    _check_options(name, description, timeout, retries, needs_approval)
    spec = ToolSpec(
        name=name,
        description=description,
        timeout=None if timeout is None else float(timeout),
        retries=retries,
        needs_approval=needs_approval,
        guardrails=tuple(as_guardrail(g) for g in guardrails),
    )
    if func is None:
        return lambda f: _attach(f, spec)
    return _attach(func, spec)
