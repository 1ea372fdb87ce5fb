"""SPEC "Streaming": `run(..., stream=True)` yields Swarm's events and ends with the Response."""

from __future__ import annotations

import json

from openai.types.chat.chat_completion_chunk import ChoiceDelta

from durable_swarm import Agent, Response, Result

from ._mock import chunk, delta_call, mock_client, requests, text_stream, tool_call, tool_stream

USER = [{"role": "user", "content": "hi"}]


def _delta(c):
    return json.loads(c.choices[0].delta.model_dump_json())


def test_stream_starts_when_iterated(make_swarm):
    """As Swarm's generator: nothing is asked of the model until the first event is."""
    client = mock_client(text_stream("Hel", "lo"))

    events = make_swarm(client).run(agent=Agent(), messages=USER, stream=True)

    assert requests(client) == []
    assert next(events) == {"delim": "start"}
    assert list(events)[-1]["response"].messages[-1]["content"] == "Hello"
    assert len(requests(client)) == 1


def test_stream_event_shapes(make_swarm):
    chunks = text_stream("Hel", "lo")
    client = mock_client(chunks)

    events = list(make_swarm(client).run(agent=Agent(name="Speaker"), messages=USER, stream=True))

    first, *rest = [_delta(c) for c in chunks]
    assert events[:-1] == [
        {"delim": "start"},
        {**first, "sender": "Speaker"},
        *rest,
        {"delim": "end"},
    ]
    assert first["role"] == "assistant"
    assert all(e.get("role") != "assistant" for e in rest)
    assert all("sender" not in e for e in rest)


def test_stream_last_item_is_response(make_swarm):
    client = mock_client(text_stream("Hel", "lo"))
    agent = Agent(name="Speaker")

    events = list(
        make_swarm(client).run(agent=agent, messages=USER, context_variables={"k": 1}, stream=True)
    )

    assert list(events[-1]) == ["response"]
    response = events[-1]["response"]
    assert isinstance(response, Response)
    assert response.messages == [
        {
            "content": "Hello",
            "sender": "Speaker",
            "role": "assistant",
            "function_call": None,
            "tool_calls": None,
        }
    ]
    assert response.agent is agent
    assert response.context_variables == {"k": 1}


def test_stream_request_sends_stream_true(make_swarm):
    def tool():
        return "x"

    client = mock_client(text_stream("a"))

    list(make_swarm(client).run(agent=Agent(functions=[tool]), messages=USER, stream=True))

    request = requests(client)[0]
    assert request["stream"] is True
    assert request["messages"] == [{"role": "system", "content": "You are a helpful agent."}, *USER]
    assert request["tool_choice"] is None
    assert request["parallel_tool_calls"] is True


def test_stream_tool_calls_executed_between_turns(make_swarm):
    ran = []

    def lookup(city: str, context_variables) -> Result:
        ran.append(city)
        return Result(value=f"sunny in {city}", context_variables={"city": city})

    call = tool_call("lookup", {"city": "Rome"}, id="call_7")
    client = mock_client(tool_stream(call), text_stream("It is sunny."))

    events = list(
        make_swarm(client).run(agent=Agent(functions=[lookup]), messages=USER, stream=True)
    )

    assert [e for e in events if "delim" in e] == [{"delim": "start"}, {"delim": "end"}] * 2
    assert ran == ["Rome"]
    response = events[-1]["response"]
    assistant, tool_message, final = response.messages
    assert assistant["tool_calls"] == [
        {
            "function": {"arguments": '{"city": "Rome"}', "name": "lookup"},
            "id": "call_7",
            "type": "function",
        }
    ]
    assert tool_message == {
        "role": "tool",
        "tool_call_id": "call_7",
        "tool_name": "lookup",
        "content": "sunny in Rome",
    }
    assert final["content"] == "It is sunny."
    assert response.context_variables == {"city": "Rome"}
    assert requests(client)[1]["messages"][-2:] == [assistant, tool_message]


def test_stream_merges_every_tool_call_in_chunk(make_swarm):
    ran = []

    def tool(n: int) -> str:
        ran.append(n)
        return str(n)

    both = chunk(
        ChoiceDelta(
            role="assistant",
            tool_calls=[
                delta_call(0, id="c0", name="tool", arguments='{"n": '),
                delta_call(1, id="c1", name="tool", arguments='{"n": '),
            ],
        )
    )
    rest = chunk(
        ChoiceDelta(tool_calls=[delta_call(0, arguments="0}"), delta_call(1, arguments="1}")])
    )
    client = mock_client([both, rest, chunk(ChoiceDelta(), "tool_calls")], text_stream("done"))

    events = list(make_swarm(client).run(agent=Agent(functions=[tool]), messages=USER, stream=True))

    calls = events[-1]["response"].messages[0]["tool_calls"]
    assert [(c["id"], c["function"]["arguments"]) for c in calls] == [
        ("c0", '{"n": 0}'),
        ("c1", '{"n": 1}'),
    ]
    assert ran == [0, 1]


def test_stream_sender_after_handoff(make_swarm):
    second = Agent(name="Second")

    def transfer():
        return second

    client = mock_client(tool_stream(tool_call("transfer")), text_stream("I am second"))

    events = list(
        make_swarm(client).run(
            agent=Agent(name="First", functions=[transfer]), messages=USER, stream=True
        )
    )

    assert [e["sender"] for e in events if "sender" in e] == ["First", "Second"]
    response = events[-1]["response"]
    assert [m.get("sender") for m in response.messages] == ["First", None, "Second"]
    assert response.agent is second


def test_stream_max_turns_zero_yields_response(make_swarm):
    client = mock_client(text_stream("never"))
    agent = Agent()

    events = list(make_swarm(client).run(agent=agent, messages=USER, stream=True, max_turns=0))

    assert len(events) == 1
    assert events[0]["response"].messages == []
    assert events[0]["response"].agent is agent
    assert client.chat.completions.create.call_count == 0


def test_stream_max_turns_one_returns_assistant_and_tools(make_swarm):
    ran = []

    def tool():
        ran.append("ran")
        return "x"

    client = mock_client(tool_stream(tool_call("tool")), text_stream("never"))

    events = list(
        make_swarm(client).run(
            agent=Agent(functions=[tool]), messages=USER, stream=True, max_turns=1
        )
    )

    assert [m["role"] for m in events[-1]["response"].messages] == ["assistant", "tool"]
    assert ran == ["ran"]
    assert client.chat.completions.create.call_count == 1


def test_stream_execute_tools_false(make_swarm):
    ran = []

    def tool():
        ran.append("ran")
        return "x"

    agent = Agent(functions=[tool])
    client = mock_client(tool_stream(tool_call("tool")), text_stream("never"))

    events = list(
        make_swarm(client).run(agent=agent, messages=USER, stream=True, execute_tools=False)
    )

    response = events[-1]["response"]
    assert ran == []
    assert [m["role"] for m in response.messages] == ["assistant"]
    assert response.messages[0]["tool_calls"][0]["function"]["name"] == "tool"
    assert response.agent is agent


def test_stream_unknown_tool_and_errors_recoverable(make_swarm):
    def broken():
        raise ValueError("nope")

    client = mock_client(
        tool_stream(tool_call("missing", id="c1"), tool_call("broken", id="c2")),
        text_stream("recovered"),
    )

    events = list(
        make_swarm(client).run(agent=Agent(functions=[broken]), messages=USER, stream=True)
    )

    messages = events[-1]["response"].messages
    assert messages[1]["content"] == "Error: Tool missing not found."
    assert messages[2]["content"].startswith("Error") and "nope" in messages[2]["content"]
    assert messages[-1]["content"] == "recovered"


def test_run_and_stream_is_stream_run(make_swarm):
    client = mock_client(text_stream("a", "b"))

    events = list(make_swarm(client).run_and_stream(agent=Agent(), messages=USER))

    assert events[0] == {"delim": "start"}
    assert events[-1]["response"].messages[0]["content"] == "ab"
    assert requests(client)[0]["stream"] is True
