"""JSON in, JSON out: every value that is not JSON is refused where it enters a durable run, with
the key that holds it, before anything is stored: run inputs (DurableSwarm and the thin client),
a tool's changes to context_variables (in place or returned). Tool results over the size limit
reach the model as an error instead of being stored. On SQLite and PostgreSQL."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import pytest

from durable_swarm import Agent, DurableSwarm, NonJsonValueError, Result, RunNotFoundError
from durable_swarm.durable import DurableClient
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

USER = [{"role": "user", "content": "hi"}]


class Thing:
    def __repr__(self) -> str:
        return "Thing()"


VALUES: dict[str, Any] = {
    "datetime": datetime(2024, 1, 2, tzinfo=timezone.utc),
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "set": {1, 2},
    "bytes": b"raw",
    "object": Thing(),
    "complex": 1j,
}
# (value, how the refusal describes it)
NOT_JSON: dict[str, tuple[Any, str]] = {
    kind: (
        value,
        f"is {value!r}, which is not JSON (no NaN or infinity)"
        if isinstance(value, float)
        else f"is a {type(value).__name__} ({value!r:.60}), which is not JSON",
    )
    for kind, value in VALUES.items()
}


def refusal(problem: str) -> str:
    return (
        f"Cannot start a durable run: {problem}. A durable run stores only JSON (str, finite "
        "numbers, bools, None, lists, dicts with str keys): convert the value (a datetime to an "
        "ISO string, a set to a list, bytes to text) or leave it out. Nothing was stored."
    )


@pytest.mark.parametrize("kind", NOT_JSON)
def test_run_inputs_that_are_not_json_are_refused_naming_the_key(
    durable_swarm_factory, run_id, kind
):
    value, described = NOT_JSON[kind]
    client = ScriptedClient([text("never")])
    swarm = durable_swarm_factory(client)
    agent = Agent(name="JsonInputs")
    cases = [
        ({"ok": 1, "bad": value}, USER, "context_variables['bad'] " + described),
        (
            {"deep": {"list": [0, {"x": value}]}},
            USER,
            "context_variables['deep']['list'][1]['x'] " + described,
        ),
        (
            {},
            [{"role": "user", "content": "hi", "extra": value}],
            "messages[0]['extra'] " + described,
        ),
    ]
    for context, messages, problem in cases:
        with pytest.raises(NonJsonValueError) as info:
            swarm.run(agent, messages, context, run_id=run_id)
        assert str(info.value) == refusal(problem)
        with pytest.raises(NonJsonValueError):
            swarm.start(agent, messages, context, run_id=run_id)
    with pytest.raises(RunNotFoundError):
        swarm.get_run(run_id)
    assert client.requests == []


def test_keys_that_are_not_strings_deep_nesting_and_long_messages_are_refused(
    durable_swarm_factory, run_id
):
    swarm = durable_swarm_factory(ScriptedClient([text("never")]), max_result_chars=50)
    agent = Agent(name="JsonInputs")
    deep: Any = "bottom"
    for _ in range(150):
        deep = [deep]
    cases = {
        "context_variables has the key 1 (int); JSON keys are strings": {1: "one"},
        "context_variables['k'] has the key (1, 2) (tuple); JSON keys are strings": {
            "k": {(1, 2): "pair"}
        },
        "context_variables['deep']" + "[0]" * 99 + " nests lists and dicts more than 100 levels "
        "deep": {"deep": deep},
    }
    for problem, context in cases.items():
        with pytest.raises(NonJsonValueError) as info:
            swarm.run(agent, USER, context, run_id=run_id)
        assert problem in str(info.value)
    with pytest.raises(NonJsonValueError, match=r"messages\[0\]\['content'\] is 51 characters"):
        swarm.run(agent, [{"role": "user", "content": "x" * 51}], run_id=run_id)
    with pytest.raises(RunNotFoundError):
        swarm.get_run(run_id)


def test_tuples_are_stored_as_lists(durable_swarm_factory, run_id):
    swarm = durable_swarm_factory(ScriptedClient([text("fine")]))
    swarm.run(Agent(name="Tuples"), USER, {"pair": (1, 2), "nested": {"t": ("a",)}}, run_id=run_id)
    assert swarm.get_run(run_id).context_variables == {"pair": [1, 2], "nested": {"t": ["a"]}}


@pytest.mark.parametrize("kind", ["datetime", "nan", "set", "bytes"])
def test_the_thin_client_refuses_inputs_that_are_not_json(
    durable_swarm_factory, database_url, run_id, kind
):
    durable_swarm_factory()  # the database exists
    value, described = NOT_JSON[kind]
    with DurableClient(database_url) as client:
        with pytest.raises(NonJsonValueError) as info:
            client.start("AnyAgent", USER, {"when": value}, run_id=run_id)
        assert str(info.value) == refusal("context_variables['when'] " + described)
        with pytest.raises(RunNotFoundError):
            client.get_run(run_id)


@pytest.mark.parametrize("how", ["in_place", "returned"])
@pytest.mark.parametrize("kind", NOT_JSON)
def test_a_tool_that_leaves_a_value_that_is_not_json_answers_the_model_with_an_error(
    durable_swarm_factory, run_id, kind, how
):
    value, described = NOT_JSON[kind]

    def remember(context_variables: dict) -> Any:
        """Remember something."""
        if how == "in_place":
            context_variables["kept"] = "changed"
            context_variables["memo"] = {"inner": value}
            return "remembered"
        return Result(value="remembered", context_variables={"memo": {"inner": value}})

    client = ScriptedClient([calls(ToolCall("remember")), text("I could not remember it.")])
    swarm = durable_swarm_factory(client)
    agent = Agent(name="JsonTools", functions=[remember])

    response = swarm.run(agent, USER, {"kept": "as given"}, run_id=run_id)

    observation = (
        "Error: tool remember left a value in context_variables that cannot be stored: "
        f"context_variables['memo']['inner'] {described}. Its changes to the context were "
        "dropped; store JSON values only (str, finite numbers, bools, None, lists, dicts with "
        "str keys)."
    )
    assert response.messages[1]["content"] == observation
    assert client.requests[1]["messages"][-1]["content"] == observation  # the model read it
    assert response.messages[-1]["content"] == "I could not remember it."
    assert response.context_variables == {"kept": "as given"}
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert info.context_variables == {"kept": "as given"}
    tool_step = next(s for s in info.steps if s.kind == "tool")
    assert tool_step.output["context_variables"] == {"kept": "as given"}


def test_a_tool_result_over_the_limit_is_an_error_and_is_not_stored(durable_swarm_factory, run_id):
    def dump() -> str:
        """Dump everything."""
        return "y" * 5000

    client = ScriptedClient([calls(ToolCall("dump")), text("Too much; I will ask for less.")])
    swarm = durable_swarm_factory(client, max_result_chars=1000)

    response = swarm.run(Agent(name="BigTools", functions=[dump]), USER, run_id=run_id)

    observation = (
        "Error: tool dump returned 5000 characters, over the 1000-character limit of a stored "
        "result; ask it for less (a narrower query, a smaller page)."
    )
    assert response.messages[1]["content"] == observation
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert all("yyyy" not in str(step.output) for step in info.steps)
    assert "yyyy" not in str(info.messages)


def test_the_size_limit_is_checked_when_the_swarm_is_made():
    with pytest.raises(ValueError, match="max_result_chars must be at least 1"):
        DurableSwarm(max_result_chars=0)
    with pytest.raises(TypeError, match="max_result_chars must be an int"):
        DurableSwarm(max_result_chars="big")  # type: ignore[arg-type]
