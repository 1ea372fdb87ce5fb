"""The person in the loop, durably (SQLite and PostgreSQL, runs in this process): questions
(`ask_user`, `AskUser`) answered with `send_input`, tool approval with `approve` / `reject`, the
recorded decisions and transitions, and the errors for answers that do not fit."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from _support.wait import wait_for
from durable_swarm import (
    AfterWork,
    AfterWorkOption,
    AskUser,
    ContextExpression,
    DurableSwarmError,
    OnCondition,
    OnContextCondition,
    Result,
    RunNotFoundError,
    Swarm,
    ask_user,
)
from durable_swarm.testing import ToolCall, calls
from durable_swarm.toolkit import tool

from ._memory import Model, agent, speaker
from ._waiting import wait_status

HELLO = [{"role": "user", "content": "Hello."}]
PAID: list[dict[str, Any]] = []  # the calls `pay` really ran with, in this process


@tool(needs_approval=True)
def pay(amount: int, to: str, memo: str = "") -> str:
    """Pay someone."""
    PAID.append({"amount": amount, "to": to, "memo": memo})
    return f"paid {amount} to {to}"


def name_after_work(last: Any, messages: Any, context: dict[str, Any]) -> Any:
    """A module-level swarm after-work (importable, so a durable run can record it)."""
    return "Closer" if context.get("close") else AfterWorkOption.TERMINATE


@pytest.fixture(autouse=True)
def _forget_payments() -> None:
    PAID.clear()


def _ask_then_echo(messages: list[dict[str, Any]], tools: Any) -> Any:
    if messages[-1]["role"] == "user":
        return calls(ToolCall("ask_user", {"question": "What is your passport number?"}))
    return f"Thanks, I got {messages[-1]['content']!r}."


# --- questions ------------------------------------------------------------------------------


def test_ask_user_waits_durably_and_send_input_resumes_with_the_answer_as_tool_result(
    durable: Any, run_id: str
) -> None:
    model = Model(Clerk=_ask_then_echo)
    swarm = durable(model.client)
    handle = swarm.start(agent("Clerk", functions=[ask_user]), HELLO, run_id=run_id)

    info = wait_status(swarm, run_id, "waiting_for_input")

    assert info.waiting_for["kind"] == "input"
    assert info.waiting_for["prompt"] == "What is your passport number?"
    assert info.waiting_for["agent"] == "Clerk"
    assert info.waiting_for["tool_call"]["function"]["name"] == "ask_user"
    assert run_id in {r.run_id for r in swarm.list_runs(status="waiting_for_input", limit=None)}
    assert len(model.requests) == 1

    swarm.send_input(run_id, "AB123456", by="ada")
    response = handle.result()

    assert response.messages[1]["role"] == "tool"
    assert response.messages[1]["content"] == "AB123456"
    assert response.messages[-1]["content"] == "Thanks, I got 'AB123456'."
    assert model.requests[1]["messages"][-1]["content"] == "AB123456"  # the model read it
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert info.waiting_for is None
    assert info.messages[2]["content"] == "AB123456"


def test_a_tool_returning_ask_user_waits_durably(durable: Any, run_id: str) -> None:
    def book(city: str) -> AskUser:
        """Book a trip."""
        return AskUser(f"Which date for {city}?")

    model = Model(Clerk=[calls(ToolCall("book", {"city": "Oslo"})), "Booked."])
    swarm = durable(model.client)
    handle = swarm.start(agent("Clerk", functions=[book]), HELLO, run_id=run_id)

    info = wait_status(swarm, run_id, "waiting_for_input")
    assert info.waiting_for["prompt"] == "Which date for Oslo?"
    swarm.send_input(run_id, "May 3")
    assert handle.result().messages[1]["content"] == "May 3"


def test_revert_to_user_waits_with_the_last_message_as_the_question(
    durable: Any, run_id: str
) -> None:
    model = Model(Clerk=lambda messages, tools: f"question {len(messages)}")
    swarm = durable(model.client)
    clerk = agent("Clerk", handoffs=[AfterWork(AfterWorkOption.REVERT_TO_USER)])
    handle = swarm.start(clerk, HELLO, run_id=run_id, max_turns=3)

    info = wait_status(swarm, run_id, "waiting_for_input")
    assert info.waiting_for["prompt"] == "question 2"
    assert info.waiting_for["tool_call"] is None
    swarm.send_input(run_id, "an answer")

    response = handle.result()  # max_turns spent: it ends without asking again
    assert [m["content"] for m in response.messages] == ["question 2", "an answer", "question 4"]
    assert swarm.get_run(run_id).messages[2] == {"role": "user", "content": "an answer"}


def test_send_input_to_a_run_that_does_not_wait_is_a_clear_error_and_sends_nothing(
    durable: Any, run_id: str
) -> None:
    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        done = [m for m in messages if m["role"] == "tool"]
        if not done:
            return calls(ToolCall("pay", {"amount": 5, "to": "Eve"}, id="call_pay"))
        if len(done) == 1:
            return calls(ToolCall("ask_user", {"question": "Anything else?"}))
        return f"Final: {done[-1]['content']}"

    swarm = durable(Model(Clerk=script).client)
    handle = swarm.start(agent("Clerk", functions=[pay, ask_user]), HELLO, run_id=run_id)
    wait_status(swarm, run_id, "waiting_for_approval")

    with pytest.raises(DurableSwarmError, match="is not waiting for input") as error:
        swarm.send_input(run_id, "stale answer")
    assert run_id in str(error.value) and "nothing was sent" in str(error.value)
    with pytest.raises(RunNotFoundError):
        swarm.send_input(f"{run_id}-no-such-run", "hello")

    swarm.approve(run_id, "call_pay")
    info = wait_status(swarm, run_id, "waiting_for_input")
    assert info.waiting_for["prompt"] == "Anything else?"
    # the stale answer was never sent: the question still waits (several polls later)
    time.sleep(0.6)
    assert swarm.get_run(run_id).status == "waiting_for_input"
    swarm.send_input(run_id, "no, thanks")
    assert handle.result().messages[-1]["content"] == "Final: no, thanks"

    with pytest.raises(DurableSwarmError, match="its status is 'succeeded'"):
        swarm.send_input(run_id, "too late")


# --- approval -------------------------------------------------------------------------------


def _pay_then_report(messages: list[dict[str, Any]], tools: Any) -> Any:
    if messages[-1]["role"] != "tool":
        args = {"amount": 30, "to": "Bob", "memo": "rent"}
        return calls(ToolCall("pay", args, id="call_pay_1"))
    return f"Report: {messages[-1]['content']}"


def test_approval_waits_with_the_call_and_runs_it_with_exactly_those_arguments(
    durable: Any, run_id: str
) -> None:
    model = Model(Cashier=_pay_then_report)
    swarm = durable(model.client)
    handle = swarm.start(agent("Cashier", functions=[pay]), HELLO, run_id=run_id)

    info = wait_status(swarm, run_id, "waiting_for_approval")

    call = info.waiting_for["tool_call"]
    assert info.waiting_for["kind"] == "approval"
    assert call["id"] == "call_pay_1"
    assert call["function"]["name"] == "pay"
    shown = json.loads(call["function"]["arguments"])
    assert shown == {"amount": 30, "to": "Bob", "memo": "rent"}
    assert PAID == []  # not before the approval

    with pytest.raises(DurableSwarmError, match="waits for approval of tool call 'call_pay_1'"):
        swarm.approve(run_id, "call_other")
    with pytest.raises(DurableSwarmError, match="not waiting for input"):
        swarm.send_input(run_id, "yes")
    assert swarm.get_run(run_id).status == "waiting_for_approval"

    swarm.approve(run_id, "call_pay_1", by="ada")
    response = handle.result()

    assert [shown] == PAID  # exactly the arguments shown, once
    assert response.messages[-1]["content"] == "Report: paid 30 to Bob"
    decisions = swarm.get_run(run_id).decisions
    assert len(decisions) == 1
    assert decisions[0]["approved"] is True
    assert decisions[0]["tool_call_id"] == "call_pay_1"
    assert decisions[0]["by"] == "ada"
    assert decisions[0]["at"]  # ISO time of the decision
    assert decisions[0]["digest"] == info.waiting_for["digest"]


def test_rejected_call_reaches_the_model_as_the_tool_message(durable: Any, run_id: str) -> None:
    model = Model(Cashier=_pay_then_report)
    swarm = durable(model.client)
    handle = swarm.start(agent("Cashier", functions=[pay]), HELLO, run_id=run_id)
    wait_status(swarm, run_id, "waiting_for_approval")

    swarm.reject(run_id, "call_pay_1", message="Bob was paid yesterday.", by="ada")
    response = handle.result()

    expected = "Error: the call to pay was rejected by ada: Bob was paid yesterday."
    assert PAID == []
    assert response.messages[1] == {
        "role": "tool",
        "tool_call_id": "call_pay_1",
        "tool_name": "pay",
        "content": expected,
    }
    assert model.requests[1]["messages"][-1]["content"] == expected  # what the model read
    assert response.messages[-1]["content"] == f"Report: {expected}"
    [decision] = swarm.get_run(run_id).decisions
    assert decision["approved"] is False
    assert decision["message"] == "Bob was paid yesterday."
    assert decision["by"] == "ada"


def _pay_twice_then_report(messages: list[dict[str, Any]], tools: Any) -> Any:
    if messages[-1]["role"] != "tool":
        return calls(
            ToolCall("pay", {"amount": 30, "to": "Bob"}, id="call_pay_1"),
            ToolCall("pay", {"amount": 5, "to": "Eve"}, id="call_pay_2"),
        )
    return "Report"


def test_a_rejection_shows_in_the_messages_while_the_next_call_waits(
    durable: Any, run_id: str
) -> None:
    """`get_run` rebuilds a waiting run's messages from its log: the rejected call's answer (the
    loop writes it, no step does) is there before the second call of the message is decided."""
    swarm = durable(Model(Cashier=_pay_twice_then_report).client)
    handle = swarm.start(agent("Cashier", functions=[pay]), HELLO, run_id=run_id)
    wait_status(swarm, run_id, "waiting_for_approval")
    swarm.reject(run_id, "call_pay_1", message="Not Bob.", by="ada")
    wait_for(
        lambda: (
            (swarm.get_run(run_id).waiting_for or {}).get("tool_call", {}).get("id") == "call_pay_2"
        ),
        "the second call to wait for its approval",
    )

    waiting = swarm.get_run(run_id).messages
    swarm.approve(run_id, "call_pay_2")
    handle.result()

    rejection = "Error: the call to pay was rejected by ada: Not Bob."
    assert [m.get("content") for m in waiting if m["role"] == "tool"] == [rejection]
    assert waiting == swarm.get_run(run_id).messages[: len(waiting)]


async def test_the_async_twins_answer_decide_cancel_resume_and_fork(
    durable: Any, run_id: str
) -> None:
    model = Model(Cashier=_pay_then_report, Clerk=_ask_then_echo)
    swarm = durable(model.client)
    cashier, clerk = agent("Cashier", functions=[pay]), agent("Clerk", functions=[ask_user])
    paid, refused, asked, dropped = (f"{run_id}-{n}" for n in ("paid", "refused", "asked", "drop"))
    handles = {
        paid: swarm.start(cashier, HELLO, run_id=paid),
        refused: swarm.start(cashier, HELLO, run_id=refused),
        asked: swarm.start(clerk, HELLO, run_id=asked),
        dropped: swarm.start(cashier, HELLO, run_id=dropped),
    }
    for each, status in ((paid, "approval"), (refused, "approval"), (asked, "input")):
        await asyncio.to_thread(wait_status, swarm, each, f"waiting_for_{status}")
    await asyncio.to_thread(wait_status, swarm, dropped, "waiting_for_approval")

    await swarm.aapprove(paid, "call_pay_1", by="ada")
    await swarm.areject(refused, "call_pay_1", "Not today.", by="ada")
    await swarm.asend_input(asked, "AB123456", by="ada")
    await swarm.acancel(dropped)

    assert (await handles[paid].aresult()).messages[-1]["content"] == "Report: paid 30 to Bob"
    rejected = (await handles[refused].aresult()).messages[-1]["content"]
    assert rejected == "Report: Error: the call to pay was rejected by ada: Not today."
    assert "AB123456" in (await handles[asked].aresult()).messages[-1]["content"]
    assert (await swarm.aget_run(dropped)).status == "cancelled"
    assert len(PAID) == 1

    resumed = await swarm.aresume(dropped)
    await asyncio.to_thread(wait_status, swarm, dropped, "waiting_for_approval")
    await swarm.aapprove(dropped, "call_pay_1")
    assert (await resumed.aresult()).messages[-1]["content"] == "Report: paid 30 to Bob"

    steps = (await swarm.aget_run(paid)).steps
    last_model = max(s.step for s in steps if s.kind == "model")
    forked = await swarm.afork(paid, last_model, new_run_id=f"{run_id}-fork")
    assert forked.run_id == f"{run_id}-fork"
    assert (await forked.aresult()).messages[-1]["content"] == "Report: paid 30 to Bob"
    assert len(PAID) == 2  # the paid run's tool step was copied, not run again; dropped's ran
    assert {r.run_id for r in await swarm.alist_runs(status="succeeded", limit=None)} >= {
        paid,
        refused,
        asked,
        dropped,
        forked.run_id,
    }


def test_approve_an_unknown_run_or_one_that_does_not_wait(durable: Any, run_id: str) -> None:
    swarm = durable(Model(Clerk=["Hi."]).client)
    swarm.run(agent("Clerk"), HELLO, run_id=run_id)
    with pytest.raises(DurableSwarmError, match="is not waiting for approval"):
        swarm.approve(run_id, "call_x")
    with pytest.raises(DurableSwarmError, match="is not waiting for approval"):
        swarm.reject(run_id, "call_x", message="no")
    with pytest.raises(RunNotFoundError):
        swarm.approve(f"{run_id}-missing", "call_x")


# --- transitions and handoff targets in durable runs -----------------------------------------


def _transitions_scenario() -> tuple[Any, Model]:
    closer = agent("Closer", handoffs=[AfterWork(AfterWorkOption.TERMINATE)])

    def finish(context_variables: dict[str, Any]) -> Result:
        """Finish up."""
        return Result(value="finishing", agent="Closer", context_variables={"done": True})

    sales = agent("Sales", functions=[finish])
    vip = agent("Vip", handoffs=[OnCondition(sales, "Sell.")])
    triage = agent(
        "Triage", handoffs=[OnContextCondition(vip, ContextExpression("${tier} == 'gold'"))]
    )

    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        return {
            "Vip": calls(ToolCall("transfer_to_sales")),
            "Sales": calls(ToolCall("finish")),
            "Closer": "Closed.",
        }[speaker(messages)]

    return (triage, [triage, vip, sales, closer]), Model(
        Vip=script, Sales=script, Closer=script, Triage=script
    )


def test_durable_transitions_are_recorded_as_in_memory(durable: Any, run_id: str) -> None:
    (triage, agents), model = _transitions_scenario()
    memory = Swarm(model.client)
    expected = memory.run(triage, HELLO, {"tier": "gold"}, agents=agents)

    (triage, agents), model = _transitions_scenario()
    swarm = durable(model.client)
    response = swarm.run(triage, HELLO, {"tier": "gold"}, run_id=run_id, agents=agents)

    info = swarm.get_run(run_id)
    assert info.transitions == memory.transitions
    assert [(t["rule"], t["source"], t["target"]) for t in info.transitions] == [
        ("context_condition", "Triage", "Vip"),
        ("tool", "Vip", "Sales"),
        ("tool", "Sales", "Closer"),
        ("after_work", "Closer", None),
    ]
    assert all(t["reason"] for t in info.transitions)
    assert response.agent.name == expected.agent.name == "Closer"
    assert response.context_variables == {"tier": "gold", "done": True}
    assert [s.kind for s in info.steps].count("handoff") == 4
    assert info.agent == "Closer"


def test_durable_swarm_after_work_as_a_module_level_function(durable: Any, run_id: str) -> None:
    closer = agent("Closer", handoffs=[AfterWork(AfterWorkOption.TERMINATE)])
    helper = agent("Helper")
    model = Model(Helper=["Helped."], Closer=["Closed."])
    swarm = durable(model.client)
    response = swarm.run(
        helper,
        HELLO,
        {"close": True},
        run_id=run_id,
        after_work=name_after_work,
        agents=[helper, closer],
    )
    assert response.agent is closer
    rules = [(t["rule"], t["target"]) for t in swarm.get_run(run_id).transitions]
    assert rules == [("swarm_after_work", "Closer"), ("after_work", None)]


def test_durable_swarm_after_work_that_cannot_be_recorded_is_refused_before_starting(
    durable: Any, run_id: str
) -> None:
    swarm = durable(Model().client)
    with pytest.raises(DurableSwarmError, match="module-level function"):
        swarm.start(agent("Helper"), HELLO, run_id=run_id, after_work=lambda: "Closer")
    with pytest.raises(RunNotFoundError):
        swarm.get_run(run_id)
