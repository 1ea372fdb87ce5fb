"""A process whose user code raises a `BaseException`: `python _base.py CONFIG` (JSON).

`config["where"]` picks the user callable that raises (`tool`, `model` client, `instructions`,
context `condition`, `handoff` target callable); for each exception of `config["kinds"]`
(`KeyboardInterrupt`, `SystemExit`, `GeneratorExit`, or `custom`: a BaseException subclass), one
run raises it and the next run of the same process must work. Prints one JSON line per kind: how
the run ended, whether DBOS's event loop survived, and how the next run went.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import dbos._dbos as dbos_internals

from durable_swarm import Agent, DurableSwarm
from durable_swarm.handoffs import OnContextCondition
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text


class Custom(BaseException):
    """A user's own BaseException."""


def raise_it(kind: str) -> None:
    if kind == "KeyboardInterrupt":
        raise KeyboardInterrupt
    if kind == "SystemExit":
        raise SystemExit(3)
    if kind == "GeneratorExit":
        raise GeneratorExit
    raise Custom("custom")


def main(config: dict[str, Any]) -> None:
    swarm = DurableSwarm(database_url=config["database_url"])
    for kind in config["kinds"]:
        print(json.dumps({"kind": kind, **one(swarm, config["where"], kind)}), flush=True)


def one(swarm: DurableSwarm, where: str, kind: str) -> dict[str, Any]:
    """One run whose `where` raises `kind`, then a plain run; how both went."""
    raised: list[bool] = []

    def once() -> None:
        if not raised:
            raised.append(True)
            raise_it(kind)

    def boom() -> str:
        """A tool that raises."""
        raise_it(kind)
        return "never"

    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        if where == "model":
            once()
        if where == "tool" and not any(m.get("role") == "tool" for m in messages):
            return calls(ToolCall("boom", id="c1"))
        return text("after")

    def instructions(context: dict[str, Any]) -> str:
        raise_it(kind)
        return "never"

    def condition(context: dict[str, Any]) -> bool:
        raise_it(kind)
        return False

    def choose(*args: Any) -> Any:
        raise_it(kind)

    other = Agent(name="Other")
    agent = {
        "tool": lambda: Agent(name="Raiser", functions=[boom]),
        "model": lambda: Agent(name="Raiser"),
        "instructions": lambda: Agent(name="Raiser", instructions=instructions),
        "condition": lambda: Agent(name="Raiser", handoffs=[OnContextCondition(other, condition)]),
        "handoff": lambda: Agent(name="Raiser", handoffs=[OnContextCondition(choose, "go")]),
    }[where]()
    swarm.client = ScriptedClient(script)
    run_id = f"{where}-{kind}-{time.monotonic_ns()}"
    swarm.start(agent, [{"role": "user", "content": "hi"}], {"go": True}, run_id=run_id)

    def loop_alive() -> bool:
        instance = dbos_internals._dbos_global_instance
        loop = instance._background_event_loop._loop if instance is not None else None
        return loop is not None and not loop.is_closed()

    deadline = time.monotonic() + 120
    while (info := swarm.get_run(run_id)).status == "pending" and loop_alive():
        assert time.monotonic() < deadline, "the run neither ended nor broke DBOS"
        time.sleep(0.02)
    try:
        response = swarm.run(Agent(name=f"Next{kind}"), [{"role": "user", "content": "hi"}])
        next_run = str(response.messages[-1]["content"])
    except Exception as e:
        next_run = f"{type(e).__name__}: {e}"
    return {"status": info.status, "error": info.error, "alive": loop_alive(), "next": next_run}


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
