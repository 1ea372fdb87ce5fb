"""A Swarm program with only its import changed runs: Swarm's own test cases, and the way its
examples and evals drive a run, written against `durable_swarm`."""

from __future__ import annotations

import json
from unittest.mock import MagicMock, Mock

import pytest
from openai.types.chat import ChatCompletion

from durable_swarm import Agent, Swarm

from ._mock import calling, completion, tool_call

DEFAULT_RESPONSE_CONTENT = "sample response content"


class MockOpenAIClient:
    """The shape of the mock client Swarm's tests use: `chat` is a MagicMock."""

    def __init__(self) -> None:
        self.chat = MagicMock()

    def set_response(self, response: ChatCompletion) -> None:
        self.chat.completions.create.return_value = response

    def set_sequential_responses(self, responses: list[ChatCompletion]) -> None:
        self.chat.completions.create.side_effect = responses


@pytest.fixture
def mock_openai_client():
    client = MockOpenAIClient()
    client.set_response(completion(DEFAULT_RESPONSE_CONTENT))
    return client


def test_run_with_simple_message(mock_openai_client):
    agent = Agent()
    client = Swarm(client=mock_openai_client)
    messages = [{"role": "user", "content": "Hello, how are you?"}]

    response = client.run(agent=agent, messages=messages)

    assert response.messages[-1]["role"] == "assistant"
    assert response.messages[-1]["content"] == DEFAULT_RESPONSE_CONTENT


def test_tool_call(mock_openai_client):
    expected_location = "San Francisco"
    get_weather_mock = Mock()

    def get_weather(location):
        get_weather_mock(location=location)
        return "It's sunny today."

    agent = Agent(name="Test Agent", functions=[get_weather])
    mock_openai_client.set_sequential_responses(
        [
            calling(tool_call("get_weather", {"location": expected_location}), content=""),
            completion(DEFAULT_RESPONSE_CONTENT),
        ]
    )

    response = Swarm(client=mock_openai_client).run(
        agent=agent, messages=[{"role": "user", "content": "What's the weather in SF?"}]
    )

    get_weather_mock.assert_called_once_with(location=expected_location)
    assert response.messages[-1]["role"] == "assistant"
    assert response.messages[-1]["content"] == DEFAULT_RESPONSE_CONTENT


def test_execute_tools_false_swarm_case(mock_openai_client):
    expected_location = "San Francisco"
    get_weather_mock = Mock()

    def get_weather(location):
        get_weather_mock(location=location)
        return "It's sunny today."

    agent = Agent(name="Test Agent", functions=[get_weather])
    mock_openai_client.set_sequential_responses(
        [
            calling(tool_call("get_weather", {"location": expected_location}), content=""),
            completion(DEFAULT_RESPONSE_CONTENT),
        ]
    )

    response = Swarm(client=mock_openai_client).run(
        agent=agent,
        messages=[{"role": "user", "content": "What's the weather in SF?"}],
        execute_tools=False,
    )

    get_weather_mock.assert_not_called()
    tool_calls = response.messages[-1].get("tool_calls")
    assert tool_calls is not None and len(tool_calls) == 1
    assert tool_calls[0]["function"]["name"] == "get_weather"
    assert json.loads(tool_calls[0]["function"]["arguments"]) == {"location": expected_location}


def test_handoff(mock_openai_client):
    def transfer_to_agent2():
        return agent2

    agent1 = Agent(name="Test Agent 1", functions=[transfer_to_agent2])
    agent2 = Agent(name="Test Agent 2")
    mock_openai_client.set_sequential_responses(
        [
            calling(tool_call("transfer_to_agent2"), content=""),
            completion(DEFAULT_RESPONSE_CONTENT),
        ]
    )

    response = Swarm(client=mock_openai_client).run(
        agent=agent1, messages=[{"role": "user", "content": "I want to talk to agent 2"}]
    )

    assert response.agent == agent2
    assert response.messages[-1]["role"] == "assistant"
    assert response.messages[-1]["content"] == DEFAULT_RESPONSE_CONTENT


def test_triage_eval_style_one_tool_call_without_executing():
    """Swarm's triage evals: `execute_tools=False`, then read the tool calls of the last message."""

    def transfer_to_sales():
        raise AssertionError("must not run")

    def transfer_to_refunds():
        raise AssertionError("must not run")

    triage = Agent(name="Triage Agent", functions=[transfer_to_sales, transfer_to_refunds])
    client = MagicMock()
    client.chat.completions.create.return_value = calling(tool_call("transfer_to_refunds"))

    response = Swarm(client=client).run(
        agent=triage,
        messages=[{"role": "user", "content": "I want a refund"}],
        execute_tools=False,
    )

    calls = response.messages[-1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["transfer_to_refunds"]
    assert response.agent is triage


def test_airline_eval_style_max_turns_one_reads_tool_name():
    """Swarm's airline function evals: `max_turns=1`, then read `tool_name` of tool messages."""

    def change_flight():
        return "Flight was successfully changed!"

    def escalate_to_agent(reason=None):
        return f"Escalating to agent: {reason}" if reason else "Escalating to agent"

    agent = Agent(name="Flight modification", functions=[change_flight, escalate_to_agent])
    client = MagicMock()
    client.chat.completions.create.side_effect = [
        calling(tool_call("escalate_to_agent", {"reason": "angry"})),
        completion("never reached"),
    ]

    response = Swarm(client=client).run(
        agent=agent, messages=[{"role": "user", "content": "Get me a human"}], max_turns=1
    )

    tool_names = [m["tool_name"] for m in response.messages if m["role"] == "tool"]
    assert tool_names == ["escalate_to_agent"]
    assert response.messages[-1]["content"] == "Escalating to agent: angry"
    assert client.chat.completions.create.call_count == 1


def test_simple_loop_no_helpers_style():
    """Swarm's `simple_loop_no_helpers` example: the caller extends its own history each turn."""
    client = MagicMock()
    client.chat.completions.create.side_effect = [completion("one"), completion("two")]
    swarm = Swarm(client=client)
    agent = Agent(name="Agent", instructions="You are a helpful agent.")
    messages = []

    for text in ("hi", "again"):
        messages.append({"role": "user", "content": text})
        response = swarm.run(agent=agent, messages=messages)
        messages.extend(response.messages)
        agent = response.agent

    assert [m["content"] for m in messages] == ["hi", "one", "again", "two"]
    assert client.chat.completions.create.call_args.kwargs["messages"][1:] == messages[:-1]


def test_context_variables_example_style():
    """Swarm's `context_variables` example: instructions and a function read the same dict."""

    def instructions(context_variables):
        return f"You are a helpful agent. Greet the user by name ({context_variables['name']})."

    def print_account_details(context_variables: dict):
        return f"Account Details: {context_variables['name']} {context_variables['user_id']}"

    agent = Agent(name="Agent", instructions=instructions, functions=[print_account_details])
    client = MagicMock()
    client.chat.completions.create.side_effect = [
        calling(tool_call("print_account_details")),
        completion("Hello James!"),
    ]

    response = Swarm(client=client).run(
        messages=[{"role": "user", "content": "Print my account details!"}],
        agent=agent,
        context_variables={"name": "James", "user_id": 123},
    )

    assert response.messages[1]["content"] == "Account Details: James 123"
    system = client.chat.completions.create.call_args_list[0].kwargs["messages"][0]["content"]
    assert "(James)" in system
