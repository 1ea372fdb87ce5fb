"""What a child process of the durable tests does (forked by `_support/zygote.py`; see
`_harness.py`).

It builds a `DurableSwarm` on the config's database, talking to the fake server at `base_url`
with the scenario's agents (`_scenarios.py`), then does one `action`:

* `run`: run the scenario (or the agent `Ghost`) with `run_id`; with `stream`, write each event
  as a JSON line to the `events` file as it is read;
* `recover`: launch (DBOS recovers this executor's pending runs) and wait for `run_id` (polling
  `get_run`, then `handle(run_id).result()`; with `stream`, reading `handle(run_id).events()`);
* `start_then_exit`: `start()` the run, wait until `exit_after_steps` steps are checkpointed, and
  leave with `os._exit(0)` (no cleanup: the run is left in flight);
* `resume`: as another worker, `resume(run_id)` a run left by a dead process and wait for it;
* `read_events`: read `handle(run_id).events()` from the start, one JSON line per event;
* `ghost_recover`: launch without the agent `Ghost` defined; report the run's status and problem
  once the recovering run reports it; then define `Ghost` and wait for the run;
* `serve`: serve the queue `queue` as a worker (`run_worker`, its target this module's `SWARMS`)
  until killed;
* `swarm_missing`: launch (recovering the run, whose swarm this process lacks), report the run's
  status and problem once the recovering run reports it, and leave with `os._exit(0)`.

With `swarms` (`{name: base_url}`), the child builds one `DurableSwarm(client, name=name)` per
entry, in that order, each with its own client of that server, and acts with the one named
`run_on` (default: the last built).

The outcome (the `Response`, and the run's status and steps from `get_run`) is written as JSON to
the `result` file.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import openai

from durable_swarm import Agent, DurableSwarm, Response

from . import _scenarios


def write_json(path: str, data: Any) -> None:
    tmp = Path(path + ".partial")
    tmp.write_text(json.dumps(data, default=repr))
    os.replace(tmp, path)


def response_json(response: Response) -> dict[str, Any]:
    agent = response.agent
    return {
        "messages": response.messages,
        "agent": agent.name if isinstance(agent, Agent) else agent,
        "agent_is_object": isinstance(agent, Agent),
        "context_variables": response.context_variables,
    }


def write_events(path: str, events: Any) -> Response:
    response = None
    with open(path, "a") as f:
        for event in events:
            if "response" in event:
                response = event["response"]
                event = {"response": response_json(response)}
            f.write(json.dumps(event) + "\n")
            f.flush()
    assert response is not None, "the stream ended without a response"
    return response


def finish(config: dict[str, Any], swarm: DurableSwarm, response: Response, **extra: Any) -> None:
    info = swarm.get_run(config["run_id"])
    write_json(
        config["result"],
        {
            **response_json(response),
            "status": info.status,
            "steps": [[s.step, s.kind, s.name] for s in info.steps],
            "info_agent": info.agent,
            "info_context_variables": info.context_variables,
            **extra,
        },
    )


def wait_until_done(swarm: DurableSwarm, run_id: str) -> None:
    """Poll the run's status (DBOS's own result wait polls only once a second)."""
    deadline = time.monotonic() + 120
    while swarm.get_run(run_id).status not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"run {run_id} did not finish"
        time.sleep(0.02)


SWARMS: list[DurableSwarm] = []  # every swarm the child built, held for the process's life


def build_swarms(config: dict[str, Any]) -> DurableSwarm:
    """The child's swarms (see the module docstring); returns the one it acts with."""
    servers = config.get("swarms") or {"default": config["base_url"]}
    for name, base_url in servers.items():
        client = openai.OpenAI(
            base_url=base_url, api_key="fake-key", max_retries=config.get("max_retries", 2)
        )
        SWARMS.append(
            DurableSwarm(
                client,
                name=name,
                database_url=config["database_url"],
                executor_id=config["executor_id"],
            )
        )
    run_on = config.get("run_on")
    return next(s for s in SWARMS if s.name == run_on) if run_on else SWARMS[-1]


def run(config: dict[str, Any]) -> None:
    """Do what `config` says (see the module docstring)."""
    os.environ[_scenarios.WORK_DIR_ENV] = config["work_dir"]
    if config.get("hang"):
        os.environ[_scenarios.HANG_ENV] = config["hang"]
    swarm = build_swarms(config)
    run_id: str = config["run_id"]
    action = config["action"]
    agent = _scenarios.define_ghost() if config.get("agent") == "Ghost" else _scenarios.triage
    stream = bool(config.get("stream"))
    events = config["events"]

    if action == "run":
        result = swarm.run(
            agent, _scenarios.USER_MESSAGES, _scenarios.START_CONTEXT, stream=stream, run_id=run_id
        )
        finish(config, swarm, write_events(events, result) if stream else result)
    elif action == "recover":
        swarm.launch()
        handle = swarm.handle(run_id)
        if stream:
            finish(config, swarm, write_events(events, handle.events()))
        else:
            wait_until_done(swarm, run_id)
            finish(config, swarm, handle.result())
    elif action == "start_then_exit":
        swarm.start(agent, _scenarios.USER_MESSAGES, _scenarios.START_CONTEXT, run_id=run_id)
        while len(swarm.get_run(run_id).steps) < config["exit_after_steps"]:
            time.sleep(0.01)
        os._exit(0)
    elif action == "resume":
        handle = swarm.resume(run_id)
        wait_until_done(swarm, run_id)
        finish(config, swarm, handle.result())
    elif action == "read_events":
        finish(config, swarm, write_events(events, swarm.handle(run_id).events()))
    elif action == "ghost_recover":
        logged: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("durable_swarm").addHandler(handler)
        swarm.launch()
        deadline = time.monotonic() + 60
        while (info := swarm.get_run(run_id)).problem is None:
            assert time.monotonic() < deadline, "the recovered run never reported a problem"
            time.sleep(0.02)
        missing = {"status": info.status, "problem": info.problem, "logged": list(logged)}
        _scenarios.define_ghost()  # the agent's code is imported now: the run goes on
        wait_until_done(swarm, run_id)
        finish(config, swarm, swarm.handle(run_id).result(), while_missing=missing)
    elif action == "serve":
        from durable_swarm.durable import run_worker

        run_worker(
            "durable._child:SWARMS",
            queue=config["queue"],
            database_url=config["database_url"],
            executor_id=config["executor_id"],
            poll_interval=0.1,
        )
    elif action == "swarm_missing":
        swarm.launch()
        deadline = time.monotonic() + 60
        while (info := swarm.get_run(run_id)).problem is None:
            assert time.monotonic() < deadline, "the recovered run never reported a problem"
            time.sleep(0.02)
        write_json(config["result"], {"status": info.status, "problem": info.problem})
        os._exit(0)
    elif action in ("tool_interrupt", "model_interrupt"):
        interrupt_run(config, in_model=action == "model_interrupt")
    else:
        raise ValueError(f"unknown action {action!r}")


def interrupt_run(config: dict[str, Any], *, in_model: bool = False) -> None:
    """A tool (or the model client, `in_model`) raises KeyboardInterrupt: report how the run ends
    and whether the next run of this process still works."""
    import dbos._dbos as dbos_internals

    from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

    def interrupt() -> str:
        """A tool that is interrupted."""
        raise KeyboardInterrupt

    interrupted: list[bool] = []

    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        if in_model and not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt
        return (
            text("after") if _scenarios.stage(messages) else calls(ToolCall("interrupt", id="c1"))
        )

    client = ScriptedClient(script)
    swarm = DurableSwarm(
        client, database_url=config["database_url"], executor_id=config["executor_id"]
    )
    run_id = config["run_id"]
    swarm.start(Agent(name="Interrupted", functions=[interrupt]), [], run_id=run_id)

    def loop_alive() -> bool:
        instance = dbos_internals._dbos_global_instance
        assert instance is not None
        loop = instance._background_event_loop._loop
        return loop is not None and not loop.is_closed()

    deadline = time.monotonic() + 60
    while (info := swarm.get_run(run_id)).status == "pending" and loop_alive():
        assert time.monotonic() < deadline, "the run neither ended nor broke DBOS"
        time.sleep(0.02)
    try:
        swarm.run(Agent(name="Next"), [{"role": "user", "content": "hi"}])
        next_run = "ok"
    except Exception as e:
        next_run = f"{type(e).__name__}: {e}"
    write_json(
        config["result"],
        {"status": info.status, "error": info.error, "loop_alive": loop_alive(), "next": next_run},
    )
