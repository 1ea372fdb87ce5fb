"""A plain `DurableSwarm` process (no worker, no queue): `python _starter.py CONFIG`.

Starts one run of `Helper` per tag in CONFIG["tags"] (`<command> <tag>`, command CONFIG["command"])
on CONFIG["database_url"] with the executor id CONFIG["executor_id"], prints `started N`, and
waits to be killed. Its runs have no queue, as an app's own runs do: when it dies, they are the
runs DBOS's own recovery would put on its internal queue.
"""

import json
import sys
import time

from _app import helper, swarm

from durable_swarm import DurableSwarm

if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    plain = DurableSwarm(
        swarm.client,
        database_url=config["database_url"],
        executor_id=config["executor_id"],
        heartbeat_interval=0.2,
        dead_after=1.5,
    )
    for tag in config["tags"]:
        plain.start(helper, [{"role": "user", "content": f"{config['command']} {tag}"}])
    print(f"started {len(config['tags'])}", flush=True)
    while True:
        time.sleep(60)
