"""SPEC "Models": `Agent`, `Response` and `Result` have Swarm's fields, defaults and leniency."""

from __future__ import annotations

import pydantic

from durable_swarm import Agent, Response, Result


def test_agent_is_pydantic_model_with_swarm_defaults():
    agent = Agent()

    assert isinstance(agent, pydantic.BaseModel)
    assert agent.name == "Agent"
    assert agent.model == "gpt-4o"
    assert agent.instructions == "You are a helpful agent."
    assert agent.functions == []
    assert agent.tool_choice is None
    assert agent.parallel_tool_calls is True


def test_agent_accepts_string_and_callable_instructions():
    def with_context(context_variables):
        return "ctx"

    def without_arguments():
        return "none"

    assert Agent(instructions="text").instructions == "text"
    assert Agent(instructions=with_context).instructions is with_context
    assert Agent(instructions=without_arguments).instructions is without_arguments


def test_agent_is_mutable():
    def tool():
        return "x"

    agent = Agent()
    agent.functions.append(tool)
    agent.name = "Renamed"
    agent.instructions = "New"

    assert agent.functions == [tool]
    assert (agent.name, agent.instructions) == ("Renamed", "New")


def test_agent_default_functions_not_shared():
    first = Agent()
    first.functions.append(lambda: "x")

    assert Agent().functions == []


def test_agent_unknown_kwargs_ignored():
    agent = Agent(name="A", temperature=0.2, llm_config={"model": "x"})

    assert agent.name == "A"
    assert not hasattr(agent, "temperature")


def test_agent_tool_choice_and_parallel_tool_calls_settable():
    agent = Agent(tool_choice="required", parallel_tool_calls=False)

    assert agent.tool_choice == "required"
    assert agent.parallel_tool_calls is False


def test_response_defaults():
    response = Response()

    assert response.messages == []
    assert response.agent is None
    assert response.context_variables == {}


def test_result_defaults():
    result = Result()

    assert result.value == ""
    assert result.agent is None
    assert result.context_variables == {}


def test_result_holds_agent_and_context():
    agent = Agent(name="Target")
    result = Result(value="done", agent=agent, context_variables={"k": 1})

    assert result.agent is agent
    assert result.context_variables == {"k": 1}


def test_response_agent_keeps_identity():
    agent = Agent(name="Kept")

    assert Response(agent=agent).agent is agent
