"""A run's notice (`get_run(...).problem`, stored in `durable_swarm_notices`) lasts only while
the run waits: it is cleared when the run goes on, and the notices of runs that no longer wait
(their process died, they were cancelled elsewhere) are deleted by the next notice posted or
cleared, so the table never outgrows the number of waiting runs. On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID

from _support.wait import wait_for
from durable_swarm import Agent
from durable_swarm.durable._notices import NOTICES_TABLE, Notices
from durable_swarm.durable._tables import engine_for
from durable_swarm.durable._workflow import run_workflow
from durable_swarm.testing import ScriptedClient, text

USER = [{"role": "user", "content": "hi"}]


def _noticed(database_url: str) -> set[str]:
    """The run ids that have a notice now."""
    from durable_swarm.durable import resolve_database_url

    engine = engine_for(resolve_database_url(database_url))
    with engine.begin() as conn:
        return {row[0] for row in conn.execute(sa.text(f"SELECT run_id FROM {NOTICES_TABLE}"))}


def _waiting_for(name: str) -> str:
    """Start a run of the agent `name`, which this process does not know (yet)."""
    run_id = f"notice-{uuid.uuid4().hex[:8]}"
    spec = {"agent": {"name": name}, "messages": USER, "context_variables": {}}
    with SetWorkflowID(run_id):
        DBOS.start_workflow(run_workflow, spec)
    return run_id


def test_a_notice_lasts_while_its_run_waits_and_the_table_stays_bounded(
    durable_swarm_factory, database_url
):
    swarm = durable_swarm_factory(ScriptedClient(lambda messages, tools: text("fine")))
    url = swarm.database_url
    # A notice left behind by a process that died: its run finished elsewhere since.
    finished = f"finished-{uuid.uuid4().hex[:8]}"
    swarm.run(Agent(name="Finisher"), USER, run_id=finished)
    Notices(url).post(finished, "a-process-that-died", 'waiting for agent "Gone"')
    assert finished in _noticed(database_url)

    name = f"Latecomer{uuid.uuid4().hex[:6]}"
    late = _waiting_for(name)
    cancelled = _waiting_for(f"Never{uuid.uuid4().hex[:6]}")
    for run_id in (late, cancelled):
        problem = wait_for(lambda r=run_id: swarm.get_run(r).problem, f"the notice of {run_id}")
        assert problem.startswith("waiting for agent")
    assert finished not in _noticed(database_url)  # pruned when the notices were posted

    Agent(name=name)  # the agent's code is imported: the run goes on
    assert swarm.handle(late).result().messages[-1]["content"] == "fine"
    assert swarm.get_run(late).problem is None
    assert _noticed(database_url) == {cancelled}

    swarm.cancel(cancelled)
    wait_for(lambda: _noticed(database_url) == set(), "the cancelled run's notice to go")
    assert swarm.get_run(cancelled).status == "cancelled"
