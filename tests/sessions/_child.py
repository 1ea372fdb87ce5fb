"""A child process of the session crash tests (`python -m sessions._child CONFIG_JSON`, run
from `tests/`): a `DurableSwarm` on the config's database, talking to the fake server at
`base_url`, with the executor id `executor_id`, that does one `action`:

* `run`: run `clerk` on `messages` with `run_id`, `session` and `compact_at`;
* `recover`: launch (DBOS recovers this executor's pending runs) and wait for `run_id`.

It writes the run's messages and status as JSON to `result`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import openai

from durable_swarm import DurableSwarm

from ._model import clerk


def main(config: dict) -> None:
    client = openai.OpenAI(base_url=config["base_url"], api_key="test", max_retries=0)
    swarm = DurableSwarm(
        client,
        database_url=config["database_url"],
        executor_id=config["executor_id"],
        compact_at=config.get("compact_at"),
    )
    run_id = config["run_id"]
    if config["action"] == "run":
        response = swarm.run(
            clerk, config["messages"], run_id=run_id, session=config.get("session")
        )
    else:
        swarm.launch()
        response = swarm.handle(run_id).result()
    result = {"messages": response.messages, "status": swarm.get_run(run_id).status}
    path = Path(config["result"])
    path.with_suffix(".partial").write_text(json.dumps(result))
    os.replace(path.with_suffix(".partial"), path)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
