"""What a durable run may store: JSON values, checked where they enter, with limits on size.

A run's log is JSON (see `_log`), so every value a run stores must be JSON: `None`, bools,
numbers (finite), strings, lists and dicts with string keys. Tuples are accepted and stored as
lists (they come back as lists). Anything else (a `datetime`, `NaN`/infinity, a set, bytes, an
object, an integer key) is refused where it enters, with the key that holds it, before anything
is stored: run inputs raise `NonJsonValueError`; a tool's result or its changes to
`context_variables` become an error observation for the model, with the context as it was.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ..errors import DurableSwarmError, NonJsonValueError

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "MAX_DEPTH", "check_input", "check_messages", "json_problem"]

# The longest tool result (or user message) a run stores: past it, the model reads an error.
DEFAULT_MAX_RESULT_CHARS = 4_000_000
# How deeply lists and dicts may nest in a stored value.
MAX_DEPTH = 100


def json_problem(value: Any, where: str) -> str | None:
    """None if `value` is JSON that a run can store, else what is wrong and at which key, e.g.
    `context_variables['when'] is a datetime (2024-01-01 00:00:00), which is not JSON`."""
    pending: deque[tuple[Any, str, int]] = deque([(value, where, 0)])
    while pending:
        item, path, depth = pending.popleft()
        if item is None or isinstance(item, (bool, int, str)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{path} is {item!r}, which is not JSON (no NaN or infinity)"
            continue
        if depth >= MAX_DEPTH and isinstance(item, (dict, list, tuple)):
            return f"{path} nests lists and dicts more than {MAX_DEPTH} levels deep"
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return (
                        f"{path} has the key {key!r:.60} ({type(key).__name__}); JSON keys are "
                        "strings"
                    )
                pending.append((inner, f"{path}[{key!r:.60}]", depth + 1))
            continue
        if isinstance(item, (list, tuple)):
            pending.extend((inner, f"{path}[{i}]", depth + 1) for i, inner in enumerate(item))
            continue
        return f"{path} is a {type(item).__name__} ({item!r:.60}), which is not JSON"
    return None


def check_messages(messages: Any) -> None:
    """Refuse `messages` that are not a list of message dicts, each with a `role` (a str), before
    anything is stored: the model server would refuse them at the first call."""
    shape = '{"role": "user", "content": "..."}'
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise DurableSwarmError(
            f"`messages` must be a list of message dicts like {shape}; nothing was started."
        )
    for i, message in enumerate(messages):
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise DurableSwarmError(
                f"`messages[{i}]` has no role (got {role!r}): each message needs one, such as "
                f"'user', 'assistant', 'system' or 'tool', as in {shape}; nothing was started."
            )


def check_input(
    messages: Any, context_variables: Any, max_chars: int = DEFAULT_MAX_RESULT_CHARS
) -> None:
    """Refuse a run's input that a run cannot store, before anything is stored.

    Raises:
        NonJsonValueError: a message or a context variable is not JSON (naming the key), or a
            message's content is longer than `max_chars`.
    """
    for where, value in (("messages", messages), ("context_variables", context_variables)):
        problem = json_problem(value, where)
        if problem is not None:
            raise NonJsonValueError(where, problem)
    for i, message in enumerate(messages or []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and len(content) > max_chars:
            raise NonJsonValueError(
                "messages",
                f"messages[{i}]['content'] is {len(content)} characters long, over the "
                f"{max_chars}-character limit of a stored message",
            )
