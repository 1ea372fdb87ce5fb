"""A durable app whose runs say hostile things everywhere a person may see them, run as a child
process on a given database:

    python _hostile_app.py DATABASE_URL

Every run id, agent name, tool name, argument, result, context key and value, error and prompt
carries `EVIL`: terminal escape sequences (a window title, clear screen, a C1 CSI), BEL, a
backspace, a carriage return and a right-to-left override. Prints the runs' statuses as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from durable_swarm import Agent, DurableSwarm, Result
from durable_swarm.human import AskUser
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import tool

EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e\u200b\U000e0041\ufeff\x08\rX"
RUN_IDS = {
    "ok": "ok" + EVIL,
    "failed": "failed" + EVIL,
    "input": "input" + EVIL,
    "approval": "approval" + EVIL,
}
CALL_ID = "call" + EVIL

second = Agent(name="Second" + EVIL)


def lookup(query: str, context_variables: dict) -> Result:
    """Look something up."""
    context_variables["key" + EVIL] = "value" + EVIL
    return Result(value="result" + EVIL, agent=second, context_variables=context_variables)


def ask() -> AskUser:
    """Ask the user."""
    return AskUser("prompt" + EVIL)


@tool(needs_approval=True)
def pay(note: str) -> str:
    """Pay, once a person approves."""
    return "paid " + note


agent = Agent(name="Agent" + EVIL, functions=[lookup, ask, pay])


def script(messages, tools):
    said = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    last = messages[-1]
    if "boom" in said:
        raise RuntimeError("the model says" + EVIL)
    if last["role"] == "tool":
        return text("answer" + EVIL)
    if "input" in said:
        return calls(ToolCall("ask"))
    if "approval" in said:
        return calls(ToolCall("pay", {"note": EVIL}, id=CALL_ID))
    return calls(
        ToolCall("lookup", {"query": EVIL}),
        ToolCall("missing" + EVIL, {"extra" + EVIL: EVIL}),
    )


def main() -> None:
    url = sys.argv[1]
    swarm = DurableSwarm(ScriptedClient(script), database_url=url, poll_interval=0.05)
    user = lambda content: [{"role": "user", "content": content + EVIL}]  # noqa: E731
    swarm.run(agent, user("ok"), context_variables={"given" + EVIL: EVIL}, run_id=RUN_IDS["ok"])
    with contextlib.suppress(Exception):
        swarm.run(agent, user("boom"), run_id=RUN_IDS["failed"])
    swarm.start(agent, user("input"), run_id=RUN_IDS["input"])
    swarm.start(agent, user("approval"), run_id=RUN_IDS["approval"])
    statuses = {}
    for name, run_id in RUN_IDS.items():
        deadline = time.monotonic() + 60
        status = swarm.get_run(run_id).status
        while status == "pending" and time.monotonic() < deadline:
            time.sleep(0.05)
            status = swarm.get_run(run_id).status
        statuses[name] = status
    print(json.dumps(statuses), flush=True)
    os._exit(0)  # leave the waiting runs waiting


if __name__ == "__main__":
    main()
