"""The messages a run appends besides the model's own: a tool's answer, and what a sub-agent's
run answers its parent. Kept apart from the tool machinery, so the code that only reads a run's
log (`durable._runs`) rebuilds them without loading it."""

from __future__ import annotations

from typing import Any

__all__ = ["final_answer", "tool_message"]


def tool_message(call: dict[str, Any], content: str) -> dict[str, Any]:
    """Swarm's tool message for `call` with `content`."""
    return {
        "role": "tool",
        "tool_call_id": call["id"],
        "tool_name": call["function"]["name"],
        "content": content,
    }


def final_answer(messages: list[dict[str, Any]]) -> str:
    """A sub-agent's answer: the content of its last assistant message."""
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return ""
