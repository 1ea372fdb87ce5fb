"""A process whose event loop is too busy to begin a run it has just started (as when thousands
of runs are recovered at once): `python _stalled_start.py DATABASE_URL RUN_ID TOOL_LOG`.

It starts one run (model -> tool -> model) with a short `dead_after`, then keeps DBOS's event
loop blocked for several times `dead_after`, so the run's row ages while its task has not begun.
The ownership thread goes on beating meanwhile. It prints one JSON line: the run's status, what
the ownership thread said, and how many times the tool ran.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from durable_swarm import Agent, DurableSwarm
from durable_swarm.durable import _dbos
from durable_swarm.testing import Reply, ScriptedClient, ToolCall, calls, text

DEAD_AFTER = 1.0


def main(url: str, run_id: str, tool_log: Path) -> None:
    def note(order: str) -> str:
        """Note an order (one line per execution of the tool)."""
        with tool_log.open("a") as f:
            f.write(order + "\n")
        return "noted"

    def script(messages: list[dict[str, Any]], tools: Any) -> Reply:
        if any(m.get("role") == "tool" for m in messages):
            return text("done")
        return calls(ToolCall("note", {"order": "o1"}))

    said: list[str] = []

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logging.getLogger("durable_swarm").addHandler(Said(logging.WARNING))
    agent = Agent(name="Noter", functions=[note])
    swarm = DurableSwarm(
        ScriptedClient(script), database_url=url, heartbeat_interval=0.1, dead_after=DEAD_AFTER
    ).launch()

    async def start_then_stall() -> Any:
        handle = await swarm.astart(agent, [{"role": "user", "content": "note o1"}], run_id=run_id)
        time.sleep(4 * DEAD_AFTER)  # blocks the event loop: the run's task has not begun
        return handle

    handle = _dbos.on_loop(start_then_stall())
    response = handle.result()  # a hand-back during the stall was said before this returns
    runs = tool_log.read_text().splitlines() if tool_log.exists() else []
    print(json.dumps({
        "answer": response.messages[-1]["content"],
        "status": swarm.get_run(run_id).status,
        "said": said,
        "tool_runs": len(runs),
    }))  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
