"""A process that races others to decide: `python _decider.py CONFIG` (JSON).

For each run id of `config["runs"]` (each waits for approval of tool call `c1`), waits at the
shared barrier file step (every racer creates `<dir>/<run>-<name>` and waits for all `racers`
files), then approves (or rejects, `config["approve"]`) as `config["name"]` through a thin
client. Prints one JSON line: run id -> "won", or the `DecisionConflictError`'s fields.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from durable_swarm.durable import DurableClient
from durable_swarm.errors import DecisionConflictError


def main(config: dict[str, Any]) -> None:
    folder, name = Path(config["dir"]), config["name"]
    outcomes: dict[str, Any] = {}
    with DurableClient(config["database_url"]) as client:
        for run_id in config["runs"]:
            (folder / f"{run_id}-{name}").touch()
            deadline = time.monotonic() + 120
            while len(list(folder.glob(f"{run_id}-*"))) < config["racers"]:
                assert time.monotonic() < deadline, "the other racer never came"
                time.sleep(0.001)
            outcomes[run_id] = decision(client, run_id, config["approve"], name)
    print(json.dumps(outcomes), flush=True)


def decision(decider: Any, run_id: str, approve: bool, name: str) -> Any:
    """Approve (or reject) tool call `c1` of `run_id` as `name` through `decider` (a swarm or
    a thin client): "won", or the fields of the `DecisionConflictError` it raised."""
    try:
        if approve:
            decider.approve(run_id, "c1", by=name)
        else:
            decider.reject(run_id, "c1", "no", by=name)
        return "won"
    except DecisionConflictError as e:
        return {"approved": e.approved, "by": e.by, "at": e.at}


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
