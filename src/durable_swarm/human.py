"""A person in the loop: questions from tools, and approval of tool calls.

A tool asks the person something by returning `AskUser("question")` (or the model calls the
ready-made `ask_user` tool): the run waits, and the answer becomes the tool's result. A tool
marked `@tool(needs_approval=True)` makes the run wait before each call until a person approves
or rejects that exact call. In a `DurableSwarm` these waits are durable: they survive restarts,
may last days and hold no thread; `send_input`, `approve` and `reject` resume the run from any
process. In the in-memory `Swarm` the person answers at the terminal (or through `input_fn`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["AskUser", "Decision", "arguments_digest", "ask_user"]


@dataclass
class AskUser:
    """Returned by a tool: ask the person `question`; their answer becomes the tool result."""

    question: str


def ask_user(question: str) -> AskUser:
    """Ask the user a question and wait for the answer. Use it when you need information only
    the user has (a name, a number, a choice) before you can go on.

    Args:
        question: the question to show the user.
    """
    return AskUser(question)


def arguments_digest(call: dict[str, Any]) -> str:
    """A digest of a tool call's name and arguments: an approval is bound to exactly these."""
    function = call.get("function") or {}
    raw = json.dumps([function.get("name"), function.get("arguments")], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass
class Decision:
    """A person's decision on a tool call waiting for approval."""

    approved: bool
    message: str | None = None
    by: str | None = None
    at: str | None = None

    def to_json(self) -> dict[str, Any]:
        """As stored in the run's log."""
        return {"approved": self.approved, "message": self.message, "by": self.by, "at": self.at}

    @classmethod
    def from_json(cls, data: Any) -> Decision:
        """From the log (a bare bool counts as approved/rejected)."""
        if isinstance(data, dict):
            return cls(
                bool(data.get("approved")), data.get("message"), data.get("by"), data.get("at")
            )
        return cls(bool(data))

    def tool_message(self, call: dict[str, Any]) -> str:
        """What the model reads when the call was rejected."""
        who = f" by {self.by}" if self.by else ""
        why = f": {self.message}" if self.message else "."
        return f"Error: the call to {call['function']['name']} was rejected{who}{why}"
