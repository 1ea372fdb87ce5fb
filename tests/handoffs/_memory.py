"""A scripted model for in-memory tests whose answers are chosen per agent.

Agents made with `agent("Name")` have the instructions "You are Name."; `Model` reads the speaking
agent from the system message of each request and answers from that agent's script: a list of
replies (consumed in order; the last one repeats) or a function `(messages, tools) -> reply`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeAlias

from durable_swarm import Agent
from durable_swarm.testing import Reply, ScriptedClient, ToolCall, calls, text

Answer: TypeAlias = Reply | str
Script: TypeAlias = list[Answer] | Callable[[list[dict[str, Any]], Any], Answer]


def agent(name: str, **fields: Any) -> Agent:
    """An agent whose system message says its name."""
    return Agent(name=name, instructions=f"You are {name}.", **fields)


def speaker(messages: list[dict[str, Any]]) -> str:
    """The agent a request is for (from "You are Name." in its system message)."""
    match = re.match(r"You are (\w+)", messages[0].get("content") or "")
    return match.group(1) if match else "?"


def tool_names(request: dict[str, Any]) -> list[str]:
    """The names of the tools a request offered."""
    return [t["function"]["name"] for t in request.get("tools") or []]


class Model:
    """`Model(Triage=[...], Sales=fn)`; `.client` is the ScriptedClient to give the swarm."""

    def __init__(self, **scripts: Script) -> None:
        self.scripts = scripts
        self.used: dict[str, int] = {}
        self.client = ScriptedClient(self)

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Answer:
        name = speaker(messages)
        script = self.scripts.get(name)
        if script is None:
            return text(f"{name} has nothing to say.")
        if callable(script):
            return script(messages, tools)
        position = self.used.get(name, 0)
        self.used[name] = position + 1
        return script[min(position, len(script) - 1)]

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.client.requests

    @property
    def speakers(self) -> list[str]:
        """Which agent each request was for, in order."""
        return [speaker(r["messages"]) for r in self.client.requests]

    def system_messages(self) -> list[str]:
        return [r["messages"][0]["content"] for r in self.client.requests]


def ask_then_greet(messages: list[dict[str, Any]], tools: Any) -> Answer:
    """A clerk's script: ask the person's name (`ask_user`), then greet them by it."""
    if messages[-1]["role"] == "user":
        return calls(ToolCall("ask_user", {"question": "Your name?"}))
    return f"Hello {messages[-1]['content']}."
