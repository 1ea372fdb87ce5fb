"""A test worker process: `python _serve.py '{"target": ..., "queue": ..., ...}'`.

Calls `durable_swarm.durable.run_worker(**config)` (what `durable-swarm worker` does), from this
directory, so `_app:swarm` is importable the way an app module is from its own directory.

One key is the test's, not `run_worker`'s: `"recovery": {"batch": N}` makes this worker put a
dead process's runs back on their queues N runs per call of `resume_workflows` (of the
`DBOSClient` its ownership thread uses), and print `recovery batch: <count> runs` for each call.
"""

import json
import sys
from typing import Any

from durable_swarm.durable import _dbos, run_worker

if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    recovery = config.pop("recovery", {})
    if "batch" in recovery:
        _dbos.RECOVERY_BATCH = recovery["batch"]
        resume = _dbos.DBOSClient.resume_workflows

        def counted(client: Any, run_ids: list[str], **kwargs: Any) -> Any:
            print(f"recovery batch: {len(run_ids)} runs", flush=True)
            return resume(client, run_ids, **kwargs)

        _dbos.DBOSClient.resume_workflows = counted  # type: ignore[method-assign]
    run_worker(**config)
