"""The turn loop driven directly: each effect it yields is answered from a script, with no model,
no tool execution and no runtime, so what the loop decides is tested on its own."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from durable_swarm import AfterWorkOption, Agent, OnContextCondition
from durable_swarm.human import Decision
from durable_swarm.loop import (
    ModelCall,
    RunRequest,
    ToolInvocation,
    Transition,
    WaitForInput,
    turn_loop,
)
from durable_swarm.toolkit import tool
from durable_swarm.tools import ToolOutcome, tool_message


def request(
    agent: Any, messages: list[dict[str, Any]], context: Any = None, **options: Any
) -> RunRequest:
    """`turn_loop`'s request."""
    return RunRequest(agent, messages, context, **options)


def run(arguments: RunRequest, answer: Callable[[Any], Any]) -> tuple[list[Any], Any]:
    """Drive the loop, answering each effect with `answer(effect)`; (effects, Response)."""
    loop = turn_loop(arguments)
    effects: list[Any] = []
    result: Any = None
    while True:
        try:
            effect = loop.send(result)
        except StopIteration as stop:
            return effects, stop.value
        effects.append(effect)
        result = answer(effect)


def reply(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": None}


def call(name: str, arguments: str = "{}", call_id: str = "c1") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


USER = [{"role": "user", "content": "hi"}]


def test_a_reply_without_tool_calls_ends_the_run_with_one_model_call():
    agent = Agent(name="Plain", instructions="Be brief.", model="m-1")
    effects, response = run(request(agent, USER), lambda effect: reply("hello"))

    [model_call] = effects
    assert isinstance(model_call, ModelCall) and model_call.agent is agent
    assert model_call.request["model"] == "m-1"
    assert model_call.request["messages"] == [{"role": "system", "content": "Be brief."}, *USER]
    assert response.messages == [reply("hello")]
    assert response.agent is agent and response.context_variables == {}


def test_model_override_and_stream_reach_the_request():
    agent = Agent(name="Overridden", model="m-1")
    arguments = request(agent, USER, model_override="m-2", stream=True)
    [model_call], _ = run(arguments, lambda effect: reply("ok"))
    assert model_call.request["model"] == "m-2" and model_call.request["stream"] is True


def test_a_tool_call_is_one_effect_and_its_outcome_feeds_the_next_model_call():
    def lookup(city: str) -> str:
        """Look the city up."""
        raise AssertionError("the loop never runs tools itself")

    agent = Agent(name="Looker", functions=[lookup])
    script = iter([call("lookup", '{"city": "Oslo"}'), reply("It is cold.")])

    def answer(effect: Any) -> Any:
        if isinstance(effect, ToolInvocation):
            assert effect.function is lookup and effect.context_variables == {"unit": "C"}
            message = tool_message(effect.call, "-3")
            return ToolOutcome(message, {**effect.context_variables, "seen": "Oslo"})
        return next(script)

    effects, response = run(request(agent, USER, {"unit": "C"}), answer)

    assert [type(e) for e in effects] == [ModelCall, ToolInvocation, ModelCall]
    second = effects[2].request["messages"]
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "tool_name": "lookup",
        "content": "-3",
    }
    assert [m["role"] for m in response.messages] == ["assistant", "tool", "assistant"]
    assert response.context_variables == {"unit": "C", "seen": "Oslo"}


def test_a_tool_returning_an_agent_hands_over_with_a_transition():
    sales = Agent(name="Sales")

    def transfer() -> Agent:
        """Transfer to sales."""
        return sales

    triage = Agent(name="Triage", functions=[transfer])
    script = iter([call("transfer"), reply("Sales here.")])

    def answer(effect: Any) -> Any:
        if isinstance(effect, ToolInvocation):
            return ToolOutcome(tool_message(effect.call, "ok"), effect.context_variables, sales)
        if isinstance(effect, Transition):
            return None
        return next(script)

    effects, response = run(request(triage, USER), answer)

    transition = next(e for e in effects if isinstance(e, Transition))
    assert transition.to_json() == {
        "source": "Triage",
        "target": "Sales",
        "rule": "tool",
        "reason": "function transfer returned it",
    }
    assert effects[-1].agent is sales and response.agent is sales


def test_max_turns_and_execute_tools_stop_the_loop():
    def noop() -> str:
        """Do nothing."""
        return ""

    agent = Agent(name="Busy", functions=[noop])
    calling = call("noop")

    def answer(effect: Any) -> Any:
        if isinstance(effect, ToolInvocation):
            return ToolOutcome(tool_message(effect.call, ""), effect.context_variables)
        return calling

    effects, response = run(request(agent, USER, max_turns=3), answer)
    assert len(response.messages) == 4  # model, tool, model, tool: the turn that starts, ends
    assert [type(e) for e in effects] == [ModelCall, ToolInvocation, ModelCall, ToolInvocation]

    effects, response = run(request(agent, USER, execute_tools=False), answer)
    assert [type(e) for e in effects] == [ModelCall] and response.messages == [calling]


def test_a_tool_that_needs_approval_waits_for_the_person_first():
    @tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    agent = Agent(name="Payer", functions=[pay])
    script = iter([call("pay", '{"amount": 5}'), reply("Not paid.")])

    def answer(effect: Any) -> Any:
        if isinstance(effect, WaitForInput):
            assert effect.kind == "approval" and effect.call["function"]["name"] == "pay"
            return Decision(False, "too much").to_json()
        assert not isinstance(effect, ToolInvocation), "a rejected tool call never runs"
        return next(script)

    effects, response = run(request(agent, USER), answer)

    assert [type(e) for e in effects] == [ModelCall, WaitForInput, ModelCall]
    assert response.messages[1]["role"] == "tool" and "too much" in response.messages[1]["content"]


def test_after_work_revert_to_user_asks_the_person_and_terminate_ends():
    agent = Agent(name="Asker")
    script = iter([reply("Which city?"), reply("Oslo it is.")])
    answers = iter(["Oslo"])

    def answer(effect: Any) -> Any:
        if isinstance(effect, WaitForInput):
            assert effect.kind == "input" and effect.prompt == "Which city?"
            return next(answers)
        if isinstance(effect, Transition):
            return None
        return next(script)

    after_work = iter([AfterWorkOption.REVERT_TO_USER, AfterWorkOption.TERMINATE])
    arguments = request(agent, USER, after_work=lambda: next(after_work))
    effects, response = run(arguments, answer)

    kinds = [type(e).__name__ for e in effects]
    assert kinds == ["ModelCall", "Transition", "WaitForInput", "ModelCall", "Transition"]
    assert response.messages[1] == {"role": "user", "content": "Oslo"}
    assert response.messages[-1] == reply("Oslo it is.")


def test_context_conditions_hand_over_before_the_model_is_called():
    vip = Agent(name="Vip")
    desk = Agent(name="Desk", handoffs=[OnContextCondition(vip, "is_vip")])
    effects, response = run(
        request(desk, USER, {"is_vip": True}),
        lambda effect: None if isinstance(effect, Transition) else reply("Welcome."),
    )
    assert isinstance(effects[0], Transition) and effects[0].rule == "context_condition"
    assert effects[1].agent is vip and response.agent is vip


def test_the_loop_is_deterministic_and_leaves_the_callers_data_alone():
    def note(text: str, context_variables: dict[str, Any]) -> str:
        """Note it."""
        raise AssertionError("never run")

    agent = Agent(name="Noter", functions=[note])
    messages, context = copy.deepcopy(USER), {"notes": []}

    def answer_with(seen: list[Any]) -> Callable[[Any], Any]:
        script = iter([call("note", '{"text": "a"}'), reply("Noted.")])

        def answer(effect: Any) -> Any:
            seen.append(
                copy.deepcopy(getattr(effect, "request", None) or getattr(effect, "call", None))
            )
            if isinstance(effect, ToolInvocation):
                effect.context_variables["notes"].append("a")  # a tool changing it in place
                return ToolOutcome(tool_message(effect.call, "ok"), effect.context_variables)
            return next(script)

        return answer

    first: list[Any] = []
    second: list[Any] = []
    _, one = run(request(agent, messages, context), answer_with(first))
    _, two = run(request(agent, messages, context), answer_with(second))

    assert first == second  # same answers, same effects: nothing else steers the loop
    assert one.messages == two.messages and one.context_variables == {"notes": ["a"]}
    assert messages == USER and context == {"notes": []}
