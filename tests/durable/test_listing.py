"""list_runs (and its async twin) filter runs by status and agent, newest first."""

from __future__ import annotations

import pytest

from durable_swarm import Agent, DurableSwarmError
from durable_swarm.testing import ScriptedClient, echo


async def test_list_runs_filters_by_status_and_agent(durable_swarm_factory, run_id):
    swarm = durable_swarm_factory(ScriptedClient(echo))
    lister = Agent(name=f"Lister-{run_id[-8:]}")
    for n in range(2):
        await swarm.arun(lister, [{"role": "user", "content": f"m{n}"}], run_id=f"{run_id}-{n}")

    mine = await swarm.alist_runs(agent=lister.name)
    assert [r.run_id for r in mine] == [f"{run_id}-1", f"{run_id}-0"]  # newest first
    assert {r.status for r in mine} == {"succeeded"}
    assert swarm.list_runs(agent=lister.name, status="failed") == []
    assert [r.run_id for r in swarm.list_runs(agent=lister.name, limit=1)] == [f"{run_id}-1"]


def test_list_runs_rejects_an_unknown_status(durable_swarm_factory):
    swarm = durable_swarm_factory(ScriptedClient(echo))
    with pytest.raises(DurableSwarmError, match="Unknown run status 'done'"):
        swarm.list_runs(status="done")
