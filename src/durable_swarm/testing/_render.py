"""Turn a scripted `Reply` into OpenAI chat completion and chunk JSON (plain dicts)."""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

from pydantic import BaseModel

from ._script import Reply


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot serialise {type(value).__name__} in a request")


def canonical_json(value: Any) -> str:
    """Stable JSON text of a request value (pydantic models are dumped first)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_default)


def jsonable(value: Any) -> Any:
    """A deep copy of ``value`` made only of JSON types, as a server would receive it."""
    return json.loads(canonical_json(value))


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def _tokens(text: str) -> int:
    """Rough token estimate: about four characters per token."""
    return len(text) // 4 + 1


def _split(text: str, parts: int) -> list[str]:
    if len(text) < parts:
        return [text] if text else []
    return [text[i * len(text) // parts : (i + 1) * len(text) // parts] for i in range(parts)]


class Rendering:
    """One reply rendered for one request: deterministic ids from the request messages."""

    def __init__(
        self,
        reply: Reply,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
    ) -> None:
        key = canonical_json(messages)
        self.id = f"chatcmpl-{_digest(key)[:29]}"
        self.created = int(time.time())
        self.model = model
        self.content = reply.content
        self.tool_calls: list[dict[str, Any]] = [
            {
                "id": call.id or f"call_{_digest(key, str(index))[:24]}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for index, call in enumerate(reply.tool_calls)
        ]
        self.finish_reason = "tool_calls" if self.tool_calls else "stop"
        prompt = _tokens(key) + (_tokens(canonical_json(tools)) if tools else 0)
        completion = _tokens(self.content or "") + sum(
            _tokens(call["function"]["name"] + call["function"]["arguments"])
            for call in self.tool_calls
        )
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, **(reply.usage or {})}
        usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
        self.usage = usage

    def completion(self) -> dict[str, Any]:
        """The ``chat.completion`` object."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content, "refusal": None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": self.usage,
        }

    def chunks(self, include_usage: bool = False) -> list[dict[str, Any]]:
        """The ``chat.completion.chunk`` objects of the streamed reply.

        The first delta carries the role; content comes a word at a time; each tool call starts
        with a delta holding its index, id, type and name, then argument fragments. The last
        delta of one call shares a chunk with the first delta of the next, so a client that
        reads only the first tool-call delta of a chunk loses calls.
        """
        deltas: list[dict[str, Any]] = [
            {"role": "assistant", "content": "" if self.content is not None else None}
        ]
        deltas += [{"content": piece} for piece in re.findall(r"\S+\s*|\s+", self.content or "")]
        groups: list[list[dict[str, Any]]] = []
        for index, call in enumerate(self.tool_calls):
            function = call["function"]
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            pieces = [
                {"index": index, "function": {"arguments": fragment}}
                for fragment in _split(function["arguments"], 3)
            ]
            if groups:
                groups[-1].append(head)
            else:
                groups.append([head])
            groups += [[piece] for piece in pieces]
        deltas += [{"tool_calls": group} for group in groups]
        chunks = [self._chunk(delta, None, include_usage) for delta in deltas]
        chunks.append(self._chunk({}, self.finish_reason, include_usage))
        if include_usage:
            chunks.append({**self._chunk({}, None, True), "choices": [], "usage": self.usage})
        return chunks

    def _chunk(
        self, delta: dict[str, Any], finish_reason: str | None, include_usage: bool
    ) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if include_usage:
            chunk["usage"] = None
        return chunk
