"""A child process of the restart tests: `run(config)`, in a process forked by
`_support/zygote.py` (or `python -m handoffs._child '<json config>'` from tests/, to debug one
by hand).

It builds a `DurableSwarm` on `database_url` with `executor_id` (children that share an executor
id recover each other's runs at launch) and a scripted model, then does one `action`:

* `approval_start`: start the cashier's run and block (it waits for an approval);
* `revert_start`: start a chat with `echo` that reverts to the person after each answer, and block;
* `fingerprints`: write the fingerprints of `_agents.FINGERPRINTED` (no database);
* `refund_start`: run AG2's refund example through `initiate_swarm_chat` (blocks at the first
  question to the person);
* `recover`: launch (DBOS recovers this executor's pending runs) and wait for `run_id`'s result;
* `unwatched_approval_start`: `approval_start` as the release before watched waits ran it: the
  run waits in a plain `DBOS.recv` (its log has no `watch:` step; recovery must replay it so);
* `repl`: `run_demo_loop(echo, swarm=..., session_id=run_id, input_fn=...)` reading `lines`; when
  they run out it blocks (`then: "block"`, for the test to kill it) or ends input (`"eof"`).

While it runs, every new wait of the run is written to `<work>/<name>.waiting.jsonl` (one JSON
line per wait: status and `waiting_for`), so the test knows when to answer without touching the
database itself. With `wait_for_go`, the child imports everything, then waits for
`<work>/<name>.go` before it touches the database (the test starts it early to hide the imports).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from durable_swarm import AfterWorkOption, DurableSwarm, _registry, initiate_swarm_chat
from durable_swarm.repl import run_demo_loop
from durable_swarm.testing import ScriptedClient

from . import _agents

MODELS = {
    "cashier": _agents.cashier_model,
    "refund": _agents.refund_model,
    "echo": _agents.echo_model,
}


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, default=repr))
    os.replace(tmp, path)


def watch_waits(swarm: DurableSwarm, work: Path, name: str, run_id: str) -> None:
    """Append each new wait of the run to `<name>.waiting.jsonl` (a daemon thread)."""

    def loop() -> None:
        seen: Any = None
        while True:
            try:
                info = swarm.get_run(run_id)
            except Exception:  # not started yet
                time.sleep(0.05)
                continue
            key = (info.status, len(info.messages))
            if info.status.startswith("waiting_for") and key != seen:
                seen = key
                line = {"status": info.status, "waiting_for": info.waiting_for}
                with open(work / f"{name}.waiting.jsonl", "a") as f:
                    f.write(json.dumps(line) + "\n")
            time.sleep(0.05)

    threading.Thread(target=loop, daemon=True).start()


def block_forever() -> None:
    while True:
        time.sleep(60)


def unwatched_waits() -> None:
    """Make this process wait as the release before watched waits did (no patch marker)."""
    from dbos import DBOS

    from durable_swarm.durable._log import WATCHED_WAITS

    patch = DBOS.patch_async

    async def without_watched_waits(name: str) -> bool:
        return False if name == WATCHED_WAITS else await patch(name)

    DBOS.patch_async = without_watched_waits  # type: ignore[method-assign]


def run(config: dict[str, Any]) -> None:
    """Do what `config` says (see the module's docstring)."""
    work, name, run_id = Path(config["work_dir"]), config["name"], config["run_id"]
    os.environ[_agents.WORK_DIR_ENV] = str(work)
    if config["action"] == "fingerprints":
        fingerprints = {a.name: _registry.fingerprint(a) for a in _agents.FINGERPRINTED}
        write_json(work / f"{name}.result.json", fingerprints)
        return
    if config.get("wait_for_go"):
        go = work / f"{name}.go"
        while not go.exists():
            time.sleep(0.01)
    swarm = DurableSwarm(
        ScriptedClient(MODELS[config["model"]]),
        database_url=config["database_url"],
        executor_id=config["executor_id"],
    )
    action = config["action"]
    if action == "unwatched_approval_start":
        unwatched_waits()
        action = "approval_start"
    if action == "approval_start":
        watch_waits(swarm, work, name, run_id)
        swarm.start(_agents.cashier, [{"role": "user", "content": "Pay Bob 30."}], run_id=run_id)
        block_forever()
    elif action == "revert_start":
        watch_waits(swarm, work, name, run_id)
        swarm.start(
            _agents.echo,
            [{"role": "user", "content": "hello"}],
            run_id=run_id,
            after_work=AfterWorkOption.REVERT_TO_USER,
            max_turns=9,
        )
        block_forever()
    elif action == "refund_start":
        watch_waits(swarm, work, name, run_id)
        initiate_swarm_chat(
            _agents.customer_service,
            _agents.REFUND_AGENTS,
            _agents.REFUND_REQUEST,
            context_variables=dict(_agents.REFUND_CONTEXT),
            swarm=swarm,
            run_id=run_id,
        )
        raise AssertionError("the chat should have waited for the person")
    elif action == "recover":
        swarm.launch()
        watch_waits(swarm, work, name, run_id)
        response = swarm.handle(run_id).result()
        info = swarm.get_run(run_id)
        write_json(
            work / f"{name}.result.json",
            {
                "messages": response.messages,
                "agent": getattr(response.agent, "name", response.agent),
                "context_variables": response.context_variables,
                "status": info.status,
                "info_messages": info.messages,
                "transitions": info.transitions,
                "decisions": info.decisions,
            },
        )
    elif action == "repl":
        pending = list(config["lines"])

        def read(prompt: str) -> str:
            print(prompt, end="", flush=True)
            if pending:
                line = pending.pop(0)
                print(line, flush=True)
                return line
            if config["then"] == "block":
                (work / f"{name}.blocked").write_text("")
                block_forever()
            raise EOFError

        run_demo_loop(_agents.echo, swarm=swarm, session_id=run_id, input_fn=read)
        sys.stdout.flush()
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
