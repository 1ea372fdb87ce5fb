"""A child process of `test_structured_output.py`: `python -m durable._structured_child <config>`
(run from `tests/`), with the config as JSON.

It builds a `DurableSwarm` on `database_url` (executor `executor_id`) whose client talks to the
fake server at `base_url`, with the agent `ORDERS` (`output_type=Order`) defined here, then does
one `action`:

* `run`: run `ORDERS` on `USER` as `run_id` (the test kills it during the model's retry);
* `recover`: launch (DBOS recovers this executor's pending runs) and wait for `run_id`;
* `read`: read the finished run `run_id` (`handle(run_id).result()`), as any other process does.

It writes to `result` what the run's `Response` holds: the output's type and value, the
messages, and the run's status and model steps.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import openai
from pydantic import BaseModel

from durable_swarm import Agent, DurableSwarm, Response


class Order(BaseModel):
    order_id: int
    status: str
    items: list[str]


ORDERS = Agent(name="StructuredOrders", instructions="Answer with the order.", output_type=Order)
USER = [{"role": "user", "content": "Where is order 7?"}]


def _write(path: str, swarm: DurableSwarm, run_id: str, response: Response) -> None:
    info = swarm.get_run(run_id)
    output = response.output
    data = {
        "output_type": f"{type(output).__module__}.{type(output).__qualname__}",
        "output": output.model_dump() if isinstance(output, BaseModel) else output,
        "is_order": isinstance(output, Order),
        "messages": response.messages,
        "status": info.status,
        "model_steps": [s.step for s in info.steps if s.kind == "model"],
        "stored_output": info.output,
    }
    tmp = Path(path + ".partial")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def run(config: dict[str, Any]) -> None:
    client = openai.OpenAI(base_url=config["base_url"], api_key="fake-key", max_retries=0)
    swarm = DurableSwarm(
        client, database_url=config["database_url"], executor_id=config["executor_id"]
    )
    run_id = config["run_id"]
    if config["action"] == "run":
        response = swarm.run(ORDERS, USER, run_id=run_id)
    elif config["action"] == "recover":
        swarm.launch()
        deadline = time.monotonic() + 120
        while swarm.get_run(run_id).status not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, f"run {run_id} did not finish"
            time.sleep(0.02)
        response = swarm.handle(run_id).result()
    elif config["action"] == "read":
        response = swarm.handle(run_id).result()
    else:
        raise ValueError(f"unknown action {config['action']!r}")
    _write(config["result"], swarm, run_id, response)


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
