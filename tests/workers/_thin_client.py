"""A thin client process: `python _thin_client.py DATABASE_URL QUEUE`.

Starts a streamed run of the agent named `Helper` by name, reads its events and result, and
prints them as JSON with the modules it imported beyond the library: it must import no agent or
tool code (the app module `_app`).
"""

import json
import sys

from durable_swarm.durable import DurableClient

if __name__ == "__main__":
    url, queue = sys.argv[1], sys.argv[2]
    with DurableClient(url) as client:
        handle = client.start(
            "Helper",
            [{"role": "user", "content": "echo from a thin client"}],
            queue=queue,
            stream=True,
        )
        events = []
        for event in handle.events():
            if "response" in event:
                response = event["response"]
                continue
            events.append(event)
        print(
            json.dumps(
                {
                    "run_id": handle.run_id,
                    "messages": response.messages,
                    "agent": response.agent,
                    "events": events,
                    "status": client.get_run(handle.run_id).status,
                    "app_imported": "_app" in sys.modules,
                }
            )
        )
