"""Swarm-compatible helpers: `function_to_json`, `debug_print`, `merge_chunk`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .tools import function_schema

__all__ = ["debug_print", "function_to_json", "merge_chunk", "merge_fields"]


def debug_print(debug: bool, *args: Any) -> None:
    """Print `args` with a timestamp when `debug` is true (Swarm's format)."""
    if not debug:
        return
    timestamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    message = " ".join(map(str, args))
    print(f"\033[97m[\033[90m{timestamp}\033[97m]\033[90m {message}\033[0m")


def merge_fields(target: dict[str, Any], source: dict[str, Any]) -> None:
    """Append the string fields of `source` to `target`, recursing into dicts."""
    for key, value in source.items():
        if isinstance(value, str):
            target[key] = (target.get(key) or "") + value
        elif isinstance(value, dict):
            merge_fields(target.setdefault(key, {}), value)


def merge_chunk(final_response: dict[str, Any], delta: dict[str, Any]) -> None:
    """Merge one streamed delta into the message being built.

    Unlike Swarm's version, every tool call of a chunk is merged, not only the first one.
    `final_response["tool_calls"]` is a mapping from the call's index to the call being built
    (a `defaultdict` as in Swarm, or a plain dict).
    """
    delta.pop("role", None)
    tool_calls = delta.pop("tool_calls", None) or []
    merge_fields(final_response, delta)
    calls = final_response.setdefault("tool_calls", {})
    for tool_call in tool_calls:
        tool_call = dict(tool_call)
        index = tool_call.pop("index")
        if index not in calls:
            calls[index] = {"function": {"arguments": "", "name": ""}, "id": "", "type": ""}
        merge_fields(calls[index], tool_call)


def function_to_json(func: Callable[..., Any]) -> dict[str, Any]:
    """The OpenAI tool schema of a Python function (Swarm's exact output for simple types).

    Richer annotations (`Optional[X]`, `list[str]`, `Literal`, `Enum`, pydantic models,
    `Annotated[X, "description"]`) get their proper JSON schema, and parameters documented in the
    docstring (`Args:` section or `:param x:`) get a description.
    """
    return function_schema(func)
