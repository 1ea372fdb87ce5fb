"""Bad input gets a clear error and loses nothing: an unreachable database, an unknown run id,
malformed messages, a tool result that cannot be stored. (An agent missing at recovery needs
other processes: see test_crash.py.)"""

from __future__ import annotations

import uuid

import dbos._dbos as dbos_internals
import pytest

from _support.db import use_database
from durable_swarm import (
    Agent,
    DatabaseUnavailableError,
    DurableSwarm,
    DurableSwarmError,
    Result,
    RunNotFoundError,
)
from durable_swarm.durable import shutdown
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

USER = [{"role": "user", "content": "hi"}]


def unreachable_url(backend: str, tmp_path) -> str:
    if backend == "postgres":
        return "postgresql://postgres@127.0.0.1:1/dswarm_nowhere"
    return str(tmp_path / f"missing-{uuid.uuid4().hex[:6]}" / "runs.sqlite")


def test_unreachable_database_is_a_clear_error_and_nothing_is_written(
    backend, database_url, tmp_path, monkeypatch, run_id
):
    monkeypatch.chdir(tmp_path)  # a default SQLite file would show up here
    url = unreachable_url(backend, tmp_path)
    client = ScriptedClient([text("never")])
    ran: list[int] = []

    def tool() -> str:
        ran.append(1)
        return "never"

    shutdown()  # DBOS is one per process: leave this module's database for the bad one
    try:
        swarm = DurableSwarm(client, database_url=url)
        agent = Agent(name="Unreachable", functions=[tool])
        with pytest.raises(DatabaseUnavailableError) as caught:
            swarm.run(agent, USER, run_id=run_id)
        for call in (lambda: swarm.start(agent, USER), lambda: swarm.get_run(run_id)):
            with pytest.raises(DatabaseUnavailableError):
                call()
    finally:
        use_database(database_url)  # the process can go on with a good database

    error = caught.value
    assert isinstance(error, ConnectionError)
    message = str(error)
    assert url.split("/")[-1] in message or url in message
    assert "Nothing was written" in message
    assert client.call_count == 0 and ran == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no file, no default database
    # no half-launched DBOS was left behind: the next swarm works on the good database
    assert dbos_internals._dbos_global_instance is not None
    good = DurableSwarm(ScriptedClient([text("fine")]), database_url=database_url)
    assert good.run(Agent(name="Fine"), USER).messages[0]["content"] == "fine"
    with pytest.raises(RunNotFoundError):
        good.get_run(run_id)  # the failed attempt left no run behind


def test_unknown_run_id_is_a_clear_error(durable_swarm_factory):
    swarm = durable_swarm_factory(ScriptedClient([]))
    missing = f"no-such-run-{uuid.uuid4().hex[:6]}"
    attempts = {
        "get_run": lambda: swarm.get_run(missing),
        "handle": lambda: swarm.handle(missing),
        "cancel": lambda: swarm.cancel(missing),
        "resume": lambda: swarm.resume(missing),
        "fork": lambda: swarm.fork(missing, 1),
    }

    for name, attempt in attempts.items():
        with pytest.raises(RunNotFoundError) as caught:
            attempt()
        assert caught.value.run_id == missing, name
        assert repr(missing) in str(caught.value), name
        assert isinstance(caught.value, KeyError), name


async def test_unknown_run_id_from_async_code(durable_swarm_factory):
    swarm = durable_swarm_factory(ScriptedClient([]))
    with pytest.raises(RunNotFoundError, match="no-such-async-run"):
        await swarm.aget_run("no-such-async-run")
    with pytest.raises(KeyError):
        await swarm.aresume("no-such-async-run")


def test_malformed_messages_start_nothing(durable_swarm_factory, run_id):
    client = ScriptedClient([text("never")])
    swarm = durable_swarm_factory(client)

    for bad in ("hello", [("user", "hello")], None):
        with pytest.raises(DurableSwarmError, match="messages"):
            swarm.run(Agent(name="Strict"), bad, run_id=run_id)
    for bad in ([{"content": "hello"}], [{"role": "user", "content": "a"}, {"role": None}]):
        with pytest.raises(DurableSwarmError, match=r"`messages\[\d\]` has no role"):
            swarm.run(Agent(name="Strict"), bad, run_id=run_id)

    assert client.call_count == 0
    with pytest.raises(RunNotFoundError):
        swarm.get_run(run_id)


def _in_place(context_variables: dict) -> str:
    context_variables["handle"] = object()
    return "stashed"


def _returned(context_variables: dict) -> Result:
    return Result(value="stashed", context_variables={"handle": object()})


@pytest.mark.parametrize("how", [_in_place, _returned], ids=["in-place", "returned"])
def test_tool_result_that_cannot_be_stored_is_an_error_the_model_reads(
    durable_swarm_factory, run_id, how
):
    def stash(context_variables: dict):
        """Keep a handle."""
        return how(context_variables)

    client = ScriptedClient([calls(ToolCall("stash", id="c1")), text("I cannot keep it.")])
    swarm = durable_swarm_factory(client)

    response = swarm.run(Agent(name="Stasher", functions=[stash]), USER, run_id=run_id)

    observation = response.messages[1]["content"]
    assert observation.startswith(
        "Error: tool stash left a value in context_variables that cannot be stored: "
        "context_variables['handle'] is a object (<object object at "
    )
    assert client.requests[1]["messages"][-1]["content"] == observation  # the model read it
    assert response.context_variables == {}  # the tool's changes were dropped
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert [(s.kind, s.name, s.error is not None) for s in info.steps] == [
        ("model", "Stasher", False),
        ("tool", "stash", False),
        ("model", "Stasher", False),
    ]
