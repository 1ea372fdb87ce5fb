"""A child process of the sub-agent crash tests: `python -m agents._crash_child CONFIG_JSON`
(working directory `tests/`).

It builds a `DurableSwarm` on `database_url` with `executor_id`, talking to the fake server at
`base_url`, with the agents of `_fanout.py`, then does `action`:

* `run`: start `Lead` as run `run_id` and, until it finishes, write the statuses of its child
  runs to the `progress` file (JSON, replaced atomically) so the test can pick when to kill it;
* `recover`: wait until the `go` file exists (the test starts this process early, so that its
  imports are done by the time the first one is killed), then launch (DBOS recovers this
  executor's pending runs, parent and children) and wait for `run_id`.

Either way, the outcome is written as JSON to the `result` file: the parent's messages and
status, and each child run's status, parent, agent and messages.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import openai

from durable_swarm import DurableSwarm, RunNotFoundError

from . import _fanout

FINISHED = ("succeeded", "failed", "cancelled")


def write_json(path: str, data: Any) -> None:
    tmp = Path(path + ".partial")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def child_statuses(swarm: DurableSwarm, run_id: str) -> dict[str, str]:
    statuses = {}
    for number in range(1, len(_fanout.WORKERS) + 1):
        child = f"{run_id}-sub{number}"
        with contextlib.suppress(RunNotFoundError):
            statuses[child] = swarm.get_run(child).status
    return statuses


def main(config: dict[str, Any]) -> None:
    os.environ[_fanout.WORK_DIR_ENV] = config["work_dir"]
    client = openai.OpenAI(base_url=config["base_url"], api_key="fake-key")
    swarm = DurableSwarm(
        client, database_url=config["database_url"], executor_id=config["executor_id"]
    )
    run_id = config["run_id"]
    if config["action"] == "run":
        swarm.start(_fanout.lead, _fanout.LEAD_TASK, run_id=run_id)
        while swarm.get_run(run_id).status not in FINISHED:
            write_json(config["progress"], child_statuses(swarm, run_id))
            time.sleep(0.05)
    else:
        while not os.path.exists(config["go"]):  # started early, so imports are done by then
            time.sleep(0.02)
        swarm.launch()
        while swarm.get_run(run_id).status not in FINISHED:
            time.sleep(0.05)
    response = swarm.handle(run_id).result()  # raises the run's error if it failed
    parent = swarm.get_run(run_id)
    children = {}
    for child in parent.children:
        info = swarm.get_run(child)
        children[child] = {
            "status": info.status,
            "parent": info.parent,
            "agent": info.agent,
            "messages": info.messages,
        }
    write_json(
        config["result"],
        {
            "messages": response.messages,
            "status": parent.status,
            "children": children,
        },
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
