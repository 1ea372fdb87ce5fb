"""Helpers shared by the durable_swarm.testing tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from openai.types.chat import ChatCompletionChunk


def assemble(chunks: Iterable[ChatCompletionChunk]) -> dict[str, Any]:
    """Merge streamed chunks into one message, taking every tool-call delta of every chunk."""
    message: dict[str, Any] = {"role": None, "content": "", "tool_calls": {}}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            message["role"] = message["role"] or delta.role
            message["content"] += delta.content or ""
            for call in delta.tool_calls or []:
                merged = message["tool_calls"].setdefault(
                    call.index, {"id": None, "name": "", "arguments": ""}
                )
                merged["id"] = merged["id"] or call.id
                if call.function is not None:
                    merged["name"] += call.function.name or ""
                    merged["arguments"] += call.function.arguments or ""
            if choice.finish_reason:
                message["finish_reason"] = choice.finish_reason
    message["tool_calls"] = [message["tool_calls"][i] for i in sorted(message["tool_calls"])]
    return message


def most_tool_call_deltas(chunks: Iterable[ChatCompletionChunk]) -> int:
    """The largest number of tool-call deltas carried by a single chunk."""
    return max(
        (len(choice.delta.tool_calls or []) for chunk in chunks for choice in chunk.choices),
        default=0,
    )
