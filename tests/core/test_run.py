"""SPEC "`run(...)`": requests sent, messages appended, tools, handoffs, errors, turn limits."""

from __future__ import annotations

import copy
import json

import pytest

from durable_swarm import Agent, Response, Result

from ._mock import calling, completion, dumped, mock_client, requests, tool_call

USER = [{"role": "user", "content": "hi"}]


# --- inputs -------------------------------------------------------------------------------------


def test_run_deep_copies_inputs(make_swarm):
    def remember(context_variables):
        context_variables["seen"] = True
        context_variables["nested"]["list"].append("tool")
        return "ok"

    messages = [{"role": "user", "content": "hi", "meta": {"tags": ["a"]}}]
    context = {"nested": {"list": ["caller"]}}
    before = (copy.deepcopy(messages), copy.deepcopy(context))
    client = mock_client(calling(tool_call("remember")), completion("done"))

    response = make_swarm(client).run(
        agent=Agent(functions=[remember]), messages=messages, context_variables=context
    )

    assert (messages, context) == before
    assert response.context_variables == {"nested": {"list": ["caller", "tool"]}, "seen": True}
    assert response.context_variables is not context
    assert response.context_variables["nested"] is not context["nested"]


def test_run_default_context_variables_not_shared_between_runs(make_swarm):
    def mark(context_variables):
        context_variables["marked"] = True
        return "ok"

    agent = Agent(functions=[mark])
    swarm = make_swarm(mock_client(calling(tool_call("mark")), completion("a"), completion("b")))

    first = swarm.run(agent=agent, messages=USER)
    second = swarm.run(agent=agent, messages=USER)

    assert first.context_variables == {"marked": True}
    assert second.context_variables == {}


def test_run_accepts_swarms_positional_arguments(make_swarm):
    def tool():
        return "x"

    client = mock_client(calling(tool_call("tool")), completion("never"))
    agent = Agent(functions=[tool])

    # agent, messages, context_variables, model_override, stream, debug, max_turns, execute_tools
    response = make_swarm(client).run(agent, USER, {"k": 1}, "m-override", False, False, 5, False)

    assert [m["role"] for m in response.messages] == ["assistant"]
    assert response.context_variables == {"k": 1}
    assert requests(client)[0]["model"] == "m-override"


# --- the completion request ---------------------------------------------------------------------


def test_request_is_exactly_swarms_without_tools(make_swarm):
    client = mock_client(completion("hello"))
    agent = Agent(name="Plain", model="gpt-4o-mini", instructions="Be nice.")

    make_swarm(client).run(agent=agent, messages=USER)

    assert requests(client) == [
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "system", "content": "Be nice."}, *USER],
            "tools": None,
            "tool_choice": None,
            "stream": False,
        }
    ]


def test_request_is_exactly_swarms_with_tools(make_swarm):
    def get_weather(location: str, unit: str = "c") -> str:
        """Weather for a place."""
        return "sunny"

    client = mock_client(completion("hello"))
    agent = Agent(functions=[get_weather], tool_choice="auto", parallel_tool_calls=False)

    make_swarm(client).run(agent=agent, messages=USER)

    assert requests(client) == [
        {
            "model": "gpt-4o",
            "messages": [{"role": "system", "content": "You are a helpful agent."}, *USER],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Weather for a place.",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "location": {"type": "string"},
                                "unit": {"type": "string"},
                            },
                            "required": ["location"],
                        },
                    },
                }
            ],
            "tool_choice": "auto",
            "stream": False,
            "parallel_tool_calls": False,
        }
    ]


def test_request_messages_are_system_plus_history(make_swarm):
    history = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two", "sender": "Agent"},
        {"role": "user", "content": "three"},
    ]
    client = mock_client(completion("four"))

    make_swarm(client).run(agent=Agent(instructions="sys"), messages=history)

    assert requests(client)[0]["messages"] == [{"role": "system", "content": "sys"}, *history]


def test_tool_choice_always_sent(make_swarm):
    client = mock_client(completion("a"))

    make_swarm(client).run(agent=Agent(), messages=USER)
    make_swarm(client).run(agent=Agent(tool_choice="none"), messages=USER)

    sent = requests(client)
    assert "tool_choice" in sent[0] and sent[0]["tool_choice"] is None
    assert sent[1]["tool_choice"] == "none"


def test_parallel_tool_calls_sent_only_with_tools(make_swarm):
    def tool():
        return "x"

    client = mock_client(completion("a"))

    make_swarm(client).run(agent=Agent(parallel_tool_calls=False), messages=USER)
    make_swarm(client).run(agent=Agent(functions=[tool]), messages=USER)

    without_tools, with_tools = requests(client)
    assert "parallel_tool_calls" not in without_tools
    assert without_tools["tools"] is None
    assert with_tools["parallel_tool_calls"] is True


@pytest.mark.parametrize(
    ("override", "models"),
    [
        pytest.param("override-model", ["override-model", "override-model"], id="override"),
        pytest.param(None, ["first-model", "second-model"], id="each-agents-own"),
    ],
)
def test_model_override_applies_to_every_agent_else_each_agents_model(make_swarm, override, models):
    second = Agent(name="Second", model="second-model")

    def transfer():
        return second

    first = Agent(name="First", model="first-model", functions=[transfer])
    client = mock_client(calling(tool_call("transfer")), completion("hi"))

    make_swarm(client).run(agent=first, messages=USER, model_override=override)

    assert [r["model"] for r in requests(client)] == models


def test_stream_flag_sent(make_swarm):
    client = mock_client(completion("a"))

    make_swarm(client).run(agent=Agent(), messages=USER)

    assert requests(client)[0]["stream"] is False


# --- instructions -------------------------------------------------------------------------------


def test_callable_instructions_receive_context_variables(make_swarm):
    seen = []

    def instructions(context_variables):
        seen.append(dict(context_variables))
        return f"Help {context_variables['name']}."

    client = mock_client(completion("a"))

    make_swarm(client).run(
        agent=Agent(instructions=instructions), messages=USER, context_variables={"name": "Ann"}
    )

    assert requests(client)[0]["messages"][0] == {"role": "system", "content": "Help Ann."}
    assert seen == [{"name": "Ann"}]


def test_callable_instructions_missing_keys_read_empty(make_swarm):
    def instructions(context_variables):
        return f"[{context_variables['missing']}]"

    client = mock_client(completion("a"))

    make_swarm(client).run(agent=Agent(instructions=instructions), messages=USER)

    assert requests(client)[0]["messages"][0]["content"] == "[]"


def test_callable_instructions_see_tool_updates(make_swarm):
    def instructions(context_variables):
        return f"step={context_variables['step']}"

    def advance(context_variables):
        context_variables["step"] = 2
        return "ok"

    client = mock_client(calling(tool_call("advance")), completion("a"))

    make_swarm(client).run(
        agent=Agent(instructions=instructions, functions=[advance]),
        messages=USER,
        context_variables={"step": 1},
    )

    assert [r["messages"][0]["content"] for r in requests(client)] == ["step=1", "step=2"]


def test_zero_arg_instructions(make_swarm):
    client = mock_client(completion("a"))

    make_swarm(client).run(agent=Agent(instructions=lambda: "No arguments."), messages=USER)

    assert requests(client)[0]["messages"][0]["content"] == "No arguments."


# --- appended messages --------------------------------------------------------------------------


def test_assistant_message_is_plain_dict_with_sender(make_swarm):
    answer = completion("Hello there")
    client = mock_client(answer)

    response = make_swarm(client).run(agent=Agent(name="Greeter"), messages=USER)

    assert response.messages == [dumped(answer.choices[0].message, "Greeter")]
    assert type(response.messages[0]) is dict
    assert response.messages[0]["sender"] == "Greeter"


def test_assistant_message_with_tool_calls_dumped_and_resent(make_swarm):
    def lookup():
        return "found"

    first = calling(tool_call("lookup", id="call_9"))
    client = mock_client(first, completion("done"))

    response = make_swarm(client).run(agent=Agent(name="A", functions=[lookup]), messages=USER)

    assistant = dumped(first.choices[0].message, "A")
    assert response.messages[0] == assistant
    assert assistant["tool_calls"][0]["id"] == "call_9"
    assert requests(client)[1]["messages"][1:] == [*USER, assistant, response.messages[1]]


def test_tool_message_shape(make_swarm):
    def lookup(query: str) -> str:
        return f"result for {query}"

    client = mock_client(calling(tool_call("lookup", {"query": "q"}, id="call_42")), completion())

    response = make_swarm(client).run(agent=Agent(functions=[lookup]), messages=USER)

    assert response.messages[1] == {
        "role": "tool",
        "tool_call_id": "call_42",
        "tool_name": "lookup",
        "content": "result for q",
    }


# --- context_variables in functions -------------------------------------------------------------


def test_context_variables_hidden_from_schema(make_swarm):
    def with_context(city: str, context_variables: dict) -> str:
        """Uses context."""
        return city

    def context_only(context_variables):
        return "x"

    client = mock_client(completion("a"))

    make_swarm(client).run(agent=Agent(functions=[with_context, context_only]), messages=USER)

    tools = requests(client)[0]["tools"]
    assert tools[0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    assert tools[1]["function"]["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
    }


def test_function_gets_live_context_variables(make_swarm):
    seen = []

    def first(context_variables):
        seen.append(dict(context_variables))
        context_variables["first"] = 1
        return "one"

    def second(context_variables):
        seen.append(dict(context_variables))
        return "two"

    client = mock_client(
        calling(tool_call("first", id="c1"), tool_call("second", id="c2")), completion("a")
    )

    response = make_swarm(client).run(
        agent=Agent(functions=[first, second]), messages=USER, context_variables={"start": 0}
    )

    assert seen == [{"start": 0}, {"start": 0, "first": 1}]
    assert response.context_variables == {"start": 0, "first": 1}


def test_function_without_context_parameter_gets_only_model_arguments(make_swarm):
    received = []

    def plain(**kwargs):
        received.append(kwargs)
        return "ok"

    client = mock_client(calling(tool_call("plain", {"a": 1})), completion("a"))

    make_swarm(client).run(
        agent=Agent(functions=[plain]), messages=USER, context_variables={"k": 1}
    )

    assert received == [{"a": 1}]


# --- return values ------------------------------------------------------------------------------


class _Outcome(Result):
    """A subclass of Result: Swarm matches Results with isinstance."""


@pytest.mark.parametrize("kind", [Result, _Outcome], ids=["Result", "subclass"])
def test_result_return_used_as_is(make_swarm, kind):
    target = Agent(name="Target")

    def act():
        return kind(value="acted", agent=target, context_variables={"done": True})

    client = mock_client(calling(tool_call("act")), completion("hi"))

    response = make_swarm(client).run(agent=Agent(functions=[act]), messages=USER)

    assert response.messages[1]["content"] == "acted"
    assert response.agent is target
    assert response.context_variables == {"done": True}


def test_agent_return_is_handoff(make_swarm):
    target = Agent(name="Sales Agent")

    def transfer_to_sales():
        return target

    client = mock_client(calling(tool_call("transfer_to_sales")), completion("hi"))

    response = make_swarm(client).run(agent=Agent(functions=[transfer_to_sales]), messages=USER)

    assert response.messages[1]["content"] == json.dumps({"assistant": "Sales Agent"})
    assert response.agent is target
    assert response.messages[2]["sender"] == "Sales Agent"
    assert requests(client)[1]["messages"][0]["content"] == target.instructions


@pytest.mark.parametrize(
    ("value", "text"),
    [(42, "42"), (3.5, "3.5"), (None, "None"), ({"a": 1}, "{'a': 1}"), (["x"], "['x']")],
)
def test_other_return_values_become_str(make_swarm, value, text):
    def tool():
        return value

    client = mock_client(calling(tool_call("tool")), completion("a"))

    response = make_swarm(client).run(agent=Agent(functions=[tool]), messages=USER)

    assert response.messages[1]["content"] == text


# --- several tool calls, handoffs, unknown tools ------------------------------------------------


def test_tool_calls_run_in_order(make_swarm):
    order = []

    def step(n: int) -> str:
        order.append(n)
        return f"step {n}"

    calls = [tool_call("step", {"n": n}, id=f"c{n}") for n in (3, 1, 2)]
    client = mock_client(calling(*calls), completion("a"))

    response = make_swarm(client).run(agent=Agent(functions=[step]), messages=USER)

    assert order == [3, 1, 2]
    assert [m["tool_call_id"] for m in response.messages[1:4]] == ["c3", "c1", "c2"]


def test_last_handoff_wins(make_swarm):
    first = Agent(name="First")
    second = Agent(name="Second")

    def to_first():
        return first

    def to_second():
        return second

    def neutral():
        return "nothing"

    client = mock_client(
        calling(
            tool_call("to_first", id="c1"),
            tool_call("to_second", id="c2"),
            tool_call("neutral", id="c3"),
        ),
        completion("from second"),
    )

    response = make_swarm(client).run(
        agent=Agent(functions=[to_first, to_second, neutral]), messages=USER
    )

    assert response.agent is second
    assert response.messages[-1]["sender"] == "Second"


def test_context_updates_merge(make_swarm):
    def a():
        return Result(value="a", context_variables={"a": 1, "shared": "a"})

    def b():
        return Result(value="b", context_variables={"b": 2, "shared": "b"})

    client = mock_client(calling(tool_call("a", id="c1"), tool_call("b", id="c2")), completion())

    response = make_swarm(client).run(
        agent=Agent(functions=[a, b]), messages=USER, context_variables={"keep": 0}
    )

    assert response.context_variables == {"keep": 0, "a": 1, "b": 2, "shared": "b"}


def test_result_updates_merge_after_the_messages_last_tool_call(make_swarm):
    """As Swarm: a tool sees the live dict (its own and earlier tools' in-place changes), not the
    `Result` updates of earlier calls of the same message; those are merged after the last one,
    over in-place changes to the same keys."""
    seen = []

    def bump(context_variables):
        context_variables["nested"]["n"] += 1
        context_variables["bumped"] = True
        return "bumped"

    def reset():
        return Result(value="reset", context_variables={"nested": {"n": 100}, "set": "reset"})

    def look(context_variables):
        seen.append(copy.deepcopy(context_variables))
        return "looked"

    client = mock_client(
        calling(
            tool_call("reset", id="c1"), tool_call("bump", id="c2"), tool_call("look", id="c3")
        ),
        calling(tool_call("look", id="c4")),
        completion("done"),
    )

    response = make_swarm(client).run(
        agent=Agent(functions=[bump, reset, look]),
        messages=USER,
        context_variables={"nested": {"n": 1}},
    )

    assert seen == [
        {"nested": {"n": 2}, "bumped": True},
        {"nested": {"n": 100}, "bumped": True, "set": "reset"},
    ]
    assert response.context_variables == {"nested": {"n": 100}, "bumped": True, "set": "reset"}


def test_context_variables_sent_by_the_model_are_replaced_by_the_live_dict(make_swarm):
    seen = []

    def look(context_variables, q: str) -> str:
        seen.append(dict(context_variables))
        return q

    arguments = {"q": "x", "context_variables": {"forged": True}}
    client = mock_client(calling(tool_call("look", arguments)), completion("done"))

    response = make_swarm(client).run(
        agent=Agent(functions=[look]), messages=USER, context_variables={"real": 1}
    )

    assert seen == [{"real": 1}]
    assert response.messages[1]["content"] == "x"


def test_unknown_tool_error_message(make_swarm):
    def known():
        return "known ran"

    client = mock_client(
        calling(tool_call("missing", id="c1"), tool_call("known", id="c2")), completion("ok")
    )

    response = make_swarm(client).run(agent=Agent(functions=[known]), messages=USER)

    assert response.messages[1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "tool_name": "missing",
        "content": "Error: Tool missing not found.",
    }
    assert response.messages[2]["content"] == "known ran"
    assert response.messages[-1]["content"] == "ok"


# --- errors the model can recover from ----------------------------------------------------------


def test_tool_exception_becomes_error_message(make_swarm):
    def explode(x: int) -> str:
        raise RuntimeError("boom happened")

    client = mock_client(calling(tool_call("explode", {"x": 1}, id="c1")), completion("sorry"))

    response = make_swarm(client).run(agent=Agent(functions=[explode]), messages=USER)

    tool_message = response.messages[1]
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == "c1"
    assert tool_message["tool_name"] == "explode"
    assert tool_message["content"].startswith("Error")
    assert "RuntimeError" in tool_message["content"]
    assert "boom happened" in tool_message["content"]
    assert response.messages[-1]["content"] == "sorry"
    assert requests(client)[1]["messages"][-1] == tool_message


def test_bad_json_arguments_become_error_message(make_swarm):
    calls = []

    def lookup(query: str) -> str:
        calls.append(query)
        return "found"

    client = mock_client(
        calling(tool_call("lookup", raw='{"query": "unterminated', id="c1")),
        calling(tool_call("lookup", {"query": "fixed"}, id="c2")),
        completion("done"),
    )

    response = make_swarm(client).run(agent=Agent(functions=[lookup]), messages=USER)

    error = response.messages[1]["content"]
    assert error.startswith("Error")
    assert "lookup" in error and "JSON" in error
    assert calls == ["fixed"]
    assert response.messages[3]["content"] == "found"
    assert response.messages[-1]["content"] == "done"


def test_json_arguments_not_an_object_become_error_message(make_swarm):
    def lookup(query: str) -> str:
        return "found"

    client = mock_client(calling(tool_call("lookup", raw='["q"]')), completion("done"))

    response = make_swarm(client).run(agent=Agent(functions=[lookup]), messages=USER)

    assert response.messages[1]["content"].startswith("Error")
    assert "object" in response.messages[1]["content"]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "query"),  # a required argument is missing
        ({"query": "q", "extra": 1}, "extra"),  # an argument the function does not take
        ({"query": "q", "limit": "many"}, "limit"),  # a value of the wrong type
    ],
)
def test_arguments_not_fitting_signature(make_swarm, arguments, problem):
    calls = []

    def search(query: str, limit: int = 5) -> str:
        calls.append((query, limit))
        return "found"

    client = mock_client(calling(tool_call("search", arguments)), completion("done"))

    response = make_swarm(client).run(agent=Agent(functions=[search]), messages=USER)

    error = response.messages[1]["content"]
    assert error.startswith("Error")
    assert "search" in error and problem in error
    assert calls == []
    assert response.messages[-1]["content"] == "done"


def test_empty_arguments_call_function_without_arguments(make_swarm):
    calls = []

    def ping():
        calls.append("ping")
        return "pong"

    client = mock_client(calling(tool_call("ping", raw="")), completion("done"))

    response = make_swarm(client).run(agent=Agent(functions=[ping]), messages=USER)

    assert calls == ["ping"]
    assert response.messages[1]["content"] == "pong"


# --- execute_tools, max_turns, end of the loop --------------------------------------------------


def test_execute_tools_false(make_swarm):
    ran = []
    other = Agent(name="Other")

    def transfer():
        ran.append("transfer")
        return other

    agent = Agent(name="Triage", functions=[transfer])
    asked = calling(tool_call("transfer"))
    client = mock_client(asked, completion("never"))

    response = make_swarm(client).run(agent=agent, messages=USER, execute_tools=False)

    assert ran == []
    assert response.messages == [dumped(asked.choices[0].message, "Triage")]
    assert response.agent is agent
    assert len(requests(client)) == 1


def test_max_turns_zero_makes_no_call(make_swarm):
    client = mock_client(completion("never"))
    agent = Agent()

    response = make_swarm(client).run(
        agent=agent, messages=USER, context_variables={"k": 1}, max_turns=0
    )

    assert client.chat.completions.create.call_count == 0
    assert response.messages == []
    assert response.agent is agent
    assert response.context_variables == {"k": 1}


def test_max_turns_one_returns_assistant_and_tools(make_swarm):
    ran = []

    def one():
        ran.append("one")
        return "1"

    def two():
        ran.append("two")
        return "2"

    client = mock_client(
        calling(tool_call("one", id="c1"), tool_call("two", id="c2")), completion("never")
    )

    response = make_swarm(client).run(agent=Agent(functions=[one, two]), messages=USER, max_turns=1)

    assert [m["role"] for m in response.messages] == ["assistant", "tool", "tool"]
    assert ran == ["one", "two"]
    assert len(requests(client)) == 1


def test_max_turns_one_hands_off(make_swarm):
    target = Agent(name="Target")

    def transfer():
        return target

    client = mock_client(calling(tool_call("transfer")), completion("never"))

    response = make_swarm(client).run(agent=Agent(functions=[transfer]), messages=USER, max_turns=1)

    assert response.agent is target
    assert len(requests(client)) == 1


def test_max_turns_counts_appended_messages(make_swarm):
    def tool():
        return "x"

    def run(max_turns):
        client = mock_client(
            calling(tool_call("tool", id="a")),
            calling(tool_call("tool", id="b")),
            completion("end"),
        )
        response = make_swarm(client).run(
            agent=Agent(functions=[tool]), messages=USER, max_turns=max_turns
        )
        return len(requests(client)), len(response.messages)

    # Each tool-calling turn appends 2 messages: turn 2 starts only while fewer than max_turns.
    assert run(2) == (1, 2)
    assert run(3) == (2, 4)
    assert run(4) == (2, 4)
    assert run(5) == (3, 5)
    assert run(float("inf")) == (3, 5)
    # A fraction, as Swarm compares: 2.5 lets a second turn start (2 < 2.5), as 3 does.
    assert run(2.5) == run(3)
    assert run(0.5) == run(1) == (1, 2)


def test_max_turns_counts_only_new_messages(make_swarm):
    long_history = [{"role": "user", "content": str(i)} for i in range(10)]
    client = mock_client(completion("answer"))

    response = make_swarm(client).run(agent=Agent(), messages=long_history, max_turns=1)

    assert [m["content"] for m in response.messages] == ["answer"]


def test_loop_ends_when_message_has_no_tool_calls(make_swarm):
    def tool():
        return "x"

    client = mock_client(calling(tool_call("tool")), completion("final"), completion("never"))

    response = make_swarm(client).run(agent=Agent(functions=[tool]), messages=USER)

    assert client.chat.completions.create.call_count == 2
    assert response.messages[-1]["content"] == "final"


def test_response_has_only_new_messages_last_agent_and_context(make_swarm):
    target = Agent(name="Target")

    def transfer(context_variables):
        return Result(value="moved", agent=target, context_variables={"moved": True})

    history = [{"role": "user", "content": "old"}, {"role": "assistant", "content": "older"}]
    client = mock_client(calling(tool_call("transfer")), completion("new"))

    response = make_swarm(client).run(
        agent=Agent(functions=[transfer]), messages=history, context_variables={"k": 1}
    )

    assert isinstance(response, Response)
    assert [m["role"] for m in response.messages] == ["assistant", "tool", "assistant"]
    assert response.messages[-1]["content"] == "new"
    assert response.agent is target
    assert response.context_variables == {"k": 1, "moved": True}
