"""Handoff rules in memory (`Swarm` with a scripted model): each kind of handoff, the priority
order of a turn, availability, `register_hand_off` and its checks, and the recorded transitions."""

from __future__ import annotations

from typing import Any

import pytest

from durable_swarm import (
    AfterWork,
    AfterWorkOption,
    AgentNotFoundError,
    ContextExpression,
    DurableSwarmError,
    OnCondition,
    OnContextCondition,
    Result,
    Swarm,
)
from durable_swarm.testing import ToolCall, calls, text

from ._memory import Model, agent, tool_names

HELLO = [{"role": "user", "content": "Hello."}]


def transitions(swarm: Swarm) -> list[tuple[str, str | None, str | None]]:
    return [(t["rule"], t["source"], t["target"]) for t in swarm.transitions]


# --- each kind of handoff ---------------------------------------------------------------------


def test_on_condition_is_offered_as_transfer_with_its_condition_and_hands_over() -> None:
    billing = agent("Billing")
    triage = agent("Triage", handoffs=[OnCondition(billing, "When the user asks about a bill.")])
    model = Model(Triage=[calls(ToolCall("transfer_to_billing"))], Billing=["Billing here."])
    swarm = Swarm(model.client)

    response = swarm.run(triage, HELLO)

    offered = model.requests[0]["tools"]
    assert [t["function"]["name"] for t in offered] == ["transfer_to_billing"]
    assert offered[0]["function"]["description"] == "When the user asks about a bill."
    assert offered[0]["function"]["parameters"]["properties"] == {}
    assert model.speakers == ["Triage", "Billing"]
    assert response.agent is billing
    assert response.messages[-1]["content"] == "Billing here."
    assert transitions(swarm) == [("tool", "Triage", "Billing")]


def test_on_condition_without_condition_text_gets_a_default_description() -> None:
    sales = agent("Sales")
    rule = OnCondition(sales)
    assert rule.transfer_function().__doc__ == "Transfer the conversation to Sales."
    assert rule.transfer_function().__name__ == "transfer_to_sales"


def test_on_condition_transfer_names_are_valid_tool_names() -> None:
    target = agent("Billing Desk")
    assert OnCondition(target, "c").transfer_function().__name__ == "transfer_to_billing_desk"


def test_on_context_condition_with_a_context_key_fires_before_the_turn_without_model() -> None:
    vip = agent("Vip")
    triage = agent("Triage", handoffs=[OnContextCondition(vip, "is_vip")])
    model = Model(Vip=["Welcome back."])
    swarm = Swarm(model.client)

    response = swarm.run(triage, HELLO, {"is_vip": True})

    assert model.speakers == ["Vip"]  # Triage's model was never asked
    assert response.agent is vip
    assert transitions(swarm) == [("context_condition", "Triage", "Vip")]
    assert "is_vip" in swarm.transitions[0]["reason"]


def test_on_context_condition_with_a_falsy_key_does_not_fire() -> None:
    vip = agent("Vip")
    triage = agent("Triage", handoffs=[OnContextCondition(vip, "is_vip")])
    for context in ({}, {"is_vip": False}, {"is_vip": 0}, {"is_vip": ""}):
        model = Model(Triage=["Hi."])
        swarm = Swarm(model.client)
        assert swarm.run(triage, HELLO, context).agent is triage
        assert model.speakers == ["Triage"]
        assert swarm.transitions == []


def test_on_context_condition_with_a_context_expression() -> None:
    fraud = agent("Fraud")
    triage = agent(
        "Triage",
        handoffs=[OnContextCondition(fraud, ContextExpression("${verified} and ${attempts} >= 3"))],
    )
    for context, expected in [
        ({"verified": True, "attempts": 3}, "Fraud"),
        ({"verified": True, "attempts": 2}, "Triage"),
        ({"verified": False, "attempts": 5}, "Triage"),
        ({}, "Triage"),
    ]:
        model = Model(Triage=["Triage here."], Fraud=["Fraud here."])
        response = Swarm(model.client).run(triage, HELLO, context)
        assert response.agent.name == expected, context
        assert model.speakers == [expected]


def test_on_context_condition_fires_once_a_tool_set_the_key_before_the_next_turn() -> None:
    def verify(context_variables: dict[str, Any]) -> str:
        """Verify the customer."""
        context_variables["verified"] = True
        return "verified"

    account = agent("Account")
    triage = agent("Triage", functions=[verify], handoffs=[OnContextCondition(account, "verified")])
    model = Model(Triage=[calls(ToolCall("verify"))], Account=["Your account."])
    swarm = Swarm(model.client)

    response = swarm.run(triage, HELLO)

    assert model.speakers == ["Triage", "Account"]  # no second Triage turn
    assert response.context_variables == {"verified": True}
    assert transitions(swarm) == [("context_condition", "Triage", "Account")]


def test_on_context_condition_with_a_callable_condition_and_a_name_or_callable_target() -> None:
    night = agent("Night")
    seen: list[Any] = []

    def choose(agent_: Any, messages: list[dict[str, Any]], context: dict[str, Any]) -> Any:
        seen.append((agent_.name, len(messages), dict(context)))
        return night

    for target in ("Night", choose):
        triage = agent(
            "Triage",
            handoffs=[OnContextCondition(target, lambda ctx: ctx.get("hour", 12) >= 22)],
        )
        model = Model(Night=["Good night."])
        swarm = Swarm(model.client)
        assert swarm.run(triage, HELLO, {"hour": 23}, agents=[night]).agent is night
        assert model.speakers == ["Night"]
    assert seen == [("Triage", 1, {"hour": 23})]


def test_context_conditions_chain_and_a_cycle_is_reported() -> None:
    c = agent("Cc")
    b = agent("Bb", handoffs=[OnContextCondition(c, "go")])
    a = agent("Aa", handoffs=[OnContextCondition(b, "go")])
    model = Model(Cc=["Here."])
    swarm = Swarm(model.client)
    assert swarm.run(a, HELLO, {"go": True}).agent is c
    assert transitions(swarm) == [
        ("context_condition", "Aa", "Bb"),
        ("context_condition", "Bb", "Cc"),
    ]

    ping = agent("Ping")
    pong = agent("Pong", handoffs=[OnContextCondition(ping, "go")])
    ping.register_hand_off(OnContextCondition(pong, "go"))
    with pytest.raises(DurableSwarmError, match="cycle"):
        Swarm(Model().client).run(ping, HELLO, {"go": True})


def test_a_function_returning_an_agent_hands_over() -> None:
    sales = agent("Sales")

    def transfer_to_sales() -> Any:
        """Hand over to sales."""
        return sales

    triage = agent("Triage", functions=[transfer_to_sales])
    model = Model(Triage=[calls(ToolCall("transfer_to_sales"))], Sales=["Sales here."])
    swarm = Swarm(model.client)

    response = swarm.run(triage, HELLO)

    assert response.agent is sales
    assert response.messages[1]["content"] == '{"assistant": "Sales"}'
    assert transitions(swarm) == [("tool", "Triage", "Sales")]
    assert swarm.transitions[0]["reason"] == "function transfer_to_sales returned it"


def test_result_with_an_agent_name_hands_over_to_that_agent() -> None:
    refunds = agent("Refunds")

    def escalate() -> Result:
        """Escalate."""
        return Result(value="escalated", agent="Refunds", context_variables={"escalated": True})

    triage = agent("Triage", functions=[escalate])
    model = Model(Triage=[calls(ToolCall("escalate"))], Refunds=["Refunds here."])
    swarm = Swarm(model.client)

    response = swarm.run(triage, HELLO, agents=[triage, refunds])

    assert response.agent is refunds
    assert response.messages[1]["content"] == "escalated"
    assert response.context_variables == {"escalated": True}
    assert transitions(swarm) == [("tool", "Triage", "Refunds")]


def test_result_with_an_unknown_agent_name_is_a_clear_error() -> None:
    def escalate() -> Result:
        """Escalate."""
        return Result(value="escalated", agent="NoSuchAgentAnywhere")

    triage = agent("Triage", functions=[escalate])
    with pytest.raises(AgentNotFoundError, match="NoSuchAgentAnywhere"):
        Swarm(Model(Triage=[calls(ToolCall("escalate"))]).client).run(triage, HELLO)


@pytest.mark.parametrize(
    ("option", "speakers", "ends_waiting"),
    [
        (AfterWorkOption.TERMINATE, ["Triage"], False),
        (AfterWorkOption.STAY, ["Triage", "Triage"], False),
        (AfterWorkOption.REVERT_TO_USER, ["Triage", "Triage"], True),
    ],
)
def test_result_with_an_after_work_option(
    option: AfterWorkOption, speakers: list[str], ends_waiting: bool
) -> None:
    def decide() -> Result:
        """Decide what happens next."""
        return Result(value="decided", agent=option)

    prompts: list[str] = []

    def person(prompt: str) -> str:
        prompts.append(prompt)
        return "I am here."

    triage = agent("Triage", functions=[decide])
    model = Model(Triage=[calls(ToolCall("decide")), "Done."])
    swarm = Swarm(model.client, input_fn=person)

    response = swarm.run(triage, HELLO)

    assert model.speakers == speakers
    assert response.messages[1]["content"] == "decided"
    assert [t["rule"] for t in swarm.transitions] == ["tool"]
    assert option.value in swarm.transitions[0]["reason"]
    if ends_waiting:  # the person was asked (with the last message) and answered
        assert prompts == ["decided"]
        assert response.messages[2] == {"role": "user", "content": "I am here."}
    else:
        assert prompts == []


# --- the priority order of a turn -----------------------------------------------------------


def test_priority_context_condition_before_the_models_tool_calls() -> None:
    b, c = agent("Bb"), agent("Cc")
    a = agent("Aa", handoffs=[OnContextCondition(b, "go"), OnCondition(c, "always")])
    model = Model(Aa=[calls(ToolCall("transfer_to_cc"))], Bb=["B."])
    swarm = Swarm(model.client)
    assert swarm.run(a, HELLO, {"go": True}).agent is b
    assert model.speakers == ["Bb"]


def test_priority_the_models_tool_calls_before_the_agents_after_work() -> None:
    b, c = agent("Bb"), agent("Cc")
    a = agent("Aa", handoffs=[OnCondition(b, "to b"), AfterWork(c)])
    model = Model(Aa=[calls(ToolCall("transfer_to_bb"))], Bb=["B."], Cc=["C."])
    swarm = Swarm(model.client)
    assert swarm.run(a, HELLO).agent is b
    assert model.speakers == ["Aa", "Bb"]
    assert transitions(swarm) == [("tool", "Aa", "Bb")]


def test_priority_after_work_applies_only_to_an_answer_without_tool_calls() -> None:
    def look_up() -> str:
        """Look something up."""
        return "found"

    c = agent("Cc")
    a = agent("Aa", functions=[look_up], handoffs=[AfterWork(c)])
    model = Model(Aa=[calls(ToolCall("look_up")), "Found it."], Cc=["C."])
    swarm = Swarm(model.client)
    assert swarm.run(a, HELLO).agent is c
    assert model.speakers == ["Aa", "Aa", "Cc"]
    assert transitions(swarm) == [("after_work", "Aa", "Cc")]


def test_priority_the_agents_after_work_before_the_swarms() -> None:
    b, c = agent("Bb"), agent("Cc", handoffs=[AfterWork(AfterWorkOption.TERMINATE)])
    a = agent("Aa", handoffs=[AfterWork(b)])
    model = Model(Aa=["A."], Bb=["B."], Cc=["C."])
    swarm = Swarm(model.client)
    response = swarm.run(a, HELLO, after_work=AfterWork(c))
    assert response.agent is c
    assert model.speakers == ["Aa", "Bb", "Cc"]  # Bb has no after-work of its own
    assert transitions(swarm) == [
        ("after_work", "Aa", "Bb"),
        ("swarm_after_work", "Bb", "Cc"),
        ("after_work", "Cc", None),
    ]


@pytest.mark.parametrize(
    "after_work",
    [lambda c: AfterWork(c), lambda c: c, lambda c: "Cc"],
    ids=["AfterWork", "agent", "name"],
)
def test_priority_the_swarms_after_work_for_agents_without_their_own(after_work: Any) -> None:
    c = agent("Cc", handoffs=[AfterWork(AfterWorkOption.TERMINATE)])
    a = agent("Aa")
    model = Model(Aa=["A."], Cc=["C."])
    swarm = Swarm(model.client)
    response = swarm.run(a, HELLO, after_work=after_work(c), agents=[a, c])
    assert response.agent is c
    assert model.speakers == ["Aa", "Cc"]
    assert transitions(swarm) == [("swarm_after_work", "Aa", "Cc"), ("after_work", "Cc", None)]


def test_without_any_rule_the_run_ends_as_swarms_does() -> None:
    a = agent("Aa")
    model = Model(Aa=["The answer."])
    swarm = Swarm(model.client)
    response = swarm.run(a, HELLO)
    assert model.speakers == ["Aa"]
    assert [m["content"] for m in response.messages] == ["The answer."]
    assert response.agent is a
    assert swarm.transitions == []


# --- availability ---------------------------------------------------------------------------


def _available_by_key() -> Any:
    return "open"


def _available_by_expression() -> Any:
    return ContextExpression("${open} == true")


def _available_by_callable() -> Any:
    return lambda context: bool(context.get("open"))


AVAILABILITY = pytest.mark.parametrize(
    "available",
    [_available_by_key, _available_by_expression, _available_by_callable],
    ids=["context-key", "context-expression", "callable"],
)


@AVAILABILITY
def test_availability_hides_or_offers_an_on_condition_transfer(available: Any) -> None:
    b = agent("Bb")
    a = agent("Aa", handoffs=[OnCondition(b, "to b", available=available())])
    for context, offered in [({"open": True}, ["transfer_to_bb"]), ({"open": False}, [])]:
        model = Model(Aa=["A."])
        Swarm(model.client).run(a, HELLO, context)
        assert tool_names(model.requests[0]) == offered
        if not offered:
            assert model.requests[0]["tools"] is None


@AVAILABILITY
def test_availability_enables_or_disables_an_on_context_condition(available: Any) -> None:
    b = agent("Bb")
    a = agent("Aa", handoffs=[OnContextCondition(b, "go", available=available())])
    for context, speaker in [({"go": 1, "open": True}, "Bb"), ({"go": 1, "open": False}, "Aa")]:
        model = Model(Aa=["A."], Bb=["B."])
        assert Swarm(model.client).run(a, HELLO, context).agent.name == speaker
        assert model.speakers == [speaker]


def test_availability_is_evaluated_again_every_turn() -> None:
    def open_up(context_variables: dict[str, Any]) -> str:
        """Open the door."""
        context_variables["open"] = True
        return "opened"

    b = agent("Bb")
    a = agent("Aa", functions=[open_up], handoffs=[OnCondition(b, "to b", available="open")])
    model = Model(Aa=[calls(ToolCall("open_up")), calls(ToolCall("transfer_to_bb"))], Bb=["B."])
    swarm = Swarm(model.client)
    assert swarm.run(a, HELLO).agent is b
    assert [tool_names(r) for r in model.requests[:2]] == [
        ["open_up"],
        ["open_up", "transfer_to_bb"],
    ]


def test_a_hidden_transfer_called_anyway_is_refused() -> None:
    b = agent("Bb")
    a = agent("Aa", handoffs=[OnCondition(b, "to b", available="open")])
    model = Model(Aa=[calls(ToolCall("transfer_to_bb")), "Stuck with me."])
    swarm = Swarm(model.client)
    response = swarm.run(a, HELLO, {"open": False})
    assert response.agent is a
    assert response.messages[1]["content"] == "Error: Tool transfer_to_bb not found."
    assert swarm.transitions == []


# --- register_hand_off and checks at definition ---------------------------------------------


def test_register_hand_off_adds_rules_and_a_new_after_work_replaces_the_old() -> None:
    b, c, d = agent("Bb"), agent("Cc"), agent("Dd")
    a = agent("Aa")
    a.register_hand_off(OnCondition(b, "to b"))
    a.register_hand_off([OnContextCondition(c, "go"), AfterWork(AfterWorkOption.STAY)])
    a.register_hand_off(AfterWork(d))
    kinds = [type(h).__name__ for h in a.handoffs]
    assert kinds == ["OnCondition", "OnContextCondition", "AfterWork"]
    assert a.handoffs[-1].agent is d

    model = Model(Aa=["A."], Dd=["D."])
    swarm = Swarm(model.client)
    assert swarm.run(a, HELLO, max_turns=2).agent is d
    assert tool_names(model.requests[0]) == ["transfer_to_bb"]


def test_agent_handoffs_accepts_one_rule_or_a_list() -> None:
    b = agent("Bb")
    assert len(agent("Aa", handoffs=OnCondition(b, "to b")).handoffs) == 1
    assert len(agent("Aa", handoffs=(OnCondition(b, "x"), AfterWork(b))).handoffs) == 2


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda b: agent("Aa", handoffs=[42]), "A handoff must be OnCondition"),
        (lambda b: agent("Aa", handoffs=[b]), "A handoff must be OnCondition"),
        (lambda b: agent("Aa").register_hand_off("Bb"), "A handoff must be OnCondition"),
        (lambda b: agent("Aa").register_hand_off([OnCondition(b), None]), "got None"),
        (lambda b: OnCondition("Bb", "to b"), "OnCondition target must be an Agent"),
        (lambda b: OnCondition(AfterWorkOption.STAY), "OnCondition target must be an Agent"),
        (lambda b: OnCondition(b, "to b", available=42), "OnCondition.available"),
        (lambda b: OnContextCondition(b, 42), "OnContextCondition.condition"),
        (lambda b: OnContextCondition(42, "go"), "OnContextCondition target"),
        (lambda b: OnContextCondition(b, "go", available=3.5), "OnContextCondition.available"),
        (lambda b: AfterWork(42), "AfterWork target"),
        (lambda b: AfterWork(None), "AfterWork target"),
    ],
)
def test_invalid_handoffs_are_rejected_when_defined(make: Any, message: str) -> None:
    b = agent("Bb")
    with pytest.raises(DurableSwarmError, match=message):
        make(b)


def test_after_work_accepts_option_names() -> None:
    assert AfterWork("stay").agent is AfterWorkOption.STAY
    assert AfterWork("TERMINATE").agent is AfterWorkOption.TERMINATE
    assert AfterWork("revert_to_user").agent is AfterWorkOption.REVERT_TO_USER
    assert AfterWork("Sales").agent == "Sales"  # an agent's name, looked up when it fires


# --- transitions ------------------------------------------------------------------------------


def test_transitions_record_rule_source_target_and_reason_and_restart_with_each_run() -> None:
    def transfer_to_c() -> Any:
        """To C."""
        return c

    c = agent("Cc", functions=[], handoffs=[AfterWork(AfterWorkOption.TERMINATE)])
    b = agent("Bb", functions=[transfer_to_c])
    a = agent("Aa", handoffs=[OnContextCondition(b, "go")])
    model = Model(Bb=[calls(ToolCall("transfer_to_c"))], Cc=["C."])
    swarm = Swarm(model.client)

    swarm.run(a, HELLO, {"go": True})

    assert swarm.transitions == [
        {"source": "Aa", "target": "Bb", "rule": "context_condition", "reason": "'go'"},
        {
            "source": "Bb",
            "target": "Cc",
            "rule": "tool",
            "reason": "function transfer_to_c returned it",
        },
        {
            "source": "Cc",
            "target": None,
            "rule": "after_work",
            "reason": "TERMINATE (Cc answered without a tool call)",
        },
    ]
    swarm.run(agent("Solo"), HELLO)
    assert swarm.transitions == []


def test_a_handoff_to_the_active_agent_records_nothing() -> None:
    def stay_here() -> Any:
        """Stay."""
        return a

    a = agent("Aa", functions=[stay_here])
    model = Model(Aa=[calls(ToolCall("stay_here")), "Still me."])
    swarm = Swarm(model.client)
    assert swarm.run(a, HELLO).agent is a
    assert swarm.transitions == []


def test_text_reply_script_sanity() -> None:
    # the scripted model itself: unknown agents answer, lists repeat their last reply
    model = Model(Aa=[text("one"), "two"])
    swarm = Swarm(model.client)
    a = agent("Aa", handoffs=[AfterWork(AfterWorkOption.STAY)])
    response = swarm.run(a, HELLO, max_turns=3)
    assert [m["content"] for m in response.messages] == ["one", "two", "two"]
