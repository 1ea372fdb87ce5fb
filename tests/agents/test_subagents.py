"""Sub-agents: an agent used as a tool, in memory and as child runs of a durable run.

Durable tests run on SQLite and on PostgreSQL (the `backend` fixture of `tests/durable`).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from _support.wait import wait_for
from durable_swarm import Agent, DurableSwarmError, RunNotFoundError, Swarm, ask_user
from durable_swarm.testing import (
    AsyncScriptedClient,
    FakeOpenAIServer,
    Fault,
    Reply,
    ScriptedClient,
    ToolCall,
    calls,
    text,
)
from durable_swarm.tools import model_tool_schema, tool_spec

from . import _fanout
from ._fanout import (
    CHIEF_ANSWER,
    CHIEF_TASK,
    LEAD_ANSWER,
    LEAD_TASK,
    TOPICS,
    WORKERS,
    fetch_log,
    worker_answer,
)


def tool_contents(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages if m.get("role") == "tool"]


# --- the tool an agent becomes -------------------------------------------------------------


def test_as_tool_schema_asks_for_one_task():
    function = model_tool_schema(_fanout.alpha.as_tool())["function"]

    assert function["name"] == "delegate_to_alpha"
    assert "sub-agent Alpha" in function["description"]
    parameters = function["parameters"]
    assert parameters["required"] == ["task"]
    assert list(parameters["properties"]) == ["task"]
    task = parameters["properties"]["task"]
    assert task["type"] == "string"
    assert "does not see this conversation" in task["description"]


def test_as_tool_name_and_description_can_be_chosen():
    writer = Agent(name="Report Writer (v2)")

    default = writer.as_tool()
    custom = writer.as_tool(name="write_report", description="Have the report written.")

    assert default.__name__ == "delegate_to_report_writer__v2_"
    assert model_tool_schema(custom)["function"]["name"] == "write_report"
    assert model_tool_schema(custom)["function"]["description"] == "Have the report written."
    assert tool_spec(custom).delegate is writer


def test_the_tool_called_directly_runs_the_agent_on_a_default_swarm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    summarizer = Agent(name="Summarizer", instructions="Summarize.")
    with FakeOpenAIServer([text("In short: yes.")]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "fake-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)

        answer = summarizer.as_tool()("Summarize the thread.")

        assert server.request_count == 1
    assert answer == "In short: yes."


# --- in memory -----------------------------------------------------------------------------


def test_in_memory_sub_agents_answer_the_parent(work_dir):
    client = ScriptedClient(_fanout.reply)

    response = Swarm(client).run(_fanout.lead, LEAD_TASK)

    assert response.messages[-1]["content"] == LEAD_ANSWER
    assert tool_contents(response.messages) == [worker_answer(name) for name in WORKERS]
    assert sorted(fetch_log(work_dir)) == sorted(TOPICS.values())
    assert client.call_count == 2 + 2 * len(WORKERS)


async def test_in_memory_sub_agents_from_async_code(work_dir):
    client = AsyncScriptedClient(_fanout.reply)

    response = await Swarm(client).arun(_fanout.lead, LEAD_TASK)

    assert response.messages[-1]["content"] == LEAD_ANSWER
    assert client.call_count == 2 + 2 * len(WORKERS)


def test_in_memory_nested_sub_agents(work_dir):
    response = Swarm(ScriptedClient(_fanout.reply)).run(_fanout.chief, CHIEF_TASK)

    assert response.messages[-1]["content"] == CHIEF_ANSWER
    assert tool_contents(response.messages) == [LEAD_ANSWER]


def test_bad_delegation_arguments_are_an_observation_the_model_corrects(work_dir):
    def script(messages: list[dict[str, Any]], tools: Any) -> Reply:
        agent, stage = _fanout.key(messages)
        if agent != "Lead":
            return _fanout.reply(messages, tools)
        if stage == 0:
            return calls(ToolCall("delegate_to_alpha", '{"task": "tides"'))  # truncated JSON
        if stage == 1:
            return calls(ToolCall("delegate_to_alpha", {"task": "tides"}))
        return text("ok")

    response = Swarm(ScriptedClient(script)).run(_fanout.lead, LEAD_TASK)

    error, answer = tool_contents(response.messages)
    assert error.startswith("Error: invalid arguments for tool delegate_to_alpha")
    assert "not valid JSON" in error
    assert answer == worker_answer("Alpha")
    assert fetch_log(work_dir) == ["tides"]


# --- durable: child runs -------------------------------------------------------------------


def test_durable_children_have_their_own_runs(durable_swarm_factory, run_id, work_dir):
    client = ScriptedClient(_fanout.reply)
    swarm = durable_swarm_factory(client)

    response = swarm.run(_fanout.lead, LEAD_TASK, run_id=run_id)

    assert response.messages[-1]["content"] == LEAD_ANSWER
    assert tool_contents(response.messages) == [worker_answer(name) for name in WORKERS]
    parent = swarm.get_run(run_id)
    children = [f"{run_id}-sub{i}" for i in (1, 2, 3)]
    assert parent.children == children
    assert parent.parent is None
    assert [s.kind for s in parent.steps].count("subagent") == 3
    assert [s.kind for s in parent.steps].count("join") == 3
    for child_id, name in zip(children, WORKERS, strict=True):
        child = swarm.get_run(child_id)
        assert child.status == "succeeded"
        assert child.parent == run_id
        assert child.agent == name
        assert child.children == []
        assert [m["role"] for m in child.messages] == ["user", "assistant", "tool", "assistant"]
        assert child.messages[0]["content"] == TOPICS[name]
        assert child.messages[-1]["content"] == worker_answer(name)
        assert [(s.kind, s.name) for s in child.steps if s.kind in ("model", "tool")] == [
            ("model", name),
            ("tool", "fetch"),
            ("model", name),
        ]
    assert sorted(fetch_log(work_dir)) == sorted(TOPICS.values())
    assert client.call_count == 2 + 2 * len(WORKERS)


def test_a_waiting_parent_shows_its_sub_agents_answers(durable_swarm_factory, run_id):
    """`get_run` of a run waiting after two sub-agents answered: each answer is the tool message
    of its own delegation (rebuilt from the log's joins), as in the finished run's messages,
    also when a call answered without a step (an unknown tool) comes first."""
    helper = Agent(name="Helper", instructions="HELP")

    def model(messages: list[dict[str, Any]], tools: Any) -> Reply:
        if messages[0]["content"] == "HELP":
            return text(f"helped with {messages[-1]['content']}")
        if messages[-1]["role"] == "user":
            return calls(
                ToolCall("no_such_tool", {}, id="c_unknown"),
                ToolCall("delegate_to_helper", {"task": "x"}, id="c_x"),
                ToolCall("delegate_to_helper", {"task": "y"}, id="c_y"),
            )
        if messages[-1].get("tool_name") == "delegate_to_helper":
            return calls(ToolCall("ask_user", {"question": "OK?"}))
        return text("done")

    parent = Agent(name="Parent", functions=[helper.as_tool(), ask_user])
    swarm = durable_swarm_factory(ScriptedClient(model))
    handle = swarm.start(parent, [{"role": "user", "content": "go"}], run_id=run_id)
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the parent to ask")

    waiting = swarm.get_run(run_id).messages
    swarm.send_input(run_id, "yes")
    handle.result()

    answers = {m["tool_call_id"]: m["content"] for m in waiting if m["role"] == "tool"}
    assert answers.pop("c_x") == "helped with x"
    assert answers.pop("c_y") == "helped with y"
    assert list(answers.values()) == [""]  # the question, not answered yet
    finished = swarm.get_run(run_id).messages
    for message in waiting[:-1]:  # the rest as in the finished run
        assert message in finished


def test_durable_nested_children(durable_swarm_factory, run_id, work_dir):
    swarm = durable_swarm_factory(ScriptedClient(_fanout.reply))

    response = swarm.run(_fanout.chief, CHIEF_TASK, run_id=run_id)

    assert response.messages[-1]["content"] == CHIEF_ANSWER
    middle = f"{run_id}-sub1"
    assert swarm.get_run(run_id).children == [middle]
    info = swarm.get_run(middle)
    assert (info.parent, info.agent, info.status) == (run_id, "Lead", "succeeded")
    assert info.messages[-1]["content"] == LEAD_ANSWER
    assert info.children == [f"{middle}-sub{i}" for i in (1, 2, 3)]
    for grandchild in info.children:
        assert swarm.get_run(grandchild).parent == middle


def test_durable_run_again_with_same_id_does_not_rerun_children(
    durable_swarm_factory, run_id, work_dir
):
    client = ScriptedClient(_fanout.reply)
    swarm = durable_swarm_factory(client)

    first = swarm.run(_fanout.lead, LEAD_TASK, run_id=run_id)
    second = swarm.run(_fanout.lead, LEAD_TASK, run_id=run_id)

    assert second.messages == first.messages
    assert client.call_count == 2 + 2 * len(WORKERS)
    assert len(fetch_log(work_dir)) == len(WORKERS)


class ArrivalLog:
    """The fake server's script: records the order requests arrive in, by (agent, stage), and
    makes each worker's first model call take `first_call_seconds` at the server."""

    def __init__(self, first_call_seconds: float) -> None:
        self.first_call_seconds = first_call_seconds
        self.arrivals: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        agent, stage = _fanout.key(messages)
        with self._lock:
            self.arrivals.append((agent, stage))
        answer = _fanout.reply(messages, tools)
        if agent in WORKERS and stage == 0:
            return Fault.delay(self.first_call_seconds, answer)
        return answer


def test_durable_sub_agents_of_one_message_run_in_parallel(durable_swarm_factory, run_id, work_dir):
    # Each worker's first model call is held 1.5 s at the server. Run one after the other, a
    # worker's second call would arrive before the next worker's first; run in parallel, all
    # three first calls are at the server together before any second call arrives.
    log = ArrivalLog(first_call_seconds=1.5)
    with FakeOpenAIServer(log) as server:
        swarm = durable_swarm_factory(server.client())
        response = swarm.run(_fanout.lead, LEAD_TASK, run_id=run_id)
        stats = server.stats

    assert response.messages[-1]["content"] == LEAD_ANSWER
    worker_calls = [a for a in log.arrivals if a[0] in WORKERS]
    assert sorted(worker_calls[:3]) == [(name, 0) for name in WORKERS]
    assert sorted(worker_calls[3:]) == [(name, 1) for name in WORKERS]
    assert stats["max_in_flight"] == 3
    assert log.arrivals[0] == ("Lead", 0) and log.arrivals[-1] == ("Lead", 3)


# --- durable: cancelling -------------------------------------------------------------------


def test_cancelling_a_parent_cancels_its_children(durable_swarm_factory, run_id):
    # the children wait for the person (a durable wait), so the cancel finds them all running
    askers = [
        Agent(name=f"Asker{i}", instructions=f"You are Asker{i}.", functions=[ask_user])
        for i in (1, 2, 3)
    ]
    boss = Agent(name="Boss", instructions="You are Boss.", functions=[a.as_tool() for a in askers])

    def script(messages: list[dict[str, Any]], tools: Any) -> Reply:
        if _fanout.agent_of(messages) == "Boss":
            return calls(*(ToolCall(f"delegate_to_asker{i}", {"task": "go"}) for i in (1, 2, 3)))
        return calls(ToolCall("ask_user", {"question": "which one?"}))

    swarm = durable_swarm_factory(ScriptedClient(script))
    swarm.start(boss, LEAD_TASK, run_id=run_id)
    children = [f"{run_id}-sub{i}" for i in (1, 2, 3)]
    wait_for(
        lambda: all(_status(swarm, c) == "waiting_for_input" for c in children),
        "the three children to wait for input",
    )

    swarm.cancel(run_id)

    wait_for(lambda: swarm.get_run(run_id).status == "cancelled", "the parent to be cancelled")
    for child in children:
        assert swarm.get_run(child).status == "cancelled"
    assert swarm.get_run(run_id).children == children
    for run in (run_id, *children):
        with pytest.raises(Exception, match="cancelled"):
            swarm.handle(run).result()  # read from the database
    with pytest.raises(DurableSwarmError, match="not waiting for input"):
        swarm.send_input(children[0], "too late")


def _status(swarm: Any, run_id: str) -> str | None:
    try:
        return str(swarm.get_run(run_id).status)
    except RunNotFoundError:
        return None
