"""A run that needs an agent this process has not got parks at a `missing` wait: it holds
nothing here, any process's `get_run(...).problem` says what it misses, and once a process has
the agent its sweep resumes the run, which goes on; the sweep deletes the wait once the run is
past it. A cancelled one stays cancelled. On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

from dbos import DBOS, SetWorkflowID

from _support.wait import wait_for
from durable_swarm import Agent
from durable_swarm.durable import _dbos
from durable_swarm.durable._waits import MISSING, WaitBook
from durable_swarm.durable._workflow import run_workflow
from durable_swarm.testing import ScriptedClient, text

USER = [{"role": "user", "content": "hi"}]


def _waiting_for(name: str) -> str:
    """Start a run of the agent `name`, which this process does not know (yet)."""
    run_id = f"missing-{uuid.uuid4().hex[:8]}"
    spec = {"agent": {"name": name}, "messages": USER, "context_variables": {}}
    with SetWorkflowID(run_id):
        DBOS.start_workflow(run_workflow, spec)
    return run_id


def _waits() -> WaitBook:
    url = _dbos.run_database_url()
    assert url is not None
    return WaitBook(url)


def test_a_run_missing_its_agent_parks_until_a_process_has_it(durable_swarm_factory) -> None:
    swarm = durable_swarm_factory(ScriptedClient(lambda messages, tools: text("fine")))
    name = f"Latecomer{uuid.uuid4().hex[:6]}"
    late = _waiting_for(name)
    never = _waiting_for(f"Never{uuid.uuid4().hex[:6]}")
    for run_id in (late, never):
        problem = wait_for(lambda r=run_id: swarm.get_run(r).problem, f"the problem of {run_id}")
        expected = name if run_id == late else "Never"
        assert problem.startswith(f'waiting for agent "{expected}')
        assert swarm.get_run(run_id).status == "pending"
        wait = wait_for(lambda r=run_id: _waits().parked([r]).get(r), f"{run_id} to park")
        assert wait.key == MISSING and wait.detail is not None
    assert _waits().parked([late])[late].detail["agent"] == name  # type: ignore[index]
    statuses = {r.workflow_id: r.status for r in DBOS.list_workflows(workflow_ids=[late, never])}
    assert statuses == {late: "CANCELLED", never: "CANCELLED"}  # nothing of them runs

    Agent(name=name)  # the agent's code is imported here: this process's sweep resumes it
    assert swarm.handle(late).result().messages[-1]["content"] == "fine"
    info = swarm.get_run(late)
    assert info.status == "succeeded" and info.problem is None
    wait_for(lambda: _waits().parked([late]) == {}, "the sweep to clean the wait up")
    assert swarm.get_run(never).status == "pending"  # still missing its agent

    swarm.cancel(never)
    assert swarm.get_run(never).status == "cancelled"
    assert swarm.get_run(never).problem is None
