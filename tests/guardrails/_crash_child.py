"""A child process of the guardrail crash tests: `python -m guardrails._crash_child CONFIG_JSON`
(working directory `tests/`).

It builds a `DurableSwarm` on `database_url` with `executor_id`, talking to the fake server at
`base_url`, with the agents of `_refunds.py`, then does `action`:

* `run`: start `agent` (`refunder` by default) on `text` as run `run_id` and wait (the test
  kills it);
* `recover`: wait until the `go` file exists (the test starts this process early, so that its
  imports are done by the time the first one is killed), then launch (DBOS recovers this
  executor's pending runs) and wait for `run_id`; its status and messages go to the `result`
  file as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import openai

from durable_swarm import DurableSwarm

from . import _refunds


def main(config: dict[str, Any]) -> None:
    os.environ[_refunds.WORK_DIR_ENV] = config["work_dir"]
    client = openai.OpenAI(base_url=config["base_url"], api_key="fake-key")
    swarm = DurableSwarm(
        client, database_url=config["database_url"], executor_id=config["executor_id"]
    )
    run_id = config["run_id"]
    if config["action"] == "run":
        agent = getattr(_refunds, config.get("agent", "refunder"))
        swarm.start(agent, [{"role": "user", "content": config["text"]}], run_id=run_id)
        while True:
            time.sleep(1)
    while not os.path.exists(config["go"]):
        time.sleep(0.02)
    swarm.launch()
    while swarm.get_run(run_id).status not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.05)
    info = swarm.get_run(run_id)
    tmp = Path(config["result"] + ".partial")
    tmp.write_text(json.dumps({"status": info.status, "messages": info.new_messages}))
    os.replace(tmp, config["result"])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
