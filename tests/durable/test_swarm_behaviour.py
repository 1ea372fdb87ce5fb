"""Swarm's behaviour (SPEC-swarm.md) through `DurableSwarm`, checked against the in-memory `Swarm`.

The full in-memory suite lives in tests/core; here the main points run durably on SQLite and
PostgreSQL, and each durable result must equal what `Swarm` gives for the same scripted model.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from typing import Any

from durable_swarm import Agent, Response, Result, Swarm
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

from ._harness import jsonable

USER = [{"role": "user", "content": "hi"}]


def both(factory: Any, script: Any, run_id: str, **kwargs: Any) -> tuple[Any, Any, Any, Any]:
    """Run the same call in memory and durably: (memory result, durable result, clients)."""
    memory_client, durable_client = ScriptedClient(script), ScriptedClient(script)
    memory = Swarm(memory_client).run(**kwargs)
    durable = factory(durable_client).run(**kwargs, run_id=run_id)
    return memory, durable, memory_client, durable_client


def test_simple_message_same_as_swarm(durable_swarm_factory, run_id):
    agent = Agent(name="Echo", instructions="Be brief.")
    memory, durable, _, client = both(
        durable_swarm_factory, [text("Hello there")], run_id, agent=agent, messages=USER
    )

    assert isinstance(durable, Response)
    assert durable.messages == memory.messages
    assert durable.messages[0]["content"] == "Hello there"
    assert durable.messages[0]["sender"] == "Echo"
    assert durable.agent is agent
    assert client.requests[0]["messages"] == [{"role": "system", "content": "Be brief."}, *USER]


def test_tool_called_once_and_transcript_same_as_swarm(durable_swarm_factory, run_id):
    ran: list[str] = []

    def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"sunny in {city}"

    agent = Agent(name="Weather", functions=[weather])
    script = [calls(ToolCall("weather", {"city": "Paris"}, id="c1")), text("It is sunny.")]
    memory, durable, _, client = both(
        durable_swarm_factory, script, run_id, agent=agent, messages=USER
    )

    assert ran == ["Paris", "Paris"]  # once in memory, once durably
    assert durable.messages == memory.messages
    assert durable.messages[1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "tool_name": "weather",
        "content": "sunny in Paris",
    }
    assert client.call_count == 2
    assert client.requests[0]["tools"][0]["function"]["name"] == "weather"


def test_execute_tools_false_stops_after_tool_calls(durable_swarm_factory, run_id):
    ran: list[int] = []

    def act() -> str:
        ran.append(1)
        return "done"

    agent = Agent(name="Planner", functions=[act])
    memory, durable, _, client = both(
        durable_swarm_factory,
        [calls(ToolCall("act", id="c1"))],
        run_id,
        agent=agent,
        messages=USER,
        execute_tools=False,
    )

    assert ran == []
    assert durable.messages == memory.messages
    assert len(durable.messages) == 1 and durable.messages[0]["tool_calls"]
    assert durable.agent is agent
    assert client.call_count == 1


def test_handoff_response_agent_is_the_agent_object(durable_swarm_factory, run_id):
    spanish = Agent(name="Spanish", instructions="Habla español.")

    def transfer_to_spanish() -> Agent:
        return spanish

    english = Agent(name="English", functions=[transfer_to_spanish])
    script = [calls(ToolCall("transfer_to_spanish", id="c1")), text("Hola")]
    memory, durable, _, client = both(
        durable_swarm_factory, script, run_id, agent=english, messages=USER
    )

    assert durable.agent is spanish
    assert durable.agent == memory.agent
    assert durable.messages == memory.messages
    assert durable.messages[1]["content"] == json.dumps({"assistant": "Spanish"})
    assert durable.messages[2]["sender"] == "Spanish"
    assert client.requests[1]["messages"][0] == {"role": "system", "content": "Habla español."}


def test_max_turns_zero_makes_no_call(durable_swarm_factory, run_id):
    agent = Agent(name="Idle")
    memory, durable, _, client = both(
        durable_swarm_factory, [], run_id, agent=agent, messages=USER, max_turns=0
    )

    assert durable.messages == memory.messages == []
    assert durable.agent is agent
    assert client.call_count == 0
    assert durable_swarm_factory().get_run(run_id).steps == []


def test_max_turns_one_returns_assistant_and_tool_messages(durable_swarm_factory, run_id):
    ran: list[int] = []

    def step() -> str:
        ran.append(1)
        return "stepped"

    agent = Agent(name="Stepper", functions=[step])
    script = [calls(ToolCall("step", id="c1"), ToolCall("step", id="c2")), text("never")]
    memory, durable, _, client = both(
        durable_swarm_factory, script, run_id, agent=agent, messages=USER, max_turns=1
    )

    assert durable.messages == memory.messages
    assert [m["role"] for m in durable.messages] == ["assistant", "tool", "tool"]
    assert len(ran) == 4  # both calls ran, in memory and durably
    assert client.call_count == 1


def test_unknown_tool_gives_error_message_and_goes_on(durable_swarm_factory, run_id):
    agent = Agent(name="Lost")
    script = [calls(ToolCall("nope", id="c1")), text("sorry")]
    memory, durable, _, _ = both(durable_swarm_factory, script, run_id, agent=agent, messages=USER)

    assert durable.messages == memory.messages
    assert durable.messages[1]["content"] == "Error: Tool nope not found."
    assert durable.messages[2]["content"] == "sorry"


def test_context_variables_updates_in_place_and_returned(durable_swarm_factory, run_id):
    def remember(context_variables: dict) -> Result:
        context_variables["nested"]["seen"].append("tool")
        return Result(value="ok", context_variables={"returned": 1})

    def instructions(context_variables: dict) -> str:
        return f"User is {context_variables['user']}; missing is {context_variables['missing']!r}"

    agent = Agent(name="Memo", instructions=instructions, functions=[remember])
    context = {"user": "ada", "nested": {"seen": []}}
    script = [calls(ToolCall("remember", id="c1")), text("ok")]
    memory, durable, _, client = both(
        durable_swarm_factory, script, run_id, agent=agent, messages=USER, context_variables=context
    )

    expected = {"user": "ada", "nested": {"seen": ["tool"]}, "returned": 1}
    assert durable.context_variables == memory.context_variables == expected
    assert client.requests[0]["messages"][0]["content"] == "User is ada; missing is ''"
    tool_schema = client.requests[0]["tools"][0]["function"]["parameters"]
    assert "context_variables" not in tool_schema["properties"]


def test_inputs_are_deep_copied(durable_swarm_factory, run_id):
    def touch(context_variables: dict) -> str:
        context_variables["nested"]["list"].append("tool")
        context_variables["new"] = True
        return "ok"

    messages = [{"role": "user", "content": "hi", "meta": {"tags": ["a"]}}]
    context = {"nested": {"list": ["caller"]}}
    before = copy.deepcopy((messages, context))
    client = ScriptedClient([calls(ToolCall("touch", id="c1")), text("ok")])

    response = durable_swarm_factory(client).run(
        Agent(name="Toucher", functions=[touch]), messages, context, run_id=run_id
    )

    assert (messages, context) == before
    assert response.context_variables == {"nested": {"list": ["caller", "tool"]}, "new": True}


def _streaming_agents() -> tuple[Agent, Agent]:
    helper = Agent(name="Helper")

    def lookup(city: str, context_variables: dict) -> str:
        context_variables["looked_up"] = city
        return f"{city}: sunny"

    def transfer() -> Agent:
        return helper

    return Agent(name="Streamer", functions=[lookup, transfer]), helper


STREAM_SCRIPT = [
    calls(ToolCall("lookup", {"city": "Oslo"}, id="c1"), ToolCall("transfer", id="c2")),
    text("Sunny in Oslo today"),
]


def test_stream_events_same_as_swarm_with_tool_calls(durable_swarm_factory, run_id):
    agent, helper = _streaming_agents()
    memory = list(Swarm(ScriptedClient(STREAM_SCRIPT)).run(agent, USER, stream=True))
    durable = list(
        durable_swarm_factory(ScriptedClient(STREAM_SCRIPT)).run(
            agent, USER, stream=True, run_id=run_id
        )
    )

    assert [e for e in durable if "delim" in e] == [{"delim": "start"}, {"delim": "end"}] * 2
    assert jsonable(durable[:-1]) == jsonable(memory[:-1])
    first_deltas = [durable[1], durable[len(durable) // 2]]
    assert all(d.get("role") != "assistant" or d["sender"] for d in first_deltas)
    senders = [e["sender"] for e in durable if e.get("role") == "assistant"]
    assert senders == ["Streamer", "Helper"]  # the agent that actually spoke
    tool_deltas = [c for e in durable for c in (e.get("tool_calls") or [])]
    assert {c["id"] for c in tool_deltas if c.get("id")} == {"c1", "c2"}  # every call merged
    response = durable[-1]["response"]
    assert list(durable[-1]) == ["response"]
    assert response.agent is helper
    assert response.messages == memory[-1]["response"].messages
    assert response.context_variables == {"looked_up": "Oslo"}
    assert [m["role"] for m in response.messages] == ["assistant", "tool", "tool", "assistant"]


def test_stream_max_turns_zero_yields_only_response(durable_swarm_factory, run_id):
    events = list(
        durable_swarm_factory(ScriptedClient([])).run(
            Agent(name="Quiet"), USER, stream=True, max_turns=0, run_id=run_id
        )
    )

    assert len(events) == 1
    assert events[0]["response"].messages == []


def test_arun_same_as_run(durable_swarm_factory, run_id):
    ran: list[str] = []

    def weather(city: str) -> str:
        ran.append(city)
        return f"sunny in {city}"

    agent = Agent(name="AsyncWeather", functions=[weather])
    script = [calls(ToolCall("weather", {"city": "Rome"}, id="c1")), text("Sunny.")]
    expected = Swarm(ScriptedClient(script)).run(agent, USER)
    swarm = durable_swarm_factory(ScriptedClient(script))

    response = asyncio.run(swarm.arun(agent, USER, run_id=run_id))

    assert response.messages == expected.messages
    assert response.agent is agent
    assert ran == ["Rome", "Rome"]
    assert swarm.get_run(run_id).status == "succeeded"


async def test_arun_streaming_same_events_as_swarm(durable_swarm_factory, run_id):
    agent, helper = _streaming_agents()
    memory = list(Swarm(ScriptedClient(STREAM_SCRIPT)).run(agent, USER, stream=True))
    swarm = durable_swarm_factory(ScriptedClient(STREAM_SCRIPT))

    events = [e async for e in await swarm.arun(agent, USER, stream=True, run_id=run_id)]

    assert jsonable(events[:-1]) == jsonable(memory[:-1])
    assert events[-1]["response"].agent is helper
    assert events[-1]["response"].messages == memory[-1]["response"].messages


def _debug_lines(out: str) -> list[str]:
    """Swarm's debug lines without their timestamps and colours."""
    return [line.split("]", 1)[-1].strip() for line in out.splitlines() if line.strip()]


def test_debug_prints_the_same_lines_as_swarm(durable_swarm_factory, run_id, capsys):
    def tool(n: int) -> str:
        return str(n)

    agent = Agent(name="Debugged", functions=[tool])
    script = [calls(ToolCall("tool", {"n": 1}, id="c1"), ToolCall("nope", id="c2")), text("ok")]
    Swarm(ScriptedClient(script)).run(agent, USER, debug=True)
    expected = _debug_lines(capsys.readouterr().out)

    durable_swarm_factory(ScriptedClient(script)).run(agent, USER, debug=True, run_id=run_id)

    assert _debug_lines(capsys.readouterr().out) == expected
    assert any("Processing tool call: tool" in line for line in expected)


async def test_sync_run_inside_a_running_event_loop(durable_swarm_factory, run_id):
    """A Jupyter cell, or an async app calling sync code: Swarm's run works there."""
    agent = Agent(name="Looped")
    expected = Swarm(ScriptedClient([text("hi")])).run(agent, USER)

    response = durable_swarm_factory(ScriptedClient([text("hi")])).run(agent, USER, run_id=run_id)

    assert response.messages == expected.messages
    assert response.agent is agent


async def test_sync_stream_inside_a_running_event_loop(durable_swarm_factory, run_id):
    agent = Agent(name="LoopedStream")
    expected = list(Swarm(ScriptedClient([text("hi")])).run(agent, USER, stream=True))

    events = list(
        durable_swarm_factory(ScriptedClient([text("hi")])).run(
            agent, USER, stream=True, run_id=run_id
        )
    )

    assert jsonable(events[:-1]) == jsonable(expected[:-1])


def test_run_and_stream_same_as_swarm(durable_swarm_factory, run_id):
    agent = Agent(name="Streamed")
    expected = list(Swarm(ScriptedClient([text("a b")])).run_and_stream(agent, USER))
    swarm = durable_swarm_factory(ScriptedClient([text("a b")]))

    events = list(swarm.run_and_stream(agent, USER, run_id=run_id))

    assert jsonable(events[:-1]) == jsonable(expected[:-1])


def test_a_run_started_from_inside_a_tool_is_refused_with_a_clear_error(
    durable_swarm_factory, run_id
):
    """A tool of a durable run is a DBOS step, and DBOS starts no workflow from a step: the
    library says so and what to do instead, rather than DBOS's bare assertion."""
    inner = Agent(name="Inner")
    swarm = durable_swarm_factory(ScriptedClient([text("inner answer")]))
    seen: list[str] = []

    def nested() -> str:
        """Start another run from inside this tool."""
        try:
            swarm.run(agent=inner, messages=USER)
        except Exception as e:  # the error a tool author would see
            seen.append(f"{type(e).__name__}: {e}")
            raise
        return "unreachable"

    outer = durable_swarm_factory(
        ScriptedClient([calls(ToolCall("nested", {}, id="c1")), text("done")])
    )
    # the tool's error ends the run as Swarm's would; what matters is its message
    with contextlib.suppress(Exception):
        outer.run(agent=Agent(name="Outer", functions=[nested]), messages=USER, run_id=run_id)
    assert seen, "the tool never ran"
    assert seen[0].startswith(
        "DurableSwarmError: DurableSwarm cannot start a run from inside a step"
    )
    assert run_id in seen[0] and "sub-agent" in seen[0]
