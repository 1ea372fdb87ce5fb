"""One name, one agent: two different definitions under one name where a name must pick an agent
is an error naming both, raised before anything runs or is stored (SQLite and PostgreSQL); the
fingerprint rule that lets tests and apps redefine an agent keeps working."""

from __future__ import annotations

import uuid

import pytest

from durable_swarm import (
    AfterWork,
    Agent,
    DuplicateAgentError,
    OnCondition,
    OnContextCondition,
    RunNotFoundError,
    Swarm,
    _registry,
)
from durable_swarm.testing import ScriptedClient, text

USER = [{"role": "user", "content": "hi"}]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def twins(name: str) -> tuple[Agent, Agent]:
    return Agent(name=name, instructions="the first"), Agent(name=name, instructions="the second")


def assert_names_both(error: DuplicateAgentError, first: Agent, second: Agent) -> None:
    message = str(error)
    assert f"Two different agents are named {first.name!r}" in message
    assert _registry.fingerprint(first) in message and _registry.fingerprint(second) in message
    assert "'the first'" in message and "'the second'" in message
    assert "rename one of them" in message


def test_two_agents_with_one_name_in_agents_are_refused() -> None:
    first, second = twins(unique("Twin"))
    client = ScriptedClient([text("never")])

    with pytest.raises(DuplicateAgentError) as info:
        Swarm(client).run(Agent(name=unique("Start")), USER, agents=[first, second])

    assert_names_both(info.value, first, second)
    assert client.requests == []


@pytest.mark.parametrize("rule", ["on_condition", "on_context_condition", "after_work"])
def test_a_handoff_target_that_shares_a_name_with_another_agent_is_refused(rule: str) -> None:
    first, second = twins(unique("Twin"))
    handoff = {
        "on_condition": lambda: OnCondition(second, "go"),
        "on_context_condition": lambda: OnContextCondition(second, "flag"),
        "after_work": lambda: AfterWork(second),
    }[rule]()
    start = Agent(name=unique("Start"), handoffs=[handoff])

    with pytest.raises(DuplicateAgentError) as info:
        Swarm(ScriptedClient([text("never")])).run(start, USER, agents=[first])

    assert_names_both(info.value, first, second)


def test_the_same_definition_twice_is_one_agent() -> None:
    name = unique("Same")
    one, two = Agent(name=name, instructions="x"), Agent(name=name, instructions="x")
    response = Swarm(ScriptedClient([text("fine")])).run(one, USER, agents=[two])
    assert response.messages[-1]["content"] == "fine"


def test_the_registry_resolves_by_fingerprint_and_refuses_a_bare_ambiguous_name() -> None:
    first, second = twins(unique("Redefined"))

    # The fingerprint rule: a run logged with a definition gets that definition back.
    assert _registry.resolve(first.name, _registry.fingerprint(first)) is first
    assert _registry.resolve(first.name, _registry.fingerprint(second)) is second
    # A name alone, or a fingerprint neither has, cannot choose: an error naming both.
    for fingerprint in (None, "0" * 16):
        with pytest.raises(DuplicateAgentError) as info:
            _registry.resolve(first.name, fingerprint, run_id="run-7")
        assert_names_both(info.value, first, second)
        assert "(needed by run 'run-7')" in str(info.value)


def test_a_handoff_by_name_to_an_ambiguous_name_fails_clearly() -> None:
    first, _second = twins(unique("ByName"))
    start = Agent(name=unique("Start"), handoffs=[OnContextCondition(first.name, "go")])

    with pytest.raises(DuplicateAgentError, match="Two different agents are named"):
        Swarm(ScriptedClient([text("never")])).run(start, USER, context_variables={"go": True})
    # Naming the agent in `agents=` says which one is meant.
    response = Swarm(ScriptedClient([text("from the first")])).run(
        start, USER, context_variables={"go": True}, agents=[first]
    )
    assert response.agent is first


def test_a_durable_run_with_two_agents_under_one_name_is_refused_before_it_is_stored(
    durable_swarm_factory, run_id
) -> None:
    first, second = twins(unique("Twin"))
    client = ScriptedClient([text("never")])
    swarm = durable_swarm_factory(client)

    with pytest.raises(DuplicateAgentError) as info:
        swarm.run(Agent(name=unique("Start")), USER, agents=[first, second], run_id=run_id)
    assert_names_both(info.value, first, second)
    with pytest.raises(DuplicateAgentError):
        swarm.start(Agent(name=unique("Start")), USER, agents=[first, second], run_id=run_id)

    with pytest.raises(RunNotFoundError):
        swarm.get_run(run_id)
    assert client.requests == []
