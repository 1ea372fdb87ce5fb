"""A child process of the encryption tests: `python -m durable._encryption_child CONFIG_JSON`
(working directory `tests/`). The key comes from `key` in the config (None: no key; the
environment of the test process never carries one).

* `run`: a `DurableSwarm` on `database_url` (executor `executor_id`, the fake server at
  `base_url`) runs `Keeper` as `run_id`: the user message, the tool's argument, its result and a
  context variable each carry a secret (`SECRETS`); `wait` false: it waits for the run to end,
  else it starts it and waits to be killed.
* `recover`: launch (DBOS recovers this executor's pending runs) and wait for `run_id` to end.
* `read`: a `DurableClient` reads `run_id` and writes what it saw (or the error it got).

Each writes `result` (JSON). The tool appends a line to `tool_log` each time it runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import openai

from durable_swarm import Agent, DurableClient, DurableSwarm

SECRETS = {
    "message": "ZEBRA-MESSAGE-4417",
    "argument": "ZEBRA-ARGUMENT-5528",
    "result": "ZEBRA-RESULT-6639",
    "context": "ZEBRA-CONTEXT-7740",
}
FINISHED = ("succeeded", "failed", "cancelled")
_TOOL_LOG: list[str] = []


def stash(note: str, context_variables: dict[str, Any]) -> str:
    """Keep a note."""
    with open(_TOOL_LOG[0], "a") as f:
        f.write(note + "\n")
    context_variables["kept"] = note
    return f"kept {note}; receipt {SECRETS['result']}"


keeper = Agent(name="Keeper", model="fake-model", functions=[stash])


def write(path: str, data: dict[str, Any]) -> None:
    tmp = Path(path + ".partial")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def wait_until_finished(swarm: DurableSwarm, run_id: str) -> None:
    deadline = time.monotonic() + 120
    while swarm.get_run(run_id).status not in FINISHED:
        assert time.monotonic() < deadline, f"run {run_id} did not finish"
        time.sleep(0.02)


def read(config: dict[str, Any]) -> dict[str, Any]:
    try:
        with DurableClient(config["database_url"], encryption_key=config.get("key")) as client:
            info = client.get_run(config["run_id"])
            listed = [r.run_id for r in client.list_runs(limit=None)]
    except Exception as e:
        return {"error_type": type(e).__name__, "error": str(e)}
    return {
        "status": info.status,
        "agent": info.agent,
        "messages": info.messages,
        "context_variables": info.context_variables,
        "encrypted": info.encrypted,
        "total_tokens": info.usage.total_tokens if info.usage else None,
        "steps": [[s.kind, s.name] for s in info.steps],
        "listed": listed,
    }


def main(config: dict[str, Any]) -> None:
    if config["action"] == "read":
        write(config["result"], read(config))
        return
    _TOOL_LOG.append(config["tool_log"])
    client = openai.OpenAI(base_url=config["base_url"], api_key="fake-key", max_retries=0)
    swarm = DurableSwarm(
        client,
        database_url=config["database_url"],
        executor_id=config["executor_id"],
        encryption_key=config.get("key"),
    )
    run_id = config["run_id"]
    if config["action"] == "run":
        user = [{"role": "user", "content": f"please keep {SECRETS['message']}"}]
        context = {"token": SECRETS["context"]}
        swarm.start(keeper, user, context_variables=context, run_id=run_id)
        if config.get("wait"):
            time.sleep(600)  # killed by the test long before
            return
    else:
        swarm.launch()
    wait_until_finished(swarm, run_id)
    info = swarm.get_run(run_id)
    write(config["result"], {"status": info.status, "error": info.error})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
