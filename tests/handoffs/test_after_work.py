"""After-work in memory: STAY, TERMINATE, REVERT_TO_USER (the person through `input_fn`),
callable after-work; system messages that update from context; AG2's old spellings."""

from __future__ import annotations

from typing import Any

import pytest

from durable_swarm import (
    AfterWork,
    AfterWorkOption,
    Agent,
    OnCondition,
    Result,
    Swarm,
    UpdateSystemMessage,
)
from durable_swarm.ag2 import AFTER_WORK, ON_CONDITION, SwarmAgent, SwarmResult
from durable_swarm.testing import ToolCall, calls

from ._memory import Model, agent

HELLO = [{"role": "user", "content": "Hello."}]


class Person:
    """Answers the questions of a run in turn and remembers the prompts."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0)


# --- the options ------------------------------------------------------------------------------


def test_stay_gives_the_agent_another_turn_until_max_turns() -> None:
    a = agent("Aa", handoffs=[AfterWork(AfterWorkOption.STAY)])
    model = Model(Aa=["one", "two", "three", "four"])
    swarm = Swarm(model.client)
    response = swarm.run(a, HELLO, max_turns=3)
    assert [m["content"] for m in response.messages] == ["one", "two", "three"]
    assert model.speakers == ["Aa"] * 3
    assert [t["rule"] for t in swarm.transitions] == ["after_work"] * 3
    assert all(t["target"] is None and "STAY" in t["reason"] for t in swarm.transitions)


def test_terminate_ends_the_run_even_with_a_swarm_after_work() -> None:
    b = agent("Bb")
    a = agent("Aa", handoffs=[AfterWork(AfterWorkOption.TERMINATE)])
    model = Model(Aa=["bye"])
    swarm = Swarm(model.client)
    response = swarm.run(a, HELLO, after_work=AfterWork(b))
    assert model.speakers == ["Aa"]
    assert response.agent is a
    assert swarm.transitions == [
        {
            "source": "Aa",
            "target": None,
            "rule": "after_work",
            "reason": "TERMINATE (Aa answered without a tool call)",
        }
    ]


def test_revert_to_user_asks_the_person_with_the_last_message_and_goes_on() -> None:
    def reply(messages: list[dict[str, Any]], tools: Any) -> str:
        said = [m["content"] for m in messages if m["role"] == "user"]
        return f"You said {said[-1]!r}; anything else?"

    a = agent("Aa", handoffs=[AfterWork(AfterWorkOption.REVERT_TO_USER)])
    person = Person("my order is late", "no, thanks")
    swarm = Swarm(Model(Aa=reply).client, input_fn=person)

    response = swarm.run(a, HELLO, max_turns=5)

    # two questions, not three: once max_turns is spent the run ends without asking again
    assert person.prompts == [
        "You said 'Hello.'; anything else?",
        "You said 'my order is late'; anything else?",
    ]
    assert [(m["role"], m["content"]) for m in response.messages] == [
        ("assistant", "You said 'Hello.'; anything else?"),
        ("user", "my order is late"),
        ("assistant", "You said 'my order is late'; anything else?"),
        ("user", "no, thanks"),
        ("assistant", "You said 'no, thanks'; anything else?"),
    ]
    assert all("REVERT_TO_USER" in t["reason"] for t in swarm.transitions)


def test_revert_to_user_as_the_swarms_after_work() -> None:
    a = agent("Aa")
    person = Person("again")
    swarm = Swarm(Model(Aa=["first", "second"]).client, input_fn=person)
    response = swarm.run(a, HELLO, after_work=AfterWorkOption.REVERT_TO_USER, max_turns=3)
    assert person.prompts == ["first"]  # not asked again after the last turn
    assert [m["content"] for m in response.messages] == ["first", "again", "second"]
    assert swarm.transitions[0]["rule"] == "swarm_after_work"


# --- callable after-work -----------------------------------------------------------------------


def test_callable_after_work_returning_an_agent_gets_agent_messages_and_context() -> None:
    seen: list[Any] = []
    b = agent("Bb", handoffs=[AfterWork(AfterWorkOption.TERMINATE)])

    def next_agent(last: Any, messages: list[dict[str, Any]], context: dict[str, Any]) -> Any:
        seen.append((last.name, [m["content"] for m in messages], dict(context)))
        return b

    a = agent("Aa", handoffs=[AfterWork(next_agent)])
    model = Model(Aa=["A."], Bb=["B."])
    swarm = Swarm(model.client)
    assert swarm.run(a, HELLO, {"k": 1}).agent is b
    assert seen == [("Aa", ["Hello.", "A."], {"k": 1})]
    assert [t["rule"] for t in swarm.transitions] == ["after_work", "after_work"]


@pytest.mark.parametrize(
    ("returned", "speakers", "last"),
    [
        (AfterWorkOption.TERMINATE, ["Aa"], "Aa"),
        (AfterWorkOption.STAY, ["Aa", "Aa"], "Aa"),
        ("Bb", ["Aa", "Bb"], "Bb"),
        ("TERMINATE", ["Aa"], "Aa"),
    ],
    ids=["option", "stay", "agent-name", "option-name"],
)
def test_callable_after_work_returning_an_option_or_a_name(
    returned: Any, speakers: list[str], last: str
) -> None:
    b = agent("Bb", handoffs=[AfterWork(AfterWorkOption.TERMINATE)])
    a = agent("Aa", handoffs=[AfterWork(lambda: returned)])  # takes no argument: fine too
    model = Model(Aa=["A."], Bb=["B."])
    response = Swarm(model.client).run(a, HELLO, agents=[a, b], max_turns=2)
    assert model.speakers == speakers
    assert response.agent.name == last


def test_callable_swarm_after_work_chooses_from_the_context() -> None:
    b = agent("Bb", handoffs=[AfterWork(AfterWorkOption.TERMINATE)])
    a = agent("Aa")

    def route(last: Any, messages: Any, context: dict[str, Any]) -> Any:
        return b if context.get("escalate") else AfterWorkOption.TERMINATE

    for context, speakers in [({"escalate": True}, ["Aa", "Bb"]), ({}, ["Aa"])]:
        model = Model(Aa=["A."], Bb=["B."])
        Swarm(model.client).run(a, HELLO, context, after_work=route)
        assert model.speakers == speakers


# --- system messages that update from context ------------------------------------------------


def _counting_tool() -> Any:
    def count(context_variables: dict[str, Any]) -> str:
        """Count one more."""
        context_variables["n"] = context_variables.get("n", 0) + 1
        return "counted"

    return count


def test_update_system_message_template_is_rendered_again_every_turn() -> None:
    a = Agent(
        name="Counter",
        instructions=UpdateSystemMessage("You are Counter for {user}; n={n}; missing=[{nope}]"),
        functions=[_counting_tool()],
    )
    model = Model(Counter=[calls(ToolCall("count")), calls(ToolCall("count")), "Done."])
    Swarm(model.client).run(a, HELLO, {"user": "Ada", "n": 0})
    assert model.system_messages() == [
        "You are Counter for Ada; n=0; missing=[]",
        "You are Counter for Ada; n=1; missing=[]",
        "You are Counter for Ada; n=2; missing=[]",
    ]


def test_update_system_message_callable_is_called_every_turn() -> None:
    def instructions(context: dict[str, Any]) -> str:
        return f"You are Counter; count is {context.get('n', 0)}."

    a = Agent(
        name="Counter",
        instructions="ignored: the update below wins",
        update_agent_state_before_reply=[UpdateSystemMessage(instructions)],
        functions=[_counting_tool()],
    )
    model = Model(Counter=[calls(ToolCall("count")), "Done."])
    Swarm(model.client).run(a, HELLO)
    assert model.system_messages() == [
        "You are Counter; count is 0.",
        "You are Counter; count is 1.",
    ]


def test_update_system_message_callable_with_agent_and_messages() -> None:
    def instructions(agent_: Any, messages: list[dict[str, Any]]) -> str:
        return f"You are {agent_.name}; {len(messages)} messages so far."

    a = Agent(
        name="Counter",
        instructions=UpdateSystemMessage(instructions),
        functions=[_counting_tool()],
    )
    model = Model(Counter=[calls(ToolCall("count")), "Done."])
    Swarm(model.client).run(a, HELLO)
    assert model.system_messages() == [
        "You are Counter; 1 messages so far.",
        "You are Counter; 3 messages so far.",
    ]


# --- AG2's old spellings ----------------------------------------------------------------------


def test_old_spellings_are_the_new_names() -> None:
    assert ON_CONDITION is OnCondition
    assert AFTER_WORK is AfterWork
    assert issubclass(SwarmAgent, Agent)
    assert issubclass(SwarmResult, Result)


def test_an_ag2_style_swarm_runs() -> None:
    """Written as AG2's swarm docs do: SwarmAgent(system_message=...), ON_CONDITION,
    AFTER_WORK, register_hand_off, SwarmResult(values=..., agent=..., context_variables=...)."""

    def record_order(order: str, context_variables: dict[str, Any]) -> SwarmResult:
        """Record the order."""
        return SwarmResult(
            values=f"Recorded {order}.",
            agent=AfterWorkOption.TERMINATE,
            context_variables={"order": order},
        )

    orders = SwarmAgent(
        "Orders",
        system_message="You are Orders.",
        functions=[record_order],
        llm_config={"model": "ignored"},  # AG2 options without meaning here are ignored
    )
    triage = SwarmAgent("Triage", system_message="You are Triage.")
    triage.register_hand_off(
        [ON_CONDITION(orders, "When the user wants to order."), AFTER_WORK(AfterWorkOption.STAY)]
    )
    model = Model(
        Triage=[calls(ToolCall("transfer_to_orders"))],
        Orders=[calls(ToolCall("record_order", {"order": "tea"}))],
    )
    swarm = Swarm(model.client)

    response = swarm.run(triage, HELLO)

    assert orders.instructions == "You are Orders."
    assert model.speakers == ["Triage", "Orders"]
    assert response.messages[-1]["content"] == "Recorded tea."
    assert response.context_variables == {"order": "tea"}
    assert [t["rule"] for t in swarm.transitions] == ["tool", "tool"]
    assert SwarmResult(values="x").value == "x"
