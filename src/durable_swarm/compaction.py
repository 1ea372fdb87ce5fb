"""Compaction: when a run's conversation would pass a token budget, older turns are summarized.

A run with `compact_at` (tokens, or `"auto"`: 80% of the model's context window when
`CONTEXT_WINDOWS` knows it) checks, before each model call, the size of what it is about to
send. Over the budget, the loop yields a `Summarize` effect for the older messages (a model call
with `SUMMARY_INSTRUCTIONS`, or the swarm's `compactor` function), recorded as a step of its own
in a durable run, so a crash never pays for it twice. From then on the model sees one summary
message plus the recent messages; the run's history (its log, `Response.messages`) keeps every
original message.

Tokens are estimated, never counted by a tokenizer: `estimate_tokens` is the length of the
request's messages and tools as JSON divided by 4 (about right for English with OpenAI's
tokenizers). The estimate depends only on the messages, so the loop stays deterministic and a
replay compacts at exactly the same places.

The cut between summarized and kept messages never splits an assistant message with
`tool_calls` from the tool messages that answer it: the kept part never starts with a tool
message. The recent part kept is at most half the budget (at least the last message); a
summary is cumulative (the next compaction summarizes the previous summary with the messages
after it).

The summary reaches the model as a user message starting with `[` + `SUMMARY_PREFIX`; the
summarizing model call's system message is `SUMMARY_INSTRUCTIONS`.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTEXT_WINDOWS",
    "SUMMARY_INSTRUCTIONS",
    "SUMMARY_PREFIX",
    "Summarize",
    "Window",
    "check_compact_at",
    "compaction_budget",
    "estimate_tokens",
    "session_messages",
    "summary_message",
    "summary_request",
]

# Context windows (tokens) of common models, for `compact_at="auto"`; a model not listed
# (matched by its name or the longest listed prefix) needs `compact_at=<tokens>` instead.
CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4": 8_192,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
}
AUTO_SHARE = 0.8  # `compact_at="auto"`: compact past this share of the context window
SUMMARY_PREFIX = "Summary of the earlier conversation"
SUMMARY_INSTRUCTIONS = (
    "You summarize a conversation between a user and AI agents so that it can continue from "
    "your summary alone. Keep every fact, name, number, decision, open question and tool "
    "result the conversation may need later; drop greetings and repetition. Answer with the "
    "summary only."
)


def estimate_tokens(messages: Sequence[dict[str, Any]], tools: Any = None) -> int:
    """The estimated token count of `messages` (and `tools`): their JSON length / 4, rounded
    up. Deterministic, from the messages alone."""
    text = json.dumps([list(messages), tools or []], ensure_ascii=False, default=str)
    return -(-len(text) // 4)


def compaction_budget(compact_at: int | str | None, model: Any) -> int | None:
    """The token budget of a run: `compact_at` tokens; for `"auto"`, 80% of `model`'s context
    window (None when the model is not in `CONTEXT_WINDOWS`: no compaction); None: off."""
    if compact_at is None:
        return None
    if compact_at != "auto":
        return int(compact_at)
    name = str(model or "").rsplit("/", 1)[-1]
    known = [k for k in CONTEXT_WINDOWS if name == k or name.startswith(f"{k}-")]
    if not known:
        return None
    return int(CONTEXT_WINDOWS[max(known, key=len)] * AUTO_SHARE)


def check_compact_at(compact_at: Any) -> int | str | None:
    """`compact_at` if valid (None, `"auto"` or a positive int), else a `DurableSwarmError`."""
    if compact_at is None or compact_at == "auto":
        return compact_at
    if isinstance(compact_at, int) and not isinstance(compact_at, bool) and compact_at > 0:
        return compact_at
    from .errors import DurableSwarmError

    raise DurableSwarmError(
        f"compact_at must be a number of tokens (a positive int), 'auto' (the model's context "
        f"window, when known) or None (no compaction), not {compact_at!r}."
    )


def summary_message(summary: str) -> dict[str, Any]:
    """The message the model sees in place of the messages a summary replaces."""
    return {"role": "user", "content": f"[{SUMMARY_PREFIX}]\n{summary}"}


@dataclass
class Summarize:
    """Effect: summarize `messages` (the older part of the conversation, an earlier summary
    first), which replace the run's history before index `upto` in what the model sees.
    `request` is the summarizing model call's `create()` parameters (unused when the swarm has
    a `compactor` function)."""

    agent: Any
    messages: list[dict[str, Any]]
    request: dict[str, Any]
    upto: int


def _transcript(messages: Sequence[dict[str, Any]]) -> str:
    """`messages` as plain text for the summarizing model (tool calls and results included)."""
    lines = []
    for message in messages:
        role = message.get("role", "?")
        who = f"{role} ({message['sender']})" if message.get("sender") else role
        if message.get("content"):
            lines.append(f"{who}: {message['content']}")
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            lines.append(f"{who} calls {function.get('name')}({function.get('arguments') or ''})")
    return "\n".join(lines)


def summary_request(model: Any, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The `create()` parameters of the model call that summarizes `messages`."""
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": SUMMARY_INSTRUCTIONS},
            {"role": "user", "content": _transcript(messages)},
        ],
        "stream": False,
    }


def _cut(history: Sequence[dict[str, Any]], start: int, keep_tokens: int) -> int | None:
    """Where the kept part of `history` begins: the most recent messages within `keep_tokens`
    (at least the last), moved back so that it does not begin with a tool message. None if
    that summarizes nothing new (past `start`)."""
    cut, size = len(history) - 1, estimate_tokens(history[-1:])
    while cut - 1 > start and size + estimate_tokens(history[cut - 1 : cut]) <= keep_tokens:
        cut -= 1
        size += estimate_tokens(history[cut : cut + 1])
    while cut > start and history[cut].get("role") == "tool":
        cut -= 1  # a tool result stays with the assistant message that called it
    return cut if cut > start else None


class Window:
    """What the model sees of a run's history: everything, or, once compacted, a summary
    message in place of the messages before `cut` and the messages from `cut` on."""

    def __init__(self, compact_at: int | str | None) -> None:
        self.compact_at = compact_at
        self.cut = 0
        self.summary: str | None = None

    def view(self, history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages the model sees of `history`."""
        if self.summary is None:
            return list(history)
        return [summary_message(self.summary), *history[self.cut :]]

    def fit(
        self, agent: Any, history: list[dict[str, Any]], request: dict[str, Any]
    ) -> Generator[Any, Any, dict[str, Any]]:
        """`request` (its first message is the system message) within the budget: the history
        as the window shows it, summarized further (a `Summarize` effect) when it would pass
        the budget. Without a budget, `request` unchanged."""
        budget = compaction_budget(self.compact_at, request.get("model"))
        if budget is None:
            return request
        system, tools = request["messages"][:1], request.get("tools")
        fitted = {**request, "messages": [*system, *self.view(history)]}
        if estimate_tokens(fitted["messages"], tools) <= budget:
            return fitted
        fixed = estimate_tokens(system, tools)
        cut = _cut(history, self.cut, max((budget - fixed) // 2, 1))
        if cut is None:  # nothing more to summarize: the request goes as it is
            return fitted
        older = self.view(history[:cut])
        summary = yield Summarize(agent, older, summary_request(request.get("model"), older), cut)
        self.cut, self.summary = cut, str(summary)
        return {**request, "messages": [*system, *self.view(history)]}


def session_messages(
    history: Sequence[dict[str, Any]], compaction: tuple[int, str] | None
) -> list[dict[str, Any]]:
    """What a session keeps of a run's whole `history`: the history as the model last saw it
    (the latest summary in place of the messages before its cut, `compaction` = (cut, summary)),
    so that the session's next run starts compact."""
    if compaction is None:
        return list(history)
    cut, summary = compaction
    return [summary_message(summary), *history[cut:]]
