"""A plain `DurableSwarm` process: `python _plain.py CONFIG` (JSON).

Starts one run per tag in `config["tags"]` (run id `<tag>`) with `DurableSwarm.start`, writes
`<work>/result-<tag>.json` as each finishes, and keeps serving (taking over other processes' runs)
until SIGTERM. `config` also gives `database_url`, `heartbeat_interval`, `dead_after`, and
`agent` ("Stepper", or "Ghost": the agent of `_ghost.py`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

from _app import WORK_DIR, client, stepper

from durable_swarm import DurableSwarm
from durable_swarm.durable import _dbos


def main(config: dict) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    swarm = DurableSwarm(
        client,
        database_url=config["database_url"],
        heartbeat_interval=config["heartbeat_interval"],
        dead_after=config["dead_after"],
    ).launch()
    print(f"launched {_dbos.ownership().executor_id}", flush=True)

    agent = stepper
    if config.get("agent") == "Ghost":
        from _ghost import ghost as agent

    def finish(tag: str) -> None:
        handle = swarm.start(agent, [{"role": "user", "content": f"step {tag}"}], run_id=tag)
        response = handle.result()
        partial = WORK_DIR / f"result-{tag}.json.partial"  # the test must never read half
        partial.write_text(json.dumps(response.messages))
        os.replace(partial, WORK_DIR / f"result-{tag}.json")

    for tag in config.get("tags", []):
        threading.Thread(target=finish, args=(tag,), daemon=True).start()
    stop.wait()
    from durable_swarm.durable import shutdown

    shutdown()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
