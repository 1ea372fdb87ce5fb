"""The messages a run appends besides the model's own: a tool's answer, and what a sub-agent's
run answers its parent. Kept apart from the tool machinery, so the code that only reads a run's
log (`durable._runs`) rebuilds them without loading it."""

from __future__ import annotations

from typing import Any

__all__ = ["ACCEPTED", "OUTPUT_TOOL", "final_answer", "tool_message"]

# The tool that takes a structured answer (`durable_swarm.output`), and its answer once valid.
OUTPUT_TOOL = "final_answer"
ACCEPTED = "Final answer accepted."


def tool_message(call: dict[str, Any], content: str) -> dict[str, Any]:
    """Swarm's tool message for `call` with `content`."""
    return {
        "role": "tool",
        "tool_call_id": call["id"],
        "tool_name": call["function"]["name"],
        "content": content,
    }


def final_answer(messages: list[dict[str, Any]]) -> str:
    """A sub-agent's answer: the content of its last assistant message, or the arguments (JSON)
    of its last `final_answer` call that was accepted (a structured answer in tool mode)."""
    accepted: set[Any] = set()
    for message in reversed(messages):
        role = message.get("role")
        if role == "tool" and message.get("tool_name") == OUTPUT_TOOL:
            if message.get("content") == ACCEPTED:
                accepted.add(message.get("tool_call_id"))
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and call.get("id") in accepted:
                    return str((call.get("function") or {}).get("arguments") or "")
            if message.get("content"):
                return str(message["content"])
    return ""
