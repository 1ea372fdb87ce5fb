"""Makes the sessions the CLI's and the console's tests read (`python _app.py DB_URL`):
session "support" from three runs (`support-1` .. `support-3`) against a fake server, the
third compacting its conversation; prints a JSON line when done."""

from __future__ import annotations

import json
import sys

from durable_swarm import Agent, DurableSwarm
from durable_swarm.durable import shutdown
from durable_swarm.testing import FakeOpenAIServer, text


def script(messages, tools):
    if messages[0]["content"].startswith("You summarize"):
        return text("THE-SUMMARY")
    return text(f"noted: {messages[-1]['content'][:20]}")


agent = Agent(name="Support", instructions="Help.")


def main(url: str) -> None:
    with FakeOpenAIServer(script) as server:
        swarm = DurableSwarm(server.client(), database_url=url)
        for number, line in enumerate(["my order is late " + "x" * 400, "it is order 42"], 1):
            swarm.run(agent, [{"role": "user", "content": line}], session="support",
                      run_id=f"support-{number}")  # fmt: skip
        swarm.run(agent, [{"role": "user", "content": "any news?"}], session="support",
                  run_id="support-3", compact_at=80)  # fmt: skip
        swarm.run(agent, [{"role": "user", "content": "hi"}], session="other")
    shutdown()
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main(sys.argv[1])
