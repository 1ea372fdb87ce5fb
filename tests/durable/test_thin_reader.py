"""Reading runs needs none of the code that runs them: the thin client, the CLI's run commands and
the web console read the log through `durable._log` and `durable._runs`, and a fresh process that
imports them, and reads, lists and counts runs (`durable-swarm runs show` and `runs list` too),
never loads the turn loop, the tool machinery, the runtimes or the model adapter. On SQLite and
PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from durable_swarm import Agent
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

RUNNERS = [
    "durable_swarm.loop",
    "durable_swarm.tools",
    "durable_swarm.runtime",
    "durable_swarm.swarm",
    "durable_swarm.model",
    "durable_swarm.durable._workflow",
    "durable_swarm.durable._swarm",
]
READERS = [
    "durable_swarm.durable._client",
    "durable_swarm._cli._runs",
    "durable_swarm._cli._store",
    "durable_swarm._cli._render",
    "durable_swarm.web._serve",
    "durable_swarm.web._views",
]


def lookup(city: str) -> str:
    """Look up a city."""
    return f"{city}: sunny"


READ_AGENT = Agent(name="thin-reader-agent", instructions="Look.", functions=[lookup])


def fresh_process(script: str, *args: str) -> Any:
    """Run `script` in a new interpreter; it prints one JSON value, returned here."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


IMPORT_READERS = f"""
import importlib, json, sys
for name in {READERS!r}:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in {RUNNERS!r} if m in sys.modules)))
"""

READ_A_RUN = f"""
import json, sys
from durable_swarm.durable._client import DurableClient
with DurableClient(sys.argv[1]) as client:
    info = client.get_run(sys.argv[2])
    listed = client.list_runs(agent="thin-reader-agent")
    counted = client.count_runs(status="succeeded")
    approvals = client.list_approvals()
loaded = sorted(m for m in {RUNNERS!r} if m in sys.modules)
with DurableClient(sys.argv[1]) as client:  # a result is a Response: the agent types load now
    result = client.handle(sys.argv[2]).result()
print(json.dumps({{
    "result": [result.agent, result.messages[-1]["content"], result.usage.model_calls],
    "status": info.status,
    "messages": [m.get("content") for m in info.messages],
    "listed": [r.run_id for r in listed],
    "counted": counted,
    "approvals": len(approvals),
    "loaded": loaded,
}}))
"""


CLI_READS = f"""
import contextlib, io, json, sys
from durable_swarm.cli import main
shown = io.StringIO()
with contextlib.redirect_stdout(shown):
    for command in (["runs", "show", sys.argv[2]], ["runs", "list"]):
        assert main([*command, "--database-url", sys.argv[1], "--json"]) == 0
print(json.dumps(sorted(m for m in {RUNNERS!r} if m in sys.modules)))
"""


def test_importing_the_readers_loads_no_runner() -> None:
    assert fresh_process(IMPORT_READERS) == []


def test_reading_a_run_in_a_fresh_process_loads_no_runner(
    durable_swarm_factory: Any, database_url: str, run_id: str
) -> None:
    swarm = durable_swarm_factory(
        ScriptedClient([calls(ToolCall("lookup", {"city": "Oslo"})), text("Sunny in Oslo.")])
    )
    swarm.run(READ_AGENT, [{"role": "user", "content": "weather?"}], run_id=run_id)

    read = fresh_process(READ_A_RUN, database_url, run_id)

    assert read["loaded"] == []
    assert read["status"] == "succeeded"
    assert read["messages"] == ["weather?", None, "Oslo: sunny", "Sunny in Oslo."]
    assert run_id in read["listed"]
    assert read["counted"] >= 1
    assert read["approvals"] == 0
    assert read["result"] == ["thin-reader-agent", "Sunny in Oslo.", 2]
    assert fresh_process(CLI_READS, database_url, run_id) == []
