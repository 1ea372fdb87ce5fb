"""Putting a run back on its queue (`_dbos.put_back`, what the ownership thread does with a run
that stopped on a database error, and a run does after a fault) never gives a second execution
a run that one execution here still runs, nor a run another process holds, and nothing while
this process's ownership is not confirmed. On SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from typing import Any

from _support.wait import wait_for
from durable_swarm import Agent
from durable_swarm.durable import _dbos
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

RELEASE = threading.Event()
TOOL_RUNS: list[str] = []


def hold(order: str) -> str:
    """Hold until the test releases it (one entry per execution of the tool)."""
    TOOL_RUNS.append(order)
    RELEASE.wait(60)
    return "held"


def _script(messages: list[dict[str, Any]], tools: Any) -> Any:
    if not any(m.get("role") == "tool" for m in messages):
        return calls(ToolCall("hold", {"order": "o1"}))
    return text("Done.")


HOLDER = Agent(name="put-back-holder", instructions="Hold.", functions=[hold])


def test_a_run_an_execution_here_runs_is_never_put_back(
    durable_swarm_factory: Any, run_id: str
) -> None:
    RELEASE.clear()
    TOOL_RUNS.clear()
    swarm = durable_swarm_factory(ScriptedClient(_script))
    handle = swarm.start(HOLDER, [{"role": "user", "content": "go"}], run_id=run_id)
    wait_for(lambda: TOOL_RUNS, "the tool to run")
    assert _dbos.put_back(run_id) is False  # its execution here is in the tool
    RELEASE.set()
    assert handle.result().messages[-1]["content"] == "Done."
    assert TOOL_RUNS == ["o1"]


def test_nothing_is_put_back_while_the_ownership_is_not_confirmed(
    durable_swarm_factory: Any, run_id: str
) -> None:
    swarm = durable_swarm_factory(ScriptedClient(lambda m, t: text("ok")))
    swarm.run(HOLDER, [{"role": "user", "content": "hi"}], run_id=run_id)
    own = _dbos.ownership()
    assert own is not None
    confirmed_until = own._confirmed_until
    own._confirmed_until = time.monotonic() - 1  # as after a pause: its heartbeat is old
    try:
        assert _dbos.put_back(run_id) is None
    finally:
        own._confirmed_until = confirmed_until
    assert _dbos.put_back(run_id) is False  # it succeeded: not PENDING here
    assert swarm.get_run(run_id).status == "succeeded"
