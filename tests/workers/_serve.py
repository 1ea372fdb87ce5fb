"""A test worker process: `python _serve.py '{"target": ..., "queue": ..., ...}'`.

Calls `durable_swarm.durable.run_worker(**config)` (what `durable-swarm worker` does), from this
directory, so `_app:swarm` is importable the way an app module is from its own directory.

One key is the test's, not `run_worker`'s: `"recovery"` picks how this worker puts a dead
process's runs back on their queues: `{"batch": 2}` (the library's batched recovery, 2 runs per
statement; each call prints `batched recovery: <count> runs`) or `{"dbos": true}` (DBOS's
own, one transaction per run, as on a DBOS release the batch was not tested with).
"""

import json
import sys
from typing import Any

import durable_swarm.durable._engine as _engine
from durable_swarm.durable import run_worker

if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    recovery = config.pop("recovery", {})
    if "batch" in recovery:
        _engine.RECOVERY_BATCH = recovery["batch"]
        reenqueue = _engine._reenqueue

        def counted(*args: Any, **kwargs: Any) -> int:
            count = reenqueue(*args, **kwargs)
            print(f"batched recovery: {count} runs", flush=True)
            return count

        _engine._reenqueue = counted
    if recovery.get("dbos"):
        _engine.BATCHED_RECOVERY_DBOS = ()
    run_worker(**config)
