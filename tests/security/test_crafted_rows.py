"""Reading a run's log never imports or calls code: a crafted row that names a module's function
as a handoff target leaves the run waiting with a problem that names it; the module is never
imported (its import would write a marker) and the process goes on serving other runs. On SQLite
and PostgreSQL."""

from __future__ import annotations

import sys
import time
import uuid

import pytest
from dbos import DBOS, SetWorkflowID

from durable_swarm import Agent
from durable_swarm.durable._workflow import agent_ref, run_workflow
from durable_swarm.testing import ScriptedClient, text

USER = [{"role": "user", "content": "hi"}]
SENTINEL = "security._sentinel"


def wait_for(predicate, timeout: float = 60.0, what: str = "a condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def marker(tmp_path, monkeypatch):
    path = tmp_path / "imported.txt"
    monkeypatch.setenv("DURABLE_SWARM_SENTINEL", str(path))
    sys.modules.pop(SENTINEL, None)
    yield path
    assert SENTINEL not in sys.modules


@pytest.mark.parametrize("target", [f"{SENTINEL}:choose", "os:abort", f"{SENTINEL}:"])
def test_a_crafted_after_work_naming_a_function_never_imports_it(
    durable_swarm_factory, marker, target
):
    agent = Agent(name="CraftedRowAgent")
    swarm = durable_swarm_factory(ScriptedClient(lambda messages, tools: text("fine")))
    swarm.launch()
    crafted = f"crafted-{uuid.uuid4().hex[:8]}"
    spec = {  # what a writer of the database could store as a run's input
        "agent": agent_ref(agent),
        "messages": USER,
        "context_variables": {},
        "after_work": {"callable": target},
    }
    with SetWorkflowID(crafted):
        DBOS.start_workflow(run_workflow, spec)

    problem = wait_for(lambda: swarm.get_run(crafted).problem, what="the run's problem")
    assert problem.startswith(f'waiting for function "{target}": ')
    assert (
        f"The function {target!r} is needed by run {crafted!r} but this process has not "
        "registered it, and names from a run's log are never imported. Define the agent whose "
        "handoff rule uses it, or start a run with after_work= set to it, in this process; the "
        "run waits and loses nothing until then."
    ) in problem
    assert swarm.get_run(crafted).status == "pending"
    # The process keeps serving other runs meanwhile.
    other = swarm.run(agent, USER, run_id=f"other-{uuid.uuid4().hex[:8]}")
    assert other.messages[-1]["content"] == "fine"
    assert not marker.exists() and not marker.with_suffix(".called").exists()
    assert SENTINEL not in sys.modules

    swarm.cancel(crafted)
    wait_for(lambda: swarm.get_run(crafted).status == "cancelled", what="the cancel")
    assert not marker.exists()
