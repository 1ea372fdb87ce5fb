"""A worker process of the fault tests: `python _serve.py CONFIG` runs `run_worker(**CONFIG)`
(target `_app:client` by default: the module with the agents, and its model client)."""

import json
import sys

from durable_swarm.durable import run_worker

if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    config.setdefault("target", "_app:client")
    run_worker(**config)
