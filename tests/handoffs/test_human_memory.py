"""The person in the loop, in memory: `AskUser` / `ask_user` through `input_fn`, and tool approval
through `approve_fn` (or a y/n question through `input_fn`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_swarm import AskUser, Swarm, ask_user
from durable_swarm.human import Decision, arguments_digest
from durable_swarm.testing import ToolCall, calls
from durable_swarm.toolkit import tool

from ._memory import Model, agent

HELLO = [{"role": "user", "content": "Hello."}]


def test_a_tool_returning_ask_user_asks_the_person_and_the_answer_is_the_tool_result() -> None:
    def book(city: str) -> AskUser:
        """Book a trip."""
        return AskUser(f"Which date do you want to go to {city}?")

    prompts: list[str] = []

    def person(question: str) -> str:
        prompts.append(question)
        return "May 3"

    a = agent("Aa", functions=[book])
    model = Model(Aa=[calls(ToolCall("book", {"city": "Oslo"})), "Booked."])
    swarm = Swarm(model.client, input_fn=person)

    response = swarm.run(a, HELLO)

    assert prompts == ["Which date do you want to go to Oslo?"]
    assert response.messages[1]["role"] == "tool"
    assert response.messages[1]["content"] == "May 3"
    assert model.requests[1]["messages"][-1]["content"] == "May 3"  # the model read it


def test_the_ready_made_ask_user_tool() -> None:
    a = agent("Aa", functions=[ask_user])
    model = Model(Aa=[calls(ToolCall("ask_user", {"question": "Your name?"})), "Hi!"])
    swarm = Swarm(model.client, input_fn=lambda q: f"answer to {q}")

    response = swarm.run(a, HELLO)

    offered = model.requests[0]["tools"][0]["function"]
    assert offered["name"] == "ask_user"
    assert "Ask the user" in offered["description"]
    assert offered["parameters"]["required"] == ["question"]
    assert response.messages[1]["content"] == "answer to Your name?"


def _payment_tool(ran: list[Any]) -> Any:
    @tool(needs_approval=True)
    def pay(amount: int, to: str) -> str:
        """Pay someone."""
        ran.append((amount, to))
        return f"paid {amount} to {to}"

    return pay


def _pay_then_report(messages: list[dict[str, Any]], tools: Any) -> Any:
    if messages[-1]["role"] != "tool":
        return calls(ToolCall("pay", {"amount": 30, "to": "Bob"}, id="call_pay"))
    return f"Report: {messages[-1]['content']}"


def test_approval_in_memory_approve_fn_sees_the_call_and_approves() -> None:
    ran: list[Any] = []
    seen: list[dict[str, Any]] = []

    def approve(call: dict[str, Any]) -> bool:
        seen.append(call)
        return True

    a = agent("Aa", functions=[_payment_tool(ran)])
    swarm = Swarm(Model(Aa=_pay_then_report).client, approve_fn=approve)

    response = swarm.run(a, HELLO)

    assert ran == [(30, "Bob")]
    assert seen[0]["id"] == "call_pay"
    assert seen[0]["function"]["name"] == "pay"
    assert json.loads(seen[0]["function"]["arguments"]) == {"amount": 30, "to": "Bob"}
    assert response.messages[-1]["content"] == "Report: paid 30 to Bob"


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (False, "Error: the call to pay was rejected."),
        (
            Decision(False, message="Too much.", by="ada"),
            "Error: the call to pay was rejected by ada: Too much.",
        ),
    ],
)
def test_approval_in_memory_rejected_call_reaches_the_model_as_the_tool_message(
    verdict: Any, expected: str
) -> None:
    ran: list[Any] = []
    a = agent("Aa", functions=[_payment_tool(ran)])
    model = Model(Aa=_pay_then_report)
    swarm = Swarm(model.client, approve_fn=lambda call: verdict)

    response = swarm.run(a, HELLO)

    assert ran == []
    assert response.messages[1] == {
        "role": "tool",
        "tool_call_id": "call_pay",
        "tool_name": "pay",
        "content": expected,
    }
    assert response.messages[-1]["content"] == f"Report: {expected}"


@pytest.mark.parametrize(("answer", "runs"), [("y", 1), ("YES", 1), ("n", 0), ("", 0)])
def test_approval_in_memory_defaults_to_a_yes_no_question(answer: str, runs: int) -> None:
    ran: list[Any] = []
    prompts: list[str] = []

    def person(question: str) -> str:
        prompts.append(question)
        return answer

    a = agent("Aa", functions=[_payment_tool(ran)])
    swarm = Swarm(Model(Aa=_pay_then_report).client, input_fn=person)
    swarm.run(a, HELLO)
    assert len(ran) == runs
    assert prompts == ['Approve pay({"amount": 30, "to": "Bob"})? [y/N]']


def test_tools_without_needs_approval_run_without_asking() -> None:
    def look_up() -> str:
        """Look up."""
        return "found"

    a = agent("Aa", functions=[look_up])
    swarm = Swarm(
        Model(Aa=[calls(ToolCall("look_up")), "ok"]).client,
        input_fn=lambda q: pytest.fail(f"asked {q!r}"),
        approve_fn=lambda call: pytest.fail("asked for approval"),
    )
    assert swarm.run(a, HELLO).messages[1]["content"] == "found"


def test_arguments_digest_binds_name_and_exact_arguments() -> None:
    call = {"id": "c1", "function": {"name": "pay", "arguments": '{"amount": 30}'}}
    same = {"id": "c2", "function": {"name": "pay", "arguments": '{"amount": 30}'}}
    other = {"id": "c1", "function": {"name": "pay", "arguments": '{"amount": 31}'}}
    renamed = {"id": "c1", "function": {"name": "refund", "arguments": '{"amount": 30}'}}
    assert arguments_digest(call) == arguments_digest(same)
    assert arguments_digest(call) != arguments_digest(other)
    assert arguments_digest(call) != arguments_digest(renamed)


def test_decision_round_trips_as_json() -> None:
    decision = Decision(False, "no", "ada", "2025-01-01T00:00:00+00:00")
    assert Decision.from_json(decision.to_json()) == decision
    assert Decision.from_json(True) == Decision(True)
