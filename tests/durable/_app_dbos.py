"""An app that configures and launches DBOS itself and runs agents in it (`test_app_dbos`).

Run as a script: `python _app_dbos.py MODE DATABASE_URL WORK_DIR MODEL_BASE_URL`. It prints one
JSON line (what it saw) on stdout. MODE:

* `beside`: the app's own workflows and queue, then `DurableSwarm.run` and `start` beside them.
* `inside`: the app workflow `app-wf` calls `swarm.run(...)` inside itself; its tool `gate`
  blocks until the file WORK_DIR/open exists (the test may kill the process meanwhile).
* `recover`: the same app restarted (same executor id and application version): DBOS recovers
  `app-wf`, and this waits for its result.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import openai
from dbos import DBOS, SetWorkflowID

from durable_swarm import Agent, DurableSwarm  # before DBOS.launch(): registers the run workflow

MODE, URL, WORK, BASE_URL = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
RUN_ID = sys.argv[5] if len(sys.argv) > 5 else ""  # "": swarm.run in a session, without a run_id

config: dict[str, Any] = {
    "name": "my-app",
    "system_database_url": URL,
    "application_version": "my-app-1",
    "executor_id": "my-app-host-1",
    "notification_listener_polling_interval_sec": 0.1,
}
if os.environ.get("APP_JSON_SERIALIZER"):  # as the guide says for encryption at rest
    from durable_swarm.durable import JsonSerializer

    config["serializer"] = JsonSerializer()
DBOS(config=config)  # type: ignore[arg-type]


def note(name: str, line: str) -> None:
    with (WORK / name).open("a") as f:
        f.write(line + "\n")


@DBOS.step()
def app_step(x: int) -> int:
    note("app_step.log", str(x))
    return x * 2


@DBOS.workflow()
def app_double(x: int) -> int:
    return app_step(x)


def gate() -> str:
    """Wait until the test opens the gate."""
    note("gate.log", "started")
    while not (WORK / "open").exists():
        time.sleep(0.05)
    note("gate.log", "done")
    return "gate open"


agent = Agent(name="Support", instructions="Help the customer.", functions=[gate])
client = openai.OpenAI(base_url=BASE_URL, api_key="fake-key", max_retries=0)
swarm = DurableSwarm(client)


@DBOS.workflow()
def app_workflow() -> dict[str, Any]:
    before = app_step(1)
    # without a run_id: in a session, which the run holds until it ends
    named = {"run_id": RUN_ID} if RUN_ID else {"session": "app-session"}
    response = swarm.run(agent, [{"role": "user", "content": "Hi"}], **named)
    after = app_step(2)
    return {"before": before, "after": after, "reply": response.messages[-1]["content"]}


def statuses() -> dict[str, dict[str, Any]]:
    return {
        w.workflow_id: {
            "name": w.name,
            "status": w.status,
            "parent": w.parent_workflow_id,
            "queue": w.queue_name,
            "version": w.app_version,
            "executor": w.executor_id,
        }
        for w in DBOS.list_workflows()
    }


DBOS.launch()
# DBOS 3.4 registers queues in the database: after the launch
app_queue = DBOS.register_queue("app_queue", concurrency=2, polling_interval_sec=0.1)
out: dict[str, Any] = {}
if MODE == "beside":
    queued = [app_queue.enqueue(app_double, i) for i in range(3)]
    started = swarm.start(agent, [{"role": "user", "content": "Hi"}], run_id="started")
    ran = swarm.run(agent, [{"role": "user", "content": "Hi"}], run_id="ran")
    out["ran"] = ran.messages[-1]["content"]
    out["started"] = started.result().messages[-1]["content"]
    out["queued"] = [h.get_result() for h in queued]
    out["direct"] = app_double(10)
    out["later"] = app_queue.enqueue(app_double, 20).get_result()
elif MODE == "inside":
    with SetWorkflowID("app-wf"):
        out["result"] = DBOS.start_workflow(app_workflow).get_result()
elif MODE == "client":
    # a run for the library's workers, enqueued on their queue, beside the app's own queue
    from durable_swarm.durable import DurableClient

    queued = [app_queue.enqueue(app_double, i) for i in range(3)]
    client_run = DurableClient(database_url=URL).start(
        "Support", [{"role": "user", "content": "Hi"}], queue="agents", run_id="queued-run"
    )
    out["queued"] = [h.get_result() for h in queued]
    out["worker"] = client_run.result().messages[-1]["content"]
elif MODE == "recover":
    out["result"] = DBOS.retrieve_workflow("app-wf").get_result()
out["workflows"] = statuses()
if MODE in ("inside", "recover"):
    steps = DBOS.list_workflow_steps("app-wf") or []
    out["steps"] = [[s["function_name"], s["child_workflow_id"], s["output"]] for s in steps]
print(json.dumps(out), flush=True)
DBOS.destroy()
