"""A small durable app for the CLI tests, run as a child process on a given database.

    python _runs_app.py DATABASE_URL create   # make the runs the CLI tests inspect, then exit
    python _runs_app.py DATABASE_URL work RUN_ID[=STATUS,...]... [--fixed]
                                              # a worker: recover/dequeue runs, wait for them

`create` leaves these runs: run-ok (a handoff, a tool call, an answer), run-failed (the model
raised), run-input (waiting for the user's name), run-approval (waiting for approval of a
refund); it prints their statuses as JSON. `work` launches DBOS with the agents imported, so
pending and enqueued runs go on; it waits until each run has one of the statuses given (default:
finished) and prints their statuses as JSON. `--fixed`: the model no longer fails on "boom".
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from durable_swarm import Agent, DurableSwarm
from durable_swarm.human import AskUser
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import tool

FIXED = "--fixed" in sys.argv


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 21°C in {city}"


def ask_name() -> AskUser:
    """Ask the user for their name."""
    return AskUser("What is your name?")


@tool(needs_approval=True)
def refund(amount: int) -> str:
    """Refund an amount of dollars (a person must approve it)."""
    return f"Refunded ${amount}"


weather_agent = Agent(name="Weather Agent", functions=[get_weather])


def transfer_to_weather():
    """Hand over to the weather agent."""
    return weather_agent


router = Agent(name="Router", functions=[transfer_to_weather, ask_name, refund])


def script(messages, tools):
    """The model: decides from the conversation, so a recovered run gets the same answers."""
    last = messages[-1]
    said = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if "boom" in said and not FIXED:
        raise RuntimeError("the model endpoint exploded")
    if last["role"] == "tool":
        name, content = last["tool_name"], last["content"]
        if name == "transfer_to_weather":
            return calls(ToolCall("get_weather", {"city": "Paris"}))
        if name == "ask_name":
            return text(f"Nice to meet you, {content}!")
        return text(f"Done: {content}")
    if "weather" in said:
        return calls(ToolCall("transfer_to_weather"))
    if "name" in said:
        return calls(ToolCall("ask_name"))
    if "refund" in said:
        return calls(ToolCall("refund", {"amount": 42}, id="call_refund_42"))
    return text("Hello!")


def wait_for(swarm, run_id, statuses, timeout=30.0):
    """Poll until the run's status is one of `statuses` (or the timeout); return the status."""
    deadline = time.monotonic() + timeout
    status = swarm.get_run(run_id).status
    while status not in statuses and time.monotonic() < deadline:
        time.sleep(0.05)
        status = swarm.get_run(run_id).status
    return status


def main():
    """Create the runs, or work on them (see the module docstring)."""
    url, command, *rest = [a for a in sys.argv[1:] if a != "--fixed"]
    swarm = DurableSwarm(ScriptedClient(script), database_url=url, poll_interval=0.05)
    done = ("succeeded", "failed", "cancelled")
    statuses = {}
    if command == "create":
        user = lambda content: [{"role": "user", "content": content}]  # noqa: E731
        swarm.run(router, user("What's the weather in Paris?"), run_id="run-ok")
        with contextlib.suppress(Exception):  # the model fails: the run is recorded as failed
            swarm.run(router, user("boom"), run_id="run-failed")
        swarm.start(router, user("What's my name? Ask me."), run_id="run-input")
        swarm.start(router, user("I want a refund"), run_id="run-approval")
        statuses["run-ok"] = swarm.get_run("run-ok").status
        statuses["run-failed"] = swarm.get_run("run-failed").status
        statuses["run-input"] = wait_for(swarm, "run-input", ("waiting_for_input", *done))
        statuses["run-approval"] = wait_for(swarm, "run-approval", ("waiting_for_approval", *done))
    else:
        swarm.launch()
        for target in rest:
            run_id, _, wanted = target.partition("=")
            statuses[run_id] = wait_for(swarm, run_id, tuple(wanted.split(",")) if wanted else done)
    print(json.dumps(statuses), flush=True)
    os._exit(0)  # leave waiting runs pending, as a killed app would


if __name__ == "__main__":
    main()
