"""OpenTelemetry spans (GenAI semantic conventions) of in-memory and durable runs, read with the
SDK's in-memory exporter: names, attributes, parentage, handoff events, opt-in message contents,
one trace per durable run, and no second span for a step replayed from the log."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from durable_swarm import Agent, Budget, BudgetExceededError, Swarm
from durable_swarm.testing import FakeOpenAIServer, ToolCall, calls, text
from durable_swarm.tracing import CAPTURE_CONTENT_ENV

from . import _otel
from ._otel import attrs, parent_id, spans
from .test_usage import USAGES, USER, look

CALL = USAGES[1]


def agents() -> tuple[Agent, Agent, Agent]:
    """`Desk` looks something up, hands over to `Expert`, who asks the sub-agent `Scout`."""
    scout = Agent(name="Scout", model="gpt-4o")
    expert = Agent(name="Expert", model="gpt-4o-mini", functions=[scout.as_tool()])

    def transfer_to_expert() -> Agent:
        """Hand over to the expert."""
        return expert

    desk = Agent(name="Desk", model="gpt-4o", functions=[look, transfer_to_expert])
    return desk, expert, scout


def script() -> list[Any]:
    return [
        calls(ToolCall("look", {"topic": "a"}, id="call_look"), usage=USAGES[0]),
        calls(ToolCall("transfer_to_expert", {}, id="call_transfer"), usage=USAGES[1]),
        calls(ToolCall("delegate_to_scout", {"task": "scout it"}, id="call_scout"), usage=CALL),
        text("scouted", usage=USAGES[2]),
        text("all done", usage=CALL),
    ]


@pytest.fixture
def exporter() -> Any:
    return _otel.install()


def check_run_spans(run_id: str | None = None) -> None:
    """The spans of one run of `agents()` on `script()`."""
    (desk,) = spans("invoke_agent Desk")
    (scout,) = spans("invoke_agent Scout")
    chats, tools = spans("chat "), spans("execute_tool ")
    assert [s.name for s in chats] == [
        "chat gpt-4o", "chat gpt-4o", "chat gpt-4o-mini", "chat gpt-4o", "chat gpt-4o-mini",
    ]  # fmt: skip
    assert [s.name for s in tools] == ["execute_tool look", "execute_tool transfer_to_expert"]
    everything = [desk, scout, *chats, *tools]
    assert {s.context.trace_id for s in everything} == {desk.context.trace_id}
    assert attrs(desk)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(desk)["gen_ai.agent.name"] == "Desk"
    if run_id:
        assert attrs(desk)["gen_ai.conversation.id"] == run_id
    assert parent_id(scout) == desk.context.span_id  # a sub-agent's run is inside its parent's
    scout_chat = chats[3]
    assert parent_id(scout_chat) == scout.context.span_id
    assert all(parent_id(s) == desk.context.span_id for s in [*chats[:3], chats[4], *tools])
    first = attrs(chats[0])
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == first["gen_ai.response.model"] == "gpt-4o"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (120, 7)
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["durable_swarm.cost_usd"] > 0
    assert attrs(chats[4])["gen_ai.response.finish_reasons"] == ("stop",)
    look_span = attrs(tools[0])
    assert look_span["gen_ai.operation.name"] == "execute_tool"
    assert (look_span["gen_ai.tool.name"], look_span["gen_ai.tool.call.id"]) == (
        "look",
        "call_look",
    )
    (handoff,) = [e for e in desk.events if e.name == "durable_swarm.handoff"]
    assert dict(handoff.attributes or {})["target"] == "Expert"
    # no message contents unless asked for
    assert not any(k.startswith("gen_ai.input") for s in everything for k in attrs(s))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_in_memory_run_spans(exporter, stream) -> None:
    desk, _, _ = agents()
    with FakeOpenAIServer(script()) as server:
        result = Swarm(server.client()).run(desk, USER, stream=stream)
        if stream:
            list(result)
    check_run_spans()


def test_message_contents_only_on_opt_in(exporter, monkeypatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    agent = Agent(name="Talker", model="gpt-4o", functions=[look])
    replies = [calls(ToolCall("look", {"topic": "secret"}, id="c1")), text("the answer")]
    with FakeOpenAIServer(replies) as server:
        Swarm(server.client()).run(agent, USER)
    first_chat, last_chat = spans("chat ")
    assert '"hi"' in attrs(first_chat)["gen_ai.input.messages"]
    assert "the answer" in attrs(last_chat)["gen_ai.output.messages"]
    (tool,) = spans("execute_tool ")
    assert "secret" in attrs(tool)["gen_ai.tool.call.arguments"]
    assert attrs(tool)["gen_ai.tool.call.result"] == "found secret"


def test_a_failed_run_span_records_the_error(exporter) -> None:
    agent = Agent(name="Broken", model="gpt-4o")
    with FakeOpenAIServer([]) as server, pytest.raises(Exception):  # noqa: B017
        Swarm(server.client(max_retries=0)).run(agent, USER)
    (run,) = spans("invoke_agent ")
    (chat,) = spans("chat ")
    assert not run.status.is_ok and not chat.status.is_ok
    assert "error.type" in attrs(run)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_durable_run_spans(exporter, durable_swarm_factory, run_id, stream) -> None:
    desk, _, _ = agents()
    with FakeOpenAIServer(script()) as server:
        swarm = durable_swarm_factory(server.client())
        result = swarm.run(desk, USER, run_id=run_id, stream=stream)
        if stream:
            list(result)
    check_run_spans(run_id)


def test_a_resumed_run_continues_its_trace_without_spans_for_replayed_steps(
    exporter, durable_swarm_factory, run_id
) -> None:
    agent = Agent(name="Looper", model="gpt-4o", functions=[look])
    replies = [calls(ToolCall("look", {"topic": str(i)}), usage=CALL) for i in range(3)]
    with FakeOpenAIServer([*replies, text("end", usage=CALL)]) as server:
        swarm = durable_swarm_factory(server.client())
        with pytest.raises(BudgetExceededError):
            swarm.run(agent, USER, run_id=run_id, budget=Budget(max_model_calls=2))
        swarm.resume(run_id, budget=Budget(max_model_calls=9)).result()
        assert server.request_count == 4
    first, resumed = spans("invoke_agent Looper")
    assert not first.status.is_ok  # stopped by the budget
    assert parent_id(resumed) == first.context.span_id  # the resumed execution, in the trace
    assert resumed.context.trace_id == first.context.trace_id
    chats, tools = spans("chat "), spans("execute_tool ")
    assert len(chats) == 4 and len(tools) == 3  # one span per call made, none for replays
    assert [parent_id(s) for s in chats] == [first.context.span_id] * 2 + [
        resumed.context.span_id
    ] * 2


def test_no_opentelemetry_no_spans_and_runs_work(tmp_path) -> None:
    code = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from durable_swarm import Agent, Swarm, tracing
from durable_swarm.testing import ScriptedClient, text
assert not tracing.enabled()
client = ScriptedClient([text("hi", usage={"prompt_tokens": 3, "completion_tokens": 2})])
response = Swarm(client).run(Agent(name="A"), [{"role": "user", "content": "x"}])
print(response.messages[-1]["content"], response.usage.total_tokens)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hi", "5"]


def test_without_a_tracer_provider_tracing_is_off(tmp_path) -> None:
    code = "from durable_swarm import tracing; print(tracing.enabled())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
