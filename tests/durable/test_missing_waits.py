"""A run that needs an agent this process has not got parks at a `missing` wait: it holds
nothing here, any process's `get_run(...).problem` says what it misses, and once a process has
the agent its sweep resumes the run, which goes on; the sweep deletes the wait once the run is
past it. A cancelled one stays cancelled. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import time
import uuid

from dbos import DBOS, SetWorkflowID

from _support.wait import wait_for
from durable_swarm import Agent
from durable_swarm.durable import _dbos, _workflow
from durable_swarm.durable._waits import MISSING, Wait, WaitBook
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


def test_a_run_resumed_for_what_it_misses_is_handed_on_a_few_times_then_waits(
    durable_swarm_factory, monkeypatch
) -> None:
    """A process that has what a parked run misses resumes it onto its queue, where a process
    that misses it too may take it: that one parks it and resumes it again at once, for the next
    process that looks, `HAND_ONS` times in a row at most; then the run waits for the next
    sweep of a process that has it (no busy loop). Here the only process misses the agent, so
    it takes each hand-on itself."""
    monkeypatch.setattr(_workflow, "HAND_ONS", 2)
    swarm = durable_swarm_factory(ScriptedClient(lambda messages, tools: text("fine")))
    run_id = _waiting_for(f"Elsewhere{uuid.uuid4().hex[:6]}")
    notices = _Notices(run_id)
    logging.getLogger("durable_swarm").addHandler(notices)
    try:
        wait_for(lambda: _waits().parked([run_id]).get(run_id), "the run to park")
        assert notices.count == 1
        # What the sweep of a process that has the agent does: win the resume, resume the run.
        offer = _waits().claim_resume(run_id, MISSING)
        assert offer is not None
        DBOS.resume_workflow(run_id)
        wait_for(lambda: notices.count == 4, "the offered execution and its two hand-ons")
        parked = wait_for(lambda: _parked_at_rest(run_id), "the run to park again")
        assert parked.detail is not None and parked.detail["handed_on"] == 0
        time.sleep(1.5)  # nothing resumes it any more
        assert notices.count == 4
        assert swarm.get_run(run_id).status == "pending"
        assert _parked_at_rest(run_id) is not None
    finally:
        logging.getLogger("durable_swarm").removeHandler(notices)
    swarm.cancel(run_id)


def _parked_at_rest(run_id: str) -> Wait | None:
    """The run's wait if it is parked and DBOS shows the run cancelled (nothing of it runs)."""
    wait = _waits().parked([run_id]).get(run_id)
    status = DBOS.get_workflow_status(run_id)
    at_rest = wait is not None and wait.state == "parked"
    return wait if at_rest and status is not None and status.status == "CANCELLED" else None


class _Notices(logging.Handler):
    """Counts the notices that `run_id` waits for what it misses (one per execution)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(logging.WARNING)
        self.run_id = run_id
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(f"Run {self.run_id} is waiting for"):
            self.count += 1
