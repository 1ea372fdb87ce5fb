"""Agents and a model script for the sub-agent tests, shared by the test process and its children.

`Lead` has three sub-agents, `Alpha`, `Beta` and `Gamma`, and calls all three in one message
(fan-out), then sums up their answers (join). Each worker looks its topic up with `fetch` and
reports. `Chief` delegates to `Lead` (nested sub-agents). Model calls per run of `Lead`: 2 for
Lead, 2 per worker.

`fetch` appends one line per execution to `<work dir>/fetch.log` (the directory comes from the
environment variable `DSWARM_AGENTS_WORK_DIR`), so a test counts executions across processes.

`reply(messages, tools)` is the model: a pure function of the request, so a request made again
after a crash gets the same answer (and the fake server gives it the same tool call ids).
`key(messages)` names a request as (agent, stage): stage is how many tool results it holds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from _support.logs import append_line, read_lines
from durable_swarm import Agent
from durable_swarm.testing import Reply, ToolCall, calls, text

WORK_DIR_ENV = "DSWARM_AGENTS_WORK_DIR"
WORKERS = ("Alpha", "Beta", "Gamma")
TOPICS = {"Alpha": "tides", "Beta": "craters", "Gamma": "ice"}
LEAD_TASK = [{"role": "user", "content": "Report on the Moon: tides, craters and ice."}]
CHIEF_TASK = [{"role": "user", "content": "Get me the Moon report."}]


def fetch_log(directory: Path) -> list[str]:
    """The topics `fetch` looked up in `directory`, one per execution."""
    return read_lines(directory / "fetch.log")


def fetch(topic: str) -> str:
    """Look a topic up.

    Args:
        topic: what to look up.
    """
    append_line(Path(os.environ[WORK_DIR_ENV]) / "fetch.log", topic)
    return f"facts about {topic}"


def _worker(name: str) -> Agent:
    return Agent(name=name, instructions=f"You are {name}. Look things up.", functions=[fetch])


alpha, beta, gamma = (_worker(name) for name in WORKERS)
lead = Agent(
    name="Lead",
    instructions="You are Lead. Delegate, then sum up.",
    functions=[alpha.as_tool(), beta.as_tool(), gamma.as_tool()],
)
chief = Agent(name="Chief", instructions="You are Chief. Ask Lead.", functions=[lead.as_tool()])


def agent_of(messages: list[dict[str, Any]]) -> str:
    """Which agent is speaking, from the system message."""
    system = str(messages[0].get("content") or "") if messages else ""
    return system.removeprefix("You are ").split(".")[0]


def key(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """(agent, stage) of a request; stage = how many tool results the request holds."""
    return agent_of(messages), sum(1 for m in messages if m.get("role") == "tool")


def worker_answer(name: str) -> str:
    return f"{name} reports: facts about {TOPICS[name]}"


LEAD_ANSWER = "Summary: " + " | ".join(worker_answer(name) for name in WORKERS)
CHIEF_ANSWER = f"Chief relays: {LEAD_ANSWER}"


def reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
    """The model of every agent here."""
    agent, stage = key(messages)
    results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    if agent == "Chief":
        if stage == 0:
            return calls(ToolCall("delegate_to_lead", {"task": "Report on the Moon."}))
        return text(f"Chief relays: {results[0]}")
    if agent == "Lead":
        if stage == 0:
            return calls(
                *(
                    ToolCall(f"delegate_to_{name.lower()}", {"task": TOPICS[name]})
                    for name in WORKERS
                )
            )
        return text("Summary: " + " | ".join(results))
    task = next(str(m["content"]) for m in messages if m.get("role") == "user")
    if stage == 0:
        return calls(ToolCall("fetch", {"topic": task}))
    return text(f"{agent} reports: {results[0]}")
