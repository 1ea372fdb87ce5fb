"""The fake model of the session tests: it answers each user line with what it saw, and
summarizes when asked to (the compaction's model call), so a test reads from the requests at
the fake server what the model saw."""

from __future__ import annotations

import threading
from typing import Any

from durable_swarm import Agent
from durable_swarm.compaction import SUMMARY_INSTRUCTIONS
from durable_swarm.testing import Fault, Reply, ToolCall, calls, text

SUMMARY = "SUMMARY-OF-EARLIER-TURNS"


def lookup(item: str) -> str:
    """Look up an item (the tests' one tool)."""
    return f"{item} is in stock " + "." * 200


clerk = Agent(name="Clerk", instructions="You answer the customer.", functions=[lookup])


def is_summary_request(messages: list[dict[str, Any]]) -> bool:
    return bool(messages) and messages[0].get("content") == SUMMARY_INSTRUCTIONS


def last_user(messages: list[dict[str, Any]]) -> str:
    return next((str(m["content"]) for m in reversed(messages) if m["role"] == "user"), "")


class SessionModel:
    """The script: a user line "look up X ..." gets a `lookup` call first, then an answer;
    any other line gets "seen N: <line>" (N: how many messages the model saw, system and
    summary included). `hold(line)` makes the first request answering `line` wait (the test
    kills its caller meanwhile); `after="tool"`: the request after its tool result.
    `arrivals["<line>|<role of the last message>"]` counts the requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held: dict[str, float] = {}
        self.arrivals: dict[str, int] = {}

    def hold(self, line: str, seconds: float = 300.0, *, after: str = "user") -> None:
        self.held[f"{line}|{after}"] = seconds

    def arrived(self, line: str, after: str = "user") -> int:
        with self._lock:
            return self.arrivals.get(f"{line}|{after}", 0)

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        if is_summary_request(messages):
            return text(SUMMARY)
        line = last_user(messages)
        if line.startswith("look up") and messages[-1]["role"] == "user":
            answer: Reply = calls(ToolCall("lookup", {"item": line.split()[2]}))
        else:
            answer = text(f"seen {len(messages)}: {line}")
        key = f"{line}|{messages[-1]['role']}"
        with self._lock:
            self.arrivals[key] = first = self.arrivals.get(key, 0) + 1
        if first == 1 and key in self.held:
            return Fault.delay(self.held[key], answer)
        return answer
