"""Makes many runs for the paging, search, delete and prune tests (a child process).

    python _many_runs.py DATABASE_URL COUNT

Leaves `run-000` ... (COUNT finished runs; every tenth one is about a lost parcel), then
`run-live` (waiting for the user's name), prints the current time as an ISO string, then, a
second later (SQLite keeps creation times in seconds), makes `run-recent` (finished) and exits.
Ids sort as the runs were made, so runs made in the same second list in that order too.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone

from durable_swarm import Agent, DurableSwarm, ask_user
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text


def script(messages, tools):
    said = messages[-1].get("content") or ""
    if "name" in said and not any(m["role"] == "tool" for m in messages):
        return calls(ToolCall("ask_user", {"question": "What is your name?"}))
    return text(f"Noted: {said}")


clerk = Agent(name="Clerk", functions=[ask_user])

if __name__ == "__main__":
    url, count = sys.argv[1], int(sys.argv[2])
    swarm = DurableSwarm(ScriptedClient(script), database_url=url)
    for i in range(count):
        about = "my parcel was lost" if i % 10 == 0 else "please refund it"
        swarm.run(
            clerk, [{"role": "user", "content": f"Order {i}: {about}"}], run_id=f"run-{i:03d}"
        )
    swarm.start(clerk, [{"role": "user", "content": "Ask my name"}], run_id="run-live")
    while swarm.get_run("run-live").status != "waiting_for_input":
        time.sleep(0.05)
    time.sleep(0.01)
    print(datetime.now(timezone.utc).isoformat(), flush=True)
    time.sleep(1.1)
    swarm.run(clerk, [{"role": "user", "content": "One more order"}], run_id="run-recent")
