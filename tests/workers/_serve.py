"""A test worker process: `python _serve.py '{"target": ..., "queue": ..., ...}'`.

Calls `durable_swarm.durable.run_worker(**config)` (what `durable-swarm worker` does), from this
directory, so `_app:swarm` is importable the way an app module is from its own directory.
"""

import json
import sys

from durable_swarm.durable import run_worker

if __name__ == "__main__":
    run_worker(**json.loads(sys.argv[1]))
