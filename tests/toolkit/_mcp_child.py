"""A child process of the MCP and shell crash tests: `python _mcp_child.py CONFIG_JSON`.

It builds a `DurableSwarm` on the config's database, talking to the fake model server at
`base_url`, with an agent whose one tool is the MCP test server (`tool: "mcp"`, over stdio; with
`changed`, the server offers one more tool), the one at `url` (`tool: "mcp-http"`) or a
`ShellTool` (`tool: "shell"`), then:

* `run`: runs the conversation as `run_id` (the test kills it with SIGKILL meanwhile);
* `recover`: launches (DBOS recovers the runs this executor left pending) and waits for `run_id`.

The outcome (messages, status, steps) is written as JSON to the `result` file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import openai

from durable_swarm import Agent, DurableSwarm, ShellTool
from durable_swarm.toolkit import MCPTools

SERVER = str(Path(__file__).with_name("_mcp_server.py"))


def agent(config: dict[str, Any]) -> Agent:
    if config["tool"] == "mcp-http":
        tool: Any = MCPTools(url=config["url"], name="tests")
    elif config["tool"] == "mcp":
        env = {
            "MCP_TEST_LOG": config["log"],
            **({"MCP_TEST_EXTRA": "1"} if config.get("changed") else {}),
        }
        tool = MCPTools(command=[sys.executable, SERVER], env=env, name="tests")
    else:
        tool = ShellTool(config["work_dir"], needs_approval=False)
    return Agent(name="Worker", functions=[tool])


def main(config: dict[str, Any]) -> None:
    client = openai.OpenAI(base_url=config["base_url"], api_key="fake-key", max_retries=0)
    swarm = DurableSwarm(
        client, database_url=config["database_url"], executor_id=config["executor_id"]
    )
    run_id = config["run_id"]
    worker = agent(config)
    if config["action"] == "run":
        swarm.run(worker, [{"role": "user", "content": "do it once"}], run_id=run_id)
        raise AssertionError("the test kills this process before the run ends")
    swarm.launch()
    deadline = time.monotonic() + 120
    while (info := swarm.get_run(run_id)).status not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"run {run_id} did not finish"
        time.sleep(0.02)
    result = {
        "status": info.status,
        "error": info.error,
        "messages": info.messages,
        "steps": [[s.step, s.kind, s.name] for s in info.steps],
    }
    Path(config["result"]).write_text(json.dumps(result))
    os._exit(0)  # DBOS's shutdown is not what this test is about


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
