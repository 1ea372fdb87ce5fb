"""examples/basic: each script runs offline and gets the right answer from the right agent."""

from __future__ import annotations

import pytest
from basic import (
    agent_handoff,
    bare_minimum,
    context_variables,
    function_calling,
    simple_loop_no_helpers,
)

from durable_swarm import Swarm
from durable_swarm.testing import ScriptedClient

OFFLINE = "(offline: scripted model — set OPENAI_API_KEY or OPENAI_BASE_URL to use a real model)"


def test_bare_minimum(run_example):
    out = run_example(bare_minimum.main)
    assert out.splitlines() == [OFFLINE, "Hello! How can I assist you today?"]


def test_agent_handoff_goes_to_the_spanish_agent(run_example):
    out = run_example(agent_handoff.main)
    assert out.splitlines()[-1].startswith("Spanish Agent: ¡Hola! Estoy muy bien")
    client = Swarm(client=ScriptedClient(agent_handoff.offline_model))
    response = client.run(agent_handoff.english_agent, [{"role": "user", "content": "Hola"}])
    assert response.agent is agent_handoff.spanish_agent
    assert [m.get("tool_name") for m in response.messages if m["role"] == "tool"] == [
        "transfer_to_spanish_agent"
    ]
    response = client.run(agent_handoff.english_agent, [{"role": "user", "content": "Hello"}])
    assert response.agent is agent_handoff.english_agent


def test_context_variables_reach_instructions_and_functions(run_example):
    out = run_example(context_variables.main)
    assert out.splitlines()[1:] == [
        "Hello James! How can I help you today?",
        "Account Details: James 123",
        "Done: your account details are printed above.",
    ]


def test_function_calling_uses_the_result(run_example):
    out = run_example(function_calling.main)
    assert out.splitlines()[-1] == "It's 67°F in NYC right now."


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What's the weather in Paris?", "It's 67°F in Paris right now."),
        ("How warm is it for Oslo today?", "It's 67°F in Oslo right now."),
        ("Tell me a joke", "I can look up the weather anywhere: just ask."),
    ],
)
def test_function_calling_offline_model(question, answer):
    client = Swarm(client=ScriptedClient(function_calling.offline_model))
    response = client.run(function_calling.agent, [{"role": "user", "content": question}])
    assert response.messages[-1]["content"] == answer


def test_simple_loop_keeps_the_conversation(run_example):
    main = simple_loop_no_helpers.main
    out = run_example(main, "--say", "My name is Ada", "--say", "What is my name?")
    assert "> My name is Ada\nAgent: Nice to meet you, Ada!" in out
    assert "> What is my name?\nAgent: Your name is Ada." in out


def test_simple_loop_reads_stdin_until_its_end(run_example, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nwhat's my name?\n"))
    out = run_example(simple_loop_no_helpers.main)
    assert "Agent: You said: hello" in out
    assert "Agent: You haven't told me your name yet." in out
